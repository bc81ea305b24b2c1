"""Repository functions: the users' door, running the Core statements in the caller's transaction.

None of them commits. The caller owns the transaction, which is what lets a service enqueue a job
in the same transaction as the data change it is about, and lets a handler complete its job
together with its own writes. The worker's batched statements and its own row are the worker's
door, :mod:`pgqueue._worker.store`; both run their calls on :mod:`pgqueue._sql.runners`.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from pgqueue import enqueue_options as _options
from pgqueue import retry_policy
from pgqueue._sql import calls as _calls
from pgqueue._sql import flow_calls as _flow_calls
from pgqueue._sql import log_calls as _log_calls
from pgqueue._sql import periodic_calls as _periodic_calls
from pgqueue._sql import retention_calls as _retention_calls
from pgqueue._sql.runners import Executor
from pgqueue._sql.runners import drive as _drive
from pgqueue._sql.runners import run as _run
from pgqueue.enqueue_options import EnqueueOptions, batch_options, enqueue_door
from pgqueue.flow import QueueSettings, Rate
from pgqueue.models import JobStatus
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

__all__ = [
    "CANCEL_LOCK_TIMEOUT_MS",
    "DEFAULT_LEASE",
    "DEFAULT_MAX_ATTEMPTS",
    "DEFAULT_PRIORITY",
    "DEFAULT_PURGE_AGE",
    "DEFAULT_PURGE_BATCH",
    "DEFAULT_QUEUE",
    "DEFAULT_RETRY_BASE",
    "DEFAULT_RETRY_CAP",
    "Executor",
    "cancel",
    "cancel_jobs",
    "cancel_report",
    "claim",
    "complete",
    "dependency_results",
    "enqueue",
    "enqueue_many",
    "enqueue_unique",
    "enqueue_with",
    "extend_lease",
    "fail",
    "fetch_result",
    "forget_queue_settings",
    "job_logs",
    "lock_queue_settings",
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
    "snooze",
    "unblock",
]

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from pgqueue.enqueue_options import BatchKeywords, EnqueueKeywords


T = TypeVar("T")

DEFAULT_QUEUE = _options.DEFAULT_QUEUE
DEFAULT_LEASE = timedelta(minutes=5)
DEFAULT_MAX_ATTEMPTS = _options.DEFAULT_MAX_ATTEMPTS
DEFAULT_PRIORITY = _options.DEFAULT_PRIORITY
DEFAULT_RETRY_BASE = retry_policy.DEFAULT_RETRY_BASE
DEFAULT_RETRY_CAP = retry_policy.DEFAULT_RETRY_CAP
DEFAULT_PURGE_AGE = timedelta(days=7)
DEFAULT_PURGE_BATCH = 10_000
#: How long :func:`cancel` waits for each row another transaction holds, in milliseconds.
CANCEL_LOCK_TIMEOUT_MS = _calls.CANCEL_LOCK_TIMEOUT_MS


@enqueue_door()
def enqueue(conn: Executor, payload: Any, **options: Unpack[EnqueueKeywords]) -> int:
    """Insert one job in the caller's transaction and return its id.

    The options are :class:`pgqueue.EnqueueOptions`' fields, as keywords with its defaults
    (``inspect.signature`` lists them; type checkers read :class:`~pgqueue.enqueue_options.
    EnqueueKeywords`).

    Args:
        payload: Any JSON value (object, array, string, number, bool or ``None``).
        queue: The job's queue, which is also its kind: workers map queues to handlers.
        run_at: Timezone-aware time before which the job is not ready. Default: now.
        delay: Alternatively, a delay from the transaction's ``now()``, a ``timedelta`` or
            seconds (``int`` or ``float``); not with ``run_at``.
        max_attempts: Attempts before the job fails for good (default 5).
        headers: Metadata about the job, stored beside the payload in ``jobs.headers`` and
            handed to the handler as ``job.headers``: ``{str: str}`` of at most 8 KiB as JSON,
            for example ``pgqueue.contrib.otel.inject_headers()``. Default ``None``.
            (``.. versionadded:: 0.1.0``)
        priority: 0 (the default, lowest) to 9 (highest): a worker claims a queue's ready jobs
            highest priority first, oldest ``run_at`` first within a priority.
        unique_key: While a job of the same queue with this key is ``queued`` or ``running``, no
            second one is inserted: the id of the job holding the key is returned instead. The
            key frees once that job is ``done`` or ``failed``; a retried job keeps it. An enqueue
            of a key that another open transaction is inserting waits for it: if it commits, its
            job is returned; if it rolls back, this one is inserted. At most 1,000 bytes.
            Default ``None``: no key, and no cost.
        concurrency_key: The key a queue's ``per_key`` limit counts by
            (:func:`set_queue_limits`): at most ``per_key`` running jobs of the queue share it,
            for example one tenant's. A non-empty ``str`` of at most 1,000 bytes (as a
            ``unique_key``). Default ``None``: ``per_key`` does not limit the job.
            (``.. versionadded:: 0.1.0``)
        depends_on: Ids of jobs this one waits for (docs/workflows.md): it stays ``queued`` but
            is not claimed until every one of them is ``done``, released by the statement that
            completes the last one. A dependency already ``done`` counts as finished; one
            already failed for good or cancelled fails the new job at once (as a later failure
            would), unless ``on_dependency_failure="run"``. Not with ``run_at`` or ``delay``.
            Each dependency's row is locked until the caller's transaction ends (that orders the
            enqueue against its completion): keep such transactions short. Default ``None``: no
            dependencies, and no cost. (``.. versionadded:: 0.1.0``)
        on_dependency_failure: ``"fail"`` (the default): when a dependency fails for good or is
            cancelled, this job fails too (``last_error`` names the dependency), and so do the
            jobs waiting for it. ``"run"``: it runs anyway once every dependency has finished,
            and can read which one failed (``dependency_results``).
        timeout: How long one attempt's handler may run, a ``timedelta`` or seconds: at the
            timeout an async handler is cancelled and a sync one gets ``job.stopping`` set,
            and the attempt fails with :class:`pgqueue.HandlerTimeoutError` (retried by its
            policy). Stored on the job, so any worker enforces it (docs/worker.md). Default
            ``None``: the worker's ``default_timeout`` (none unless set).
            (``.. versionadded:: 0.1.0``)
        expires_in: A deadline, a ``timedelta`` or seconds: a job not started within this long
            of its ``run_at`` is never run; the claim that finds it late fails it with
            ``expired_at`` set and ``last_error`` beginning with ``"expired"``, not retried
            (:attr:`pgqueue.JobResult.expired`; its dependents fail as for a failure). Default
            ``None``: no deadline. (``.. versionadded:: 0.1.0``)

    Raises:
        InvalidArgumentError: before any SQL, for a bad payload, queue, schedule, priority,
            key or dependency list, or a keyword that is no enqueue option.
        UnknownDependencyError: ``depends_on`` names an id no job has (checked in the same
            transaction before anything is inserted: nothing is written).
    """
    return _drive(conn, _calls.enqueue(payload, EnqueueOptions.of(options)))


@enqueue_door()
def enqueue_unique(
    conn: Executor, payload: Any, *, unique_key: str, **options: Unpack[BatchKeywords]
) -> EnqueuedJob:
    """:func:`enqueue` with a ``unique_key``, saying whether it inserted a job or found the live
    job holding the key (``EnqueuedJob(id, inserted)``).

    .. versionadded:: 0.1.0
    """
    checked = EnqueueOptions.of({**options, "unique_key": unique_key})
    return _drive(conn, _calls.enqueue_unique(payload, checked))


@enqueue_door(leave_out=["unique_key"])
def enqueue_many(
    conn: Executor,
    payloads: Iterable[Any],
    *,
    unique_keys: Iterable[str | None] | None = None,
    concurrency_keys: Iterable[str | None] | None = None,
    **options: Unpack[BatchKeywords],
) -> list[int]:
    """Insert a batch of jobs in one round trip; return their ids in input order.

    Every payload (and key) is checked before the statement runs: one bad one rejects the whole
    batch. The options (one value for the batch) are :func:`enqueue`'s but ``unique_key``, and
    are stored on every job. ``unique_keys`` gives one key or ``None`` per payload: a payload
    whose key a live job holds gets that job's id, and equal keys within the batch collapse into
    one job (equal keys, equal ids). Still one round trip, plus one lookup when some key was
    held. ``concurrency_keys`` likewise gives one concurrency key or ``None`` per payload (a
    list aligned with the payloads; another length is refused and nothing is written).
    ``depends_on`` (one list for every job of the batch) and ``on_dependency_failure`` as for
    :func:`enqueue`: two more statements, the check of the ids and one that records the edges of
    the whole batch.

    ``concurrency_key=`` (one key for every job, or one per payload) still works but is
    deprecated here, with a :class:`DeprecationWarning`: give ``concurrency_keys``
    (``.. deprecated:: 0.1.0``).
    """
    checked, keys = batch_options(options, concurrency_keys)
    return _drive(conn, _calls.enqueue_many(payloads, checked, unique_keys, keys))


def enqueue_with(conn: Executor, payload: Any, options: EnqueueOptions) -> EnqueuedJob:
    """:func:`enqueue` with its options already built and checked (a
    :class:`pgqueue.EnqueueOptions`): the inserted job, or the live one holding
    ``options.unique_key``. What ``pgqueue enqueue`` runs.

    .. versionadded:: 0.1.0
    """
    return _drive(conn, _calls.enqueue_job(payload, options))


def claim(
    conn: Executor,
    *,
    queue: str = DEFAULT_QUEUE,
    limit: int = 10,
    lease: timedelta | float = DEFAULT_LEASE,
    locked_by: str | None = None,
) -> list[ClaimedJob]:
    """Claim up to ``limit`` ready jobs of one queue with ``FOR UPDATE SKIP LOCKED`` (R6, R7).

    Each job becomes ``running`` with ``attempts + 1`` and ``locked_until = now() + lease``.
    Commit right away and work outside the transaction (lease mode, R9), or work inside it for
    jobs of a few milliseconds (R8). Jobs come back oldest ``run_at`` first.

    ``locked_by`` (at most 63 bytes) is recorded in ``jobs.locked_by`` with ``locked_at =
    now()``: who holds the job, shown by ``pgqueue workers`` and the dashboard. Default: the
    connection's ``application_name`` (NULL when it has none); a worker passes its own name.
    """
    return _run(conn, _calls.claim(queue, limit, lease, locked_by))


def complete(conn: Executor, job_id: int, attempts: int) -> bool:
    """Mark a job ``done`` (R10). False when the job is no longer ours (R13): change nothing."""
    return _run(conn, _calls.complete(job_id, attempts))


def fetch_result(conn: Executor, job_id: int) -> JobResult | None:
    """A job's status, result, progress and error as its row holds them now; ``None`` when no
    job has this id (never enqueued, or purged).

    One ``SELECT`` by primary key in the caller's transaction, of the columns
    ``pgqueue grants --role-producer`` grants a producer. ``job_id`` must be an ``int``
    (:class:`InvalidArgumentTypeError` before any SQL otherwise).

    .. versionadded:: 0.1.0
    """
    return _run(conn, _calls.fetch_result(job_id))


def dependency_results(conn: Executor, job_id: int) -> dict[int, JobResult]:
    """``{id: JobResult}`` of every job ``job_id`` depends on (``depends_on``), in one query in
    the caller's transaction; empty for a job without dependencies (or an unknown id). What
    :meth:`pgqueue.JobContext.dependency_results` returns inside a running task.

    .. versionadded:: 0.1.0
    """
    return _run(conn, _calls.dependency_results(job_id))


def job_logs(conn: Executor, job_id: int, *, attempt: int | None = None) -> list[LogLine]:
    """The log lines job ``job_id`` recorded (:meth:`pgqueue.JobContext.log`, and the
    ``logging`` records a worker with ``capture_logs=True`` captured), oldest attempt first and
    each attempt's in the order recorded; only attempt ``attempt``'s when given. ``[]`` for a job
    with no lines (or an unknown id). The list is a :class:`pgqueue.results.LogLines`: its
    ``dropped`` says how many older lines each attempt's bound (1,000 lines / 256 KiB) dropped.

    A running job's lines are those the worker's last heartbeat wrote; a finished job's are all
    of them. One ``SELECT`` by primary key in the caller's transaction.

    .. versionadded:: 0.1.0
    """
    return _run(conn, _log_calls.job_lines(job_id, attempt))


def extend_lease(
    conn: Executor, job_id: int, attempts: int, lease: timedelta | float = DEFAULT_LEASE
) -> bool:
    """Push a running job's lease to ``now() + lease`` (R14). False: the job is lost, stop work."""
    return _run(conn, _calls.extend_lease(job_id, attempts, lease))


