"""The worker's door to the database: its batched statements and its own row, one runner.

Users call :mod:`pgqueue.repository`; the worker's parts (the completer, the heartbeat, the
scheduler, the pruner, the shutdown, the row in ``jobs_workers``) call these. Each is one line:
the call is built (and its values checked) in :mod:`pgqueue._sql`, and run by
:mod:`pgqueue._sql.runners`, the runner the repository uses too, in the caller's transaction.
The worker also runs a few of the users' functions as they are (``claim``, ``complete``,
``fail``, ``snooze``, ``reap_expired``).

Batched statements take ``held``, ``[(job_id, claimed_attempts), ...]``, from claims, not from
users: they are not validated again on the hot path.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta

from pgqueue import retry_policy
from pgqueue._sql import calls, log_calls, periodic_calls, retention_calls, worker_calls
from pgqueue._sql.calls import BatchCompletion, BatchFailure
from pgqueue._sql.log_calls import JobLines
from pgqueue._sql.runners import Executor, run
from pgqueue.periodic import Periodic
from pgqueue.results import FailResult, Fired, PeriodicRow, Settled

# -- one job, for the lanes that finish a job alone (transaction mode, ``testing.drain``) ------


def complete_with_result(
    conn: Executor,
    job_id: int,
    attempts: int,
    result_json: str | None,
    progress_json: str | None = None,
) -> bool:
    """:func:`pgqueue.repository.complete` that also stores the job's result and last progress,
    JSON texts the worker encoded and checked (``None``: no result; keep the stored progress)."""
    return run(conn, calls.complete_with_result(job_id, attempts, result_json, progress_json))


def fail_rolled_back(
    conn: Executor,
    job_id: int,
    attempts: int,
    error: str,
    *,
    retry: bool,
    policy: retry_policy.RetryPolicy,
    lease: timedelta,
    locked_by: str | None,
    lock_timeout_ms: int,
) -> FailResult | None:
    """Transaction mode: fail attempt ``attempts`` of a job whose handler's session was ended
    (its claim rolled back with it): the claim taken again, then the ordinary failure, both in
    the caller's transaction. ``None`` when the row is no longer as that claim found it."""
    if not run(conn, calls.retake_rolled_back(job_id, attempts, lease, locked_by, lock_timeout_ms)):
        return None
    return run(conn, calls.fail(job_id, attempts, error, retry, policy.base, policy.cap))


def set_local_lock_timeout(conn: Executor, milliseconds: int) -> None:
    """``SET LOCAL lock_timeout`` for the rest of the caller's transaction (nothing outlives it)."""
    run(conn, calls.set_local_lock_timeout(milliseconds))


# -- batched lifecycle ---------------------------------------------------------------------------


def complete_many(
    conn: Executor,
    held: Sequence[tuple[int, int]],
    *,
    lock_timeout_ms: int | None = None,
    lines: Sequence[JobLines] = (),
) -> set[int]:
    """R10 for a batch: the ids that were still ours and are now ``done``.

    ``lock_timeout_ms``: wait at most that long for a row lock (the statement sets it for its own
    transaction: in autocommit, for itself alone). Default: the session's. ``lines``: the log
    lines of jobs of the batch, written by the same statement (:mod:`pgqueue._sql.log_calls`).
    """
    return run(conn, log_calls.with_lines(calls.complete_many(held, lock_timeout_ms), lines))


def complete_many_with_results(
    conn: Executor,
    completions: Sequence[BatchCompletion],
    *,
    lock_timeout_ms: int | None = None,
    lines: Sequence[JobLines] = (),
) -> set[int]:
    """:func:`complete_many` for ``(job_id, attempts, result_json, progress_json)``: each job's
    result and last progress written by the same one statement (``lock_timeout_ms`` likewise)."""
    call = calls.complete_many_with_results(completions, lock_timeout_ms)
    return run(conn, log_calls.with_lines(call, lines))


def fail_many(
    conn: Executor,
    failures: Sequence[BatchFailure],
    *,
    base: timedelta = retry_policy.DEFAULT_RETRY_BASE,
    cap: timedelta = retry_policy.DEFAULT_RETRY_CAP,
    lock_timeout_ms: int | None = None,
    lines: Sequence[JobLines] = (),
) -> dict[int, FailResult]:
    """R11 for a batch of ``(job_id, attempts, error, retry[, traceback])`` sharing one backoff,
    by id, in one statement (``lock_timeout_ms`` as for :func:`complete_many`)."""
    return run(
        conn, log_calls.with_lines(calls.fail_many(failures, base, cap, lock_timeout_ms), lines)
    )


def snooze_many(
    conn: Executor,
    snoozes: Sequence[tuple[int, int, timedelta]],
    *,
    lock_timeout_ms: int | None = None,
    lines: Sequence[JobLines] = (),
) -> set[int]:
    """Snoozes for a batch of ``(job_id, attempts, delay)``: the ids that were still ours and are
    queued again (``lock_timeout_ms`` as for :func:`complete_many`)."""
    return run(conn, log_calls.with_lines(calls.snooze_many(snoozes, lock_timeout_ms), lines))


