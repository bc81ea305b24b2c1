"""The declarative ``Job`` model: the same table the Alembic revisions create.

The model is for reading jobs, for autogenerate comparisons and for users' foreign keys. The queue's
hot paths use the Core statements of :mod:`pgqueue._sql.statements`, built on ``Job.__table__``.
"""

from __future__ import annotations

import enum
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    ForeignKey,
    Identity,
    Index,
    Integer,
    Interval,
    MetaData,
    SmallInteger,
    Table,
    Text,
    case,
    func,
    literal_column,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSON, JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.sql.elements import ColumnClause, ColumnElement

#: Names the revisions use, so autogenerate and the catalog agree (PostgreSQL's own defaults).
NAMING_CONVENTION: dict[str, str] = {
    "pk": "%(table_name)s_pkey",
    "ck": "%(table_name)s_%(constraint_name)s_check",
    "ix": "%(table_name)s_%(column_0_N_name)s_idx",
    "uq": "%(table_name)s_%(column_0_N_name)s_key",
    "fk": "%(table_name)s_%(column_0_N_name)s_fkey",
}

#: pgqueue's own metadata: pass it next to yours as Alembic's ``target_metadata``.
metadata = MetaData(naming_convention=NAMING_CONVENTION)


class JobStatus(str, enum.Enum):
    """A job's state; the values are the text stored in ``jobs.status``."""

    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"

    def __str__(self) -> str:
        return self.value


#: The stored statuses of a live job, written once: it holds its ``unique_key``, may be cancelled,
#: and is not finished (a dependency that is live still counts in its dependents' ``waiting_on``).
LIVE_STATUSES: tuple[JobStatus, ...] = (JobStatus.QUEUED, JobStatus.RUNNING)
#: :data:`LIVE_STATUSES` as SQL text: ``status IN ('queued', 'running')``.
LIVE_SQL = "status IN (" + ", ".join(f"'{status.value}'" for status in LIVE_STATUSES) + ")"
#: The predicate of ``jobs_unique_key_idx``, spelled as the index spells it: the arbiter of an
#: enqueue's ``ON CONFLICT`` and the key lookups must match it for the planner to use the index.
LIVE_KEY_SQL = f"unique_key IS NOT NULL AND {LIVE_SQL}"


class JobState(str, enum.Enum):
    """A job's state as people see it (``pgqueue list``, ``show``, the dashboard): its stored
    :class:`JobStatus`, with the two statuses that mean several things each told apart.

    ``queued``, ``waiting``, ``sleeping`` and ``awaiting signal`` are all stored ``queued``;
    ``failed``, ``cancelled`` and ``expired`` are all stored ``failed``. :func:`in_state` is
    the rule that tells them apart, and :data:`JOB_STATE` the value a reader shows;
    ``jobs.status`` and :attr:`pgqueue.JobResult.status` keep the stored status
    (docs/lifecycle.md, "The states people see").

    .. versionadded:: 0.1.0
    """

    #: Stored ``queued``, waiting for no dependency: ready, or due at its ``run_at``.
    QUEUED = "queued"
    #: Stored ``queued`` with ``waiting_on > 0``: not claimed until its dependencies
    #: (``depends_on``) are done; it has no ``run_at`` of its own until then.
    WAITING = "waiting"
    #: Stored ``running``: a worker holds it.
    RUNNING = "running"
    #: Stored ``done``.
    DONE = "done"
    #: Stored ``failed`` without ``cancelled_at`` or ``expired_at``: failed for good on its own.
    FAILED = "failed"
    #: Stored ``failed`` with ``cancelled_at``: cancelled (by an operator, or by a cancelled
    #: dependency).
    CANCELLED = "cancelled"
    #: Stored ``failed`` with ``expired_at``: not started within its ``expires_in`` of its
    #: ``run_at``, so never run (pgqueue_0015).
    EXPIRED = "expired"
    #: Stored ``queued``, given back by a durable sleep (:meth:`pgqueue.JobContext.sleep`)
    #: whose wake-up (``suspended_until``) is still to come (pgqueue_0019).
    SLEEPING = "sleeping"
    #: Stored ``queued``, given back by :meth:`pgqueue.JobContext.wait_for_signal` until its
    #: signal arrives or its timeout (``suspended_until``) passes (pgqueue_0019).
    AWAITING_SIGNAL = "awaiting signal"

    @property
    def stored(self) -> JobStatus:
        """The status ``jobs.status`` holds for a job in this state."""
        return _STORED[self]

    def __str__(self) -> str:
        return self.value


