"""pgqueue: a background-job queue on one PostgreSQL table.

Enqueue in the same transaction as your data, claim with ``FOR UPDATE SKIP LOCKED``, hold jobs by
lease, and finish them with updates guarded by the claimed attempt number.
"""

from __future__ import annotations

from pgqueue._base.validation import MAX_DURATION, MAX_JSON_DEPTH, MAX_PRIORITY, MIN_PRIORITY
from pgqueue.errors import (
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
    "EnqueuedJob",
    "FailResult",
    "GroupIds",
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
