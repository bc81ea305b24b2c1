"""The watchdog: enforces handler timeouts, and stops a worker whose every thread is stuck.

A thread of its own that sleeps until the soonest deadline of :class:`~pgqueue._worker.deadlines.
Deadlines` (the runtime's), then, under the worker's lock, asks the runtime to stop a handler at
its timeout and to give it up at timeout + grace (its failure is then written by the completer,
whether or not the handler returned). Transaction mode's handlers are interrupted here too
(``pg_cancel_backend`` of their connection), outside the lock.

A Python thread cannot be killed: one stuck in a handler keeps its slot. When every handler
thread has been stuck for longer than the lease, no job can run here any more, so the worker
stops (:class:`pgqueue.WorkerStuckError`: no more claims, what it holds given back) and its
supervisor or orchestrator replaces the process. While any thread is stuck, the watchdog looks
again every second, and tells ``on_stuck`` (the ``jobs_workers`` row) each change of the count.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from pgqueue._worker.deadlines import Due
from pgqueue._worker.runtime import Runtime
from pgqueue._worker.window import Held
from pgqueue.errors import WorkerStuckError

log = logging.getLogger("pgqueue.worker")

#: How often the watchdog looks at stuck threads while there are some (seconds).
_STUCK_CHECK = 1.0


class Watchdog:
    """Runs until :meth:`close`; every step under the runtime's lock but the I/O.

    Args:
        runtime: The run's shared state (its deadlines, window, stuck threads).
        threads: Handler threads of the worker (0 without sync handlers in lease mode).
        lease: A thread stuck this long counts towards stopping the worker.
        on_stuck: Told the number of stuck threads whenever it changes (I/O, unlocked).
    """

    def __init__(
        self,
        runtime: Runtime,
        *,
        threads: int,
        lease: float,
        on_stuck: Callable[[int], None] = lambda n: None,
    ) -> None:
        self._rt = runtime
        self._threads = threads
        self._lease = lease
        self._on_stuck = on_stuck
        self._closed = False
        self._told = 0
        self._thread = threading.Thread(target=self._run, name="pgqueue-watchdog", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self, timeout: float = 5.0) -> None:
        """Stop watching (the run ended) and wait for the thread."""
        with self._rt.lock:
            self._closed = True
            self._rt.deadline_moved.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            try:
                if self._step():
                    return
            except Exception:  # timeouts must go on being enforced: log, pause, go on
                log.exception("the worker's watchdog failed a step; going on in a second")
                with self._rt.lock:
                    if not self._closed:
                        self._rt.deadline_moved.wait(1.0)

    def _step(self) -> bool:
        """One wait-or-act round; True once closed."""
        rt = self._rt
        while True:
            interrupts: list[Held] = []
            given_up: list[Held] = []
            with rt.lock:
                if self._closed:
                    return True
                now = time.monotonic()
                for due, held in rt.deadlines.due(now):
                    if due is Due.TIMEOUT:
                        if rt.time_out(held) and held.interrupt is not None:
                            interrupts.append(held)
                    elif rt.give_up(held):
                        given_up.append(held)
                stuck = len(rt.stuck)
                if stuck and self._all_stuck(now):
                    ids = sorted(h.job.id for h in rt.stuck.values())
                    rt.wake_claimer()
                else:
                    ids = []
                if not (interrupts or given_up or ids or stuck != self._told):
                    soonest = rt.deadlines.next_at()
                    wait = None if soonest is None else max(0.0, soonest - now)
                    if stuck:
                        wait = _STUCK_CHECK if wait is None else min(wait, _STUCK_CHECK)
                    rt.deadline_moved.wait(wait)
                    continue
            for held in interrupts:
                self._interrupt(held)
            for held in given_up:
                rt.fail_timed_out(held)
            if stuck != self._told:
                self._told = stuck
                self._on_stuck(stuck)
            if ids:
                log.error(
                    "every handler thread (%d) has been stuck for longer than the lease (%gs): "
                    "stopping the worker so that it is replaced",
                    self._threads,
                    self._lease,
                )
                rt.fail("handler threads", WorkerStuckError(ids))
                with rt.lock:  # once: the run stops now
                    self._threads = 0
            return False

    def _all_stuck(self, now: float) -> bool:
        """Every handler thread stuck for longer than the lease. Lock held."""
        threads = self._threads
        if threads == 0 or len(self._rt.stuck) < threads:
            return False
        return all(
            h.stuck_since is not None and now - h.stuck_since > self._lease
            for h in self._rt.stuck.values()
        )

    def _interrupt(self, held: Held) -> None:
        interrupt = held.interrupt
        if interrupt is None:
            return
        try:
            interrupt()
        except Exception as exc:  # the timeout still fails the attempt when it returns
            log.warning(
                "job %d: could not interrupt its handler's statement at the timeout (%s)",
                held.job.id,
                exc,
            )
