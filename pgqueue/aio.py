"""asyncio twins of the repository functions, for ``AsyncConnection`` and ``AsyncSession``.

Use them with psycopg's async driver (``create_async_engine("postgresql+psycopg://...")``), for
example from FastAPI or Starlette request handlers::

    async with engine.begin() as conn:
        user_id = await create_user(conn, email)
        await pgqueue.aio.enqueue(conn, {"user_id": user_id}, queue="welcome_email")

Each function has the name, signature and behaviour of its twin in :mod:`pgqueue.repository`;
both build the same :class:`pgqueue._sql.calls.Call` (validation, parameters, statement, row
mapping) and differ only by ``await``. None of them commits: the caller owns the transaction.

Workers: :class:`pgqueue.Worker` runs ``async def`` handlers on an event loop of its own (and
sync ones in threads); an async service enqueues with this module and runs the worker as its own
process (``pgqueue worker``) or in a thread beside its event loop. An async handler completes its
job in its own transaction with ``await pgqueue.aio.complete(conn, job.id, job.attempts)``.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar, Union

from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession

from pgqueue import waiting as _waiting
from pgqueue import workflows as _workflows
from pgqueue._sql import calls as _calls
from pgqueue._sql import flow_calls as _flow_calls
from pgqueue._sql import log_calls as _log_calls
from pgqueue._sql import periodic_calls as _periodic_calls
from pgqueue._sql import retention_calls as _retention_calls
from pgqueue._sql.runners import adrive, arun
from pgqueue.enqueue_options import EnqueueOptions, batch_options, enqueue_door
from pgqueue.flow import QueueSettings, Rate
from pgqueue.models import JobStatus
from pgqueue.repository import (
    DEFAULT_LEASE,
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_PURGE_AGE,
    DEFAULT_PURGE_BATCH,
    DEFAULT_QUEUE,
    DEFAULT_RETRY_BASE,
    DEFAULT_RETRY_CAP,
)
from pgqueue.results import (
    CancelledJob,
    CancelReport,
    ClaimedJob,
    EnqueuedJob,
    FailResult,
    JobResult,
    LogLine,
    PeriodicRow,
    ReapedJob,
)
from pgqueue.retention_policy import Retention, RetentionValue
from pgqueue.schema import channel_of
from pgqueue.tasks import Signature

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from pgqueue.enqueue_options import BatchKeywords, EnqueueKeywords

#: What every async function accepts: an async Core connection or an async ORM session.
AsyncExecutor: TypeAlias = Union[AsyncConnection, AsyncSession]  # noqa: UP007 (runtime alias on 3.10)

T = TypeVar("T")

__all__ = [
    "AsyncExecutor",
    "cancel",
    "chain",
    "claim",
    "complete",
    "enqueue",
    "enqueue_many",
    "enqueue_unique",
    "extend_lease",
    "fail",
    "fetch_result",
    "forget_queue_settings",
    "group",
    "job_logs",
    "pause",
    "periodic_states",
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
    "wait_for",
]


@enqueue_door()
async def enqueue(conn: AsyncExecutor, payload: Any, **options: Unpack[EnqueueKeywords]) -> int:
    """Insert one job in the caller's transaction; see :func:`pgqueue.repository.enqueue`."""
    return await adrive(conn, _calls.enqueue(payload, EnqueueOptions.of(options)))


@enqueue_door()
async def enqueue_unique(
    conn: AsyncExecutor, payload: Any, *, unique_key: str, **options: Unpack[BatchKeywords]
) -> EnqueuedJob:
    """Insert unless the key is held; see :func:`pgqueue.repository.enqueue_unique`."""
    checked = EnqueueOptions.of({**options, "unique_key": unique_key})
    return await adrive(conn, _calls.enqueue_unique(payload, checked))


async def chain(conn: AsyncExecutor, /, *signatures: Signature) -> list[int]:
    """:func:`pgqueue.chain` on an ``AsyncConnection`` or ``AsyncSession`` (its transaction):
    the same plan, run by the runner of this module's other functions.

    .. versionadded:: 0.1.0
    """
    return await adrive(conn, _workflows.chain_plan(signatures))


async def group(
    conn: AsyncExecutor, members: Iterable[Signature], /, *, then: Signature | None = None
) -> _workflows.GroupIds:
    """:func:`pgqueue.group` on an ``AsyncConnection`` or ``AsyncSession`` (its transaction).

    .. versionadded:: 0.1.0
    """
    return await adrive(conn, _workflows.group_plan(members, then))


@enqueue_door(leave_out=["unique_key"])
async def enqueue_many(
    conn: AsyncExecutor,
    payloads: Iterable[Any],
    *,
    unique_keys: Iterable[str | None] | None = None,
    concurrency_keys: Iterable[str | None] | None = None,
    **options: Unpack[BatchKeywords],
) -> list[int]:
    """Insert a batch in one round trip; see :func:`pgqueue.repository.enqueue_many`."""
    checked, keys = batch_options(options, concurrency_keys)
    return await adrive(conn, _calls.enqueue_many(payloads, checked, unique_keys, keys))