_STORED = {
    JobState.QUEUED: JobStatus.QUEUED,
    JobState.WAITING: JobStatus.QUEUED,
    JobState.RUNNING: JobStatus.RUNNING,
    JobState.DONE: JobStatus.DONE,
    JobState.FAILED: JobStatus.FAILED,
    JobState.CANCELLED: JobStatus.FAILED,
    JobState.EXPIRED: JobStatus.FAILED,
    JobState.SLEEPING: JobStatus.QUEUED,
    JobState.AWAITING_SIGNAL: JobStatus.QUEUED,
}


class Base(DeclarativeBase):
    metadata = metadata


class Job(Base):
    """One row per job (R1). ``attempts`` is the fencing token of every guarded update."""

    __tablename__ = "jobs"

    id: Mapped[int] = mapped_column(BigInteger, Identity(always=True), primary_key=True)
    queue: Mapped[str] = mapped_column(Text, server_default=text("'default'"))
    payload: Mapped[Any] = mapped_column(JSONB)
    status: Mapped[str] = mapped_column(Text, server_default=text("'queued'"))
    run_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    attempts: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    max_attempts: Mapped[int] = mapped_column(Integer, server_default=text("5"))
    locked_until: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    last_error: Mapped[str | None] = mapped_column(Text)
    #: Producer metadata (``{str: str}``, a trace context for example), never inside the payload.
    headers: Mapped[dict[str, str] | None] = mapped_column(JSONB)
    #: 0-9, higher runs first (:data:`pgqueue.MAX_PRIORITY`).
    priority: Mapped[int] = mapped_column(SmallInteger, server_default=text("0"))
    #: While a job with this key is queued or running, no other job of its queue takes the key.
    unique_key: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    #: When the job became ``done`` or ``failed`` (set by the same UPDATE; a retry clears it).
    #: ``None`` while queued or running, and for jobs finished before pgqueue_0009.
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    #: The last failed attempts, oldest first: ``[{"attempt", "at", "error", "traceback"}, ...]``
    #: (pgqueue_0010), at most :data:`pgqueue._sql.statements.MAX_ERRORS_KEPT`; ``last_error`` holds
    #: the newest one-line error.
    errors: Mapped[list[dict[str, Any]] | None] = mapped_column(JSONB)
    #: How often a handler gave the job back with :class:`pgqueue.Snooze` (pgqueue_0010).
    snoozes: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    #: When an operator cancelled the job (its status is then ``failed``); ``None`` otherwise.
    cancelled_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    #: The worker (its ``application_name``) that claimed the job last, and when (pgqueue_0010).
    locked_by: Mapped[str | None] = mapped_column(Text)
    locked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    #: The :class:`pgqueue.Task` that runs the job, by name (pgqueue_0011); ``None`` for
    #: queue-keyed jobs, which their queue's handler runs.
    task: Mapped[str | None] = mapped_column(Text)
    #: What the job's task or handler returned, any JSON value (pgqueue_0011); ``None`` until
    #: the job is ``done`` (and for a job that returned ``None``: ``status`` tells them apart).
    result: Mapped[Any] = mapped_column(JSONB, nullable=True)
    #: The last value the running job passed to ``set_progress`` (pgqueue_0011).
    progress: Mapped[Any] = mapped_column(JSONB, nullable=True)
    #: The key a queue's ``per_key`` limit counts by (pgqueue_0012): at most ``per_key`` running
    #: jobs of the queue share it; ``None`` is not limited by ``per_key``.
    concurrency_key: Mapped[str | None] = mapped_column(Text)
    #: How many of the job's dependencies (``depends_on``) are not finished yet (pgqueue_0013). A
    #: job with ``waiting_on > 0`` is ``queued`` but not ready: its ``run_at`` is
    #: :data:`pgqueue.enqueue_options.WAITING_RUN_AT` until the last dependency finishes.
    waiting_on: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    #: Some job depends on this one (pgqueue_0013): its completion releases them.
    has_dependents: Mapped[bool] = mapped_column(Boolean, server_default=text("false"))
    #: How long one attempt's handler may run (``timeout=``, pgqueue_0015); ``None``: the
    #: worker's ``default_timeout``, if any.
    timeout: Mapped[timedelta | None] = mapped_column(Interval)
    #: A job not started within this long of its ``run_at`` is never run (``expires_in=``,
    #: pgqueue_0015): the claim that finds it late fails it instead.
    expires_in: Mapped[timedelta | None] = mapped_column(Interval)
    #: When a claim found the job past its deadline and failed it (its status is then
    #: ``failed``); ``None`` otherwise (pgqueue_0015).
    expired_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    #: The durable steps, sleeps and signal waits the job reached, in order (pgqueue_0019):
    #: ``[{"name", "kind", "at", "attempt", "value"?, "wake_at"?}, ...]``; ``None`` for none.
    steps: Mapped[list[dict[str, Any]] | None] = mapped_column(JSONB, nullable=True)
    #: The signals it received (:func:`pgqueue.signal`), ``{name: {"payload", "at"}}``
    #: (pgqueue_0019); kept until the job asks for them, and after.
    signals: Mapped[dict[str, Any] | None] = mapped_column(JSONB, nullable=True)
    #: Until when the job gave itself back by a durable sleep or a signal wait (pgqueue_0019):
    #: while it is in the future, the queued job is ``sleeping`` or ``awaiting signal``.
    suspended_until: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    #: The signal a suspended job waits for; ``None`` for a sleep (pgqueue_0019).
    awaiting_signal: Mapped[str | None] = mapped_column(Text)

    __table_args__ = (
        CheckConstraint(
            "status IN ('queued', 'running', 'done', 'failed')",
            name="status",
        ),
        CheckConstraint("priority >= 0 AND priority <= 9", name="priority"),
        # R2: only ready-able rows, so it stays small however much history the table holds; the
        # claim reads it one priority level at a time (pgqueue_0006).
        Index(
            "jobs_ready_idx",
            "queue",
            "priority",
            "run_at",
            postgresql_where=text("status = 'queued'"),
        ),
        # One live job per (queue, key); jobs without a key add no entry.
        Index(
            "jobs_unique_key_idx",
            "queue",
            "unique_key",
            unique=True,
            postgresql_where=text(LIVE_KEY_SQL),
        ),
        # Leases of running jobs only: the reaper never scans finished history.
        Index("jobs_lease_idx", "locked_until", postgresql_where=text("status = 'running'")),
        # Failed ids only: a page of failed jobs never walks the done history.
        Index("jobs_failed_idx", "id", postgresql_where=text("status = 'failed'")),
        # Queued jobs that carry a key only (pgqueue_0017): a per_key claim takes each key's
        # first ready jobs from it, one probe per key, never ranking the whole backlog.
        Index(
            "jobs_ready_key_idx",
            "queue",
            "concurrency_key",
            text("priority DESC"),
            "run_at",
            "id",
            postgresql_where=text("status = 'queued' AND concurrency_key IS NOT NULL"),
        ),
        # Running jobs that carry a key only (pgqueue_0012): a key's running count never reads
        # the queued backlog or the finished history.
        Index(
            "jobs_running_key_idx",
            "queue",
            "concurrency_key",
            postgresql_where=text("status = 'running' AND concurrency_key IS NOT NULL"),
        ),
        # Finished rows by queue, status and age (pgqueue_0016), the only index of finished rows
        # (pgqueue_0017): a queue's prune reads its own expired rows oldest first, never another
        # queue's history, and the dashboard's last hour is a range scan of it per queue.
        Index(
            "jobs_prune_idx",
            "queue",
            "status",
            "finished_at",
            postgresql_where=text("finished_at IS NOT NULL"),
        ),
    )

    def __repr__(self) -> str:
        return (
            f"Job(id={self.id!r}, queue={self.queue!r}, status={self.status!r}, "
            f"attempts={self.attempts!r})"
        )


