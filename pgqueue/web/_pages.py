"""The GET pages: the overview (and its live fragment), the job list, one job, the workers."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, TypeVar

from starlette.requests import Request
from starlette.responses import Response

from pgqueue import admin, repository
from pgqueue import periodic as periodic_rules
from pgqueue._base.readable import Unreadable, decode_json
from pgqueue._base.validation import (
    check_queue,
    check_unique_key,
    encode_payload,
    is_ascii_digits,
)
from pgqueue.errors import InvalidArgumentError, PgQueueError
from pgqueue.models import JobState
from pgqueue.results import LogLine, LogLines, PeriodicRow
from pgqueue.retention_policy import retention_of
from pgqueue.web import _graph
from pgqueue.web._chart import MINUTES, finished_charts
from pgqueue.web._db import in_thread
from pgqueue.web._render import error_page, page, settings, url

T = TypeVar("T")

#: Largest id a ``bigint`` holds: a bigger one in a URL is no job (404), not a database error.
MAX_JOB_ID = 2**63 - 1
#: Rows per page of the job list, by default and at most.
PAGE_SIZE = 50
MAX_PAGE_SIZE = 500
#: Characters of a payload's JSON text a job page shows at most (the server cuts it): a 100 MB
#: payload costs this process and the page 64 KiB, not 100 MB.
PAYLOAD_PREVIEW_CHARS = 64 * 1024

#: What an action's redirect says, by the code in its ``done`` query parameter. Fixed texts
#: (only the count comes from the URL): a link cannot make the page say anything else.
MESSAGES = {
    "retried": "Job requeued: it is queued and due now, with a fresh budget of attempts.",
    "not-retried": "Job not requeued: only failed and queued jobs are (and a failed job stays "
    "failed while another live job holds its unique key).",
    "not-retried-waiting": "Job not requeued: it waits for its dependencies (depends_on) and runs "
    "once they are done; a retry cannot run it sooner. Cancel it to drop it.",
    "cancelled": "Job cancelled: it failed for good, marked cancelled (cancelled_at).",
    "not-cancelled": "Job not cancelled: only queued, waiting and running jobs are, and not while "
    "another transaction holds its row for long (a transaction-mode worker); try again.",
    "signalled": "Signal sent: the job has it (one awaiting it is ready now).",
    "not-signalled": "Signal not sent: the job is finished (done or failed); nothing was written.",
    "retried-failed": "{n} failed job(s) requeued (cancelled jobs are left as they are).",
    "retried-selected": "{n} of the selected job(s) requeued (only failed, cancelled and queued "
    "jobs are, and not while another live job holds a failed one's unique key).",
    "cancelled-selected": "{n} of the selected job(s) cancelled (only queued, waiting and "
    "running jobs are, and not while another transaction holds their row).",
    "purged": "{n} done job(s) deleted.",
    "purged-more": "{n} done job(s) deleted; more remain: purge again.",
    "paused": "Queue paused: workers claim none of its jobs until it is resumed (running jobs "
    "finish; enqueueing still works).",
    "already-paused": "The queue was already paused: nothing changed.",
    "resumed": "Queue resumed: workers claim its jobs again.",
    "not-paused": "The queue was not paused: nothing changed.",
    "limits-set": "Limits saved: running workers follow within about a second.",
}


#: What the list filters by: the states people see (``waiting`` and ``cancelled`` included).
STATES = [s.value for s in JobState]


class BadRequest(Exception):
    """A query parameter or form field that cannot be used; its text says which and why."""


def message(request: Request) -> str | None:
    """The text of the ``done`` code an action redirected with, if any."""
    text = MESSAGES.get(request.query_params.get("done", ""))
    if text is None:
        return None
    count = request.query_params.get("n", "0")
    return text.format(n=int(count) if is_ascii_digits(count) else 0)


async def read(request: Request, work: Callable[..., T], *args: object) -> T:
    """Run blocking database work off the event loop, in a connection of the app's engine."""

    def run() -> T:
        with settings(request).engine.connect() as conn:
            return work(conn, *args)

    return await in_thread(run)