async def claim(
    conn: AsyncExecutor,
    *,
    queue: str = DEFAULT_QUEUE,
    limit: int = 10,
    lease: timedelta | float = DEFAULT_LEASE,
    locked_by: str | None = None,
) -> list[ClaimedJob]:
    """Claim up to ``limit`` ready jobs; see :func:`pgqueue.repository.claim`."""
    return await arun(conn, _calls.claim(queue, limit, lease, locked_by))


async def complete(conn: AsyncExecutor, job_id: int, attempts: int) -> bool:
    """Mark a job ``done`` if still ours; see :func:`pgqueue.repository.complete`."""
    return await arun(conn, _calls.complete(job_id, attempts))


async def fetch_result(conn: AsyncExecutor, job_id: int) -> JobResult | None:
    """A job's status, result, progress and error; see :func:`pgqueue.repository.fetch_result`."""
    return await arun(conn, _calls.fetch_result(job_id))


async def job_logs(
    conn: AsyncExecutor, job_id: int, *, attempt: int | None = None
) -> list[LogLine]:
    """A job's log lines; see :func:`pgqueue.repository.job_logs`."""
    return await arun(conn, _log_calls.job_lines(job_id, attempt))


async def extend_lease(
    conn: AsyncExecutor, job_id: int, attempts: int, lease: timedelta | float = DEFAULT_LEASE
) -> bool:
    """Push a running job's lease; see :func:`pgqueue.repository.extend_lease`."""
    return await arun(conn, _calls.extend_lease(job_id, attempts, lease))


async def fail(
    conn: AsyncExecutor,
    job_id: int,
    attempts: int,
    error: str,
    *,
    retry: bool = True,
    base: timedelta | float = DEFAULT_RETRY_BASE,
    cap: timedelta | float = DEFAULT_RETRY_CAP,
    traceback: str | None = None,
) -> FailResult | None:
    """Record a failed attempt; see :func:`pgqueue.repository.fail`."""
    return await arun(conn, _calls.fail(job_id, attempts, error, retry, base, cap, traceback))


async def snooze(
    conn: AsyncExecutor, job_id: int, attempts: int, delay: timedelta | float = 0
) -> bool:
    """Give a running job back for later; see :func:`pgqueue.repository.snooze`."""
    return await arun(conn, _calls.snooze(job_id, attempts, delay))


async def reap_expired(conn: AsyncExecutor) -> list[ReapedJob]:
    """Requeue or fail jobs whose lease expired; see :func:`pgqueue.repository.reap_expired`."""
    return await arun(conn, _calls.reap_expired())


async def purge_done(
    conn: AsyncExecutor,
    *,
    older_than: timedelta | float = DEFAULT_PURGE_AGE,
    batch_size: int = DEFAULT_PURGE_BATCH,
) -> int:
    """Delete one batch of old ``done`` jobs; see :func:`pgqueue.repository.purge_done`."""
    return await arun(conn, _calls.purge_done(older_than, batch_size))


async def purge(
    conn: AsyncExecutor,
    *,
    status: JobStatus = JobStatus.DONE,
    older_than: timedelta | float = DEFAULT_PURGE_AGE,
    batch_size: int = DEFAULT_PURGE_BATCH,
    queue: str | None = None,
) -> int:
    """Delete one batch of old finished jobs; see :func:`pgqueue.repository.purge`."""
    return await arun(conn, _calls.purge_done(older_than, batch_size, status, queue))


async def retry(
    conn: AsyncExecutor, job_ids: Iterable[int], *, attempts: int = DEFAULT_MAX_ATTEMPTS
) -> list[int]:
    """Requeue failed or queued jobs now; see :func:`pgqueue.repository.retry`."""
    return await adrive(conn, _calls.retry(job_ids, attempts))


async def unblock(conn: AsyncExecutor, job_ids: Iterable[int]) -> list[int]:
    """Free waiting jobs from deleted dependencies; see :func:`pgqueue.repository.unblock`."""
    return await adrive(conn, _calls.unblock(job_ids))


async def retry_failed(
    conn: AsyncExecutor,
    *,
    queue: str | None = None,
    attempts: int = DEFAULT_MAX_ATTEMPTS,
    include_cancelled: bool = False,
    include_expired: bool = False,
) -> list[int]:
    """Requeue every failed job (not cancelled ones unless ``include_cancelled``, not expired
    ones unless ``include_expired``); see :func:`pgqueue.repository.retry_failed`."""
    return await arun(
        conn, _calls.retry_failed(queue, attempts, include_cancelled, include_expired)
    )


