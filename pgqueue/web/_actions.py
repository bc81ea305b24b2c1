"""The POST actions: retry and cancel a job, retry a queue's failed jobs, purge its done jobs.

Each runs the repository function the CLI runs, in a short transaction of its own, and answers
with a redirect (303) back to the page it came from. In order, before anything changes: a
read-only dashboard answers 403, a request without the form token of its own CSRF cookie answers
403, an unusable field answers 400.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import TypeVar
from urllib.parse import parse_qs

from sqlalchemy import Connection
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from pgqueue import admin, repository
from pgqueue._base.durations import parse_duration
from pgqueue._base.validation import check_queue
from pgqueue.errors import PgQueueError
from pgqueue.web import _csrf
from pgqueue.web._pages import MAX_JOB_ID
from pgqueue.web._render import error_page, redirect, settings, url

T = TypeVar("T")

#: A form of the dashboard is a token and a duration: anything bigger is not one of ours.
MAX_FORM_BYTES = 16 * 1024
#: Batches one purge request deletes at most (``DEFAULT_PURGE_BATCH`` rows each), so a click on a
#: vast history answers within seconds; the message then says more remain.
PURGE_BATCHES_PER_REQUEST = 20

_FORM_TYPE = "application/x-www-form-urlencoded"


class Refused(Exception):
    """The request may not change anything: ``status`` and why."""

    def __init__(self, status: int, problem: str) -> None:
        super().__init__(problem)
        self.status = status


async def _checked_form(request: Request) -> dict[str, str]:
    """The POST's fields, once the dashboard is writable and the CSRF token matches."""
    conf = settings(request)
    if conf.read_only:
        raise Refused(403, "This dashboard is read-only: it changes nothing.")
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise Refused(413, "Form too large.")
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    fields: dict[str, str] = {}
    if content_type == _FORM_TYPE:
        try:
            parsed = parse_qs(body.decode("utf-8"), keep_blank_values=True, max_num_fields=20)
        except (UnicodeDecodeError, ValueError):
            parsed = {}
        fields = {name: values[0] for name, values in parsed.items()}
    if not _csrf.is_valid(conf.secret, request.cookies.get(_csrf.COOKIE), fields.get(_csrf.FIELD)):
        raise Refused(
            403,
            "Missing or invalid CSRF token: reload the page and submit its form again "
            "(cookies must be enabled).",
        )
    return fields


async def _write(request: Request, work: Callable[[Connection], T]) -> T:
    """Run ``work`` in one committed transaction off the event loop; refresh the findings."""
    conf = settings(request)

    def run() -> T:
        with conf.engine.begin() as conn:
            return work(conn)

    try:
        return await run_in_threadpool(run)
    finally:
        conf.overview.forget_findings()


def _job_id(request: Request) -> int:
    job_id = int(request.path_params["job_id"])
    if job_id > MAX_JOB_ID:
        raise Refused(404, f"No job with id {job_id}.")
    return job_id


def _queue(request: Request) -> str:
    try:
        return check_queue(request.path_params["queue"])
    except PgQueueError as exc:
        raise Refused(404, f"No such queue: {exc}") from exc


async def _exists(request: Request, job_id: int) -> bool:
    def run() -> bool:
        with settings(request).engine.connect() as conn:
            return admin.get_job(conn, job_id) is not None

    return await run_in_threadpool(run)


async def job_retry(request: Request) -> Response:
    return await _job_action(request, "retry")


async def job_cancel(request: Request) -> Response:
    return await _job_action(request, "cancel")


async def _job_action(request: Request, verb: str) -> Response:
    try:
        await _checked_form(request)
        job_id = _job_id(request)
        if not await _exists(request, job_id):
            raise Refused(404, f"No job with id {job_id}.")
    except Refused as refused:
        return error_page(request, refused.status, str(refused))
    if verb == "retry":
        changed = await _write(request, lambda conn: repository.retry(conn, [job_id]))
        code = "retried" if changed else "not-retried"
    else:
        changed = await _write(request, lambda conn: repository.cancel(conn, [job_id]))
        code = "cancelled" if changed else "not-cancelled"
    return redirect(url(request, "job", query={"done": code}, job_id=job_id))


async def queue_retry_failed(request: Request) -> Response:
    try:
        await _checked_form(request)
        queue = _queue(request)
    except Refused as refused:
        return error_page(request, refused.status, str(refused))
    requeued = await _write(request, lambda conn: repository.retry_failed(conn, queue=queue))
    return redirect(url(request, "overview", query={"done": "retried-failed", "n": len(requeued)}))


async def queue_purge(request: Request) -> Response:
    """Delete the queue's done jobs created more than ``older_than`` (a form field) ago."""
    try:
        fields = await _checked_form(request)
        queue = _queue(request)
        older_than = _older_than(fields.get("older_than", ""))
    except Refused as refused:
        return error_page(request, refused.status, str(refused))
    total, more = 0, True
    for _ in range(PURGE_BATCHES_PER_REQUEST):
        deleted = await _write(
            request,
            lambda conn: repository.purge(conn, queue=queue, older_than=older_than),
        )
        total += deleted
        if deleted < repository.DEFAULT_PURGE_BATCH:
            more = False
            break
    code = "purged-more" if more else "purged"
    return redirect(url(request, "overview", query={"done": code, "n": total}))


def _older_than(raw: str) -> timedelta:
    try:
        return parse_duration(raw)
    except ValueError as exc:
        raise Refused(400, f"older_than: {exc}") from exc
