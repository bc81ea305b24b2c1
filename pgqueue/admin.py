"""Read-side queries for operators: list and show jobs, queue statistics (R21).

What ``pgqueue list``, ``show`` and ``stats`` print, what ``enqueue`` and ``retry`` say about
unique keys, and what the dashboard (:mod:`pgqueue.web`) shows; usable from Python too. Every
function runs in the caller's connection and returns plain values ready for JSON (times as aware
datetimes). A job's value no Python client can load (a row written by SQL with ``run_at`` in year
29405, or a payload nested 5,000 levels deep) comes as an :class:`Unreadable` holding the server's
text, so one such row never breaks a listing.
"""

from __future__ import annotations

from datetime import timedelta
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
    func,
    select,
    text,
)

from pgqueue._readable import READABLE_FROM, decoded, readable
from pgqueue._readable import Unreadable as Unreadable  # returned by the readers below
from pgqueue._validation import check_job_id
from pgqueue.models import JobStatus, jobs_table
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


def list_jobs(
    conn: Connection,
    *,
    queue: str | None = None,
    status: JobStatus | None = None,
    limit: int = 50,
    before_id: int | None = None,
    with_payload: bool = True,
) -> list[dict[str, Any]]:
    """The most recent jobs (highest id first), optionally of one queue and one status.

    ``before_id`` pages by keyset: only ids below it, so page N costs what page 1 costs (a
    backward scan of ``jobs_pkey`` from that id, or of the partial index of the status), where an
    ``OFFSET`` would read and drop every row before the page. ``with_payload=False`` leaves the
    payloads on the server, for a listing that does not show them (default ``True``).
    """
    stmt = list_jobs_statement(
        queue=queue, status=status, limit=limit, before_id=before_id, with_payload=with_payload
    )
    return [decoded(row) for row in conn.execute(stmt)]


def list_jobs_statement(
    *,
    queue: str | None = None,
    status: JobStatus | None = None,
    limit: int = 50,
    before_id: int | None = None,
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
    return stmt.order_by(jobs.c.id.desc()).limit(limit)


def get_job(conn: Connection, job_id: int) -> dict[str, Any] | None:
    """One job with its payload, or ``None`` when there is no such id.

    Raises:
        InvalidArgumentError: for an id no ``bigint`` holds, before any SQL.
    """
    stmt = select(*readable(jobs.c)).where(jobs.c.id == check_job_id(job_id))
    row = conn.execute(stmt).first()
    return None if row is None else decoded(row)


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
    """Per queue: ready, scheduled, running, expired leases, done, failed, oldest ready age (s).

    One pass over ``jobs``: on a table with a long history run it sparingly, or purge first.
    """
    queued = jobs.c.status == status_literal(JobStatus.QUEUED)
    running = jobs.c.status == status_literal(JobStatus.RUNNING)
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
            _count(jobs.c.status == status_literal(JobStatus.FAILED)).label("failed"),
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
