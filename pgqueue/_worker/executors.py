"""Running one handler on one job, and writing one job's outcome in the caller's transaction.

The worker's lanes (threads, the event loop, transaction mode) and :func:`pgqueue.testing.drain`
all call handlers and write outcomes through these functions, so tests and production agree:
the same error text (:func:`describe_error`) and traceback in the job's ``errors``, the same
savepoint around a handler that runs in
the job's transaction (:func:`run_in_savepoint`), and the same outcome decision as the
completer's batches (:mod:`pgqueue._worker.outcomes`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from pgqueue import repository
from pgqueue._base.tracebacks import format_traceback
from pgqueue._worker.outcomes import Decision, after_complete, after_fail, after_snooze, unmatched
from pgqueue._worker.window import Held
from pgqueue.hooks import HookDispatcher
from pgqueue.jobs import Handler, Outcome, Snooze
from pgqueue.repository import Executor
from pgqueue.retry_policy import RetryPolicy, describe_error

log = logging.getLogger("pgqueue.worker")


class HandlerCancelled(Exception):
    """An ``async def`` handler's task was cancelled other than by a cancel or a lost lease: at
    the shutdown deadline, or by the coroutine itself. The attempt counts as failed."""


def call_sync(handler: Handler, held: Held, hooks: HookDispatcher | None) -> Exception | None:
    """Run a sync handler; return what it raised (``None``: it returned)."""
    _started(held, hooks)
    error: Exception | None = None
    try:
        handler(held.job)
    except Exception as exc:
        error = exc
    _handled(held, hooks, error)
    return error


async def call_async(
    handler: Handler, held: Held, hooks: HookDispatcher | None
) -> BaseException | None:
    """Await a coroutine handler inside its task; a cancellation is returned, not raised.

    The task is the worker's own and ends here, so swallowing ``CancelledError`` is safe: the
    caller tells a cancel, a lost lease and a shutdown apart by the job's flags.
    """
    _started(held, hooks)
    error: BaseException | None = None
    try:
        await handler(held.job)  # type: ignore[misc]
    except (Exception, asyncio.CancelledError) as exc:
        error = exc
    _handled(held, hooks, error)
    return error


def run_inline(handler: Handler, held: Held, is_async: bool) -> BaseException | None:
    """Run a handler of either kind on the calling thread (``asyncio.run`` for a coroutine)."""
    if is_async:
        return asyncio.run(call_async(handler, held, None))
    return call_sync(handler, held, None)


def settle(
    conn: Executor, held: Held, error: BaseException | None, policy: RetryPolicy
) -> Decision:
    """Complete, snooze or fail one job in the caller's transaction and say what became of it."""
    job = held.job
    if error is None:
        decision = after_complete(repository.complete(conn, job.id, job.attempts))
    elif held.snooze is not None:
        matched = repository.snooze(conn, job.id, job.attempts, held.snooze)
        decision = after_snooze(matched, held.snooze)
    else:
        detail = describe_error(error)
        held.traceback = format_traceback(error)
        row = repository.fail(
            conn,
            job.id,
            job.attempts,
            detail,
            retry=policy.should_retry(error),
            base=policy.base,
            cap=policy.cap,
            traceback=held.traceback,
        )
        decision = after_fail(row, detail)
    if decision[0] is not Outcome.LOST:
        return decision
    return unmatched(repository.settled_among(conn, [held.key]).get(job.id), decision[1])


def run_in_savepoint(
    conn: Executor, held: Held, run: Callable[[], BaseException | None], policy: RetryPolicy
) -> tuple[BaseException | None, Outcome, str]:
    """Run a handler (``run()`` returns what it raised) in a savepoint of the caller's
    transaction, then :func:`settle` its job there: what the handler wrote is kept when it
    returned and rolled back when it raised, and either way the outcome is written in the same
    transaction. Transaction mode and :func:`pgqueue.testing.drain` on a connection."""
    savepoint = conn.begin_nested()
    error = run()
    if error is None:
        savepoint.commit()
    else:
        savepoint.rollback()
    outcome, detail = settle(conn, held, error, policy)
    return error, outcome, detail


def _started(held: Held, hooks: HookDispatcher | None) -> None:
    job = held.job
    log.debug(
        "job %d queue=%s attempt=%d: start payload=%r", job.id, job.queue, job.attempts, job.payload
    )
    held.started_at = time.monotonic()
    if hooks is not None:
        hooks.started(held.job, held.started_at - held.claimed_at)


def _handled(held: Held, hooks: HookDispatcher | None, error: BaseException | None) -> None:
    held.handler_seconds = time.monotonic() - held.started_at
    if isinstance(error, Snooze):
        held.snooze = error.delay
    if hooks is not None:
        hooks.handled(held.job, held.handler_seconds, error)
