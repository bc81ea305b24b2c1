"""The heartbeat: keeps the leases of every job the worker holds, and learns which it lost.

Every ``lease / 3`` (or at once when :meth:`Heartbeat.poke` says a job was cancelled) it extends
all held leases in one statement, which also writes the progress the jobs set since the last beat
(:meth:`pgqueue.JobContext.set_progress`: coalesced, the last value of each job) and the log
lines they recorded (:mod:`pgqueue._worker.capture`; a beat that isolates a refused progress
leaves them to the next beat or the outcome). A job the
extension misses was completed by its handler's own transaction, cancelled, or reaped and perhaps
claimed by another worker; one more statement tells which, and the runtime stops the handler of a
job that is no longer worth running. It is a thread
of its own, so it keeps beating while handlers block, run CPU-bound Python or await.

It has its own stop signal, not the worker's: after a stop the handlers still running get the
shutdown grace, and their leases must outlive it, or another worker's reaper requeues a job that is
still running here and runs it a second time at once. The worker calls :meth:`Heartbeat.stop`
once every handler has finished or been abandoned at the deadline (such a job is then left to its
lease).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import TypeAlias

from sqlalchemy import Connection, Engine

from pgqueue._base.urls import error_line
from pgqueue._sql.driver_errors import DriverError, classify
from pgqueue._worker import store
from pgqueue._worker.capture import pending_lines, written
from pgqueue._worker.culprits import Rows
from pgqueue._worker.faults import Faults
from pgqueue._worker.pulse import Pulse
from pgqueue._worker.runtime import Runtime
from pgqueue._worker.transient import short_transaction
from pgqueue._worker.window import Held, State, keys
from pgqueue.jobs import marks_of
from pgqueue.results import Settled

log = logging.getLogger("pgqueue.worker")


class Heartbeat:
    def __init__(
        self, runtime: Runtime, engine: Engine, lease: timedelta, *, lock_timeout_ms: int
    ) -> None:
        self._runtime = runtime
        self._engine = engine
        self._lease = lease
        self._period = lease.total_seconds() / 3
        self._lock_timeout_ms = lock_timeout_ms
        self._poked = threading.Event()
        self._stop = threading.Event()
        self.pulse = Pulse("heartbeat")
        # Failed beats are tried again within a period; failing for a whole period (a third of
        # the lease left at most), the worker stops rather than hold jobs it cannot keep.
        self._faults = Faults(
            "heartbeat", fatal=runtime.fail, max_pause=self._period, give_up_after=self._period
        )
        self._thread = threading.Thread(target=self._run, name="pgqueue-heartbeat", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def poke(self) -> None:
        """Beat now: a job may have been cancelled (the cancel NOTIFY)."""
        self._poked.set()

    def stop(self) -> None:
        """Stop extending leases (the handlers finished, or the shutdown deadline passed)."""
        self._stop.set()
        self._poked.set()

    def join(self, timeout: float) -> None:
        self.stop()
        self._thread.join(timeout)

    def _run(self) -> None:
        stop = self._stop
        self.pulse.attach()
        pause = self._period
        try:
            while True:
                self.pulse.waiting()
                if stop.is_set():
                    break
                self._poked.wait(pause)
                self._poked.clear()
                if stop.is_set():
                    break
                self.pulse.step()
                try:
                    with self._runtime.lock:
                        held = self._runtime.window.leased()
                    if held:
                        self.beat(held, deadline=time.monotonic() + self._period)
                except Exception as exc:
                    pause = self._faults.failed(exc)  # sooner than a period: the leases wait
                else:
                    self._faults.succeeded()
                    pause = self._period
        finally:
            if not stop.is_set():  # ended by what no step catches: the leases are not kept
                self._runtime.fail("heartbeat", RuntimeError("the heartbeat's thread ended"))
        self.pulse.finish()  # not on an exception: a dead heartbeat is what /livez reports

    def _retry(self, deadline: float) -> bool:
        self.pulse.step()
        return not self._stop.is_set() and time.monotonic() < deadline

    def beat(self, held: list[Held], deadline: float) -> None:
        # The progress jobs set since the last beat rides on the lease extension: the same
        # rows, the same one statement, however many set_progress calls there were.
        progress = [marks_of(h.job).pending_progress() for h in held]
        lines, versions = pending_lines(held)
        sent = [False]  # whether the statement that committed carried the lines
        bounded = self._bounded(held)

        def work(conn: Connection) -> Beat:
            if bounded is not None:
                kept = store.extend_leases_bounded(
                    conn,
                    [
                        (h.job.id, h.job.attempts, seconds, None if p is None else p[1])
                        for h, seconds, p in zip(held, bounded, progress, strict=True)
                    ],
                    lines,
                )
            elif any(progress):
                kept = store.extend_leases_with_progress(
                    conn,
                    [
                        (h.job.id, h.job.attempts, None if p is None else p[1])
                        for h, p in zip(held, progress, strict=True)
                    ],
                    self._lease,
                    lines,
                )
            else:
                kept = store.extend_leases(conn, keys(held), self._lease, lines)
            sent[0] = True
            return kept, self._settled(conn, held, kept), []

        def isolating(conn: Connection) -> Beat:
            sent[0] = False
            # The database refused one job's progress: every lease first, then the progress
            # in halves, each try in a savepoint, until the refused ones stand alone.
            if bounded is not None:
                kept = store.extend_leases_bounded(
                    conn,
                    [
                        (h.job.id, h.job.attempts, s, None)
                        for h, s in zip(held, bounded, strict=True)
                    ],
                )
            else:
                kept = store.extend_leases(conn, keys(held), self._lease)
            rows: Rows[tuple[Held, tuple[int, str]], set[int]] = Rows(
                [(h, p) for h, p in zip(held, progress, strict=True) if p and h.job.id in kept]
            )
            rows.write(conn, self._extend_with_progress, savepoint=True)
            refused = [(h, error) for (h, _), error in rows.refused]
            return kept, self._settled(conn, held, kept), refused

        def run(step: Callable[[Connection], Beat]) -> Beat | None:
            return short_transaction(
                self._engine,
                step,
                what="heartbeat",
                keep_trying=lambda: self._retry(deadline),
                lock_timeout_ms=self._lock_timeout_ms,
            )

        try:
            result = run(work)
        except Exception as exc:
            if not any(progress) or classify(exc) is not DriverError.DATA:
                raise
            result = run(isolating)
        if result is None:
            return
        kept, settled, refused = result
        if sent[0]:
            written(versions, kept)
        for h, error in refused:
            log.warning(
                "job %d queue=%s attempt=%d: the database refused its progress (%s); dropped",
                h.job.id,
                h.job.queue,
                h.job.attempts,
                error_line(error),
            )
        for h, p in zip(held, progress, strict=True):
            if p is not None and h.job.id in kept:
                marks_of(h.job).written(p[0])  # or refused: never sent again
        hooks = self._runtime.hooks
        if hooks is not None:
            hooks.lease_extended([h.job for h in held if h.job.id in kept])
        if len(kept) < len(held):
            self._runtime.leases_checked(held, kept, settled)

    def _bounded(self, held: list[Held]) -> list[float] | None:
        """Each job's lease in seconds when some running job has a timeout (its lease then ends
        by timeout + grace, never later; at least a millisecond, so the statement stays valid),
        else ``None``: every lease is the worker's, the statement the one without timeouts. A job
        whose handler returned (its outcome waits for the completer) keeps a whole lease."""
        deadlines = [h.deadline if h.state is State.RUNNING else None for h in held]
        if not any(d is not None for d in deadlines):
            return None
        lease = self._lease.total_seconds()
        now = time.monotonic()
        return [lease if d is None else max(0.001, min(lease, d - now)) for d in deadlines]

    def _settled(self, conn: Connection, held: list[Held], kept: set[int]) -> dict[int, Settled]:
        missed = [h for h in held if h.job.id not in kept]
        return store.settled_among(conn, keys(missed)) if missed else {}

    def _extend_with_progress(
        self, conn: Connection, rows: list[tuple[Held, tuple[int, str]]]
    ) -> set[int]:
        return store.extend_leases_with_progress(
            conn, [(h.job.id, h.job.attempts, p[1]) for h, p in rows], self._lease
        )


#: What one beat learnt: the ids still ours, how the others ended, and the jobs whose progress
#: the database refused (with why).
Beat: TypeAlias = tuple[set[int], dict[int, Settled], list[tuple[Held, BaseException]]]
