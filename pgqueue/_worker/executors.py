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
from dataclasses import dataclass, field
from datetime import timedelta

from pgqueue import repository
from pgqueue._base.tracebacks import format_traceback
from pgqueue._base.validation import encode_payload
from pgqueue._sql.runners import Executor
from pgqueue._worker import store
from pgqueue._worker.capture import pending_lines
from pgqueue._worker.outcomes import Decision, after_complete, after_fail, after_snooze, unmatched
from pgqueue._worker.window import Held
from pgqueue.errors import HandlerTimeoutError, InvalidPayloadError, InvalidResultError
from pgqueue.hooks import HookDispatcher
from pgqueue.jobs import (
    Handler,
    JobContext,
    Outcome,
    Snooze,
    Suspended,
    current_job_var,
    marks_of,
)
from pgqueue.retry_policy import RetryPolicy, describe_error

log = logging.getLogger("pgqueue.worker")

#: Default of ``Worker(max_result_bytes=...)``: the largest JSON text a task's result may be.
DEFAULT_MAX_RESULT_BYTES = 1_000_000


class HandlerCancelled(Exception):
    """An ``async def`` handler's task was cancelled other than by a cancel or a lost lease: at
    the shutdown deadline, or by the coroutine itself. The attempt counts as failed."""


@dataclass(eq=False)
class Target:
    """What runs one job: a queue's handler, or a task's function behind its argument decoding.

    Attributes:
        call: Called with the job (a coroutine function when ``is_async``); its return value is
            the job's result.
        is_async: Runs on the event loop (awaited) rather than on a thread.
        task: The task's name; ``None`` for a queue's handler. A task's result must be JSON of
            at most ``max_result_bytes`` or the job fails for good; a handler's value that is
            neither is not stored (logged once per handler).
        retry: The task's own retry policy, if it has one (else the queue's applies).
        max_result_bytes: The bound of a result's JSON text.
    """

    call: Callable[[JobContext], object]
    is_async: bool
    task: str | None = None
    retry: RetryPolicy | None = None
    max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES
    _warned: bool = field(default=False, init=False, repr=False)


def handler_target(handler: Handler, is_async: bool) -> Target:
    """A queue handler as a :class:`Target` with the default result bound (``drain``'s)."""
    return Target(handler, is_async)


def retryable(policy: RetryPolicy, error: BaseException) -> bool:
    """Whether a failed attempt may be retried: never for a task's result that is not storable
    (the same code returns the same kind of value), else as ``policy`` says."""
    return not isinstance(error, InvalidResultError) and policy.should_retry(error)


def keep_result(target: Target, held: Held, value: object) -> InvalidResultError | None:
    """Encode what the handler or task returned into ``held.result``, for its completion.

    ``None`` (the common return) costs one comparison and is stored as SQL NULL. A task's value
    that is not JSON, or too large, is returned as the attempt's error; a handler's is dropped
    with a log line (handlers returned anything before results were stored).
    """
    if value is None:
        held.result = None
        return None
    problem: str | None = None
    try:
        text = encode_payload(value, argument="result")
    except InvalidPayloadError as exc:
        problem = f"is not JSON: {exc.problem}"
    else:
        # json.dumps escapes every non-ASCII character: its length is its size in bytes.
        if len(text) <= target.max_result_bytes:
            held.result = text
            return None
        problem = f"is too large: {len(text)} bytes > max_result_bytes {target.max_result_bytes}"
    held.result = None
    job = held.job
    if target.task is not None:
        return InvalidResultError(f"the result of task {target.task!r} {problem}")
    if not target._warned:
        target._warned = True
        log.warning(
            "queue %s: the handler's return value %s; not stored (only a task's result must "
            "be JSON; logged once per handler)",
            job.queue,
            problem,
        )
    return None


def call_sync(target: Target, held: Held, hooks: HookDispatcher | None) -> Exception | None:
    """Run a sync handler or task; return what it raised (``None``: it returned).

    :func:`pgqueue.current_job` answers the job on this thread for the call's duration.
    """
    _started(held, target, hooks)
    error: Exception | None = None
    token = current_job_var.set(held.job)
    try:
        value = target.call(held.job)
        if value is not None:
            error = keep_result(target, held, value)
    except Exception as exc:
        error = exc
    finally:
        current_job_var.reset(token)
    if held.timed_out:
        error = _timed_out(held)
    _handled(held, hooks, error)
    return error


async def call_async(
    target: Target, held: Held, hooks: HookDispatcher | None
) -> BaseException | None:
    """Await a coroutine handler or task inside its task; a cancellation is returned, not raised.

    The task is the worker's own and ends here, so swallowing ``CancelledError`` is safe: the
    caller tells a cancel, a lost lease and a shutdown apart by the job's flags. The job's
    asyncio task has a context of its own: :func:`pgqueue.current_job` answers this job there.
    """
    _started(held, target, hooks)
    error: BaseException | None = None
    token = current_job_var.set(held.job)
    try:
        value = await target.call(held.job)  # type: ignore[misc]
        if value is not None:
            error = keep_result(target, held, value)
    except (Exception, asyncio.CancelledError) as exc:
        error = exc
    finally:
        current_job_var.reset(token)
    if held.timed_out:
        error = _timed_out(held)
    _handled(held, hooks, error)
    return error


