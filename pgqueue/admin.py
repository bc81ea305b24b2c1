"""Read-side queries for operators: list and show jobs, queue statistics (R21).

What ``pgqueue list``, ``show`` and ``stats`` print, what ``enqueue`` and ``retry`` say about
unique keys, and what the dashboard (:mod:`pgqueue.web`) shows; usable from Python too. Every
function runs in the caller's connection and returns plain values ready for JSON (times as aware
datetimes). A job's value no Python client can load (a row written by SQL with ``run_at`` in year
29405, or a payload nested 5,000 levels deep) comes as an :class:`Unreadable` holding the server's
text, so one such row never breaks a listing.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    BigInteger,
    Connection,
    Float,
    Integer,
    Interval,
    Select,
    and_,
    bindparam,
    cast,
    func,
    literal,
    literal_column,
    select,
    table,
    text,
    true,
)
from sqlalchemy import Text as TextType
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.sql.expression import column

from pgqueue._base.connections import WORKER_PREFIX
from pgqueue._base.readable import READABLE_FROM, decoded, readable
from pgqueue._base.readable import Unreadable as Unreadable  # returned by the readers below
from pgqueue._base.validation import (
    check_job_id,
    check_positive_int,
    check_unique_key,
    encode_payload,
)
from pgqueue.errors import InvalidArgumentError, InvalidArgumentTypeError
from pgqueue.models import JobStatus, jobs_table, workers_table
from pgqueue.statements import status_literal

jobs = jobs_table

#: The columns ``pgqueue list`` and ``show`` print, in order.
JOB_COLUMNS = (
    "id",
    "queue",
    "status",
    "priority",
    "attempts",
    "max_attempts",
    "run_at",
    "locked_until",
    "last_error",
    "unique_key",
    "created_at",
    "finished_at",
)


#: Most characters of ``error_contains``: a search, not a document.
MAX_SEARCH_CHARS = 1000


def list_jobs(
    conn: Connection,
    *,
    queue: str | None = None,
    status: JobStatus | None = None,
    limit: int = 50,
    before_id: int | None = None,
    payload_contains: Any = None,
    error_contains: str | None = None,
    unique_key: str | None = None,
    with_payload: bool = True,
) -> list[dict[str, Any]]:
    """The most recent jobs (highest id first), optionally of one queue and one status.

    ``before_id`` pages by keyset: only ids below it, so page N costs what page 1 costs (a
    backward scan of ``jobs_pkey`` from that id, or of the partial index of the status), where an
    ``OFFSET`` would read and drop every row before the page.

    Searches (each a bound parameter): ``payload_contains`` keeps the jobs whose payload
    contains this JSON value (``payload @> value``: ``{"user": 42}`` matches ``{"user": 42,
    "x": 1}``; ``None`` searches nothing), ``error_contains`` those whose ``last_error`` holds
    this text (case-insensitive; ``%`` and ``_`` are plain characters), ``unique_key`` those with
    this key. No index serves them: a rare match walks the history back, newest first, until it
    has a page. ``with_payload=False`` leaves the payload out of the rows (the dashboard's list
    shows none, and a payload may weigh megabytes).

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
    )
    return [decoded(row) for row in conn.execute(stmt)]


def list_jobs_statement(
    *,
    queue: str | None = None,
    status: JobStatus | None = None,
    limit: int = 50,
    before_id: int | None = None,
    payload_contains: Any = None,
    error_contains: str | None = None,
    unique_key: str | None = None,
    with_payload: bool = True,
) -> Select[Any]:
    """The statement :func:`list_jobs` runs (its plan is checked on a million done jobs)."""
    names = (*JOB_COLUMNS, "payload") if with_payload else JOB_COLUMNS
    stmt: Select[Any] = select(*readable(jobs.c[name] for name in names))
    if queue is not None:
        stmt = stmt.where(jobs.c.queue == bindparam("queue_name", queue))
    if status is not None:
        stmt = stmt.where(jobs.c.status == status_literal(status))
    if before_id is not None:
        stmt = stmt.where(jobs.c.id < bindparam("before_id", before_id, type_=BigInteger))
    if payload_contains is not None:
        try:
            wanted = encode_payload(payload_contains)
        except InvalidArgumentError as exc:
            raise InvalidArgumentError("payload_contains", exc.problem) from exc
        stmt = stmt.where(
            jobs.c.payload.op("@>")(
                cast(bindparam("payload_contains", wanted, type_=TextType), JSONB)
            )
        )
    if error_contains is not None:
        text_ = _search_text("error_contains", error_contains)
        stmt = stmt.where(jobs.c.last_error.icontains(text_, autoescape=True))
    if unique_key is not None:
        key = check_unique_key(unique_key)
        stmt = stmt.where(jobs.c.unique_key == bindparam("unique_key", key, type_=TextType))
    return stmt.order_by(jobs.c.id.desc()).limit(limit)