#: The Core table behind :class:`Job`.
jobs_table: Table = Job.__table__  # type: ignore[assignment]


def status_literal(status: JobStatus) -> ColumnClause[Any]:
    """``'queued'`` inline, so generic plans can still prove a partial index's predicate.

    Here, beside the table, so that every statement module shares it without importing another.
    """
    return literal_column(f"'{status.value}'", Text)


def is_live(status: ColumnElement[Any]) -> ColumnElement[bool]:
    """``status IN ('queued', 'running')`` of a ``status`` column (:data:`LIVE_STATUSES`), with
    the statuses inline as :func:`status_literal` renders them."""
    return status.in_([status_literal(s) for s in LIVE_STATUSES])


def in_state(state: JobState | JobStatus | str) -> ColumnElement[bool]:
    """The condition on ``jobs`` of a job in ``state`` (a :class:`JobState`, or its value; a
    :class:`JobStatus` names the state of its value): the one rule that tells ``waiting`` from
    ``queued`` and ``cancelled`` from ``failed``, for every reader that filters or counts by
    state. The stored status is a literal, so a partial index on it still serves the filter.

    Raises:
        ValueError: ``state`` names no state.
    """
    wanted = JobState(state)
    condition = jobs_table.c.status == status_literal(wanted.stored)
    until = jobs_table.c.suspended_until
    suspended = until > func.now()
    if wanted is JobState.QUEUED:
        condition = condition & (jobs_table.c.waiting_on == 0) & (until.is_(None) | ~suspended)
    elif wanted is JobState.WAITING:
        condition = condition & (jobs_table.c.waiting_on > 0)
    elif wanted is JobState.SLEEPING:
        condition = (
            condition
            & (jobs_table.c.waiting_on == 0)
            & suspended
            & jobs_table.c.awaiting_signal.is_(None)
        )
    elif wanted is JobState.AWAITING_SIGNAL:
        condition = (
            condition
            & (jobs_table.c.waiting_on == 0)
            & suspended
            & jobs_table.c.awaiting_signal.is_not(None)
        )
    elif wanted is JobState.FAILED:
        condition = (
            condition & jobs_table.c.cancelled_at.is_(None) & jobs_table.c.expired_at.is_(None)
        )
    elif wanted is JobState.CANCELLED:
        condition = condition & jobs_table.c.cancelled_at.is_not(None)
    elif wanted is JobState.EXPIRED:
        condition = condition & jobs_table.c.expired_at.is_not(None)
    return condition