async def cancel(conn: AsyncExecutor, job_ids: Iterable[int]) -> list[int]:
    """Cancel queued and running jobs; see :func:`pgqueue.repository.cancel`."""
    return [job.id for job in await cancel_jobs(conn, job_ids)]


async def cancel_jobs(conn: AsyncExecutor, job_ids: Iterable[int]) -> list[CancelledJob]:
    """Cancel, telling which jobs were running; see :func:`pgqueue.repository.cancel_jobs`."""
    return (await cancel_report(conn, job_ids)).cancelled


async def cancel_report(conn: AsyncExecutor, job_ids: Iterable[int]) -> CancelReport:
    """Cancel, naming the jobs skipped; see :func:`pgqueue.repository.cancel_report`."""
    return await adrive(conn, _calls.cancel(job_ids, channel_of(conn)))


async def periodic_states(
    conn: AsyncExecutor, names: Iterable[str] | None = None
) -> list[PeriodicRow]:
    """The periodic definitions in the database; see :func:`pgqueue.repository.periodic_states`."""
    return await arun(conn, _periodic_calls.states(names))


async def remove_periodic(conn: AsyncExecutor, name: str) -> bool:
    """Delete a definition's row; see :func:`pgqueue.repository.remove_periodic`."""
    return await arun(conn, _periodic_calls.remove(name))


async def pause(conn: AsyncExecutor, queue: str) -> bool:
    """Pause a queue; see :func:`pgqueue.repository.pause`."""
    return await adrive(conn, _flow_calls.pause(queue, channel_of(conn)))


async def resume(conn: AsyncExecutor, queue: str) -> bool:
    """Take a paused queue up again; see :func:`pgqueue.repository.resume`."""
    return await arun(conn, _flow_calls.resume(queue, channel_of(conn)))


async def set_queue_limits(
    conn: AsyncExecutor,
    queue: str,
    *,
    concurrency: int | None = None,
    per_key: int | None = None,
    rate: Rate | None = None,
) -> QueueSettings:
    """Set a queue's limits; see :func:`pgqueue.repository.set_queue_limits`."""
    plan = _flow_calls.set_limits(queue, concurrency, per_key, rate, channel_of(conn))
    return await adrive(conn, plan)


async def forget_queue_settings(conn: AsyncExecutor, queue: str) -> bool:
    """Drop a queue's settings row; see :func:`pgqueue.repository.forget_queue_settings`."""
    return await arun(conn, _flow_calls.forget(queue, channel_of(conn)))


async def queue_settings(conn: AsyncExecutor, queue: str | None = None) -> list[QueueSettings]:
    """The stored pause and limits of queues; see :func:`pgqueue.repository.queue_settings`."""
    return await arun(conn, _flow_calls.settings(queue))


async def set_retention(
    conn: AsyncExecutor,
    queue: str | None = None,
    *,
    done: RetentionValue = ...,
    failed: RetentionValue = ...,
    **unknown: object,
) -> Retention:
    """Set a queue's retention; see :func:`pgqueue.repository.set_retention`."""
    return await adrive(conn, _retention_calls.set_retention(queue, done, failed, unknown))


async def retention(conn: AsyncExecutor) -> list[Retention]:
    """How long finished jobs are kept; see :func:`pgqueue.repository.retention`."""
    return await adrive(conn, _retention_calls.retention())


async def wait_for(
    engine: AsyncEngine,
    job_id: int,
    *,
    timeout: timedelta | float,
    poll_interval: timedelta | float = _waiting.DEFAULT_POLL_INTERVAL,
    listen: bool = True,
    listen_url: str | URL | None = None,
) -> JobResult:
    """Wait until a job is ``done`` or ``failed`` for good; see :func:`pgqueue.wait_for`.

    The reads run on ``engine`` (an ``AsyncEngine``), the sleeps on the event loop: a waiting
    coroutine holds no connection. The LISTEN connection is the process's shared one, in a
    thread (:mod:`pgqueue.waiting`).

    .. versionadded:: 0.1.0
    """
    _waiting.check_engine(engine, AsyncEngine, "sqlalchemy AsyncEngine")
    deadline = _waiting.Deadline(job_id, timeout, poll_interval)
    url = _waiting.listen_target(engine.sync_engine, listen, listen_url)
    loop = asyncio.get_running_loop()
    woken = asyncio.Event()

    def wake() -> None:  # from the listener thread
        loop.call_soon_threadsafe(woken.set)

    with _waiting.subscribed(engine.sync_engine, deadline.job_id, wake, url):
        while True:
            woken.clear()
            async with engine.connect() as conn:
                await conn.execution_options(isolation_level=_waiting.AUTOCOMMIT)
                found = await fetch_result(conn, deadline.job_id)
            pause = deadline.after(found)
            if pause is None:
                assert found is not None
                return found
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(woken.wait(), pause)