async def overview(request: Request) -> Response:
    data = await in_thread(settings(request).overview.read)
    return page(
        request,
        "overview.html",
        o=data,
        message=message(request),
        done_counted=admin.DONE_COUNTED,
    )


async def overview_live(request: Request) -> Response:
    """The part of the overview that refreshes itself, alone."""
    data = await in_thread(settings(request).overview.read)
    return page(request, "_live.html", o=data, done_counted=admin.DONE_COUNTED)


def _int_param(request: Request, name: str, low: int, high: int) -> int | None:
    raw = request.query_params.get(name, "")
    if raw == "":
        return None
    if not is_ascii_digits(raw) or not low <= int(raw) <= high:
        raise BadRequest(f"{name} must be an integer from {low} to {high}, got {raw!r}")
    return int(raw)


@dataclass(frozen=True)
class JobQuery:
    """The job list's filters and searches, checked; ``search`` is what its links carry."""

    queue: str | None = None
    status: JobState | None = None
    before: int | None = None
    limit: int = PAGE_SIZE
    payload: str | None = None  # the JSON text as typed
    payload_value: Any = None
    error: str | None = None
    key: str | None = None
    task: str | None = None

    @property
    def search(self) -> dict[str, Any]:
        return {
            "queue": self.queue,
            "status": self.status.value if self.status else None,
            "payload": self.payload,
            "error": self.error,
            "key": self.key,
            "task": self.task,
            "limit": self.limit if self.limit != PAGE_SIZE else None,
        }


def _text_param(request: Request, name: str) -> str | None:
    raw = request.query_params.get(name, "")
    if raw == "":
        return None
    if "\x00" in raw or len(raw) > admin.MAX_SEARCH_CHARS:
        raise BadRequest(
            f"{name} must be at most {admin.MAX_SEARCH_CHARS} characters, without U+0000"
        )
    return raw


def _filters(request: Request) -> JobQuery:
    queue = request.query_params.get("queue") or None
    if queue is not None:
        try:
            check_queue(queue)
        except PgQueueError as exc:
            raise BadRequest(str(exc)) from exc
    raw_status = request.query_params.get("status") or None
    if raw_status is not None and raw_status not in STATES:
        raise BadRequest(f"status must be one of {', '.join(STATES)}, got {raw_status!r}")
    status = JobState(raw_status) if raw_status else None
    before = _int_param(request, "before", 1, MAX_JOB_ID)
    limit = _int_param(request, "limit", 1, MAX_PAGE_SIZE) or PAGE_SIZE
    payload = _text_param(request, "payload")
    value = None
    if payload is not None:
        try:
            value = json.loads(payload)
            encode_payload(value)
        except (ValueError, RecursionError) as exc:
            problem = exc.problem if isinstance(exc, InvalidArgumentError) else exc
            raise BadRequest(
                f'payload must be a JSON value the payloads contain, such as {{"user": 42}}: '
                f"{problem}"
            ) from exc
        if value is None:
            raise BadRequest('payload must be a JSON value other than null, such as {"user": 42}')
    error = _text_param(request, "error")
    key = _text_param(request, "key")
    if key is not None:
        try:
            check_unique_key(key, name="key")
        except PgQueueError as exc:
            raise BadRequest(str(exc)) from exc
    task = _text_param(request, "task")
    return JobQuery(queue, status, before, limit, payload, value, error, key, task)


