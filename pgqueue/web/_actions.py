"""The POST actions: retry and cancel a job or the jobs selected on the list, retry a queue's
failed jobs, purge its done jobs (after a confirmation page), pause and resume a queue, set its
limits (from its page).

Each runs the repository function the CLI runs, in a short transaction of its own, and answers
with a redirect (303) back to the page it came from. In order, before anything changes: a
read-only dashboard answers 403, a request without the form token of its own CSRF cookie answers
403, an unusable field answers 400. (A foreign ``Host`` or ``Origin`` was refused before, by
:mod:`pgqueue.web._hosts`.)
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from datetime import timedelta
from typing import TypeVar
from urllib.parse import parse_qs

from sqlalchemy import Connection
from starlette.requests import Request
from starlette.responses import Response

from pgqueue import admin, repository
from pgqueue._base.durations import format_duration, parse_duration
from pgqueue._base.validation import check_queue, is_ascii_digits
from pgqueue.errors import JobWaitingError, PgQueueError
from pgqueue.flow import Rate
from pgqueue.web import _csrf
from pgqueue.web._db import in_thread
from pgqueue.web._pages import MAX_JOB_ID, MAX_PAGE_SIZE, STATES
from pgqueue.web._render import error_page, page, redirect, settings, url

T = TypeVar("T")

#: A form of the dashboard is a token and a duration, or a page of selected ids (500 ids of 19
#: digits fit): anything bigger is not one of ours.
MAX_FORM_BYTES = 16 * 1024
#: Fields of a form: a token, an action, the list's filters and one id per selected job.
MAX_FORM_FIELDS = MAX_PAGE_SIZE + 10
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
    """The POST's fields (the first value of each), once writable and the CSRF token matches."""
    return {name: values[0] for name, values in (await _checked_fields(request)).items()}


async def _checked_fields(request: Request) -> dict[str, list[str]]:
    """The POST's fields with every value, once the dashboard is writable and the token matches."""
    conf = settings(request)
    if conf.read_only:
        raise Refused(403, "This dashboard is read-only: it changes nothing.")
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise Refused(413, "Form too large.")
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    fields: dict[str, list[str]] = {}
    if content_type == _FORM_TYPE:
        try:
            fields = parse_qs(
                body.decode("utf-8"), keep_blank_values=True, max_num_fields=MAX_FORM_FIELDS
            )
        except (UnicodeDecodeError, ValueError):
            fields = {}
    token = fields[_csrf.FIELD][0] if fields.get(_csrf.FIELD) else None
    if not _csrf.is_valid(conf.secret, request.cookies.get(_csrf.COOKIE), token):
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
        return await in_thread(run)
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
    """Whether the job exists (its status alone: never its payload)."""

    def run() -> bool:
        with settings(request).engine.connect() as conn:
            return bool(admin.job_statuses(conn, [job_id]))

    return await in_thread(run)


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
        try:
            changed = await _write(request, lambda conn: repository.retry(conn, [job_id]))
            code = "retried" if changed else "not-retried"
        except JobWaitingError:
            code = "not-retried-waiting"
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


async def queue_pause(request: Request) -> Response:
    """Pause the queue (workers follow within about a second); back to the overview."""
    return await _queue_switch(request, repository.pause, "paused", "already-paused")


async def queue_resume(request: Request) -> Response:
    """Take the paused queue up again; back to the overview."""
    return await _queue_switch(request, repository.resume, "resumed", "not-paused")


async def _queue_switch(
    request: Request, switch: Callable[[Connection, str], bool], changed: str, unchanged: str
) -> Response:
    try:
        fields = await _checked_form(request)
        queue = _queue(request)
    except Refused as refused:
        return error_page(request, refused.status, str(refused))
    done = await _write(request, lambda conn: switch(conn, queue))
    return redirect(_back(request, fields, queue, {"done": changed if done else unchanged}))


def _back(request: Request, fields: dict[str, str], queue: str, query: dict[str, object]) -> str:
    """Where a queue's action returns: its own page when the form came from there (a fixed
    ``back=queue`` field, never a URL from the form), else the overview."""
    if fields.get("back") == "queue":
        return url(request, "queue", query=query, queue=queue)
    return url(request, "overview", query=query)


