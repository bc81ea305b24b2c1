"""pgqueue: a background-job queue on one PostgreSQL table.

Enqueue in the same transaction as your data, claim with ``FOR UPDATE SKIP LOCKED``, hold jobs by
lease, and finish them with updates guarded by the claimed attempt number.
"""

from __future__ import annotations

from pgqueue.errors import (
    InvalidArgumentError,
    InvalidArgumentTypeError,
    InvalidPayloadError,
    PgQueueError,
)
from pgqueue.hooks import WorkerHooks
from pgqueue.models import Job, JobStatus, metadata
from pgqueue.pooler import pooled_engine_options
from pgqueue.repository import (
    claim,
    complete,
    enqueue,
    enqueue_many,
    extend_lease,
    fail,
    purge_done,
    reap_expired,
)
from pgqueue.results import ClaimedJob, FailResult, ReapedJob
from pgqueue.retry import RetryPolicy
from pgqueue.schema import channel_for, use_schema
from pgqueue.worker import JobContext, Registry, Worker, WorkerStats

__version__ = "0.1.0"

__all__ = [
    "ClaimedJob",
    "FailResult",
    "InvalidArgumentError",
    "InvalidArgumentTypeError",
    "InvalidPayloadError",
    "Job",
    "JobContext",
    "JobStatus",
    "PgQueueError",
    "ReapedJob",
    "Registry",
    "RetryPolicy",
    "Worker",
    "WorkerHooks",
    "WorkerStats",
    "__version__",
    "channel_for",
    "claim",
    "complete",
    "enqueue",
    "enqueue_many",
    "extend_lease",
    "fail",
    "metadata",
    "pooled_engine_options",
    "purge_done",
    "reap_expired",
    "use_schema",
]
