"""Handler threads: the lane of sync handlers, one class per mode.

Lease mode (R9, :class:`ThreadLane`): a thread takes the next claimed job, runs its handler outside
any transaction and hands the outcome to the completer. Transaction mode (R8,
:class:`TransactionLane`): a thread takes a ticket (a queue name), then claims one job, runs its
handler and writes its outcome in one transaction, so a crash rolls everything back and the job is
ready again at once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from datetime import timedelta
from functools import partial

from sqlalchemy import Engine

from pgqueue import repository
from pgqueue._base.urls import error_line
from pgqueue._sql.calls import rows_taken
from pgqueue._sql.driver_errors import is_transient
from pgqueue._worker.abandon import (
    Interrupter,
    RolledBackFailure,
    SessionNotEndedError,
    end_and_fail,
)
from pgqueue._worker.dispatch import Dispatch, as_dispatch
from pgqueue._worker.executors import call_sync, retryable, run_in_savepoint
from pgqueue._worker.runtime import Runtime
from pgqueue._worker.window import Held, Lane
from pgqueue.errors import HandlerTimeoutError
from pgqueue.flow import QueueSettings
from pgqueue.jobs import Handler, Outcome, end_transaction
from pgqueue.retry_policy import RetryPolicy, describe_error

log = logging.getLogger("pgqueue.worker")


class _HandlerThreads:
    """``concurrency`` daemon threads running :meth:`_loop`."""

    def __init__(
        self, runtime: Runtime, handlers: Mapping[str, Handler] | Dispatch, concurrency: int
    ) -> None:
        self._rt = runtime
        self._dispatch = as_dispatch(handlers)
        self._threads = [
            threading.Thread(target=self._loop, name=f"pgqueue-handler-{i}", daemon=True)
            for i in range(concurrency)
        ]

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def join(self, deadline: float) -> None:
        """Wait for the threads until ``deadline``, except those stuck in a handler past its
        timeout (they may never return: daemon threads, left to the process's exit)."""
        for t in self._threads:
            with self._rt.lock:
                stuck = t.ident in self._rt.stuck
            if not stuck:
                t.join(max(0.0, deadline - time.monotonic()))

    def _loop(self) -> None:
        raise NotImplementedError


class ThreadLane(_HandlerThreads):
    """Lease mode: each thread runs the next job the claimer put in the window."""

    def _loop(self) -> None:
        rt = self._rt
        window = rt.window
        while True:
            with rt.lock:
                while not (rt.stop.is_set() or window.has_pending(Lane.THREADS)):
                    rt.work_ready.wait()
                if rt.stop.is_set():
                    return
                held = window.start_next(Lane.THREADS)
                assert held is not None
                held.thread_id = threading.get_ident()
                rt.started(held)
                if not window.has_pending(Lane.THREADS):
                    rt.wake_claimer()
            error = call_sync(self._dispatch.target(held.job), held, rt.hooks)
            rt.finish(held, error)


class TransactionLane(_HandlerThreads):
    """Transaction mode: the claimer hands a thread a ticket, the thread claims its job.

    The lane owns its tickets and counts its open transactions; nothing of it is in the claim
    window (a job's row is locked by its transaction, so the heartbeat must not extend it). To the
    claimer it is the intake: a free thread is worth a ticket, one job per ticket, and
    ``on_job(queue)`` says when a ticket found a job (more may wait). Its state is guarded by the
    runtime's lock, like the window.
    """

    def __init__(
        self,
        runtime: Runtime,
        handlers: Mapping[str, Handler] | Dispatch,
        concurrency: int,
        *,
        engine: Engine,
        lease: timedelta,
        on_job: Callable[[str], None],
        locked_by: str | None = None,
    ) -> None:
        super().__init__(runtime, handlers, concurrency)
        self._locked_by = locked_by  # recorded in jobs.locked_by by each claim
        self._slots = concurrency
        self._engine = engine
        self._lease = lease
        self._on_job = on_job
        self._tickets: deque[str] = deque()  # queues to claim from, one job each
        self._running = 0  # tickets taken by a thread whose transaction is open
        # Sessions being ended at timeout + grace: no thread claims meanwhile, so none of this
        # worker's takes the row freed by the end before its failure is written.
        self._ending = 0

    # -- the claimer's intake (lock held) ---------------------------------------------------------

    def worth_claim(self, lane: Lane) -> bool:
        """A free thread, with no ticket waiting for it, is worth a claim."""
        return self._room() > 0

    def any_worth_claim(self) -> bool:
        return self._room() > 0

    def in_flight(self) -> int:
        """Tickets waiting plus transactions open: zero once all is finished."""
        return len(self._tickets) + self._running

    def admits(self, settings: QueueSettings) -> bool:
        """Not a queue with limits: they count ``running`` jobs, and this lane's are running only
        inside their open transaction, invisible to other workers."""
        return not settings.limited

    def take(self, queue: str, lane: Lane) -> int:
        """Take ``queue`` as a ticket for the next free thread: the claimer claims nothing."""
        self._tickets.append(queue)
        self._rt.work_ready.notify()
        return 0

    def _room(self) -> int:
        return self._slots - len(self._tickets) - self._running

    # -- the threads ------------------------------------------------------------------------------

    def _loop(self) -> None:
        rt = self._rt
        while True:
            with rt.lock:
                while not (rt.stop.is_set() or (self._tickets and not self._ending)):
                    rt.work_ready.wait()
                if rt.stop.is_set():
                    self._tickets.clear()  # never taken: nothing was claimed for them
                    return
                queue = self._tickets.popleft()
                self._running += 1
            try:
                self._run_in_transaction(queue)
            finally:
                with rt.lock:
                    self._running -= 1
                    rt.claimer_wakeup.notify()

    def _run_in_transaction(self, queue: str) -> None:
        rt, engine, lease, locked_by = self._rt, self._engine, self._lease, self._locked_by
        held: Held | None = None
        outcome, detail = Outcome.LOST, ""
        try:
            with engine.begin() as conn:
                claimed = repository.claim(
                    conn, queue=queue, limit=1, lease=lease, locked_by=locked_by
                )
                if not claimed:
                    if rows_taken(claimed):  # it failed an expired job: more may be waiting
                        with rt.lock:
                            rt.expired(queue, rows_taken(claimed))
                            self._on_job(queue)
                    return
                with rt.lock:
                    # Not in the window (counted as a running ticket instead).
                    held = rt.accept_in_transaction(claimed[0], conn)
                    self._on_job(queue)
                job = held.job
                held.thread_id = threading.get_ident()
                interrupter = (
                    Interrupter.of(engine, conn)
                    if rt.deadlines.timeout_of(held) is not None
                    else None
                )
                held.interrupt = interrupter
                target = self._dispatch.target(job)
                policy = target.retry if target.retry is not None else rt.policy(queue)
                if interrupter is not None:
                    held.abandon_transaction = partial(self._abandon, held, interrupter, policy)
                with rt.lock:
                    rt.started(held)
                run: Callable[[], BaseException | None] = partial(call_sync, target, held, rt.hooks)
                if interrupter is not None:
                    run = interrupter.around(run)
                _, outcome, detail = run_in_savepoint(conn, held, run, policy)
        except Exception as exc:
            if held is None and is_transient(exc):
                log.warning("claim on queue %s failed: %s", queue, error_line(exc))
                rt.stop.wait(1.0)
                return
            if held is None:
                raise
            outcome, detail = Outcome.LOST, f"transaction rolled back: {error_line(exc)}"
        finally:
            if held is not None:
                end_transaction(held.job)
                with rt.lock:
                    rt.ended_in_transaction(held)
        if held is not None:
            with rt.lock:
                if held.abandoned:  # its failure was written at timeout + grace
                    log.warning(
                        "job %d queue=%s attempt=%d: its handler returned after its session was "
                        "ended at timeout + grace; what it did was rolled back",
                        held.job.id,
                        held.job.queue,
                        held.job.attempts,
                    )
                    return
                rt.record(held, outcome, detail)

    def _abandon(self, held: Held, interrupter: Interrupter, policy: RetryPolicy) -> None:
        """At timeout + grace, a handler still running inside its transaction: end its session
        and fail the attempt as its own transaction would have (:mod:`pgqueue._worker.abandon`).
        Its thread stays taken until the handler returns. Unlocked (I/O)."""
        rt, job = self._rt, held.job

        def mark() -> None:
            with rt.lock:
                held.abandoned = True

        error = HandlerTimeoutError(held.timeout or 0.0)
        failure = RolledBackFailure(
            job.id,
            job.attempts,
            describe_error(error),
            retry=retryable(policy, error),
            policy=policy,
            lease=self._lease,
            locked_by=self._locked_by,
        )
        with rt.lock:
            self._ending += 1
        try:
            decision = end_and_fail(self._engine, interrupter, failure, mark)
        except SessionNotEndedError as exc:  # its own transaction writes its outcome
            with rt.lock:
                held.abandoned = False
            log.warning(
                "job %d: could not end its handler's session at timeout + grace (%s)", job.id, exc
            )
            return
        finally:
            with rt.lock:
                self._ending -= 1
                rt.work_ready.notify_all()
        if decision is None:
            return  # the handler returned meanwhile: its own transaction writes the outcome
        with rt.lock:
            rt.record(held, *decision)
