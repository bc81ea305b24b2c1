"""Small frozen results of the repository functions."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any


@dataclass(frozen=True)
class ClaimedJob:
    """A job this caller now holds. ``attempts`` is the token every later update must present.

    ``headers`` is what the producer passed as ``enqueue(..., headers=...)``, or ``None``
    (``.. versionadded:: 0.1.0``); ``priority`` its priority, 0-9; ``task`` the name of the
    task the job runs (``jobs.task``), ``None`` for a queue-keyed job; ``timeout`` its own
    execution timeout in seconds (``timeout=``), ``None`` for none. A claim never returns a job
    it found past its deadline (``expires_in=``): it failed that one instead.
    """

    id: int
    queue: str
    payload: Any
    attempts: int
    headers: Mapping[str, str] | None = None
    priority: int = 0
    task: str | None = None
    #: The job's own execution timeout in seconds (``timeout=``), ``None`` for none.
    timeout: float | None = None


@dataclass(frozen=True)
class EnqueuedJob:
    """What :func:`pgqueue.enqueue_unique` did: ``inserted`` a new job ``id``, or found ``id``, the
    live job holding the key.

    .. versionadded:: 0.1.0
    """

    id: int
    inserted: bool


@dataclass(frozen=True)
class FailResult:
    """Where a failed job went: back to ``queued`` (``retry_in`` set) or ``failed`` for good.

    Attributes:
        status: ``"queued"`` or ``"failed"``.
        attempts: Attempts spent so far.
        retry_in: Delay before the next attempt; ``None`` when the job failed for good.
    """

    id: int
    status: str
    attempts: int
    retry_in: timedelta | None


@dataclass(frozen=True)
class ReapedJob:
    """A job whose lease had expired: requeued, or failed once its attempts were spent."""

    id: int
    status: str
    attempts: int


@dataclass(frozen=True)
class CancelledJob:
    """A job :func:`pgqueue.cancel` failed for good; ``was_running``: a worker held it.

    .. versionadded:: 0.1.0
    """

    id: int
    was_running: bool


@dataclass(frozen=True)
class CancelReport:
    """What :func:`pgqueue.repository.cancel_report` did.

    Attributes:
        cancelled: The jobs cancelled, in id order.
        skipped: Ids of queued or running jobs left alone because another transaction held
            their row longer than the cancel waits (a ``mode="transaction"`` worker running it),
            in id order. Unknown and finished ids are in neither list.
        dependents: Ids of the jobs that waited for a cancelled one (``depends_on``, directly or
            through others) and were cancelled with it, in id order; those enqueued with
            ``on_dependency_failure="run"`` are released instead and are not listed.

    .. versionadded:: 0.1.0
    """

    cancelled: list[CancelledJob]
    skipped: list[int]
    dependents: list[int] = field(default_factory=list)


class Settled(enum.Enum):
    """How a job its worker still held left ``running`` without the worker's own write."""

    DONE_BY_HANDLER = "done by handler"
    CANCELLED = "cancelled"


@dataclass(frozen=True)
class PeriodicRow:
    """A periodic definition as the database holds it (``jobs_periodic``).

    Attributes:
        name: The definition's name.
        schedule: Its cron expression, or ``every Ns`` for an interval.
        timezone: The zone its cron expression is read in.
        queue: Where its jobs go.
        ticks_from: Ticks before this get no job (first declared, or schedule last changed).
        last_tick: The last tick enqueued, ``None`` before the first.
        declared_at: When a worker last declared it.

    .. versionadded:: 0.1.0
    """

    name: str
    schedule: str
    timezone: str
    queue: str
    ticks_from: datetime
    last_tick: datetime | None
    declared_at: datetime


@dataclass(frozen=True)
class Fired:
    """What one firing statement did: ``advanced`` the tick (won the compare-and-set), and the
    ids of the jobs it inserted (none when a ``skip_if_running`` key was held)."""

    advanced: bool
    job_ids: list[int]


#: The statuses a job does not leave by itself: :func:`pgqueue.wait_for` returns on them. A
#: failed attempt that will be retried is ``queued`` again, so it is not among them.
FINISHED_STATUSES = frozenset({"done", "failed"})


@dataclass(frozen=True)
class JobResult:
    """A job's outcome as its row holds it now: what :func:`pgqueue.fetch_result` and
    :func:`pgqueue.wait_for` return.

    The result lives as long as the job's row: ``purge`` removes both (see docs/lifecycle.md
    for keeping results longer).

    Attributes:
        id: The job's id.
        status: ``"queued"``, ``"running"``, ``"done"`` or ``"failed"`` (text, as stored).
        value: What the task (or queue handler) returned, any JSON value; ``None`` until the job
            is done, and for a task that returned ``None``.
        error: ``last_error``: the error of the last failed attempt (kept after a successful
            retry), ``"cancelled"`` for a cancelled job, else ``None``.
        progress: The last value the job passed to ``set_progress``, or ``None``.
        finished_at: When the job became ``done`` or ``failed`` for good; ``None`` before.
        task: The task's name, ``None`` for a queue-keyed job.
        attempts: Attempts spent so far.
        cancelled: ``pgqueue.cancel`` failed it (its ``status`` is ``"failed"``).
        expired: It was not started within its ``expires_in`` of its ``run_at``, so it never
            ran (its ``status`` is ``"failed"``, its ``error`` begins with ``"expired"``).

    .. versionadded:: 0.1.0
    """

    id: int
    status: str
    value: Any
    error: str | None
    progress: Any
    finished_at: datetime | None
    task: str | None = None
    attempts: int = 0
    cancelled: bool = False
    expired: bool = False

    @property
    def finished(self) -> bool:
        """``done`` or ``failed`` for good: nothing more will happen to the job by itself."""
        return self.status in FINISHED_STATUSES

    @property
    def succeeded(self) -> bool:
        """``done``: :attr:`value` is what the job returned."""
        return self.status == "done"


@dataclass(frozen=True)
class LogLine:
    """One line of a job's log (:func:`pgqueue.job_logs`).

    Attributes:
        time: When the line was recorded (the worker's clock, UTC).
        attempt: The attempt that recorded it.
        level: ``"info"`` for :meth:`pgqueue.JobContext.log`; a captured ``logging`` record's
            level in lower case (``"warning"``, ``"error"`` ...).
        message: The message, its passwords masked (a message no client could read: its repr).
        fields: The line's fields as stored JSON (``{}`` for none; a captured record has none).
        logger: The logger's name for a captured record, ``None`` for a ``job.log`` line.

    .. versionadded:: 0.1.0
    """

    time: datetime
    attempt: int
    level: str
    message: str
    fields: dict[str, Any]
    logger: str | None


class LogLines(list[LogLine]):
    """The lines :func:`pgqueue.job_logs` returns, oldest attempt first, each attempt's in the
    order recorded; ``dropped`` says how many older lines each attempt's bound dropped (by
    attempt, only those that dropped any).

    .. versionadded:: 0.1.0
    """

    dropped: dict[int, int]

    def __init__(self, lines: list[LogLine] | None = None, dropped: dict[int, int] | None = None):
        super().__init__(lines or [])
        self.dropped = dropped or {}
