"""What a running worker's components share: one lock, the claim window, and how a job ends.

The claimer, the handler lanes, the heartbeat and the completer each run on threads of their
own and meet here. Everything in :class:`Runtime` that touches the window or the stats runs under
its one lock; the completer's hand-over happens outside it.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
import traceback as tracebacks
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from pgqueue._base.tracebacks import format_traceback
from pgqueue._worker.deadlines import Deadlines
from pgqueue._worker.executors import HandlerCancelled, retryable
from pgqueue._worker.outcomes import OUTCOMES, count_and_log
from pgqueue._worker.window import ClaimWindow, Held, Lane, State, busy
from pgqueue.errors import HandlerTimeoutError
from pgqueue.hooks import HookDispatcher
from pgqueue.jobs import JobContext, Outcome, WorkerStats, marks_of
from pgqueue.results import ClaimedJob, Settled
from pgqueue.retry_policy import RetryPolicy, describe_error

if TYPE_CHECKING:  # the worker hands its completer over; the runtime only calls it
    from sqlalchemy import Connection, Engine

    from pgqueue._worker.completer import Completer

log = logging.getLogger("pgqueue.worker")


class Runtime:
    """The shared state of one ``Worker.run()``, complete when constructed.

    The completer and the async lane both call the runtime and are called by it: the worker
    builds the completer first (reporting through a callback) and hands the runtime a callback
    that wakes the async lane built after it; nothing here is set from outside later.

    Args:
        window: The claim window (lease mode's held jobs).
        stats: The worker's counters.
        hooks: The worker's hooks, if any.
        policies: The retry policy of a queue.
        completer: Takes the outcomes of finished jobs.
        wake_async: Called (under the lock) when async jobs are waiting: the event loop's
            wake-up. Default: nothing (no async lane).
        split: The jobs of one claim by the lane each runs in
            (:meth:`pgqueue._worker.dispatch.Dispatch.split`: a queue whose tasks run in both
            lanes). Default: all in the lane they were claimed for.
        deadlines: The handler timeouts (``Worker(default_timeout, timeout_grace)``). Default:
            none beyond the jobs' own, no grace.

    Attributes:
        lock: Guards the window, the stats, the lanes' bookkeeping and the claimer's queues.
        claimer_wakeup: Wakes the claiming loop (capacity freed, a notification, a stop).
        work_ready: Wakes handler threads, one per new job (or ticket).
        deadline_moved: Wakes the watchdog (a sooner deadline, a stop).
        stuck: The jobs whose sync handler outlived timeout + grace and has not returned, by the
            thread that runs it (stuck: :attr:`pgqueue.WorkerStats.stuck` counts them).
        stop: Set once this run shuts down (the worker sets it for a stop asked at any time,
            even before the run got going) and never cleared: nothing new is claimed or started,
            and a thread that outlives the run sees it too.
    """

    def __init__(
        self,
        window: ClaimWindow,
        stats: WorkerStats,
        hooks: HookDispatcher | None,
        policies: Callable[[str], RetryPolicy],
        *,
        completer: Completer,
        wake_async: Callable[[], None] = lambda: None,
        log_tracebacks: bool = True,
        capture_logs: bool = False,
        split: Callable[[Lane, list[JobContext]], list[tuple[Lane, list[JobContext]]]]
        | None = None,
        engine: Engine | None = None,
        deadlines: Deadlines | None = None,
    ) -> None:
        # An RLock although nothing re-enters it: a Condition over one tests ownership in C,
        # which measured faster on the per-job wake-ups than over a plain Lock.
        self.lock = threading.RLock()
        self.claimer_wakeup = threading.Condition(self.lock)
        self.work_ready = threading.Condition(self.lock)
        self.deadline_moved = threading.Condition(self.lock)
        self.deadlines = Deadlines(None, 0.0) if deadlines is None else deadlines
        self.stuck: dict[int, Held] = {}
        self.stop = threading.Event()
        self.window = window
        self.stats = stats
        self.hooks = hooks
        self.policy = policies
        self.completer = completer
        self.wake_async = wake_async
        self._split = split
        #: Given to each job's context: what ``JobContext.dependency_results`` reads through.
        self.engine = engine
        #: Whether a failed attempt's log line carries its traceback (``Worker(log_tracebacks)``).
        self.log_tracebacks = log_tracebacks
        #: Whether held jobs' ``logging`` records are their lines (``Worker(capture_logs)``).
        self.capture_logs = capture_logs
        self.last_work = time.monotonic()
        #: Jobs whose end was recorded, but for those whose completion carried their queue's next
        #: claim (``Held.rode``: that claim saw their slots): a queue parked at a flow limit is
        #: claimed again once this moves (one of this worker's jobs left ``running``, so a slot
        #: may be free that no claim saw).
        self.finished = 0
        #: ``(loop, last error)`` of the loop that could not go on, once one could not: the run
        #: stops and ``Worker.run()`` raises :class:`pgqueue.WorkerFailedError`.
        self.failure: tuple[str, BaseException] | None = None

    def fail(self, loop: str, error: BaseException) -> None:
        """A loop cannot go on (:mod:`pgqueue._worker.faults`): this run stops as for a stop, and
        remembers why (the first loop to give up). Takes the lock; callable from any thread."""
        with self.lock:
            if self.failure is None:
                self.failure = (loop, error)
            self.stop.set()
            self.claimer_wakeup.notify_all()
            self.work_ready.notify_all()
            self.deadline_moved.notify_all()

    # -- claims -----------------------------------------------------------------------------------

    def accept(self, lane: Lane, claimed: Iterable[ClaimedJob]) -> int:
        """Hold freshly claimed jobs in the window and wake their lane; call with the lock held."""
        engine = self.engine
        jobs = [JobContext.of(c, engine=engine) for c in claimed]
        if not jobs:
            return 0
        if self.capture_logs:
            for job in jobs:
                marks_of(job).capture = True
        self._count_claimed(len(jobs))
        for to, some in [(lane, jobs)] if self._split is None else self._split(lane, jobs):
            self._accept(to, some)
        return len(jobs)

    def accept_in_transaction(self, claimed: ClaimedJob, connection: Connection) -> Held:
        """A job a handler thread claimed in its own open transaction (transaction mode): counted
        and announced as :meth:`accept` does, and held by that thread, not the window (its row is
        locked by the transaction, so the heartbeat must not extend it). Lock held."""
        job = JobContext.of(claimed, connection=connection)
        marks_of(job).capture = self.capture_logs
        self._count_claimed(1)
        held = Held(job, Lane.THREADS, self.last_work, State.RUNNING)
        self._announce(held)
        return held

    def expired(self, queue: str, count: int) -> None:
        """A claim failed ``count`` jobs of ``queue`` as past their deadline: counted, logged and
        told to hooks (they have no other event). Lock held."""
        if not count:
            return
        self.stats.expired += count
        log.info("queue %s: %d job(s) expired before they started (never run)", queue, count)
        if self.hooks is not None:
            self.hooks.expired(queue, count)

    def _count_claimed(self, n: int) -> None:
        self.last_work = time.monotonic()
        self.stats.claimed += n

    def _announce(self, held: Held) -> None:
        if self.hooks is not None:
            self.hooks.claimed(held.job)
        log.debug(
            "job %d queue=%s attempt=%d: claimed", held.job.id, held.job.queue, held.job.attempts
        )

    def _accept(self, lane: Lane, jobs: list[JobContext]) -> None:
        for held in self.window.accept(lane, jobs, self.last_work):
            self._announce(held)
        if lane is Lane.THREADS:
            self.work_ready.notify(len(jobs))
        else:
            self.wake_async()

    def wake_claimer(self) -> None:
        """Capacity changed: wake the claiming loop if a claim is now worth it. Lock held."""
        if not len(self.window) or self.window.any_worth_claim():
            self.claimer_wakeup.notify()

    # -- timeouts ---------------------------------------------------------------------------------

    def started(self, held: Held) -> None:
        """``held``'s handler starts now: bound it by its timeout, if it has one. Lock held."""
        deadlines = self.deadlines
        if held.job.timeout is None and deadlines.default_timeout is None:
            return  # the common case: no clock read, nothing held
        if deadlines.started(held, time.monotonic()):
            self.deadline_moved.notify()

    def time_out(self, held: Held) -> bool:
        """The watchdog: ``held`` ran past its timeout. Its handler is asked to stop (its task
        cancelled, ``job.stopping`` set) and its attempt will fail with
        :class:`~pgqueue.HandlerTimeoutError`; it is given up after the grace. False when it
        had ended meanwhile. Lock held."""
        if held.ended or held.job.lease_lost or held.job.cancelled:
            self.deadlines.ended(held)
            return False
        held.timed_out = True
        held.job.stopping.set()
        log.warning(
            "job %d queue=%s attempt=%d: timed out after %gs; stopping its handler",
            held.job.id,
            held.job.queue,
            held.job.attempts,
            held.timeout,
        )
        if held.cancel_task is not None:
            held.cancel_task()
        return True

    def give_up(self, held: Held) -> bool:
        """The watchdog: ``held``'s handler outlived timeout + grace. In lease mode its failure
        goes to the completer now, and whatever the handler returns later is dropped; the slot
        stays taken until it returns (a sync one's thread is counted in :attr:`stuck`, and its
        stack logged once). True when its failure is to be written: the caller then calls
        :meth:`fail_timed_out` without the lock (the completer takes its own). Lock held."""
        if held.ended or held.job.lease_lost or held.job.cancelled or held.abandoned:
            return False
        job = held.job
        if held.lane is Lane.THREADS and held.thread_id is not None:
            self.stuck[held.thread_id] = held
            self.stats.stuck = len(self.stuck)
            held.stuck_since = time.monotonic()
            frame = sys._current_frames().get(held.thread_id)
            stack = "".join(tracebacks.format_stack(frame)) if frame is not None else ""
            log.warning(
                "job %d queue=%s attempt=%d: its handler did not return within %gs of its "
                "timeout; the thread is stuck (its slot stays taken until it returns), at:\n%s",
                job.id,
                job.queue,
                job.attempts,
                self.deadlines.grace,
                stack.rstrip(),
            )
        if not self.window.holds(held):  # transaction mode: its own transaction holds the row
            return held.abandon_transaction is not None
        held.abandoned = True
        self.window.abandon(held)
        return True

    def ended_in_transaction(self, held: Held) -> None:
        """Transaction mode: ``held``'s handler returned and its transaction ended (its outcome
        written or rolled back): nothing is timed out after, its thread is no longer stuck.
        Lock held."""
        held.ended = True
        self.deadlines.ended(held)
        if held.thread_id is not None and self.stuck.get(held.thread_id) is held:
            del self.stuck[held.thread_id]
            self.stats.stuck = len(self.stuck)

    def fail_timed_out(self, held: Held) -> None:
        """Hand the failure of a job given up (:meth:`give_up`) to the completer, or, in
        transaction mode, have its session ended and the failure written. No lock."""
        if held.abandon_transaction is not None and not self.window.holds(held):
            held.abandon_transaction()
            return
        policy = self.policy_of(held)
        error = HandlerTimeoutError(held.timeout or 0.0)
        self.completer.fail(
            held,
            describe_error(error),
            retry=retryable(policy, error),
            policy=policy,
            traceback=None,
        )

    # -- outcomes ---------------------------------------------------------------------------------

    def finish(self, held: Held, error: BaseException | None) -> None:
        """A handler returned or raised: drop the outcome of a job no longer ours, else hand it to
        the completer. Takes the lock."""
        job = held.job
        with self.lock:
            held.ended = True
            if held.deadline is not None:
                self.deadlines.ended(held)
            if held.abandoned:  # its failure was written at timeout + grace
                self.window.returned(held)
                if held.thread_id is not None and self.stuck.get(held.thread_id) is held:
                    del self.stuck[held.thread_id]
                    self.stats.stuck = len(self.stuck)
                log.warning(
                    "job %d queue=%s attempt=%d: its handler returned %.1fs after its timeout; "
                    "what it did is dropped (the attempt had failed)",
                    job.id,
                    job.queue,
                    job.attempts,
                    time.monotonic() - (held.deadline or 0.0) + self.deadlines.grace,
                )
                self.wake_claimer()
                return
            if job.lease_lost or job.cancelled:
                self.window.forget(held)
                if job.cancelled:
                    self.record(held, Outcome.CANCELLED, "")
                else:
                    self.record(held, Outcome.LOST, "lease lost")
                self.wake_claimer()
                return
            self.window.finishing(held)
            self.wake_claimer()
            # Nothing else is running or waiting to run: no outcome can join this one's batch,
            # so the completer writes it without its gathering wait.
            last = not self.window.any_busy()
        if last:
            self.completer.hurry()
        if error is None:
            self.completer.complete(held)
            return
        if held.snooze is not None:
            self.completer.snooze(held)
            return
        held.traceback = None if isinstance(error, HandlerTimeoutError) else format_traceback(error)
        if not isinstance(error, Exception):
            # A task cancelled at the shutdown deadline, or by the coroutine itself: a failed,
            # retryable attempt, so a job that always outlasts the deadline spends its attempts.
            # Its traceback says where it was waiting.
            error = HandlerCancelled("the handler's task was cancelled")
        policy = self.policy_of(held)
        self.completer.fail(
            held,
            describe_error(error),
            retry=retryable(policy, error),
            policy=policy,
            traceback=held.traceback,
        )

    def policy_of(self, held: Held) -> RetryPolicy:
        """The retry policy of a job: its task's own, else its queue's."""
        return held.retry if held.retry is not None else self.policy(held.job.queue)

    def report(self, outcomes: list[tuple[Held, Outcome, str]]) -> None:
        """The completer's callback: a batch's outcomes are written (or known to be lost)."""
        with self.lock:
            for held, outcome, detail in outcomes:
                self.window.forget(held)
                self.record(held, outcome, detail)
            self.wake_claimer()

    def record(self, held: Held, outcome: Outcome, detail: str) -> None:
        """Count, log and tell hooks of one job's end. Lock held."""
        if not held.rode:
            self.finished += 1
        if held.timed_out and outcome in (Outcome.RETRY, Outcome.FAILED):
            self.stats.timed_out += 1
        traceback = held.traceback if self.log_tracebacks else None
        count_and_log(self.stats, held.job, outcome, detail, traceback)
        if self.hooks is not None:
            self.hooks.outcome(
                held.job, OUTCOMES[outcome].event, detail, held.handler_seconds, held.snooze
            )

    # -- what the heartbeat learnt ----------------------------------------------------------------

    def leases_checked(
        self, checked: list[Held], kept: set[int], settled: Mapping[int, Settled]
    ) -> None:
        """Jobs whose lease extension matched nothing: self-done, cancelled, or lost."""
        with self.lock:
            for held in checked:
                if held.job.id in kept or not self.window.holds(held):
                    continue
                how = settled.get(held.job.id)
                if how is Settled.DONE_BY_HANDLER and held.state is not State.PENDING:
                    self.window.self_done(held)  # its handler finished it: stop extending
                elif busy(held.state):  # lost, cancelled, or done elsewhere before it started
                    self._stop_job(held, cancelled=how is Settled.CANCELLED)
            self.claimer_wakeup.notify_all()

    def _stop_job(self, held: Held, *, cancelled: bool) -> None:
        job = held.job
        what = "cancelled" if cancelled else "lease lost"
        if cancelled:
            marks_of(job).cancelled = True
        else:
            marks_of(job).lease_lost = True
        job.stopping.set()
        if held.state is State.PENDING:
            self.window.drop_pending(held)
            self.record(
                held, Outcome.CANCELLED if cancelled else Outcome.LOST, f"{what}, unstarted"
            )
            return
        log.warning(
            "job %d queue=%s attempt=%d: %s, stopping its handler",
            job.id,
            job.queue,
            job.attempts,
            what,
        )
        if held.cancel_task is not None:
            held.cancel_task()