def _search_text(name: str, value: object) -> str:
    if not isinstance(value, str):
        raise InvalidArgumentTypeError(name, "str", value)
    if not value or "\x00" in value or len(value) > MAX_SEARCH_CHARS:
        raise InvalidArgumentError(
            name, f"must be 1 to {MAX_SEARCH_CHARS} characters, without U+0000"
        )
    return value


def get_job(
    conn: Connection, job_id: int, *, payload_chars: int | None = None
) -> dict[str, Any] | None:
    """One job with its payload, or ``None`` when there is no such id.

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
        stmt = select(*readable(jobs.c)).where(jobs.c.id == job_id)
        row = conn.execute(stmt).first()
    else:
        limit = check_positive_int("payload_chars", payload_chars)
        row = conn.execute(get_job_statement(limit), {"job_id": job_id}).first()
    if row is None:
        return None
    job = decoded(row)
    job["errors"] = error_history(job.get("errors"))
    return job


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


def get_job_statement(payload_chars: int) -> Select[Any]:
    """:func:`get_job` with ``payload_chars`` (parameter ``job_id``): every column but the
    payload, and the payload's text cut on the server (computed once, in a subquery)."""
    as_text = (
        select(cast(jobs.c.payload, TextType).label("t"))
        .correlate(jobs)
        .offset(literal_column("0"))
        .lateral("p")
    )
    columns = readable(c for c in jobs.c if c.name != "payload")
    return (
        select(
            *columns,
            func.left(as_text.c.t, literal(payload_chars, Integer, literal_execute=True)).label(
                "payload_text"
            ),
            func.length(as_text.c.t).label("payload_length"),
        )
        .select_from(jobs.join(as_text, true()))
        .where(jobs.c.id == bindparam("job_id", type_=BigInteger))
    )


def job_statuses(conn: Connection, job_ids: list[int]) -> dict[int, str]:
    """The current status of each existing id, to explain why a command left a job alone."""
    rows = conn.execute(select(jobs.c.id, jobs.c.status).where(jobs.c.id.in_(job_ids)))
    return {row.id: row.status for row in rows}


def key_holders(conn: Connection, job_ids: list[int]) -> dict[int, tuple[str, int]]:
    """``{id: (unique_key, holder_id)}`` for each of ``job_ids`` whose unique key another queued or
    running job of its queue holds: why ``retry`` leaves such a failed job alone."""
    holder = jobs.alias("holder")
    live = [status_literal(JobStatus.QUEUED), status_literal(JobStatus.RUNNING)]
    stmt = (
        select(jobs.c.id, jobs.c.unique_key, holder.c.id.label("holder_id"))
        .select_from(jobs)
        .join(
            holder,
            and_(
                holder.c.queue == jobs.c.queue,
                holder.c.unique_key == jobs.c.unique_key,
                holder.c.unique_key.is_not(None),
                holder.c.status.in_(live),
                holder.c.id != jobs.c.id,
            ),
        )
        .where(jobs.c.id.in_(job_ids))
    )
    return {row.id: (row.unique_key, row.holder_id) for row in conn.execute(stmt)}


def _count(*conditions: Any) -> Any:
    return func.count().filter(and_(*conditions))


def queue_stats(conn: Connection) -> list[dict[str, Any]]:
    """Per queue: ready, scheduled, running, expired leases, done, failed, cancelled, oldest
    ready age (s).

    ``failed`` counts the jobs that failed for good on their own; ``cancelled`` those an operator
    cancelled (also ``status = 'failed'``, with ``cancelled_at`` set): the two never overlap.
    One pass over ``jobs``: on a table with a long history run it sparingly, or purge first.
    """
    queued = jobs.c.status == status_literal(JobStatus.QUEUED)
    running = jobs.c.status == status_literal(JobStatus.RUNNING)
    failed = jobs.c.status == status_literal(JobStatus.FAILED)
    ready = and_(queued, jobs.c.run_at <= func.now())
    # greatest(): a run_at of '-infinity' (written by SQL) would fail the subtraction below.
    oldest_ready = func.min(func.greatest(jobs.c.run_at, READABLE_FROM)).filter(ready)
    stmt = (
        select(
            jobs.c.queue,
            _count(ready).label("ready"),
            _count(queued, jobs.c.run_at > func.now()).label("scheduled"),
            _count(running).label("running"),
            _count(running, jobs.c.locked_until < func.now()).label("expired_leases"),
            _count(jobs.c.status == status_literal(JobStatus.DONE)).label("done"),
            _count(failed, jobs.c.cancelled_at.is_(None)).label("failed"),
            _count(failed, jobs.c.cancelled_at.is_not(None)).label("cancelled"),
            func.extract("epoch", func.now() - oldest_ready)
            .cast(Float)
            .label("oldest_ready_age_s"),
        )
        .group_by(jobs.c.queue)
        .order_by(jobs.c.queue)
    )
    return [dict(row._mapping) for row in conn.execute(stmt)]