def fail(
    conn: Executor,
    job_id: int,
    attempts: int,
    error: str,
    *,
    retry: bool = True,
    base: timedelta | float = DEFAULT_RETRY_BASE,
    cap: timedelta | float = DEFAULT_RETRY_CAP,
    traceback: str | None = None,
) -> FailResult | None:
    """Record a failed attempt (R11) and schedule the retry, or fail the job for good.

    The retry waits ``least(cap, base * 2^attempts)``: 20 s after the first failure, then 40 s,
    80 s, 160 s with the defaults. Once ``attempts >= max_attempts``, or with ``retry=False``
    (a non-retryable error), the job becomes ``failed``. ``error`` becomes ``last_error``; the
    same statement appends ``{"attempt", "at", "error", "traceback"}`` to the job's ``errors``
    (the last :data:`~pgqueue._sql.statements.MAX_ERRORS_KEPT` are kept). ``traceback``: text, kept
    to its last :data:`~pgqueue.retry_policy.MAX_TRACEBACK_LENGTH` characters; default none.
    Returns ``None`` when the guard matched no row (the job is no longer ours).
    """
    return _run(conn, _calls.fail(job_id, attempts, error, retry, base, cap, traceback))


def snooze(conn: Executor, job_id: int, attempts: int, delay: timedelta | float = 0) -> bool:
    """Give a running job back to ``queued``, ready after ``delay``, without using up an attempt.

    What the worker does when a handler raises :class:`pgqueue.Snooze`: ``run_at = now() +
    delay``, ``max_attempts`` and ``snoozes`` one more, ``last_error`` kept. Guarded like
    :func:`complete`: False when the job is no longer ours, and nothing changed.
    """
    return _run(conn, _calls.snooze(job_id, attempts, delay))


