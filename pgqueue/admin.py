"""Read-side queries for operators: list and show jobs, queue statistics (R21).

What ``pgqueue list``, ``show`` and ``stats`` print, what ``enqueue`` and ``retry`` say about
unique keys, and what the dashboard (:mod:`pgqueue.web`) shows; usable from Python too. Every
function runs in the caller's connection and returns plain values ready for JSON (times as aware
datetimes). A job's value no Python client can load (a row written by SQL with ``run_at`` in year
29405, or a payload nested 5,000 levels deep) comes as an :class:`Unreadable` holding the server's
text, so one such row never breaks a listing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection

from pgqueue._base.connections import WORKER_PREFIX
from pgqueue._base.readable import Unreadable as Unreadable  # returned by the readers below
from pgqueue._base.readable import decoded
from pgqueue._base.schedule import scheduled_for
from pgqueue._base.validation import check_job_id, check_positive_int, check_queue
from pgqueue._sql.reads import DONE_COUNTED as DONE_COUNTED
from pgqueue._sql.reads import (
    DONE_ESTIMATE,
    OLDEST_SNAPSHOT,
    SCHEMA_PRESENT,
    TABLE_STATS,
    WORKFLOW_IDS,
    job_links_statement,
    job_statement,
    job_statuses_statement,
    key_holders_statement,
    periodic_last_jobs_statement,
    queue_overview_statement,
    queue_stats_statement,
    workflow_edges_statement,
    workflow_nodes_statement,
)
from pgqueue._sql.reads import JOB_COLUMNS as JOB_COLUMNS
from pgqueue._sql.reads import MAX_SEARCH_CHARS as MAX_SEARCH_CHARS
from pgqueue._sql.reads import (
    all_queue_counts_statement as all_queue_counts_statement,  # public, as above
)
from pgqueue._sql.reads import (
    connected_workers_statement as connected_workers_statement,  # public: its plan is checked
)
from pgqueue._sql.reads import (
    finished_per_minute_statement as finished_per_minute_statement,  # public, as above
)
from pgqueue._sql.reads import get_job_statement as get_job_statement  # public, as above
from pgqueue._sql.reads import list_jobs_statement as list_jobs_statement  # public, as above
from pgqueue._sql.reads import (
    queue_counts_statement as queue_counts_statement,  # public, as above
)
from pgqueue.enqueue_options import WAITING_RUN_AT
from pgqueue.flow import Rate
from pgqueue.models import JobState, JobStatus
from pgqueue.results import PeriodicRow


def list_jobs(
    conn: Connection,
    *,
    queue: str | None = None,
    status: JobState | JobStatus | None = None,
    limit: int = 50,
    before_id: int | None = None,
    payload_contains: Any = None,
    error_contains: str | None = None,
    unique_key: str | None = None,
    with_payload: bool = True,
    task: str | None = None,
) -> list[dict[str, Any]]:
    """The most recent jobs (highest id first), optionally of one queue and one state.

    Each row's ``status`` is its :class:`pgqueue.JobState`: ``waiting`` for a queued job that
    waits for its dependencies (then ``run_at`` is ``None`` and ``waiting_for`` holds the ids it
    waits for, the first 20; ``waiting_on`` counts them), ``cancelled`` for a cancelled one, else
    the stored status (docs/lifecycle.md, "The states people see"). ``status`` filters by state:
    ``JobState.WAITING`` (or ``"waiting"``), ``JobState.CANCELLED``; a :class:`JobStatus` names
    the state of its value, so ``JobStatus.QUEUED`` leaves the waiting jobs out and
    ``JobStatus.FAILED`` the cancelled ones (``.. versionchanged:: 0.1.0``).

    ``before_id`` pages by keyset: only ids below it, so page N costs what page 1 costs (a
    backward scan of ``jobs_pkey`` from that id, or of the partial index of the status), where an
    ``OFFSET`` would read and drop every row before the page.

    Searches (each a bound parameter): ``payload_contains`` keeps the jobs whose payload
    contains this JSON value (``payload @> value``: ``{"user": 42}`` matches ``{"user": 42,
    "x": 1}``; ``None`` searches nothing), ``error_contains`` those whose ``last_error`` holds
    this text (case-insensitive; ``%`` and ``_`` are plain characters), ``unique_key`` those with
    this key. No index serves them: a rare match walks the history back, newest first, until it
    has a page. ``with_payload=False`` leaves the payload out of the rows (the dashboard's list
    shows none, and a payload may weigh megabytes). ``task`` keeps the jobs of the task of this
    name (``.. versionadded:: 0.1.0``).

    Raises:
        InvalidArgumentError: a search that cannot be one (a payload jsonb cannot store, an
            empty or oversized text); nothing runs.
    """
    stmt = list_jobs_statement(
        queue=queue,
        status=status,
        limit=limit,
        before_id=before_id,
        payload_contains=payload_contains,
        error_contains=error_contains,
        unique_key=unique_key,
        with_payload=with_payload,
        task=task,
    )
    return [decoded(row) for row in conn.execute(stmt)]


def get_job(
    conn: Connection, job_id: int, *, payload_chars: int | None = None
) -> dict[str, Any] | None:
    """One job with its payload, or ``None`` when there is no such id.

    Its ``status``, ``run_at`` and ``waiting_for`` are shown as :func:`list_jobs` shows them;
    ``waiting_on`` and ``cancelled_at`` are the stored columns, and so are ``timeout``,
    ``expires_in`` and ``expired_at`` (pgqueue_0015); ``deadline`` is when the job, not started
    by then, expires (:func:`deadline_of`).

    With ``payload_chars``, the payload is not decoded: ``payload_text`` holds at most the first
    ``payload_chars`` characters of its JSON text and ``payload_length`` the full text's length,
    both computed by the server, so a payload of 100 MB sends (and costs this process) only
    that prefix. ``errors`` is its history of failed attempts (:func:`error_history`), ``[]``
    for none. A value no Python client can load (a timestamp past year 9999, JSON nested too
    deep, written by SQL) comes back as an :class:`Unreadable`, the rest of the row intact.

    Raises:
        InvalidArgumentError: for an id no ``bigint`` holds, before any SQL.
    """
    job_id = check_job_id(job_id)
    if payload_chars is None:
        row = conn.execute(job_statement(job_id)).first()
    else:
        limit = check_positive_int("payload_chars", payload_chars)
        row = conn.execute(get_job_statement(limit), {"job_id": job_id}).first()
    if row is None:
        return None
    job = decoded(row)
    job["errors"] = error_history(job.get("errors"))
    job["deadline"] = deadline_of(job)
    return job


def deadline_of(job: Mapping[str, Any]) -> Any:
    """When a job not started by then expires (``run_at + expires_in``), ``None`` without a
    deadline or while it waits for its dependencies (its ``run_at`` is not its own yet)."""
    run_at, expires_in = job.get("run_at"), job.get("expires_in")
    if not isinstance(run_at, datetime) or not isinstance(expires_in, timedelta):
        return None
    try:
        return run_at + expires_in
    except OverflowError:  # past year 9999: no client reads such a time
        return None


def waiting_more(job: Mapping[str, Any]) -> int:
    """How many of a waiting job's dependencies its ``waiting_for`` leaves out: past the first
    ids it shows, or no longer found (deleted by hand: ``pgqueue doctor`` names those); 0 for a
    job in any other state. Reads a row of :func:`list_jobs` or :func:`get_job`.

    .. versionadded:: 0.1.0
    """
    shown = job.get("waiting_for")
    if shown is None:
        return 0
    return max(int(job.get("waiting_on") or 0) - len(shown), 0)


#: How many dependencies and dependents :func:`job_links` returns of a job, each.
JOB_LINKS_LIMIT = 100


def job_links(conn: Connection, job_id: int, limit: int = JOB_LINKS_LIMIT) -> dict[str, Any]:
    """What a job waits for and what waits for it (``depends_on``, #24), for ``pgqueue show``
    and the dashboard's job page, in one query.

    Returns ``{"waits_for": [{"id", "status"}, ...], "waited_by": [...], "more": {"waits_for":
    bool, "waited_by": bool}}``, each list by id and cut at ``limit`` (``more`` says a list was
    cut: a fan-in of 10,000 members shows its first ones); ``status`` is each job's
    :class:`pgqueue.JobState`.

    Raises:
        InvalidArgumentError: for an id no ``bigint`` holds, or a bad ``limit``, before any SQL.

    .. versionadded:: 0.1.0
    """
    job_id = check_job_id(job_id)
    limit = check_positive_int("limit", limit)
    found: dict[str, list[dict[str, Any]]] = {"waits_for": [], "waited_by": []}
    rows = conn.execute(job_links_statement(), {"job_id": job_id, "limit": limit + 1})
    for row in rows:
        found[row.direction].append({"id": int(row.id), "status": str(row.status)})
    for side in found.values():
        side.sort(key=lambda link: int(link["id"]))
    more = {name: len(side) > limit for name, side in found.items()}
    return {name: side[:limit] for name, side in found.items()} | {"more": more}


#: How many characters of a step's value ``pgqueue show`` and the job page print.
STEP_VALUE_CHARS = 200


def job_steps(job: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A job's durable steps, sleeps and signal waits (``jobs.steps``, #33) as ``pgqueue show``
    and the dashboard's job page list them, in the order the job reached them: ``name``,
    ``kind`` (``step``, ``sleep`` or ``signal``), ``at`` (when it was first reached) and
    ``detail``: a step's value or a received signal's payload as JSON cut to
    :data:`STEP_VALUE_CHARS` characters, a sleep's wake-up, a wait's timeout or that it timed
    out. Reads a row of :func:`get_job`; ``[]`` for a job without any.

    .. versionadded:: 0.1.0
    """
    steps = job.get("steps")
    if not isinstance(steps, dict):
        return []
    entries = [(n, e) for n, e in steps.items() if isinstance(e, dict)]
    entries.sort(key=lambda item: int(item[1].get("n") or 0))
    return [
        {
            "name": name,
            "kind": str(entry.get("kind")),
            "at": _timestamp(entry.get("at")),
            "detail": _step_detail(entry),
        }
        for name, entry in entries
    ]


def _step_detail(entry: Mapping[str, Any]) -> str:
    until = _timestamp(entry.get("until"))
    if entry.get("kind") == "sleep":
        return f"wakes at {until}"
    if entry.get("kind") == "signal" and not entry.get("received"):
        if entry.get("timed_out"):
            return "timed out"
        return "awaited, no timeout" if until is None else f"awaited until {until}"
    text = json.dumps(entry.get("value"), ensure_ascii=False, default=str)
    if len(text) > STEP_VALUE_CHARS:
        return text[: STEP_VALUE_CHARS - 3] + "..."
    return text


def job_waits(job: Mapping[str, Any]) -> dict[str, Any]:
    """What a job of :func:`get_job` waits for now, and the signals it received (#33):
    ``{"sleeping": (name, wake-up) or None, "awaiting": (signal, timeout or None) or None,
    "received": [signal names]}``. A job is sleeping or awaiting only in those states
    (:class:`pgqueue.JobState`).

    .. versionadded:: 0.1.0
    """
    state = job.get("status")
    until = job.get("suspended_until")
    sleeping = awaiting = None
    if state == JobState.SLEEPING.value:
        sleeps = [s for s in job_steps(job) if s["kind"] == "sleep"]
        sleeping = (sleeps[-1]["name"] if sleeps else "?", until)
    elif state == JobState.AWAITING_SIGNAL.value:
        far = isinstance(until, datetime) and until.year >= WAITING_RUN_AT.year
        awaiting = (job.get("awaiting_signal"), None if far else until)
    signals = job.get("signals")
    received = sorted(signals) if isinstance(signals, dict) else []
    return {"sleeping": sleeping, "awaiting": awaiting, "received": received}


def error_history(errors: Any) -> list[dict[str, Any]]:
    """``jobs.errors`` (oldest first) with each ``at`` an aware datetime like the other times.

    The database wrote ``at`` as ISO text (``now()`` through ``jsonb_build_object``); text that
    does not parse is left as it is, and anything but an entry object is skipped.
    """
    if not isinstance(errors, list):
        return []
    return [
        {**entry, "at": _timestamp(entry.get("at"))} for entry in errors if isinstance(entry, dict)
    ]


#: PostgreSQL drops trailing zeros of the microseconds; Python 3.10 parses 3 or 6 digits only.
_FRACTION = re.compile(r"\.(\d{1,6})(?=\D|$)")


def _timestamp(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return datetime.fromisoformat(
            _FRACTION.sub(lambda m: "." + m.group(1).ljust(6, "0"), value, count=1)
        )
    except ValueError:
        return value


def job_statuses(conn: Connection, job_ids: list[int]) -> dict[int, str]:
    """The current state (:class:`pgqueue.JobState`'s value) of each existing id, to explain why
    a command left a job alone."""
    rows = conn.execute(job_statuses_statement(job_ids))
    return {row.id: row.status for row in rows}


def key_holders(conn: Connection, job_ids: list[int]) -> dict[int, tuple[str, int]]:
    """``{id: (unique_key, holder_id)}`` for each of ``job_ids`` whose unique key another queued or
    running job of its queue holds: why ``retry`` leaves such a failed job alone."""
    return {
        row.id: (row.unique_key, row.holder_id)
        for row in conn.execute(key_holders_statement(job_ids))
    }


def queue_stats(conn: Connection, queue: str | None = None) -> list[dict[str, Any]]:
    """Per queue: ready, scheduled, waiting, running, expired leases, done, failed, cancelled,
    expired, sleeping, awaiting signal (``awaiting_signal``), oldest ready age (s).

    Each job is counted in its :class:`pgqueue.JobState` (:func:`pgqueue.models.in_state`), the
    ``queued`` ones as ``ready`` (due now) or ``scheduled`` (due later). ``waiting`` counts the
    queued jobs waiting for a dependency (``depends_on``, ``waiting_on > 0``); ``sleeping`` and
    ``awaiting_signal`` those given back by a durable sleep or signal wait (#33), apart from
    both.

    ``failed`` counts the jobs that failed for good on their own; ``cancelled`` those an operator
    cancelled (also ``status = 'failed'``, with ``cancelled_at`` set); ``expired`` those never
    started within their ``expires_in`` (also ``failed``, with ``expired_at`` set): the three
    never overlap.
    One pass over ``jobs``: on a table with a long history run it sparingly, or purge first.
    ``queue``: that queue's row only (its rows read, not the whole table's).
    """
    if queue is None:
        return [dict(row._mapping) for row in conn.execute(queue_stats_statement())]
    stmt = queue_stats_statement(one_queue=True)
    return [dict(row._mapping) for row in conn.execute(stmt, {"queue_name": check_queue(queue)})]


def queue_counts(conn: Connection, queue: str) -> dict[str, Any]:
    """The counts of one queue that :func:`queue_stats` gives, read from indexes: what the
    dashboard's queue page shows, in time that does not grow with the queue's done history.

    Every state is counted exactly but ``done``: up to :data:`DONE_COUNTED` done jobs are
    counted one by one (an index-only range); past that, ``done`` is the planner's estimate
    from the table's statistics (as fresh as its last ``ANALYZE``), never below
    :data:`DONE_COUNTED`, and ``done_estimated`` is ``True``. Jobs finished before
    pgqueue_0009 (no ``finished_at``) are not in the done count. ``known`` is ``False`` when
    the queue has no job at all.
    """
    params = {"queue_name": check_queue(queue)}
    counts = _estimated(
        conn, dict(conn.execute(queue_counts_statement(), params).one()._mapping), queue
    )
    counts["known"] = any(
        counts[name] for name in counts if name not in ("oldest_ready_age_s", "done_estimated")
    )
    return counts


def all_queue_counts(conn: Connection) -> list[dict[str, Any]]:
    """:func:`queue_counts` for every queue with a job (``queue`` and its counts, by name, with
    ``done_estimated``), in one statement read from indexes: what the dashboard's overview
    shows, in time that does not grow with the done history (:func:`queue_stats` gives the
    same counts, ``done`` exact, by one pass over the table). A queue's ``done`` past
    :data:`DONE_COUNTED` is the planner's estimate, as on its page.
    """
    rows = conn.execute(all_queue_counts_statement())
    return [_estimated(conn, dict(row._mapping), row.queue) for row in rows]


def _estimated(conn: Connection, counts: dict[str, Any], queue: str) -> dict[str, Any]:
    """``counts`` with ``done_estimated``, and ``done`` the planner's estimate past
    :data:`DONE_COUNTED` (never below it)."""
    counts["done_estimated"] = counts["done"] >= DONE_COUNTED
    if counts["done_estimated"]:
        plan = conn.execute(DONE_ESTIMATE, {"queue_name": queue}).scalar_one()
        counts["done"] = max(DONE_COUNTED, int(plan[0]["Plan"]["Plan Rows"]))
    return counts


def queue_overview(conn: Connection) -> list[dict[str, Any]]:
    """Per queue with live jobs or stored settings: ``queue, paused, concurrency, per_key, rate,
    ready, running, sleeping, awaiting_signal`` (``rate`` a :class:`pgqueue.Rate` or ``None``),
    by name.

    What ``pgqueue queues`` prints and the dashboard's overview shows beside each queue. Reads
    the queued and running jobs only, never the finished history.
    """
    rows = []
    for row in conn.execute(queue_overview_statement()):
        found = dict(row._mapping)
        limit, period = found.pop("rate_limit"), found.pop("rate_period")
        found["rate"] = None if limit is None else Rate(int(limit), period)
        rows.append(found)
    return rows


def finished_per_minute(
    conn: Connection, *, window: timedelta = timedelta(hours=1), queue: str | None = None
) -> list[dict[str, Any]]:
    """Jobs finished per queue and minute over the last ``window``: ``queue, minute,
    minutes_ago, done, failed``, oldest minute first (minutes without a finished job are
    absent; ``minutes_ago`` is 0 for the current minute, read on the server's clock).

    A range scan of the partial ``jobs_prune_idx`` per queue (pgqueue_0016/0017): its cost follows
    the jobs finished within the window and the number of queues, never the whole history. A job
    retried since it finished is not counted (a retry clears ``finished_at``). ``queue``: that
    queue's minutes only.
    """
    if queue is None:
        return [dict(row._mapping) for row in conn.execute(finished_per_minute_statement(window))]
    stmt = finished_per_minute_statement(window, one_queue=True)
    return [dict(row._mapping) for row in conn.execute(stmt, {"queue_name": check_queue(queue)})]


def oldest_snapshot(conn: Connection) -> dict[str, Any] | None:
    """The session holding the xmin horizon back the longest (R9), or ``None``.

    ``pid, application_name, state, xmin_age_xids, xact_age_s``: vacuum cannot remove a row
    that died after this session's snapshot was taken, in any table of the database. Sessions of
    other roles are visible only with ``pg_read_all_stats`` (``pg_monitor``).
    """
    row = conn.execute(OLDEST_SNAPSHOT).first()
    return None if row is None else dict(row._mapping)


def table_stats(conn: Connection) -> dict[str, Any]:
    """``pg_stat_user_tables`` for ``jobs``: live and dead tuples, last (auto)vacuum (R21)."""
    row = conn.execute(TABLE_STATS).first()
    return {} if row is None else dict(row._mapping)


def schema_present(conn: Connection) -> bool:
    """Whether the ``jobs`` table is visible on this connection's search path."""
    return conn.execute(SCHEMA_PRESENT).scalar_one() is True


def connected_workers(conn: Connection) -> list[dict[str, Any]]:
    """Every worker process connected to this database now: ``name, host, pid, queues, since,
    connections, jobs_held``, by name.

    A worker is connected while a session named ``pgqueue-worker:<host>:<pid>`` is in
    ``pg_stat_activity`` (its LISTEN connection, the command's engine): a killed worker is gone
    at once, whatever its ``jobs_workers`` row says. ``queues`` and ``since`` (when it started)
    come from that row (pgqueue_0010); a worker without one (it could not write it, or was
    started before the revision) shows ``queues = None`` and since its oldest connection, with
    host and pid read from its name. ``jobs_held``: its running jobs (``locked_by``), counted on
    the partial ``jobs_lease_idx``. Sessions of other roles are visible only with
    ``pg_read_all_stats`` (``pg_monitor``).

    .. versionadded:: 0.1.0
    """
    rows = [dict(row._mapping) for row in conn.execute(connected_workers_statement())]
    for row in rows:
        if row["host"] is None:
            host, _, pid = row["name"].removeprefix(WORKER_PREFIX).rpartition(":")
            row["host"], row["pid"] = host or None, int(pid) if pid.isdigit() else None
    return rows


def periodic_last_jobs(conn: Connection, rows: list[PeriodicRow]) -> dict[str, dict[str, Any]]:
    """``{name: {"id", "status"}}``: the job each definition of ``rows`` enqueued for its last
    tick, found by the headers every periodic job carries (``periodic``, ``scheduled_for``);
    absent when there is none (not fired yet, or purged).

    .. versionadded:: 0.1.0
    """
    fired = [r for r in rows if r.last_tick is not None]
    if not fired:
        return {}
    params = {
        "names": [r.name for r in fired],
        "queues": [r.queue for r in fired],
        "ticks": [scheduled_for(r.last_tick, r.timezone) for r in fired if r.last_tick],
    }
    result = conn.execute(periodic_last_jobs_statement(), params)
    return {row.name: {"id": row.id, "status": row.status} for row in result}


#: Most jobs :func:`workflow` reads: a graph of more says it was cut.
WORKFLOW_LIMIT = 500


def workflow(conn: Connection, job_id: int, limit: int = WORKFLOW_LIMIT) -> dict[str, Any]:
    """The workflow of job ``job_id``: every job linked to it by ``depends_on`` either way, at
    most ``limit``, for the dashboard's graph. Returns ``{"nodes": [{"id", "queue", "task",
    "status"}, ...] by id, "edges": [(depends_on, job_id), ...], "cut": bool}`` (``cut``: the
    workflow has more jobs than ``limit``; the first ones walked from the job are shown).

    .. versionadded:: 0.1.0
    """
    job_id = check_job_id(job_id)
    limit = check_positive_int("limit", limit)
    ids = [int(r.id) for r in conn.execute(WORKFLOW_IDS, {"job_id": job_id, "limit": limit + 1})]
    cut = len(ids) > limit
    ids = ids[:limit]
    nodes = [
        {"id": int(r.id), "queue": r.queue, "task": r.task, "status": str(r.status)}
        for r in conn.execute(workflow_nodes_statement(), {"ids": ids})
    ]
    edges = [
        (int(r.depends_on), int(r.job_id))
        for r in conn.execute(workflow_edges_statement(), {"ids": ids})
    ]
    return {"nodes": sorted(nodes, key=lambda n: int(n["id"])), "edges": edges, "cut": cut}
