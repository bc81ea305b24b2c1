"""Pulses: how a worker's loops tell ``/livez`` they are alive, waiting, or stuck in one step.

Each loop (claimer, completer, heartbeat) marks :meth:`Pulse.step` when it starts a step (and at
each retry of one) and :meth:`Pulse.waiting` before it sleeps until its next wake-up. A loop that
waits is healthy however long it waits (an idle worker sends nothing); a loop is stuck once it
has been in one step longer than the worker's ``stuck_after``, and dead once its thread ended
while the worker still runs.
"""

from __future__ import annotations

import threading
import time


class Pulse:
    """The liveness of one loop; written by the loop's thread, read by the health probe."""

    def __init__(self, name: str) -> None:
        self.name = name
        # One tuple, replaced whole: the probe's thread never sees half an update.
        self._state: tuple[float, bool] = (time.monotonic(), True)
        self._thread: threading.Thread | None = None
        self._finished = False

    def attach(self) -> None:
        """Called on the loop's own thread once it starts: a dead thread is reported."""
        self._thread = threading.current_thread()
        self.step()

    def step(self) -> None:
        """A step (or a retry of one) begins now."""
        self._state = (time.monotonic(), False)

    def waiting(self) -> None:
        """The loop sleeps until its next wake-up: not stuck, however long that takes."""
        self._state = (time.monotonic(), True)

    def finish(self) -> None:
        """The loop returned on purpose (the worker stops)."""
        self._finished = True
        self.waiting()

    def problem(self, stuck_after: float, now: float | None = None) -> str | None:
        """``None`` when healthy, else a few words saying what is wrong."""
        if self._finished:
            return None
        since, waiting = self._state
        if self._thread is not None and not self._thread.is_alive():
            return "its thread ended"
        busy = (time.monotonic() if now is None else now) - since
        if not waiting and busy > stuck_after:
            return f"stuck in one step for {busy:.0f}s"
        return None