def reap_expired(conn: Executor) -> list[ReapedJob]:
    """Requeue running jobs whose lease expired, or fail them once attempts are spent (R12).

    Safe to run from any worker or from cron, concurrently: each row is updated once.
    """
    return _run(conn, _calls.reap_expired())


def purge_done(
    conn: Executor,
    *,
    older_than: timedelta | float = DEFAULT_PURGE_AGE,
    batch_size: int = DEFAULT_PURGE_BATCH,
) -> int:
    """Delete at most one batch of ``done`` jobs created before ``now() - older_than`` (R20).

    Returns how many were deleted; loop while it returns ``batch_size``, one short transaction
    per batch, so vacuum keeps up and no long transaction holds it back.
    """
    return _run(conn, _calls.purge_done(older_than, batch_size))


def purge(
    conn: Executor,
    *,
    status: JobStatus = JobStatus.DONE,
    older_than: timedelta | float = DEFAULT_PURGE_AGE,
    batch_size: int = DEFAULT_PURGE_BATCH,
    queue: str | None = None,
) -> int:
    """Delete at most one batch of ``done`` or ``failed`` jobs older than ``older_than`` (R20).

    :func:`purge_done` for either finished status; loop while it returns ``batch_size``.
    ``queue`` limits it to one queue's jobs (default ``None``: every queue;
    ``.. versionadded:: 0.1.0``).
    """
    return _run(conn, _calls.purge_done(older_than, batch_size, status, queue))