#: A job's :class:`JobState` as text (``'waiting'``, ``'cancelled'``, else the stored status):
#: what the operator's readers select as ``status``.
JOB_STATE: ColumnElement[str] = case(
    *(
        (in_state(state), literal_column(f"'{state.value}'", Text))
        for state in JobState
        if state.value != state.stored.value
    ),
    else_=jobs_table.c.status,
)


#: A job's outcome as :class:`pgqueue.JobResult` reads it: only the columns a producer that waits
#: is granted (:data:`pgqueue.grants.WAITER_COLUMNS`), ``cancelled`` derived from ``cancelled_at``.
JOB_RESULT_COLUMNS: tuple[ColumnElement[Any], ...] = (
    jobs_table.c.id,
    jobs_table.c.status,
    jobs_table.c.result,
    jobs_table.c.last_error,
    jobs_table.c.progress,
    jobs_table.c.finished_at,
    jobs_table.c.task,
    jobs_table.c.attempts,
    jobs_table.c.cancelled_at.is_not(None).label("cancelled"),
    jobs_table.c.expired_at.is_not(None).label("expired"),
    jobs_table.c.steps,
)


class JobDependency(Base):
    """One edge of a workflow (pgqueue_0013): job ``job_id`` waits for job ``depends_on``.

    ``pending`` while the edge still counts in the waiting job's ``waiting_on``: the dependency's
    completion settles it once. ``run_on_failure`` is ``on_dependency_failure="run"``: the job
    runs even when this dependency fails for good or is cancelled. Both ends go with their job
    (``purge``).

    .. versionadded:: 0.1.0
    """

    __tablename__ = "jobs_dependencies"

    depends_on: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True
    )
    job_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True
    )
    pending: Mapped[bool] = mapped_column(Boolean)
    run_on_failure: Mapped[bool] = mapped_column(Boolean, server_default=text("false"))

    __table_args__ = (Index("jobs_dependencies_job_id_idx", "job_id"),)

    def __repr__(self) -> str:
        return f"JobDependency(job_id={self.job_id!r}, depends_on={self.depends_on!r})"