async def queue_limits(request: Request) -> Response:
    """Set the queue's three limits from its page's form (a blank field: no such limit), as
    ``pgqueue limit``; back to the queue's page. A value that is no limit answers 400, nothing
    written."""
    try:
        fields = await _checked_form(request)
        queue = _queue(request)
        concurrency = _limit(fields, "concurrency")
        per_key = _limit(fields, "per_key")
        rate_text = fields.get("rate", "").strip()
        try:
            rate = Rate.parse(rate_text) if rate_text else None
        except PgQueueError as exc:
            raise Refused(400, f"rate: {exc}") from exc
    except Refused as refused:
        return error_page(request, refused.status, str(refused))

    def write(conn: Connection) -> None:
        repository.set_queue_limits(
            conn, queue, concurrency=concurrency, per_key=per_key, rate=rate
        )

    await _write(request, write)
    return redirect(url(request, "queue", query={"done": "limits-set"}, queue=queue))


def _limit(fields: dict[str, str], name: str) -> int | None:
    """A limit field: blank for none, else a whole number from 1 (ASCII digits only)."""
    raw = fields.get(name, "").strip()
    if not raw:
        return None
    if not is_ascii_digits(raw) or int(raw) < 1 or int(raw) > 2_147_483_647:
        raise Refused(400, f"{name}: must be a whole number from 1, or blank for none")
    return int(raw)


#: The field a purge's confirmation page adds; without it a purge deletes nothing.
CONFIRM_FIELD = "confirm"


async def queue_purge(request: Request) -> Response:
    """Delete the queue's done jobs created more than ``older_than`` (a form field) ago.

    The overview's form only asks: the answer is a page that says what would be deleted, whose
    own form (with ``confirm=yes``) deletes. No script needed, and a stray click deletes nothing.
    """
    try:
        fields = await _checked_form(request)
        queue = _queue(request)
        older_than = _older_than(fields.get("older_than", ""))
    except Refused as refused:
        return error_page(request, refused.status, str(refused))
    if fields.get(CONFIRM_FIELD) != "yes":
        return page(
            request,
            "confirm_purge.html",
            queue=queue,
            older_than=format_duration(older_than),
            confirm_field=CONFIRM_FIELD,
        )
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


#: What the list's buttons do, by the ``action`` field.
BULK_ACTIONS = ("retry", "cancel")


async def jobs_bulk(request: Request) -> Response:
    """Retry or cancel the jobs selected on the list (``job_id`` fields, at most a page's worth),
    then back to the list with its filters."""
    try:
        fields = await _checked_fields(request)
        action = (fields.get("action") or [""])[0]
        if action not in BULK_ACTIONS:
            raise Refused(400, f"action must be one of {', '.join(BULK_ACTIONS)}")
        ids = _selected_ids(fields.get("job_id") or [])
    except Refused as refused:
        return error_page(request, refused.status, str(refused))
    try:
        if action == "retry":
            changed = await _write(request, lambda conn: repository.retry(conn, ids))
        else:
            changed = await _write(request, lambda conn: repository.cancel(conn, ids))
    except PgQueueError as exc:  # two failed jobs of one unique key, say
        return error_page(request, 409, f"Nothing changed: {exc}")
    code = "retried-selected" if action == "retry" else "cancelled-selected"
    back = {**_list_filters(fields), "done": code, "n": len(changed)}
    return redirect(url(request, "jobs", query=back))


def _selected_ids(raw: list[str]) -> list[int]:
    if not raw:
        raise Refused(400, "No job selected: tick the jobs to act on, then press the button.")
    if len(raw) > MAX_PAGE_SIZE:
        raise Refused(400, f"At most {MAX_PAGE_SIZE} jobs at once, got {len(raw)}.")
    bad = [v for v in raw if not is_ascii_digits(v) or not 1 <= int(v) <= MAX_JOB_ID]
    if bad:
        raise Refused(400, f"job_id must be job ids, got {bad[0][:40]!r}")
    return sorted({int(value) for value in raw})


def _list_filters(fields: dict[str, list[str]]) -> dict[str, str]:
    """The list's queue and status to go back to, when they are ones (else the whole list)."""
    back: dict[str, str] = {}
    queue = (fields.get("queue") or [""])[0]
    if queue:
        with contextlib.suppress(PgQueueError):
            back["queue"] = check_queue(queue)
    status = (fields.get("status") or [""])[0]
    if status in STATES:
        back["status"] = status
    return back