def retry(
    conn: Executor, job_ids: Iterable[int], *, attempts: int = DEFAULT_MAX_ATTEMPTS
) -> list[int]:
    """Requeue failed (or queued, due later) jobs now, with ``attempts`` more attempts to spend.

    ``max_attempts`` is raised to ``attempts_so_far + attempts``; ``attempts`` itself is never
    reset, since it is the token of every guarded update. Returns the ids requeued; running and
    done jobs are left as they are, and so is a failed job whose unique key another queued or
    running job holds now (two failed jobs with the same key in one call raise
    :class:`pgqueue.errors.UniqueKeyError`). A cancelled job named here is requeued (and no
    longer marked cancelled), unlike with :func:`retry_failed`.

    Raises:
        JobWaitingError: a job named waits for its dependencies (``depends_on``, shown
            ``waiting``): it runs once they are done, and a retry cannot run it sooner. Checked
            first: nothing of the call is written (``.. versionadded:: 0.1.0``).

    .. versionadded:: 0.1.0
    """
    return _drive(conn, _calls.retry(job_ids, attempts))


def unblock(conn: Executor, job_ids: Iterable[int]) -> list[int]:
    """Free waiting jobs from dependencies that no longer exist (a row deleted by hand).

    A waiting job counts its unfinished dependencies (``waiting_on``); deleting a dependency's
    row by hand takes its edge with it (``ON DELETE CASCADE``) but not the count, so the job
    would wait for ever (``pgqueue doctor`` reports such jobs). ``unblock`` counts again what
    each named job waits for: the dependencies that exist and have not finished. One left waiting
    for nothing is ready now; one still waiting for others runs once they are done. Jobs that
    are not waiting, whose dependencies all exist, or that do not exist are left alone.

    The rows are locked first, in id order, so a dependency finishing at the same moment is
    counted once (see :data:`pgqueue._sql.workflow_statements.UNBLOCK`). Runs in the caller's
    transaction (READ COMMITTED).

    Returns:
        The ids whose count dropped, in id order.

    Raises:
        InvalidArgumentError: an id no ``bigint`` holds, before any SQL.
        InvalidArgumentTypeError: ``job_ids`` is not an iterable of ids, before any SQL.

    .. versionadded:: 0.1.0
    """
    return _drive(conn, _calls.unblock(job_ids))