def _timed_out(held: Held) -> HandlerTimeoutError:
    """The attempt's error once its timeout passed, whatever the handler returned or raised
    (a result is not kept: the attempt failed)."""
    held.result = None
    return HandlerTimeoutError(held.timeout or 0.0)


def run_inline(target: Target, held: Held) -> BaseException | None:
    """Run a handler or task of either kind on the calling thread (``asyncio.run`` for a
    coroutine)."""
    if target.is_async:
        return asyncio.run(call_async(target, held, None))
    return call_sync(target, held, None)


def settle(
    conn: Executor, held: Held, error: BaseException | None, policy: RetryPolicy
) -> Decision:
    """Complete, snooze or fail one job in the caller's transaction and say what became of it.

    A completion stores the job's result and its last progress in the same statement; the
    job's log lines, if it recorded any, follow in one more.
    """
    job = held.job
    if error is None:
        progress = marks_of(job).pending_progress()
        if held.result is None and progress is None:
            matched = repository.complete(conn, job.id, job.attempts)
        else:
            matched = store.complete_with_result(
                conn, job.id, job.attempts, held.result, None if progress is None else progress[1]
            )
            if matched and progress is not None:
                marks_of(job).written(progress[0])
        decision = after_complete(matched)
    elif held.suspension is not None:
        suspension = held.suspension
        rows = [(job.id, job.attempts, suspension.until, suspension.signal)]
        matched = bool(store.suspend_many(conn, rows))
        decision = after_snooze(matched, held.snooze or timedelta(0))
    elif held.snooze is not None:
        matched = repository.snooze(conn, job.id, job.attempts, held.snooze)
        decision = after_snooze(matched, held.snooze)
    else:
        detail = describe_error(error)
        timed_out = isinstance(error, HandlerTimeoutError)
        held.traceback = None if timed_out else format_traceback(error)
        row = repository.fail(
            conn,
            job.id,
            job.attempts,
            detail,
            retry=retryable(policy, error),
            base=policy.base,
            cap=policy.cap,
            traceback=held.traceback,
        )
        decision = after_fail(row, detail)
    lines, _ = pending_lines([held])
    if lines:  # alone: one statement more, in the same transaction, for a job that logged
        store.write_lines(conn, lines)
    if decision[0] is not Outcome.LOST:
        return decision
    return unmatched(store.settled_among(conn, [held.key]).get(job.id), decision[1])


def run_in_savepoint(
    conn: Executor, held: Held, run: Callable[[], BaseException | None], policy: RetryPolicy
) -> tuple[BaseException | None, Outcome, str]:
    """Run a handler (``run()`` returns what it raised) in a savepoint of the caller's
    transaction, then :func:`settle` its job there: what the handler wrote is kept when it
    returned and rolled back when it raised, and either way the outcome is written in the same
    transaction. Transaction mode and :func:`pgqueue.testing.drain` on a connection.

    A durable sleep or signal wait (:class:`pgqueue.jobs.Suspended`) keeps what the handler
    wrote before it, its steps among them: it is no failure, and the job resumes after it."""
    savepoint = conn.begin_nested()
    error = run()
    if error is None or isinstance(error, Suspended):
        savepoint.commit()
    else:
        savepoint.rollback()
    outcome, detail = settle(conn, held, error, policy)
    return error, outcome, detail


def _started(held: Held, target: Target, hooks: HookDispatcher | None) -> None:
    job = held.job
    if log.isEnabledFor(logging.DEBUG):  # the payload is decoded for the line only when it is
        log.debug(
            "job %d queue=%s attempt=%d: start payload=%r",
            job.id,
            job.queue,
            job.attempts,
            job.payload,
        )
    held.retry = target.retry
    marks_of(job).max_step_bytes = target.max_result_bytes
    held.started_at = time.monotonic()
    if hooks is not None:
        hooks.started(held.job, held.started_at - held.claimed_at)


def _handled(held: Held, hooks: HookDispatcher | None, error: BaseException | None) -> None:
    held.handler_seconds = time.monotonic() - held.started_at
    logs = marks_of(held.job).logs
    if logs is not None:
        # Encoded here, on the handler's thread, as its result is (keep_result): the completer's
        # thread, which every job's outcome waits for, finds the lines ready to send.
        logs.pending()
    if isinstance(error, Snooze):
        held.snooze = error.delay
        if isinstance(error, Suspended):
            held.suspension = error.suspension
    if hooks is not None:
        hooks.handled(held.job, held.handler_seconds, error)
