"""The completer: batches the outcomes of finished jobs into one guarded statement each.

Handlers hand their outcome over and return at once; one thread turns everything that arrived
within a few milliseconds into one flush: ``complete_many``, ``fail_many`` per retry policy,
``snooze_many`` (only when a handler raised :class:`pgqueue.Snooze`), then one ``settled_among``
for any job whose guard matched nothing. The jobs' log lines ride on the same statements
(:mod:`pgqueue._worker.capture`): none of their own. Each is one statement in autocommit that
sets its own lock timeout, so a flush of completions is one round trip. A lost connection, a
deadlock or a lock timeout retries the flush from the first statement that did not commit, so a
finished job is not run again for want of its write. A statement the database refuses for one
row's value is written again in halves (:mod:`pgqueue._worker.culprits`): the other outcomes
land, and the job whose write was refused fails for good, saying what was refused and why.

A queue parked at its flow limit has its completions written together with its next claim (the
``refill`` seam: :meth:`pgqueue._worker.claimer.Claimer.complete_and_claim`). With ``overlap``,
a second thread (the *second rider*) writes the next such batch while the completer's own is on
the wire, on a connection of its own: the server completes its rows while the first claim holds
the queue's lock, and its claim follows once the first commits. Rides are then two at a time
instead of one after the other, so a limit that binds only through the worker's own prefetch
(``concurrency=100`` on four threads) stops halving the drain's use of the server's cores.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import timedelta
from functools import partial

from sqlalchemy import Connection, Engine

from pgqueue._base.urls import error_line
from pgqueue._worker import store
from pgqueue._worker.capture import pending_lines
from pgqueue._worker.culprits import Rows
from pgqueue._worker.faults import Fatal, Faults
from pgqueue._worker.outcomes import after_complete, after_fail, after_snooze, unmatched
from pgqueue._worker.pulse import Pulse
from pgqueue._worker.replay import Replay
from pgqueue._worker.transient import short_transaction
from pgqueue._worker.window import Held, keys
from pgqueue.jobs import Outcome, marks_of
from pgqueue.results import FailResult
from pgqueue.retry_policy import RetryPolicy

log = logging.getLogger("pgqueue.worker")

#: Most outcomes per flush: one statement of 500 ids costs little more than one of 10, and a
#: completer that keeps up keeps the worker's bookkeeping small. Also the claim window's backlog
#: bound: finished jobs waiting beyond the window before claims pause.
FLUSH_SIZE = 500

#: ``(held job, outcome, detail)`` as the completer reports them.
Report = Callable[[list[tuple[Held, Outcome, str]]], None]

#: ``refill(replay, queue, finished, beside)``: the plain completions among ``finished`` (jobs of
#: ``queue``: :func:`pgqueue._worker.window.completes_plainly`) written together with a claim for
#: the slots they free (a queue at its flow limit), in one transaction on ``replay``; returns the
#: ids written, or ``None`` when not done that way (then they are written as usual). ``beside``:
#: the second rider's ride, sent while another may hold the queue's lock.
#: :meth:`pgqueue._worker.claimer.Claimer.complete_and_claim`.
Refill = Callable[[Replay, str, list[Held], bool], set[int] | None]

#: Fewest finished jobs the second rider takes while the completer's own ride is on the wire: a
#: ride of a few jobs costs its transaction for little (a binding limit of a few slots, where
#: nothing else finishes meanwhile, never sends one).
SECOND_RIDE_MIN = 8

#: ``urgent(done)``: whether a job of ``done`` frees a slot a claim waits for (its queue is parked
#: at a flow limit): then the batch is written without the gathering wait, since the worker's
#: next jobs of that queue come with its write
#: (:meth:`pgqueue._worker.claimer.Claimer.waits_for_finish`).
Urgent = Callable[[list[Held]], bool]


@dataclass
class Failure:
    held: Held
    error: str
    retry: bool
    policy: RetryPolicy
    traceback: str | None = None


#: ``write(done, failed, snoozed, keep_trying)``: one batch written, its outcomes; ``None`` once
#: it gave up (a transient error while ``keep_trying()`` said stop).
Write = Callable[
    [list[Held], list[Failure], list[Held], Callable[[], bool]],
    list[tuple[Held, Outcome, str]] | None,
]


class Completer:
    """One thread that flushes finished jobs within ``flush_delay`` seconds, ``batch_size`` at most.

    ``report([(held, outcome, detail), ...])`` is called once per batch after its write committed
    (or once it is known that the write could not be made: those jobs are lost). ``write`` writes
    one batch; the default is a :class:`Flush` on ``engine`` (the unit tests pass their own, so
    the batching is tested without a database). A batch whose report raised is logged and the
    thread goes on; ``fatal`` is called when reports keep failing, or when the thread ends
    other than by :meth:`close` (:mod:`pgqueue._worker.faults`).
    """

    def __init__(
        self,
        engine: Engine,
        report: Report,
        *,
        lock_timeout_ms: int,
        batch_size: int = FLUSH_SIZE,
        flush_delay: float = 0.002,
        write: Write | None = None,
        fatal: Fatal | None = None,
        refill: Refill | None = None,
        urgent: Urgent | None = None,
        overlap: bool = False,
    ) -> None:
        self._engine = engine
        self._report = report
        self._fatal = fatal
        # A report that keeps failing (a bug) stops the worker: finished jobs whose outcomes are
        # never told leave it claiming nothing, or holding what it cannot account for.
        self._faults = Faults("completer", fatal=fatal, max_pause=5.0)
        self._write = write or self._flush
        self._refill = refill
        self._urgent = urgent
        # The refills' connection, held between flushes (one thread: this one); given back
        # before any other write, so the completer holds one connection at a time.
        self._replay = Replay(engine, defer_json=True)  # rides claim: payloads as the claimer's
        self._batch_size = batch_size
        self._lock_timeout_ms = lock_timeout_ms
        self._flush_delay = flush_delay
        self._hurried = False  # under _cond: skip the next gathering wait
        lock = threading.Lock()
        self._cond = threading.Condition(lock)
        #: Wakes the second rider (same lock as ``_cond``): jobs of a parked queue gathered while
        #: the completer's own ride is on the wire.
        self._second_cond = threading.Condition(lock)
        #: Under the lock: the jobs of the completer's own ride on the wire (0: none).
        self._riding = 0
        self._done: list[Held] = []
        self._failed: list[Failure] = []
        self._snoozed: list[Held] = []
        self._closing = False
        self._give_up_at: float | None = None
        self.pulse = Pulse("completer")
        self._thread = threading.Thread(target=self._run, name="pgqueue-completer", daemon=True)
        self._second: threading.Thread | None = None
        if overlap and refill is not None and urgent is not None:
            self._second = threading.Thread(
                target=self._run_second, name="pgqueue-completer-ride", daemon=True
            )
        self._second_replay = Replay(engine, defer_json=True)
        self._second_faults = Faults("completer", fatal=fatal, max_pause=5.0)
        #: The second rider's liveness (``/livez``), when there is one.
        self.ride_pulse = Pulse("completer-ride") if self._second is not None else None

    def start(self) -> None:
        self._thread.start()
        if self._second is not None:
            self._second.start()

    def complete(self, held: Held) -> None:
        with self._cond:
            self._done.append(held)
            self._wake()

    def fail(
        self,
        held: Held,
        error: str,
        *,
        retry: bool,
        policy: RetryPolicy,
        traceback: str | None = None,
    ) -> None:
        with self._cond:
            self._failed.append(Failure(held, error, retry, policy, traceback))
            self._wake()

    def snooze(self, held: Held) -> None:
        """``held.snooze`` says when the job is ready again."""
        with self._cond:
            self._snoozed.append(held)
            self._wake()

    def hurry(self) -> None:
        """The next outcome is the last for now (nothing else runs): write the batch it joins
        without the gathering wait."""
        with self._cond:
            self._hurried = True
            self._cond.notify()  # ends a gathering wait already under way

    def _wake(self) -> None:
        queued = len(self._done) + len(self._failed) + len(self._snoozed)
        if queued == 1 or queued >= self._batch_size:
            self._cond.notify()  # the first wakes the thread, a full batch ends its wait
        if self._riding and len(self._done) == self._second_at():
            self._second_cond.notify()

    def _second_at(self) -> int:
        """Finished jobs that make a second ride worth sending while the first is on the wire:
        half the first one's, at least :data:`SECOND_RIDE_MIN`. Lock held."""
        return max(SECOND_RIDE_MIN, self._riding // 2)

    def close(self, deadline: float) -> None:
        """Flush what is buffered, retrying until ``deadline`` (a ``time.monotonic()`` value)."""
        with self._cond:
            self._closing = True
            self._give_up_at = deadline
            self._cond.notify_all()
            self._second_cond.notify_all()
        self._thread.join(max(0.0, deadline - time.monotonic()) + 1.0)

    def _keep_trying(self) -> bool:
        self.pulse.step()  # a retry is progress: a database outage is /readyz's business
        return self._give_up_at is None or time.monotonic() < self._give_up_at

    def _run(self) -> None:
        self.pulse.attach()
        ended = False
        try:
            while True:
                batch = self._next_batch()
                if batch is None:
                    ended = True
                    if self._second is not None:
                        # Its ride reports before the completer ends, like the completer's own.
                        self._second.join()
                    self._replay.release()
                    self.pulse.finish()
                    return
                self._write_and_report(
                    partial(self._written, *batch), self._faults, self.pulse, self._cond
                )
        finally:
            if not ended and self._fatal is not None:  # what no step catches ended the thread
                self._fatal("completer", RuntimeError("the completer's thread ended"))

    def _run_second(self) -> None:
        """The second rider: while the completer's own ride is on the wire, the next batch of a
        parked queue's finished jobs rides on a connection of its own (see the module's text)."""
        pulse = self.ride_pulse
        assert pulse is not None
        pulse.attach()
        try:
            while True:
                pulse.waiting()
                done = self._second_batch()
                if done is None:
                    pulse.finish()
                    return
                pulse.step()
                self._write_and_report(
                    partial(self._written, done, [], [], self._second_replay),
                    self._second_faults,
                    pulse,
                    self._second_cond,
                )
        finally:
            self._second_replay.release()

    def _write_and_report(
        self,
        write: Callable[[], list[tuple[Held, Outcome, str]]],
        faults: Faults,
        pulse: Pulse,
        wake: threading.Condition,
    ) -> None:
        """One batch written and its outcomes reported (the completer's or the second rider's).
        A report that raised is counted by ``faults``, which stops the worker when reports keep
        failing, and the thread pauses as they say (on ``wake``, unless closing)."""
        try:
            self._report(write())
        except Exception as exc:
            pause = faults.failed(exc)
            with self._cond:
                pulse.waiting()
                if not self._closing:
                    wake.wait(pause)
        else:
            faults.succeeded()

    def _second_batch(self) -> list[Held] | None:
        """The finished jobs for a second ride, once the completer rides and enough gathered;
        ``None`` once closing (what is left is the completer's to write)."""
        urgent = self._urgent
        assert urgent is not None
        with self._cond:
            while not self._closing:
                if self._riding and len(self._done) >= self._second_at() and urgent(self._done):
                    return self._take_done()
                self._second_cond.wait()
            return None

    def _take_done(self) -> list[Held]:
        """The oldest finished jobs, up to a batch, out of the buffer. Lock held."""
        done, self._done = self._done[: self._batch_size], self._done[self._batch_size :]
        return done

    def _next_batch(self) -> tuple[list[Held], list[Failure], list[Held]] | None:
        """The next batch once one is buffered (after a short gathering wait), ``None`` once
        closed with nothing left."""
        with self._cond:
            self.pulse.waiting()
            while not (self._done or self._failed or self._snoozed or self._closing):
                self._cond.wait()
            if not (self._done or self._failed or self._snoozed):
                return None
            self.pulse.step()
            # Let a burst gather: one statement for many jobs.
            queued = len(self._done) + len(self._failed) + len(self._snoozed)
            if (
                queued < self._batch_size
                and not self._closing
                and not self._hurried
                and not (self._urgent is not None and self._urgent(self._done))
            ):
                self._cond.wait(self._flush_delay)
            self._hurried = False
            done = self._take_done()
            failed = self._failed[: self._batch_size]
            self._failed = self._failed[self._batch_size :]
            snoozed = self._snoozed[: self._batch_size]
            self._snoozed = self._snoozed[self._batch_size :]
        return done, failed, snoozed

    def _written(
        self,
        done: list[Held],
        failed: list[Failure],
        snoozed: list[Held],
        replay: Replay | None = None,
    ) -> list[tuple[Held, Outcome, str]]:
        """One batch written: its outcomes (lost when the write could not be made). ``replay``:
        the rides' connection (the completer's own unless the second rider's)."""
        replay = self._replay if replay is None else replay
        refilled: list[tuple[Held, Outcome, str]] = []
        if self._refill is not None and done:
            own = (
                replay is self._replay
                and self._second is not None
                and self._urgent is not None
                and self._urgent(done)
            )
            if own:
                with self._cond:
                    self._riding = len(done)
            try:
                done, refilled = self._refilled(self._refill, done, replay)
            finally:
                if own:
                    with self._cond:
                        self._riding = 0
            if not (done or failed or snoozed):
                return refilled
            replay.release()
        try:
            outcomes = self._write(done, failed, snoozed, self._keep_trying)
        except Exception:
            log.exception("flushing %d job outcomes failed", len(done) + len(failed) + len(snoozed))
            outcomes = None
        if outcomes is None:
            outcomes = [(h, Outcome.LOST, "completion not written") for h in done]
            outcomes += [(f.held, Outcome.LOST, "failure not written") for f in failed]
            outcomes += [(h, Outcome.LOST, "snooze not written") for h in snoozed]
        return refilled + outcomes

    def _refilled(
        self, refill: Refill, done: list[Held], replay: Replay
    ) -> tuple[list[Held], list[tuple[Held, Outcome, str]]]:
        """The plain completions of ``done`` written with a claim of their queue's freed slots
        where ``refill`` takes them (it looks at a queue's jobs only when the queue waits at its
        limit: most have none); returns the jobs left to write as usual, and the outcomes of
        those written."""
        by_queue: dict[str, list[Held]] = {}
        for held in done:
            by_queue.setdefault(held.job.queue, []).append(held)
        written: list[tuple[Held, Outcome, str]] = []
        taken: set[int] = set()
        for queue, jobs in by_queue.items():
            completed = refill(replay, queue, jobs, replay is not self._replay)
            if completed is None:
                continue
            for h in jobs:
                if h.job.id in completed:  # one whose guard matched nothing is written as usual
                    taken.add(id(h))
                    h.rode = True
                    written.append((h, *after_complete(True)))
        if not taken:
            return done, written
        return [h for h in done if id(h) not in taken], written

    def _flush(
        self,
        done: list[Held],
        failed: list[Failure],
        snoozed: list[Held],
        keep_trying: Callable[[], bool],
    ) -> list[tuple[Held, Outcome, str]]:
        flush = Flush(done, failed, snoozed, self._lock_timeout_ms)
        try:
            outcomes = short_transaction(
                self._engine, flush, what="flush", keep_trying=keep_trying, autocommit=True
            )
        except Exception:
            log.exception("flushing %d job outcomes failed", flush.size)
            outcomes = None
        # Given up (the shutdown's deadline) or broken: what committed is reported as such.
        return flush.so_far() if outcomes is None else outcomes


class Flush:
    """One batch's writes, one autocommit statement each, as a callable for ``short_transaction``.

    Called again after a transient error, it skips the statements that already returned (and so
    committed): a retried flush never reports a job it completed as completed by someone else.
    A statement the database refuses for one row's value is written again in halves
    (:class:`~pgqueue._worker.culprits.Rows`): the other jobs' outcomes land, and the job whose
    write was refused fails for good, its ``last_error`` saying what the database refused (its
    completion, failure or snooze, and why); only a job whose failure cannot be written either is
    lost (its row still says ``running``: it runs again after its lease).
    """

    def __init__(
        self,
        done: list[Held],
        failed: list[Failure],
        snoozed: list[Held],
        lock_timeout_ms: int,
    ) -> None:
        self._done: Rows[Held, set[int]] = Rows(done)
        self._groups: list[tuple[RetryPolicy, Rows[Failure, dict[int, FailResult]]]] = [
            (policy, Rows(group)) for policy, group in _by_policy(failed)
        ]
        self._snoozed: Rows[Held, set[int]] = Rows(snoozed)
        self._lock_timeout_ms = lock_timeout_ms
        #: The jobs whose write was refused, failed instead: made once every kind was written.
        self._refusals: Rows[Refusal, dict[int, FailResult]] | None = None

    @property
    def size(self) -> int:
        """How many jobs' outcomes the batch writes."""
        return (
            len(self._done.rows)
            + sum(len(g.rows) for _, g in self._groups)
            + len(self._snoozed.rows)
        )

    def __call__(self, conn: Connection) -> list[tuple[Held, Outcome, str]]:
        self._done.write(conn, self._complete)
        for policy, group in self._groups:
            group.write(conn, partial(self._fail, policy=policy))
        self._snoozed.write(conn, self._snooze)
        if self._refusals is None:
            self._refusals = Rows(self._refused())
        self._refusals.write(conn, self._fail_refused)
        decided = self._decided()
        # Every write went through: a job lost now is one whose guard matched no row (or whose
        # failure could not be written either, which stays lost).
        gave_up = {id(r.held) for r, _ in self._refusals.refused}
        missed = [
            held
            for held, outcome, _ in decided
            if outcome is Outcome.LOST and id(held) not in gave_up
        ]
        if not missed:
            return decided
        settled = store.settled_among(conn, keys(missed))
        return [
            (held, *unmatched(settled.get(held.job.id), detail))
            if outcome is Outcome.LOST and id(held) not in gave_up
            else (held, outcome, detail)
            for held, outcome, detail in decided
        ]

    def so_far(self) -> list[tuple[Held, Outcome, str]]:
        """Every job of the batch as far as the flush got, once it gave up or broke: what was
        written is reported as written (a guard that matched no row as lost), what was not as
        lost, "not written" (its row still says ``running``: it runs again after its lease)."""
        return self._decided()

    def _complete(self, conn: Connection, done: list[Held]) -> set[int]:
        """Completions in one statement: with results and progress when one of its jobs has
        either, else the plain one (handlers that return ``None``: nothing more sent)."""
        progress = [marks_of(h.job).pending_progress() for h in done]
        lines, _ = pending_lines(done)
        if all(h.result is None for h in done) and not any(progress):
            return store.complete_many(
                conn, keys(done), lock_timeout_ms=self._lock_timeout_ms, lines=lines
            )
        matched = store.complete_many_with_results(
            conn,
            [
                (h.job.id, h.job.attempts, h.result, None if p is None else p[1])
                for h, p in zip(done, progress, strict=True)
            ],
            lock_timeout_ms=self._lock_timeout_ms,
            lines=lines,
        )
        for h, p in zip(done, progress, strict=True):
            if p is not None and h.job.id in matched:
                marks_of(h.job).written(p[0])
        return matched

    def _fail(
        self, conn: Connection, failures: list[Failure], *, policy: RetryPolicy
    ) -> dict[int, FailResult]:
        return store.fail_many(
            conn,
            [(f.held.job.id, f.held.job.attempts, f.error, f.retry, f.traceback) for f in failures],
            base=policy.base,
            cap=policy.cap,
            lock_timeout_ms=self._lock_timeout_ms,
            lines=pending_lines(f.held for f in failures)[0],
        )

    def _snooze(self, conn: Connection, snoozed: list[Held]) -> set[int]:
        """Snoozes in one statement; durable sleeps and signal waits (``held.suspension``) in
        one of their own, sent only when the batch has one."""
        plain = [h for h in snoozed if h.suspension is None]
        matched: set[int] = set()
        if plain:
            matched = store.snooze_many(
                conn,
                [(h.job.id, h.job.attempts, h.snooze or timedelta(0)) for h in plain],
                lock_timeout_ms=self._lock_timeout_ms,
                lines=pending_lines(plain)[0],
            )
        if len(plain) < len(snoozed):
            matched |= store.suspend_many(
                conn,
                [
                    (h.job.id, h.job.attempts, h.suspension.until, h.suspension.signal)
                    for h in snoozed
                    if h.suspension is not None
                ],
                lock_timeout_ms=self._lock_timeout_ms,
                lines=pending_lines(h for h in snoozed if h.suspension is not None)[0],
            )
        return matched

    def _refused(self) -> list[Refusal]:
        """Each job whose write the database refused, with the failure that replaces it."""
        refused = [Refusal(held, "completion", exc) for held, exc in self._done.refused]
        for _, group in self._groups:
            refused += [Refusal(f.held, "failure", exc, f.error) for f, exc in group.refused]
        refused += [Refusal(held, "snooze", exc) for held, exc in self._snoozed.refused]
        for refusal in refused:
            log.error(
                "job %d queue=%s attempt=%d: the database refused its %s: %s; the job fails "
                "for good%s",
                refusal.held.job.id,
                refusal.held.job.queue,
                refusal.held.job.attempts,
                refusal.what,
                error_line(refusal.error),
                "" if refusal.handler_error is None else f" (its error: {refusal.handler_error})",
            )
        return refused

    def _fail_refused(self, conn: Connection, refused: list[Refusal]) -> dict[int, FailResult]:
        """A refused write's job fails for good (another try would write the same), saying why:
        a text of pgqueue's own, so the database that refused the job's values takes it."""
        return store.fail_many(
            conn,
            [(r.held.job.id, r.held.job.attempts, r.text, False, None) for r in refused],
            lock_timeout_ms=self._lock_timeout_ms,
        )

    def _decided(self) -> list[tuple[Held, Outcome, str]]:
        """Every job of the batch with what its write's answer means (``LOST``: its guard
        matched no row, or its write was not made)."""
        refusals = self._refusals
        failed_instead = _merged(refusals.answers) if refusals is not None else {}
        unwritten = {id(r.held) for r in refusals.pending()} if refusals is not None else set()
        instead = {id(r.held): r for r in refusals.rows} if refusals is not None else {}
        given_up = {id(r.held): e for r, e in refusals.refused} if refusals is not None else {}

        def refused(held: Held, what: str) -> tuple[Held, Outcome, str]:
            r = instead.get(id(held))
            if r is None or id(held) in unwritten:
                return held, Outcome.LOST, f"{what} not written"
            if id(held) in given_up:
                return (
                    held,
                    Outcome.LOST,
                    f"{what} refused, and its failure too: " + error_line(given_up[id(held)]),
                )
            return held, *after_fail(failed_instead.get(held.job.id), r.detail)

        decided: list[tuple[Held, Outcome, str]] = []
        matched: set[int] = set().union(*self._done.answers)
        written = {id(h) for h in self._done.landed()}
        for held in self._done.rows:
            if id(held) in written:
                decided.append((held, *after_complete(held.job.id in matched)))
            else:
                decided.append(refused(held, "completion"))
        for _, group in self._groups:
            rows = _merged(group.answers)
            written = {id(f) for f in group.landed()}
            for f in group.rows:
                if id(f) in written:
                    decided.append((f.held, *after_fail(rows.get(f.held.job.id), f.error)))
                else:
                    decided.append(refused(f.held, "failure"))
        requeued: set[int] = set().union(*self._snoozed.answers)
        written = {id(h) for h in self._snoozed.landed()}
        for held in self._snoozed.rows:
            if id(held) in written:
                decided.append(
                    (held, *after_snooze(held.job.id in requeued, held.snooze or timedelta(0)))
                )
            else:
                decided.append(refused(held, "snooze"))
        return decided


@dataclass(frozen=True)
class Refusal:
    """A job whose completion, failure or snooze the database refused, and why."""

    held: Held
    what: str
    error: BaseException
    #: A refused failure's own error text (from the handler).
    handler_error: str | None = None

    @property
    def text(self) -> str:
        """``last_error`` of the failure that replaces the refused write."""
        return f"the database refused this job's {self.what}: {error_line(self.error)}"

    @property
    def detail(self) -> str:
        """The log line's and the hooks' text: ``last_error``, and the handler's error if any."""
        if self.handler_error is None:
            return self.text
        return f"{self.text} (its error: {self.handler_error})"


def _merged(answers: Iterable[dict[int, FailResult]]) -> dict[int, FailResult]:
    merged: dict[int, FailResult] = {}
    for answer in answers:
        merged.update(answer)
    return merged


def _by_policy(failed: Iterable[Failure]) -> list[tuple[RetryPolicy, list[Failure]]]:
    groups: dict[RetryPolicy, list[Failure]] = {}
    for f in failed:
        groups.setdefault(f.policy, []).append(f)
    return list(groups.items())