def retry_failed(
    conn: Executor,
    *,
    queue: str | None = None,
    attempts: int = DEFAULT_MAX_ATTEMPTS,
    include_cancelled: bool = False,
    include_expired: bool = False,
) -> list[int]:
    """Requeue every ``failed`` job (of one queue, or all) like :func:`retry`; return their ids.

    Jobs an operator cancelled (:func:`cancel`: ``cancelled_at`` set) are left alone unless
    ``include_cancelled=True`` (default ``False``; ``.. versionadded:: 0.1.0``); a cancelled job
    that comes back is no longer marked cancelled. Jobs that expired (``expires_in``: never
    started in time, ``expired_at`` set) are left alone unless ``include_expired=True`` (default
    ``False``; ``.. versionadded:: 0.1.0``); one that comes back is no longer marked expired
    and keeps its ``expires_in``, counted from its new ``run_at`` (now). :func:`retry` of a
    cancelled or expired job's id always requeues it: naming the id is asking for it.

    .. versionadded:: 0.1.0
    """
    return _run(conn, _calls.retry_failed(queue, attempts, include_cancelled, include_expired))


def cancel(conn: Executor, job_ids: Iterable[int]) -> list[int]:
    """Cancel queued and running jobs: they fail for good with ``cancelled_at = now()`` (and
    ``last_error = 'cancelled'``).

    The row changes at once, so no worker can complete the job afterwards (its guard no longer
    matches). The worker running it learns on commit through a NOTIFY (or at its next heartbeat
    when it does not listen): it sets ``job.stopping`` for a sync handler, cancels an async
    handler's task, drops the outcome and counts it in ``WorkerStats.cancelled``.

    A row that another transaction holds at that moment (a worker's claim, heartbeat or
    completion, for milliseconds) is waited for, at most :data:`CANCEL_LOCK_TIMEOUT_MS` (500 ms)
    per job, in a savepoint of the caller's transaction (which must be a transaction, not
    autocommit); the caller's ``lock_timeout`` is left as it was. A job held longer (inside the
    open transaction of a ``mode="transaction"`` worker) is skipped and not reported:
    :func:`cancel_report` names those. Unknown and finished ids are skipped too. Returns the ids
    cancelled, in id order.

    Raises:
        InvalidArgumentError: ``conn`` is in autocommit (nothing is written).

    .. versionadded:: 0.1.0
    """
    return [job.id for job in cancel_jobs(conn, job_ids)]


