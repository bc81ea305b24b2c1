"""The GET pages: the overview (and its live fragment), the job list, one job."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from pgqueue import admin
from pgqueue._validation import check_queue
from pgqueue.errors import PgQueueError
from pgqueue.models import JobStatus
from pgqueue.web._render import error_page, page, settings

T = TypeVar("T")

#: Largest id a ``bigint`` holds: a bigger one in a URL is no job (404), not a database error.
MAX_JOB_ID = 2**63 - 1
#: Rows per page of the job list, by default and at most.
PAGE_SIZE = 50
MAX_PAGE_SIZE = 500

#: What an action's redirect says, by the code in its ``done`` query parameter. Fixed texts
#: (only the count comes from the URL): a link cannot make the page say anything else.
MESSAGES = {
    "retried": "Job requeued: it is queued and due now, with a fresh budget of attempts.",
    "not-retried": "Job not requeued: only failed and queued jobs are (and a failed job stays "
    "failed while another live job holds its unique key).",
    "cancelled": "Job cancelled: it failed for good with last_error 'cancelled'.",
    "not-cancelled": "Job not cancelled: only queued and running jobs are, and not while "
    "another transaction holds its row; try again.",
    "retried-failed": "{n} failed job(s) requeued.",
    "purged": "{n} done job(s) deleted.",
    "purged-more": "{n} done job(s) deleted; more remain: purge again.",
}


class BadRequest(Exception):
    """A query parameter or form field that cannot be used; its text says which and why."""


def message(request: Request) -> str | None:
    """The text of the ``done`` code an action redirected with, if any."""
    text = MESSAGES.get(request.query_params.get("done", ""))
    if text is None:
        return None
    count = request.query_params.get("n", "0")
    return text.format(n=int(count) if count.isdigit() else 0)


async def read(request: Request, work: Callable[..., T], *args: object) -> T:
    """Run blocking database work off the event loop, in a connection of the app's engine."""

    def run() -> T:
        with settings(request).engine.connect() as conn:
            return work(conn, *args)

    return await run_in_threadpool(run)


async def overview(request: Request) -> Response:
    data = await run_in_threadpool(settings(request).overview.read)
    return page(request, "overview.html", o=data, message=message(request))


async def overview_live(request: Request) -> Response:
    """The part of the overview that refreshes itself, alone."""
    data = await run_in_threadpool(settings(request).overview.read)
    return page(request, "_live.html", o=data)


def _int_param(request: Request, name: str, low: int, high: int) -> int | None:
    raw = request.query_params.get(name, "")
    if raw == "":
        return None
    if not raw.isdigit() or not low <= int(raw) <= high:
        raise BadRequest(f"{name} must be an integer from {low} to {high}, got {raw!r}")
    return int(raw)


def _filters(request: Request) -> tuple[str | None, JobStatus | None, int | None, int]:
    queue = request.query_params.get("queue") or None
    if queue is not None:
        try:
            check_queue(queue)
        except PgQueueError as exc:
            raise BadRequest(str(exc)) from exc
    raw_status = request.query_params.get("status") or None
    statuses = [s.value for s in JobStatus]
    if raw_status is not None and raw_status not in statuses:
        raise BadRequest(f"status must be one of {', '.join(statuses)}, got {raw_status!r}")
    status = JobStatus(raw_status) if raw_status else None
    before = _int_param(request, "before", 1, MAX_JOB_ID)
    limit = _int_param(request, "limit", 1, MAX_PAGE_SIZE) or PAGE_SIZE
    return queue, status, before, limit


async def jobs(request: Request) -> Response:
    """Newest first, a page at a time by keyset (``before`` = the last id of the page before)."""
    try:
        queue, status, before, limit = _filters(request)
    except BadRequest as exc:
        return error_page(request, 422, str(exc))
    rows = await read(
        request,
        lambda conn: admin.list_jobs(
            conn, queue=queue, status=status, limit=limit + 1, before_id=before, with_payload=False
        ),
    )
    older = rows[limit - 1]["id"] if len(rows) > limit else None
    return page(
        request,
        "jobs.html",
        jobs=rows[:limit],
        queue=queue,
        status=status.value if status else None,
        statuses=[s.value for s in JobStatus],
        before=before,
        limit=limit if limit != PAGE_SIZE else None,
        older=older,
    )


async def job(request: Request) -> Response:
    job_id = int(request.path_params["job_id"])
    found = await read(request, admin.get_job, job_id) if job_id <= MAX_JOB_ID else None
    if found is None:
        return error_page(request, 404, f"No job with id {job_id}.")
    return page(request, "job.html", job=found, message=message(request))
