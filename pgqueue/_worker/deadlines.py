"""Handler timeouts as bookkeeping: which running job is due for what, and when.

Pure, no I/O and no lock of its own (the worker's one lock guards it, like the window): the
lanes add a job when its handler starts, the watchdog (:mod:`pgqueue._worker.watchdog`) takes
what is due. Each job with a timeout is due twice: at its timeout (ask the handler to stop) and
at timeout + grace (write the failure whether or not the handler returned). A job without one
costs a lookup and nothing more.
"""

from __future__ import annotations

import enum
import heapq
import itertools

from pgqueue._worker.window import Held


class Due(enum.IntEnum):
    #: The timeout passed: stop the handler (cancel its task, set ``job.stopping``).
    TIMEOUT = 0
    #: Timeout + grace passed: write the failure without waiting for the handler.
    GIVE_UP = 1


class Deadlines:
    """The timeouts of running jobs, soonest first.

    Args:
        default_timeout: Seconds for a job without a timeout of its own; ``None``: none.
        grace: Seconds between a timeout and the failure written without the handler.
    """

    def __init__(self, default_timeout: float | None, grace: float) -> None:
        self.default_timeout = default_timeout
        self.grace = grace
        self._heap: list[tuple[float, int, Due, Held]] = []
        self._order = itertools.count()

    def timeout_of(self, held: Held) -> float | None:
        """The job's own timeout, else the default."""
        own = held.job.timeout
        return self.default_timeout if own is None else own

    def started(self, held: Held, now: float) -> bool:
        """``held``'s handler starts at ``now``: bound it, if it has a timeout. True when the
        soonest deadline moved earlier (wake the watchdog)."""
        timeout = self.timeout_of(held)
        if timeout is None:
            return False
        held.timeout = timeout
        held.deadline = now + timeout + self.grace
        return self._push(now + timeout, Due.TIMEOUT, held)

    def timed_out(self, held: Held, now: float) -> None:
        """``held`` was asked to stop at ``now``: it is given up at ``now + grace``."""
        self._push(now + self.grace, Due.GIVE_UP, held)

    def _push(self, at: float, due: Due, held: Held) -> bool:
        soonest = self._heap[0][0] if self._heap else None
        heapq.heappush(self._heap, (at, next(self._order), due, held))
        return soonest is None or at < soonest

    def due(self, now: float) -> list[tuple[Due, Held]]:
        """What is due by ``now``, taken out, soonest first; ended jobs are skipped."""
        taken: list[tuple[Due, Held]] = []
        while self._heap and self._heap[0][0] <= now:
            _, _, due, held = heapq.heappop(self._heap)
            if not held.ended:
                taken.append((due, held))
        return taken

    def next_at(self) -> float | None:
        """When the soonest deadline is due; ``None`` when none is."""
        return self._heap[0][0] if self._heap else None

    def __len__(self) -> int:
        return len(self._heap)
