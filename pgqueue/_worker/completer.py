"""The completer: batches the outcomes of finished jobs into one guarded statement each.

Handlers hand their outcome over and return at once; one thread turns everything that arrived
within a few milliseconds into one flush: ``complete_many``, ``fail_many`` per retry policy,
``snooze_many`` (only when a handler raised :class:`pgqueue.Snooze`), then one ``settled_among``
for any job whose guard matched nothing. Each is one statement in autocommit that sets its own
lock timeout, so a flush of completions is one round trip. A lost connection, a deadlock or a
lock timeout retries the flush from the first statement that did not commit, so a finished job is
not run again for want of its write.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import Connection, Engine

from pgqueue import repository
from pgqueue._worker.outcomes import after_complete, after_fail, after_snooze, unmatched
from pgqueue._worker.pulse import Pulse
from pgqueue._worker.transient import short_transaction
from pgqueue._worker.window import Held, keys
from pgqueue.jobs import Outcome
from pgqueue.results import FailResult
from pgqueue.retry_policy import RetryPolicy

log = logging.getLogger("pgqueue.worker")

#: Most outcomes per flush: one statement of 500 ids costs little more than one of 10, and a
#: completer that keeps up keeps the worker's bookkeeping small. Also the claim window's backlog
#: bound: finished jobs waiting beyond the window before claims pause.
FLUSH_SIZE = 500

#: ``(held job, outcome, detail)`` as the completer reports them.
Report = Callable[[list[tuple[Held, Outcome, str]]], None]


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
    the batching is tested without a database).
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
    ) -> None:
        self._engine = engine
        self._report = report
        self._write = write or self._flush
        self._batch_size = batch_size
        self._lock_timeout_ms = lock_timeout_ms
        self._flush_delay = flush_delay
        self._cond = threading.Condition()
        self._done: list[Held] = []
        self._failed: list[Failure] = []
        self._snoozed: list[Held] = []
        self._closing = False
        self._give_up_at: float | None = None
        self.pulse = Pulse("completer")
        self._thread = threading.Thread(target=self._run, name="pgqueue-completer", daemon=True)

    def start(self) -> None:
        self._thread.start()

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

    def _wake(self) -> None:
        queued = len(self._done) + len(self._failed) + len(self._snoozed)
        if queued == 1 or queued >= self._batch_size:
            self._cond.notify()  # the first wakes the thread, a full batch ends its wait

    def close(self, deadline: float) -> None:
        """Flush what is buffered, retrying until ``deadline`` (a ``time.monotonic()`` value)."""
        with self._cond:
            self._closing = True
            self._give_up_at = deadline
            self._cond.notify_all()
        self._thread.join(max(0.0, deadline - time.monotonic()) + 1.0)

    def _keep_trying(self) -> bool:
        self.pulse.step()  # a retry is progress: a database outage is /readyz's business
        return self._give_up_at is None or time.monotonic() < self._give_up_at

    def _run(self) -> None:
        self.pulse.attach()
        while True:
            with self._cond:
                self.pulse.waiting()
                while not (self._done or self._failed or self._snoozed or self._closing):
                    self._cond.wait()
                if not (self._done or self._failed or self._snoozed):
                    self.pulse.finish()
                    return
                self.pulse.step()
                # Let a burst gather: one statement for many jobs.
                queued = len(self._done) + len(self._failed) + len(self._snoozed)
                if queued < self._batch_size and not self._closing:
                    self._cond.wait(self._flush_delay)
                done, self._done = self._done[: self._batch_size], self._done[self._batch_size :]
                failed = self._failed[: self._batch_size]
                self._failed = self._failed[self._batch_size :]
                snoozed = self._snoozed[: self._batch_size]
                self._snoozed = self._snoozed[self._batch_size :]
            try:
                outcomes = self._write(done, failed, snoozed, self._keep_trying)
            except Exception:
                log.exception(
                    "flushing %d job outcomes failed", len(done) + len(failed) + len(snoozed)
                )
                outcomes = None
            if outcomes is None:
                outcomes = [(h, Outcome.LOST, "completion not written") for h in done]
                outcomes += [(f.held, Outcome.LOST, "failure not written") for f in failed]
                outcomes += [(h, Outcome.LOST, "snooze not written") for h in snoozed]
            self._report(outcomes)

    def _flush(
        self,
        done: list[Held],
        failed: list[Failure],
        snoozed: list[Held],
        keep_trying: Callable[[], bool],
    ) -> list[tuple[Held, Outcome, str]] | None:
        return short_transaction(
            self._engine,
            Flush(done, failed, snoozed, self._lock_timeout_ms),
            what="flush",
            keep_trying=keep_trying,
            autocommit=True,
        )


class Flush:
    """One batch's writes, one autocommit statement each, as a callable for ``short_transaction``.

    Called again after a transient error, it skips the statements that already returned (and so
    committed): a retried flush never reports a job it completed as completed by someone else.
    """

    def __init__(
        self,
        done: list[Held],
        failed: list[Failure],
        snoozed: list[Held],
        lock_timeout_ms: int,
    ) -> None:
        self._done = done
        self._groups = _by_policy(failed)
        self._snoozed = snoozed
        self._lock_timeout_ms = lock_timeout_ms
        self._matched: set[int] | None = None if done else set()
        self._failures: dict[int, dict[int, FailResult]] = {}
        self._requeued: set[int] | None = None if self._snoozed else set()

    def __call__(self, conn: Connection) -> list[tuple[Held, Outcome, str]]:
        if self._matched is None:
            self._matched = self._complete(conn)
        for index, (policy, group) in enumerate(self._groups):
            if index not in self._failures:
                self._failures[index] = repository.fail_many(
                    conn,
                    [
                        (f.held.job.id, f.held.job.attempts, f.error, f.retry, f.traceback)
                        for f in group
                    ],
                    base=policy.base,
                    cap=policy.cap,
                    lock_timeout_ms=self._lock_timeout_ms,
                )
        if self._requeued is None:
            self._requeued = repository.snooze_many(
                conn,
                [(h.job.id, h.job.attempts, h.snooze or timedelta(0)) for h in self._snoozed],
                lock_timeout_ms=self._lock_timeout_ms,
            )
        decided = self._decided()
        missed = [(held, detail) for held, outcome, detail in decided if outcome is Outcome.LOST]
        if not missed:
            return decided
        settled = repository.settled_among(conn, keys(held for held, _ in missed))
        return [
            (held, *unmatched(settled.get(held.job.id), detail))
            if outcome is Outcome.LOST
            else (held, outcome, detail)
            for held, outcome, detail in decided
        ]

    def _complete(self, conn: Connection) -> set[int]:
        """The batch's completions in one statement: with results and progress when one of its
        jobs has either, else the plain one (handlers that return ``None``: nothing more sent)."""
        done = self._done
        progress = [h.job.pending_progress() for h in done]
        if all(h.result is None for h in done) and not any(progress):
            return repository.complete_many(conn, keys(done), lock_timeout_ms=self._lock_timeout_ms)
        matched = repository.complete_many_with_results(
            conn,
            [
                (h.job.id, h.job.attempts, h.result, None if p is None else p[1])
                for h, p in zip(done, progress, strict=True)
            ],
            lock_timeout_ms=self._lock_timeout_ms,
        )
        for h, p in zip(done, progress, strict=True):
            if p is not None and h.job.id in matched:
                h.job.progress_written(p[0])
        return matched

    def _decided(self) -> list[tuple[Held, Outcome, str]]:
        """Every job of the batch with what its write's answer means (``LOST``: matched none)."""
        matched = self._matched or set()
        decided = [(held, *after_complete(held.job.id in matched)) for held in self._done]
        for index, (_, group) in enumerate(self._groups):
            rows = self._failures[index]
            decided += [(f.held, *after_fail(rows.get(f.held.job.id), f.error)) for f in group]
        requeued = self._requeued or set()
        decided += [
            (held, *after_snooze(held.job.id in requeued, held.snooze or timedelta(0)))
            for held in self._snoozed
        ]
        return decided


def _by_policy(failed: Iterable[Failure]) -> list[tuple[RetryPolicy, list[Failure]]]:
    groups: dict[RetryPolicy, list[Failure]] = {}
    for f in failed:
        groups.setdefault(f.policy, []).append(f)
    return list(groups.items())