def finished_per_minute(
    conn: Connection, *, window: timedelta = timedelta(hours=1)
) -> list[dict[str, Any]]:
    """Jobs finished per queue and minute over the last ``window``: ``queue, minute,
    minutes_ago, done, failed``, oldest minute first (minutes without a finished job are
    absent; ``minutes_ago`` is 0 for the current minute, read on the server's clock).

    A range scan of the partial ``jobs_finished_at_idx`` (pgqueue_0009): its cost follows the jobs
    finished within the window, never the whole history. A job retried since it finished is not
    counted (a retry clears ``finished_at``).
    """
    return [dict(row._mapping) for row in conn.execute(finished_per_minute_statement(window))]


def finished_per_minute_statement(window: timedelta = timedelta(hours=1)) -> Select[Any]:
    """The statement :func:`finished_per_minute` runs."""
    minute = func.date_trunc("minute", jobs.c.finished_at).label("minute")
    stmt = (
        select(
            jobs.c.queue,
            minute,
            func.floor(func.extract("epoch", func.date_trunc("minute", func.now()) - minute) / 60)
            .cast(Integer)
            .label("minutes_ago"),
            _count(jobs.c.status == status_literal(JobStatus.DONE)).label("done"),
            _count(jobs.c.status == status_literal(JobStatus.FAILED)).label("failed"),
        )
        .where(
            jobs.c.finished_at.is_not(None),
            jobs.c.finished_at >= func.now() - bindparam("window", window, type_=Interval),
            # Never in the future, but for a row written by SQL ('infinity'): not a minute.
            jobs.c.finished_at <= func.now(),
        )
        .group_by(jobs.c.queue, minute)
        .order_by(minute, jobs.c.queue)
    )
    return stmt


_OLDEST_SNAPSHOT = text(
    """
    SELECT pid, application_name, state,
           greatest(age(backend_xmin), age(backend_xid)) AS xmin_age_xids,
           extract(epoch FROM now() - xact_start)::float AS xact_age_s
    FROM pg_stat_activity
    WHERE datname = current_database() AND pid <> pg_backend_pid()
      AND (backend_xmin IS NOT NULL OR backend_xid IS NOT NULL)
    ORDER BY greatest(age(backend_xmin), age(backend_xid)) DESC LIMIT 1
    """
)


def oldest_snapshot(conn: Connection) -> dict[str, Any] | None:
    """The session holding the xmin horizon back the longest (R9), or ``None``.

    ``pid, application_name, state, xmin_age_xids, xact_age_s``: vacuum cannot remove a row
    that died after this session's snapshot was taken, in any table of the database. Sessions of
    other roles are visible only with ``pg_read_all_stats`` (``pg_monitor``).
    """
    row = conn.execute(_OLDEST_SNAPSHOT).first()
    return None if row is None else dict(row._mapping)


_TABLE_STATS = text(
    """
    SELECT n_live_tup, n_dead_tup, last_autovacuum, last_vacuum, last_autoanalyze
    FROM pg_stat_user_tables WHERE relid = to_regclass('jobs')
    """
)


def table_stats(conn: Connection) -> dict[str, Any]:
    """``pg_stat_user_tables`` for ``jobs``: live and dead tuples, last (auto)vacuum (R21)."""
    row = conn.execute(_TABLE_STATS).first()
    return {} if row is None else dict(row._mapping)


def schema_present(conn: Connection) -> bool:
    """Whether the ``jobs`` table is visible on this connection's search path."""
    return conn.execute(text("SELECT to_regclass('jobs') IS NOT NULL")).scalar_one() is True


_activity = table(
    "pg_stat_activity",
    column("application_name"),
    column("backend_start"),
    column("backend_type"),
    column("datname"),
    schema="pg_catalog",
)


def connected_workers_statement() -> Select[Any]:
    """The statement :func:`connected_workers` runs (parameter ``prefix``)."""
    connected = (
        select(
            _activity.c.application_name.label("name"),
            func.min(_activity.c.backend_start).label("connected_since"),
            func.count().label("connections"),
        )
        .where(
            _activity.c.datname == func.current_database(),
            _activity.c.backend_type == literal_column("'client backend'"),
            func.starts_with(
                _activity.c.application_name, bindparam("prefix", WORKER_PREFIX, type_=TextType)
            ),
        )
        .group_by(_activity.c.application_name)
        .cte("connected")
    )
    # The literal status: only the partial jobs_lease_idx (running jobs) is read, never history.
    held = (
        select(jobs.c.locked_by, func.count().label("jobs_held"))
        .where(
            jobs.c.status == status_literal(JobStatus.RUNNING),
            jobs.c.locked_by.in_(select(connected.c.name)),
        )
        .group_by(jobs.c.locked_by)
        .cte("held")
    )
    workers = workers_table
    return (
        select(
            connected.c.name,
            workers.c.host,
            workers.c.pid,
            workers.c.queues,
            func.coalesce(workers.c.started_at, connected.c.connected_since).label("since"),
            connected.c.connections,
            func.coalesce(held.c.jobs_held, literal_column("0")).label("jobs_held"),
        )
        .select_from(
            connected.outerjoin(workers, workers.c.name == connected.c.name).outerjoin(
                held, held.c.locked_by == connected.c.name
            )
        )
        .order_by(connected.c.name)
    )


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
