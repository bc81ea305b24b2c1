"""The heartbeat: keeps the leases of every job the worker holds, and learns which it lost.

Every ``lease / 3`` (or at once when :meth:`Heartbeat.poke` says a job was cancelled) it extends
all held leases in one statement, which also writes the progress the jobs set since the last beat
(:meth:`pgqueue.JobContext.set_progress`: coalesced, the last value of each job). A job the
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

import threading
import time
from datetime import timedelta

from sqlalchemy import Connection, Engine

from pgqueue import repository
from pgqueue._worker.pulse import Pulse
from pgqueue._worker.runtime import Runtime
from pgqueue._worker.transient import short_transaction
from pgqueue._worker.window import Held, keys
from pgqueue.results import Settled


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
        while True:
            self.pulse.waiting()
            if stop.is_set():
                break
            self._poked.wait(self._period)
            self._poked.clear()
            if stop.is_set():
                break
            self.pulse.step()
            with self._runtime.lock:
                held = self._runtime.window.leased()
            if held:
                self.beat(held, deadline=time.monotonic() + self._period)
        self.pulse.finish()  # not on an exception: a dead heartbeat is what /livez reports

    def _retry(self, deadline: float) -> bool:
        self.pulse.step()
        return not self._stop.is_set() and time.monotonic() < deadline

    def beat(self, held: list[Held], deadline: float) -> None:
        # The progress jobs set since the last beat rides on the lease extension: the same
        # rows, the same one statement, however many set_progress calls there were.
        progress = [h.job.pending_progress() for h in held]

        def work(conn: Connection) -> tuple[set[int], dict[int, Settled]]:
            if any(progress):
                kept = repository.extend_leases_with_progress(
                    conn,
                    [
                        (h.job.id, h.job.attempts, None if p is None else p[1])
                        for h, p in zip(held, progress, strict=True)
                    ],
                    self._lease,
                )
            else:
                kept = repository.extend_leases(conn, keys(held), self._lease)
            missed = [h for h in held if h.job.id not in kept]
            return kept, repository.settled_among(conn, keys(missed)) if missed else {}

        result = short_transaction(
            self._engine,
            work,
            what="heartbeat",
            keep_trying=lambda: self._retry(deadline),
            lock_timeout_ms=self._lock_timeout_ms,
        )
        if result is None:
            return
        kept, settled = result
        for h, p in zip(held, progress, strict=True):
            if p is not None and h.job.id in kept:
                h.job.progress_written(p[0])
        hooks = self._runtime.hooks
        if hooks is not None:
            hooks.lease_extended([h.job for h in held if h.job.id in kept])
        if len(kept) < len(held):
            self._runtime.leases_checked(held, kept, settled)