async def jobs(request: Request) -> Response:
    """Newest first, a page at a time by keyset (``before`` = the last id of the page before).

    The rows carry no payload: the list shows none, and one may weigh megabytes.
    """
    try:
        q = _filters(request)
    except BadRequest as exc:
        return error_page(request, 422, str(exc))
    rows = await read(
        request,
        lambda conn: admin.list_jobs(
            conn,
            queue=q.queue,
            status=q.status,
            limit=q.limit + 1,
            before_id=q.before,
            payload_contains=q.payload_value,
            error_contains=q.error,
            unique_key=q.key,
            with_payload=False,
            task=q.task,
        ),
    )
    older = rows[q.limit - 1]["id"] if len(rows) > q.limit else None
    return page(
        request,
        "jobs.html",
        jobs=rows[: q.limit],
        queue=q.queue,
        status=q.status.value if q.status else None,
        statuses=STATES,
        waiting_more=admin.waiting_more,
        before=q.before,
        search=q.search,
        searching=bool(q.payload or q.error or q.key or q.task),
        older=older,
        message=message(request),
    )


async def job(request: Request) -> Response:
    job_id = int(request.path_params["job_id"])

    def job_and_links(
        conn: Any,
    ) -> tuple[dict[str, Any] | None, dict[str, Any], list[LogLine]]:
        found = admin.get_job(conn, job_id, payload_chars=PAYLOAD_PREVIEW_CHARS)
        if found is None:
            return None, {}, []
        return found, admin.job_links(conn, job_id), repository.job_logs(conn, job_id)

    found, links, lines = (
        await read(request, job_and_links) if job_id <= MAX_JOB_ID else (None, {}, [])
    )
    if found is None:
        return error_page(request, 404, f"No job with id {job_id}.")
    return page(
        request,
        "job.html",
        job=found,
        links=links,
        attempts=_by_attempt(lines),
        running_for_s=_since(found.get("locked_at")),
        payload=_payload_shown(found),
        result=_json_shown(found.get("result")),
        progress=_json_shown(found.get("progress")),
        steps=admin.job_steps(found),
        waits=admin.job_waits(found),
        payload_limit=PAYLOAD_PREVIEW_CHARS,
        message=message(request),
    )


def _since(moment: object) -> float | None:
    """Seconds from ``moment`` (a running job's claim) to now, ``None`` when unknown."""
    if not isinstance(moment, datetime):
        return None
    return max(0.0, (datetime.now(timezone.utc) - moment).total_seconds())


@dataclass(frozen=True)
class AttemptLines:
    """One attempt's log lines on the job page, with its fields as JSON text."""

    attempt: int
    lines: list[tuple[LogLine, str | None]]
    dropped: int


def _by_attempt(lines: list[LogLine]) -> list[AttemptLines]:
    """The job's lines by attempt, newest attempt first, each attempt's oldest line first."""
    dropped = lines.dropped if isinstance(lines, LogLines) else {}
    attempts: dict[int, list[tuple[LogLine, str | None]]] = {}
    for line in lines:
        fields = (
            json.dumps(line.fields, ensure_ascii=False, sort_keys=True) if line.fields else None
        )
        attempts.setdefault(line.attempt, []).append((line, fields))
    return [AttemptLines(n, attempts[n], dropped.get(n, 0)) for n in sorted(attempts, reverse=True)]


def _payload_shown(job: dict[str, Any]) -> str:
    """The payload's JSON text, indented when it came whole (a cut one is shown as it is)."""
    text: str | None = job["payload_text"]
    if text is None:  # SQL NULL: only a row written by hand has none
        return "null"
    if job["payload_length"] > PAYLOAD_PREVIEW_CHARS:
        return text
    value = decode_json(text)
    if isinstance(value, Unreadable):  # written by SQL: too deep to decode, shown as its text
        return str(value)
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)


def _json_shown(value: Any) -> str | None:
    """A task's result or progress as indented JSON; ``None`` when the column is NULL."""
    if value is None:
        return None
    if isinstance(value, Unreadable):
        return str(value)
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)


#: A queue's counts, in the order its page lists them, and the state each links to (if any).
QUEUE_COUNTS = (
    ("ready", "queued"),
    ("scheduled", None),
    ("waiting", "waiting"),
    ("running", "running"),
    ("expired_leases", None),
    ("failed", "failed"),
    ("cancelled", "cancelled"),
    ("expired", "expired"),
    ("done", "done"),
)