#: The Core table behind :class:`JobDependency`.
dependencies_table: Table = JobDependency.__table__  # type: ignore[assignment]


class PeriodicState(Base):
    """One row per periodic definition name (pgqueue_0007): what lets many workers fire a tick once.

    ``last_tick`` only moves forward, by a compare-and-set in the statement that inserts the
    tick's job; ``ticks_from`` is when the definition was first declared, or its schedule last
    changed (no job for ticks before it); ``declared_at`` is when a worker last declared it.

    .. versionadded:: 0.1.0
    """

    __tablename__ = "jobs_periodic"

    name: Mapped[str] = mapped_column(Text, primary_key=True)
    schedule: Mapped[str] = mapped_column(Text)
    timezone: Mapped[str] = mapped_column(Text)
    queue: Mapped[str] = mapped_column(Text)
    ticks_from: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    last_tick: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    declared_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now()
    )

    def __repr__(self) -> str:
        return f"PeriodicState(name={self.name!r}, last_tick={self.last_tick!r})"


#: The Core table behind :class:`PeriodicState`.
periodic_table: Table = PeriodicState.__table__  # type: ignore[assignment]


class WorkerRecord(Base):
    """One row per running worker process (pgqueue_0010): what it serves and since when.

    Written once when the worker starts and deleted when it stops cleanly; whether it is still
    connected is read from ``pg_stat_activity`` (its ``application_name`` is ``name``), so the row
    of a killed worker never claims it is alive.

    .. versionadded:: 0.1.0
    """

    __tablename__ = "jobs_workers"

    name: Mapped[str] = mapped_column(Text, primary_key=True)
    host: Mapped[str] = mapped_column(Text)
    pid: Mapped[int] = mapped_column(Integer)
    queues: Mapped[list[str]] = mapped_column(ARRAY(Text))
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    #: How many of its handler threads are stuck in a handler past its timeout (pgqueue_0015).
    stuck: Mapped[int] = mapped_column(Integer, server_default=text("0"))

    def __repr__(self) -> str:
        return f"WorkerRecord(name={self.name!r}, queues={self.queues!r})"


#: The Core table behind :class:`WorkerRecord`.
workers_table: Table = WorkerRecord.__table__  # type: ignore[assignment]


class QueueSettingsRecord(Base):
    """One row per queue an operator paused or limited (pgqueue_0012).

    A queue without a row is unpaused and unlimited. ``rate_limit`` and ``rate_period`` are both
    set or both ``None``; ``window_start`` and ``window_count`` are the rate limit's fixed window,
    written by the claim in its own statement on the database clock. Read it through
    :func:`pgqueue.queue_settings`, change it through :func:`pgqueue.pause`,
    :func:`pgqueue.resume` and :func:`pgqueue.set_queue_limits` (they notify the workers).

    .. versionadded:: 0.1.0
    """

    __tablename__ = "jobs_queues"

    queue: Mapped[str] = mapped_column(Text, primary_key=True)
    paused: Mapped[bool] = mapped_column(Boolean, server_default=text("false"))
    concurrency: Mapped[int | None] = mapped_column(Integer)
    per_key: Mapped[int | None] = mapped_column(Integer)
    rate_limit: Mapped[int | None] = mapped_column(Integer)
    rate_period: Mapped[timedelta | None] = mapped_column(Interval)
    window_start: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    window_count: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())

    __table_args__ = (
        CheckConstraint("concurrency >= 1", name="concurrency"),
        CheckConstraint("per_key >= 1", name="per_key"),
        CheckConstraint("rate_limit >= 1", name="rate_limit"),
        CheckConstraint("(rate_limit IS NULL) = (rate_period IS NULL)", name="rate"),
        CheckConstraint("rate_period > interval '0'", name="rate_period"),
    )

    def __repr__(self) -> str:
        return f"QueueSettingsRecord(queue={self.queue!r}, paused={self.paused!r})"