def extend_leases(
    conn: Executor,
    held: Sequence[tuple[int, int]],
    lease: timedelta,
    lines: Sequence[JobLines] = (),
) -> set[int]:
    """R14 for a batch: the ids whose lease now ends at ``now() + lease``; the rest are lost.
    ``lines``: the log lines running jobs recorded since the last beat, in the same statement."""
    return run(conn, log_calls.with_lines(calls.extend_leases(held, lease), lines))


def extend_leases_with_progress(
    conn: Executor,
    held: Sequence[tuple[int, int, str | None]],
    lease: timedelta,
    lines: Sequence[JobLines] = (),
) -> set[int]:
    """:func:`extend_leases` for ``(job_id, attempts, progress_json)``: the heartbeat's one
    statement also writes the progress each job set since the last beat (``None``: keep it)."""
    return run(conn, log_calls.with_lines(calls.extend_leases_with_progress(held, lease), lines))


def extend_leases_bounded(
    conn: Executor,
    held: Sequence[tuple[int, int, float, str | None]],
    lines: Sequence[JobLines] = (),
) -> set[int]:
    """:func:`extend_leases_with_progress` with a lease of its own per job, in seconds: the
    heartbeat's while a held job has a timeout (its lease ends by timeout + grace)."""
    return run(conn, log_calls.with_lines(calls.extend_leases_bounded(held), lines))


def write_lines(conn: Executor, lines: Sequence[JobLines]) -> None:
    """The log lines of jobs whose outcome was written alone (transaction mode,
    ``testing.drain``), in the caller's transaction: one statement, only for jobs that logged."""
    run(conn, log_calls.write_lines(lines))


def release_many(conn: Executor, held: Sequence[tuple[int, int]]) -> set[int]:
    """Give claimed jobs that never started back to ``queued`` without charging the attempt."""
    return run(conn, calls.release_many(held))


def settled_among(conn: Executor, held: Sequence[tuple[int, int]]) -> dict[int, Settled]:
    """Of jobs no longer ``running`` under these attempts: which were completed by their
    handler's own transaction and which were cancelled (the others are lost)."""
    return run(conn, calls.settled_among(held))


# -- periodic jobs (``jobs_periodic``): the scheduler's side ------------------------------------


def periodic_states(conn: Executor, names: Iterable[str] | None = None) -> list[PeriodicRow]:
    """The stored definitions of ``names`` (all when ``None``), as
    :func:`pgqueue.repository.periodic_states` reads them for users."""
    return run(conn, periodic_calls.states(names))


def declare_periodic(
    conn: Executor, definitions: Sequence[Periodic], now: datetime
) -> list[PeriodicRow]:
    """A worker's start: upsert its definitions; a changed schedule counts from ``now``."""
    return run(conn, periodic_calls.declare(definitions, now))


def refresh_periodic(conn: Executor, names: Sequence[str]) -> None:
    """``declared_at = now()``: a running worker still declares these."""
    run(conn, periodic_calls.refresh(names))


def fire_periodic(
    conn: Executor, definition: Periodic, prev: datetime | None, ticks: Sequence[datetime]
) -> Fired:
    """Enqueue ``ticks`` of ``definition`` in one statement if its ``last_tick`` is still ``prev``
    (and its stored schedule is the definition's); otherwise insert nothing."""
    return run(conn, periodic_calls.fire(definition, prev, ticks))


# -- retention (``jobs_retention``, pgqueue_0016): the pruner's side ----------------------------


def ensure_retention_row(conn: Executor, queue: str) -> bool:
    """Give ``queue`` a ``jobs_retention`` row to lock while pruning it; False when it had one
    (then nothing is written, and nothing waits)."""
    if run(conn, retention_calls.has_row(queue)):
        return False
    run(conn, retention_calls.ensure_row(queue))
    return True


def take_prune(
    conn: Executor, queue: str, worker: str, interval: timedelta, *, continuing: bool
) -> dict[str, timedelta | None] | None:
    """Lock ``queue``'s row for this transaction's prune when it is due (or still ``worker``'s
    with ``continuing``); its retention by kind, or ``None``: skip the queue."""
    return run(conn, retention_calls.take(queue, worker, interval, continuing=continuing))


def prune_finished(conn: Executor, queue: str, kind: str, kept: timedelta) -> int:
    """Delete one batch (at most 1,000) of ``queue``'s jobs of ``kind`` finished more than
    ``kept`` ago; how many were deleted."""
    return run(conn, retention_calls.prune(queue, kind, kept))


# -- the worker's own row (``jobs_workers``, pgqueue_0010) ---------------------------------------


def register_worker(
    conn: Executor, name: str, host: str, pid: int, queues: Sequence[str]
) -> datetime:
    """Write the row of one run (replacing one a killed process of the same host and pid left);
    return its ``started_at``, which :func:`unregister_worker` names."""
    return run(conn, worker_calls.register(name, host, pid, queues))


def unregister_worker(conn: Executor, name: str, started_at: datetime) -> None:
    """Delete the row this run wrote, and only that one."""
    run(conn, worker_calls.unregister(name, started_at))


def set_worker_stuck(conn: Executor, name: str, started_at: datetime, stuck: int) -> None:
    """Write how many of this run's handler threads are stuck now (``pgqueue workers``)."""
    run(conn, worker_calls.set_stuck(name, started_at, stuck))