async def queue(request: Request) -> Response:
    """One queue: its counts by state, pause, limits and retention, the last hour's finished
    jobs per minute, the oldest ready job's age, the workers that serve it, and its forms."""
    try:
        name = check_queue(request.path_params["queue"])
    except PgQueueError as exc:
        return error_page(request, 404, f"No such queue: {exc}")

    def one_queue(conn: Any) -> dict[str, Any]:
        counts = admin.queue_counts(conn, name)
        (stored,) = repository.queue_settings(conn, name)
        workers = [w for w in admin.connected_workers(conn) if name in (w["queues"] or [])]
        return {
            "counts": counts,
            "settings": stored,
            "retention": retention_of(repository.retention(conn), name),
            "finished": finished_charts(admin.finished_per_minute(conn, queue=name)).get(name),
            "workers": workers,
        }

    data = await read(request, one_queue)
    counts = data["counts"]
    return page(
        request,
        "queue.html",
        queue=name,
        counts=[(label, counts.get(label) or 0, state) for label, state in QUEUE_COUNTS],
        known=counts["known"],
        done_estimated=counts["done_estimated"],
        done_counted=admin.DONE_COUNTED,
        oldest_ready_s=counts["oldest_ready_age_s"],
        settings=data["settings"],
        retention=data["retention"],
        finished=data["finished"],
        minutes=MINUTES,
        workers=data["workers"],
        message=message(request),
    )


async def job_graph(request: Request) -> Response:
    """The job's whole workflow (every job linked to it by ``depends_on`` either way, at most
    :data:`pgqueue.admin.WORKFLOW_LIMIT`) as a server-drawn SVG."""
    job_id = int(request.path_params["job_id"])

    def flow(conn: Any) -> dict[str, Any] | None:
        if not admin.job_statuses(conn, [job_id]):
            return None
        return admin.workflow(conn, job_id)

    found = await read(request, flow) if job_id <= MAX_JOB_ID else None
    if found is None:
        return error_page(request, 404, f"No job with id {job_id}.")
    return page(
        request,
        "graph.html",
        job_id=job_id,
        graph=_graph.layout(found["nodes"], found["edges"], job_id, found["cut"]),
        # The job route's path less the id, routed once: 500 boxes routed each cost 28 ms.
        job_path=url(request, "job", job_id=0).removesuffix("0"),
        limit=admin.WORKFLOW_LIMIT,
        fold_over=_graph.FOLD_OVER,
        states=STATES,
    )


async def periodic(request: Request) -> Response:
    """Every periodic definition the database knows: its schedule, queue, last and next tick,
    whether a worker still declares it, and the job its last tick enqueued."""

    def definitions(conn: Any) -> tuple[list[PeriodicRow], dict[str, dict[str, Any]]]:
        rows = repository.periodic_states(conn)
        return rows, admin.periodic_last_jobs(conn, rows)

    rows, last = await read(request, definitions)
    now = datetime.now(timezone.utc)
    shown = [
        {
            "row": row,
            "next_tick": _next_tick(row, now),
            "stale": periodic_rules.is_stale(row, now),
            "last_job": last.get(row.name),
        }
        for row in rows
    ]
    return page(request, "periodic.html", definitions=shown)


def _next_tick(row: PeriodicRow, now: datetime) -> datetime | None:
    """The next tick a worker will enqueue, ``None`` for a schedule this version cannot read."""
    try:
        return periodic_rules.next_tick(row, now)
    except PgQueueError:
        return None


async def workers(request: Request) -> Response:
    """The worker processes connected now, with their queues and the jobs they hold."""
    rows = await read(request, admin.connected_workers)
    now = datetime.now(timezone.utc)
    for row in rows:
        since = row["since"]
        row["for_s"] = (now - since).total_seconds() if isinstance(since, datetime) else None
    return page(request, "workers.html", workers=rows)