#: The Core table behind :class:`QueueSettingsRecord`.
queues_table: Table = QueueSettingsRecord.__table__  # type: ignore[assignment]


#: How long ``done`` jobs are kept where no retention is set (``jobs_retention``): 7 days.
DEFAULT_DONE_RETENTION = timedelta(days=7)
#: How long ``failed`` jobs (cancelled and expired ones too) are kept where none is set: 30 days.
DEFAULT_FAILED_RETENTION = timedelta(days=30)
#: The kinds of finished jobs a retention is set for, as ``jobs_retention`` names its columns.
RETENTION_KINDS = ("done", "failed")
#: The ``jobs_retention.queue`` of the default's row: blank, which no queue name may be.
DEFAULT_RETENTION_ROW = ""


class RetentionRecord(Base):
    """One row per queue with a retention of its own, or pruned by a worker (pgqueue_0016).

    ``done`` and ``failed`` apply where ``done_set`` and ``failed_set`` say so (a set kind with
    ``None`` is kept for ever; an unset one takes the default's). The row whose ``queue`` is
    ``''`` holds the default. ``pruned_at`` and ``pruned_by`` record the last prune: a worker
    prunes a queue holding its row locked, and only once ``pruned_at`` is a minute old. Read it
    through :func:`pgqueue.retention`, change it through :func:`pgqueue.set_retention`.

    .. versionadded:: 0.1.0
    """

    __tablename__ = "jobs_retention"

    queue: Mapped[str] = mapped_column(Text, primary_key=True)
    done: Mapped[timedelta | None] = mapped_column(Interval)
    failed: Mapped[timedelta | None] = mapped_column(Interval)
    done_set: Mapped[bool] = mapped_column(Boolean, server_default=text("false"))
    failed_set: Mapped[bool] = mapped_column(Boolean, server_default=text("false"))
    pruned_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    pruned_by: Mapped[str | None] = mapped_column(Text)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())

    __table_args__ = (
        CheckConstraint("done > interval '0'", name="done"),
        CheckConstraint("failed > interval '0'", name="failed"),
        CheckConstraint("done_set OR done IS NULL", name="done_set"),
        CheckConstraint("failed_set OR failed IS NULL", name="failed_set"),
    )

    def __repr__(self) -> str:
        return f"RetentionRecord(queue={self.queue!r}, done={self.done!r}, failed={self.failed!r})"


#: The Core table behind :class:`RetentionRecord`.
retention_table: Table = RetentionRecord.__table__  # type: ignore[assignment]


class JobLogRecord(Base):
    """The log lines of one attempt of one job (pgqueue_0018): what its handler recorded with
    :meth:`pgqueue.JobContext.log` and, with ``Worker(capture_logs=True)``, what it logged.

    ``lines`` is a JSON array of ``[microseconds since the epoch, level, logger name or null,
    fields, message]``, oldest first: the last 1,000 lines / 256 KiB of the attempt, the
    worker's buffer as a whole (each write replaces the row); ``dropped`` counts the older lines
    the bound dropped. Written by the statements that already write the job's outcome or extend
    its lease, never one of its own; deleted with its job by the statements that delete finished
    jobs (purge, retention: in the same statement, not by a foreign key, whose trigger per row
    made them 1.5x slower). Read it through :func:`pgqueue.job_logs`.

    .. versionadded:: 0.1.0
    """

    __tablename__ = "jobs_logs"

    job_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    attempt: Mapped[int] = mapped_column(Integer, primary_key=True)
    #: ``json``, not ``jsonb``: written whole and read whole, never queried inside.
    lines: Mapped[Any] = mapped_column(JSON)
    dropped: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())

    def __repr__(self) -> str:
        return f"JobLogRecord(job_id={self.job_id!r}, attempt={self.attempt!r})"


#: The Core table behind :class:`JobLogRecord`.
job_logs_table: Table = JobLogRecord.__table__  # type: ignore[assignment]
