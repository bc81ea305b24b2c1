"""pgqueue: a background-job queue on one PostgreSQL table.

Enqueue in the same transaction as your data, claim with ``FOR UPDATE SKIP LOCKED``, hold jobs by
lease, and finish them with updates guarded by the claimed attempt number.

This module is the public API (:data:`__all__`). The modules beside it, one concept each:
``repository`` (the users' functions, in the caller's transaction) and ``aio`` (their asyncio
twins), which take their options from ``enqueue_options`` (:class:`EnqueueOptions`: every
enqueue option and its default, once); ``models`` (the table), ``schema`` (where it lives),
``storage`` (its storage parameters), ``results`` and ``errors`` (the values returned and
raised); ``jobs`` (what a handler gets), ``tasks`` (typed tasks), ``workflows`` (chains and
groups), ``periodic``, ``retry_policy``, ``retention_policy`` (how long finished jobs are kept),
``flow`` (pauses and limits) and ``hooks``; ``worker`` (the facade over
``_worker``), ``listener`` (its LISTEN connection), ``health`` (its probes) and ``pooler``
(running behind PgBouncer); ``waiting`` (:func:`wait_for`); ``testing`` (helpers for users'
tests); the operator's ``admin``, ``doctor``, ``grants`` and ``demo``; ``statements``, the old
path of the ``jobs`` table's statements (a re-export of ``_sql.statements``); ``__main__``
(``python -m pgqueue``).

The folders: ``_base`` (helpers that know nothing of jobs), ``_sql`` (every statement and call,
no I/O), ``_worker`` (the worker's machinery), ``migrations`` (the Alembic revisions), ``cli``
(the command line), ``web`` (the dashboard) and ``contrib`` (optional integrations); each
``__init__`` names what lives in it and what it may import.
"""

from __future__ import annotations

from pgqueue._base.validation import MAX_DURATION, MAX_JSON_DEPTH, MAX_PRIORITY, MIN_PRIORITY
from pgqueue.enqueue_options import EnqueueOptions
from pgqueue.errors import (
    HandlerTimeoutError,
    InvalidArgumentError,
    InvalidArgumentTypeError,
    InvalidPayloadError,
    JobNotFoundError,
    JobTimeoutError,
    JobWaitingError,
    PgQueueError,
    UniqueKeyError,
    UnknownDependencyError,
    WorkerFailedError,
    WorkerStuckError,
)
from pgqueue.flow import QueueSettings, Rate
from pgqueue.hooks import WorkerHooks
from pgqueue.jobs import JobContext, Outcome, Registry, Snooze, WorkerStats, current_job
from pgqueue.models import Job, JobDependency, JobState, JobStatus, metadata
from pgqueue.periodic import Periodic
from pgqueue.pooler import pooled_engine_options
from pgqueue.repository import (
    cancel,
    claim,
    complete,
    enqueue,
    enqueue_many,
    enqueue_unique,
    extend_lease,
    fail,
    fetch_result,
    forget_queue_settings,
    job_logs,
    pause,
    periodic_states,
    purge,
    purge_done,
    queue_settings,
    reap_expired,
    remove_periodic,
    resume,
    retention,
    retry,
    retry_failed,
    set_queue_limits,
    set_retention,
    unblock,
)
from pgqueue.results import (
    CancelledJob,
    CancelReport,
    ClaimedJob,
    EnqueuedJob,
    FailResult,
    JobResult,
    LogLine,
    LogLines,
    PeriodicRow,
    ReapedJob,
)
from pgqueue.retention_policy import Retention
from pgqueue.retry_policy import RetryPolicy
from pgqueue.schema import channel_for, finished_channel_for, use_schema
from pgqueue.tasks import Signature, Task
from pgqueue.waiting import wait_for
from pgqueue.worker import Worker
from pgqueue.workflows import GroupIds, chain, group

__version__ = "0.1.0"

__all__ = [
    "MAX_DURATION",
    "MAX_JSON_DEPTH",
    "MAX_PRIORITY",
    "MIN_PRIORITY",
    "CancelReport",
    "CancelledJob",
    "ClaimedJob",
    "EnqueueOptions",
    "EnqueuedJob",
    "FailResult",
    "GroupIds",
    "HandlerTimeoutError",
    "InvalidArgumentError",
    "InvalidArgumentTypeError",
    "InvalidPayloadError",
    "Job",
    "JobContext",
    "JobDependency",
    "JobNotFoundError",
    "JobResult",
    "JobState",
    "JobStatus",
    "JobTimeoutError",
    "JobWaitingError",
    "LogLine",
    "LogLines",
    "Outcome",
    "Periodic",
    "PeriodicRow",
    "PgQueueError",
    "QueueSettings",
    "Rate",
    "ReapedJob",
    "Registry",
    "Retention",
    "RetryPolicy",
    "Signature",
    "Snooze",
    "Task",
    "UniqueKeyError",
    "UnknownDependencyError",
    "Worker",
    "WorkerFailedError",
    "WorkerHooks",
    "WorkerStats",
    "WorkerStuckError",
    "__version__",
    "cancel",
    "chain",
    "channel_for",
    "claim",
    "complete",
    "current_job",
    "enqueue",
    "enqueue_many",
    "enqueue_unique",
    "extend_lease",
    "fail",
    "fetch_result",
    "finished_channel_for",
    "forget_queue_settings",
    "group",
    "job_logs",
    "metadata",
    "pause",
    "periodic_states",
    "pooled_engine_options",
    "purge",
    "purge_done",
    "queue_settings",
    "reap_expired",
    "remove_periodic",
    "resume",
    "retention",
    "retry",
    "retry_failed",
    "set_queue_limits",
    "set_retention",
    "unblock",
    "use_schema",
    "wait_for",
]