def cancel_jobs(conn: Executor, job_ids: Iterable[int]) -> list[CancelledJob]:
    """:func:`cancel`, telling for each cancelled job whether a worker was running it."""
    return cancel_report(conn, job_ids).cancelled


def cancel_report(conn: Executor, job_ids: Iterable[int]) -> CancelReport:
    """:func:`cancel_jobs`, also naming the queued or running jobs it skipped because another
    transaction held their row for longer than :data:`CANCEL_LOCK_TIMEOUT_MS`.

    .. versionadded:: 0.1.0
    """
    return _drive(conn, _calls.cancel(job_ids, channel_of(conn)))


# -- periodic jobs (``jobs_periodic``) -----------------------------------------------------------


def periodic_states(conn: Executor, names: Iterable[str] | None = None) -> list[PeriodicRow]:
    """The periodic definitions the database holds (all of them, by name, or those of ``names``).

    .. versionadded:: 0.1.0
    """
    return _run(conn, _periodic_calls.states(names))


def remove_periodic(conn: Executor, name: str) -> bool:
    """Delete a definition's row (its jobs stay). True when it existed. A worker that still
    declares the definition brings it back at its next start, with no job for the ticks between.

    .. versionadded:: 0.1.0
    """
    return _run(conn, _periodic_calls.remove(name))


# -- flow control (``jobs_queues``, pgqueue_0012) -----------------------------------------------


def pause(conn: Executor, queue: str) -> bool:
    """Pause a queue, in the caller's transaction: workers claim none of its jobs from the commit
    on (within about a second: a notification, else their fallback poll), until :func:`resume`.

    Running jobs finish normally, and enqueueing into a paused queue still works. The state is
    stored in ``jobs_queues``, so it holds for workers started later and survives restarts
    (:func:`forget_queue_settings` drops it). Returns True when the queue was not paused before
    (False: already paused, nothing changed).

    A queue nothing knows (no queued or running job, no settings: not in ``pgqueue queues``) is
    paused all the same, with a WARNING on the ``pgqueue.flow`` logger naming it: a typo's
    likely sign.

    Raises:
        InvalidArgumentError: an invalid queue name (empty, blank, a comma...), before any SQL.

    .. versionadded:: 0.1.0
    """
    return _drive(conn, _flow_calls.pause(queue, channel_of(conn)))


def resume(conn: Executor, queue: str) -> bool:
    """Take a paused queue up again (in the caller's transaction); its limits stay as they are.

    Returns True when the queue was paused (False: it was not, nothing changed).

    .. versionadded:: 0.1.0
    """
    return _run(conn, _flow_calls.resume(queue, channel_of(conn)))


def set_queue_limits(
    conn: Executor,
    queue: str,
    *,
    concurrency: int | None = None,
    per_key: int | None = None,
    rate: Rate | None = None,
) -> QueueSettings:
    """Set a queue's limits, all three at once, in the caller's transaction; ``None`` removes
    that limit (so ``set_queue_limits(conn, q)`` removes every limit). The pause is kept.

    Args:
        queue: The queue.
        concurrency: At most this many of the queue's jobs ``running`` at once, over every worker
            and process on the database.
        per_key: At most this many running jobs of the queue with the same ``concurrency_key``
            (``enqueue(..., concurrency_key=...)``); jobs without a key are not limited by it.
        rate: A :class:`pgqueue.Rate`: at most ``rate.limit`` jobs of the queue start per
            ``rate.period``, on the database clock.

    Running workers follow within about a second of the commit. Returns the queue's settings
    after the change. A queue nothing knows is limited all the same, with a WARNING on the
    ``pgqueue.flow`` logger (as :func:`pause` does).

    Raises:
        InvalidArgumentError: before any SQL, for an invalid queue name or a limit below 1.
        InvalidArgumentTypeError: a limit that is not an ``int``, a ``rate`` that is not a
            :class:`pgqueue.Rate`.

    .. versionadded:: 0.1.0
    """
    plan = _flow_calls.set_limits(queue, concurrency, per_key, rate, channel_of(conn))
    return _drive(conn, plan)


def queue_settings(conn: Executor, queue: str | None = None) -> list[QueueSettings]:
    """The pause and limits of every queue that has any stored, by name; or of ``queue`` alone
    (a list of one: its defaults, unpaused and unlimited, when nothing is stored for it).

    .. versionadded:: 0.1.0
    """
    return _run(conn, _flow_calls.settings(queue))


def lock_queue_settings(conn: Executor, queue: str) -> QueueSettings:
    """The queue's settings, its row locked until the caller's transaction ends (inserted with no
    settings when it had none). For pgqueue's own callers (``pgqueue limit``, which changes some
    limits and keeps the others): two of them on one queue take turns instead of losing one's
    change.
    """
    return _drive(conn, _flow_calls.lock_settings(queue))


def forget_queue_settings(conn: Executor, queue: str) -> bool:
    """Drop the queue's settings row (``jobs_queues``), in the caller's transaction: the queue
    is then unpaused and unlimited, its rate window forgotten, and it leaves ``pgqueue queues``
    once it has no queued or running job. Running workers follow within about a second of the
    commit, as for :func:`pause`. ``pgqueue limit Q --forget`` runs it.

    Returns True when a row was dropped (False: nothing was stored for the queue).

    Raises:
        InvalidArgumentError: an invalid queue name, before any SQL.

    .. versionadded:: 0.1.0
    """
    return _run(conn, _flow_calls.forget(queue, channel_of(conn)))


# -- retention (``jobs_retention``) ---------------------------------------------------------------


def set_retention(
    conn: Executor,
    queue: str | None = None,
    *,
    done: RetentionValue = ...,
    failed: RetentionValue = ...,
    **unknown: object,
) -> Retention:
    """Set how long a queue's finished jobs are kept, in the caller's transaction; running
    workers delete older ones (at most once a minute per queue, 1,000 rows per statement).

    Args:
        queue: The queue; ``None`` (default) sets the default of every queue without a setting
            of its own.
        done: How long ``done`` jobs are kept after they finished (a ``timedelta`` or
            seconds); ``None``: for ever. Omitted: unchanged (a queue without its own keeps
            the default's). The built-in default is 7 days.
        failed: The same for ``failed`` jobs, cancelled and expired ones included. The
            built-in default is 30 days.

    Returns:
        The queue's retention as workers now apply it.

    Raises:
        InvalidArgumentError: before any SQL, nothing written: a duration that is zero,
            negative, NaN or over :data:`pgqueue.MAX_DURATION`, a blank queue name, a kind
            other than ``done`` and ``failed``, or no kind at all.

    .. versionadded:: 0.1.0
    """
    return _drive(conn, _retention_calls.set_retention(queue, done, failed, unknown))


def retention(conn: Executor) -> list[Retention]:
    """How long finished jobs are kept: the default first (``queue`` ``None``), then every queue
    with a setting of its own, by name. A queue not listed keeps the default.

    .. versionadded:: 0.1.0
    """
    return _drive(conn, _retention_calls.retention())
