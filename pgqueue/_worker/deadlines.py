"""Handler timeouts as bookkeeping: which running job is due for what, and when.

Pure, no I/O and no lock of its own (the worker's one lock guards it, like the window): the
lanes add a job when its handler starts and drop it when the handler returns, the watchdog
(:mod:`pgqueue._worker.watchdog`) takes what is due. Each job with a timeout is due twice: at
its timeout (ask the handler to stop) and at timeout + grace (write the failure whether or not
the handler returned).

What it holds is the running jobs that have a timeout, no more (a set: a job's start and end
cost one insertion and one removal), and the soonest deadline among them. The watchdog wakes at
that deadline and walks the set once to find what is due and the next soonest: with jobs much
shorter than their timeouts, as most are, it wakes about once per timeout, never once per job.
A job without a timeout costs a lookup and nothing more.
"""

from __future__ import annotations

import enum
import math

from pgqueue._worker.window import Held


class Due(enum.IntEnum):
    #: The timeout passed: stop the handler (cancel its task, set ``job.stopping``).
    TIMEOUT = 0
    #: Timeout + grace passed: write the failure without waiting for the handler.
    GIVE_UP = 1


class Deadlines:
    """The timeouts of running jobs.

    Args:
        default_timeout: Seconds for a job without a timeout of its own; ``None``: none.
        grace: Seconds between a timeout and the failure written without the handler.
    """

    def __init__(self, default_timeout: float | None, grace: float) -> None:
        self.default_timeout = default_timeout
        self.grace = grace
        self._timed: set[Held] = set()
        self._soonest = math.inf

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
        self._timed.add(held)
        at = now + timeout
        if at < self._soonest:
            self._soonest = at
            return True
        return False

    def ended(self, held: Held) -> None:
        """``held``'s handler returned, or it was given up: nothing more is due for it."""
        self._timed.discard(held)

    def due(self, now: float) -> list[tuple[Due, Held]]:
        """What is due by ``now`` (each job's timeout once, then its give-up once); ended jobs
        are dropped. Recomputes the soonest deadline; cheap when nothing is due yet."""
        if now < self._soonest:
            return []
        taken: list[tuple[Due, Held]] = []
        soonest = math.inf
        for held in list(self._timed):
            assert held.deadline is not None  # set with the timeout
            if held.ended:
                self._timed.discard(held)
                continue
            at = held.deadline if held.timed_out else held.deadline - self.grace
            if at <= now:
                if held.timed_out:
                    taken.append((Due.GIVE_UP, held))
                    self._timed.discard(held)
                    continue
                taken.append((Due.TIMEOUT, held))
                at = held.deadline  # its give-up is next (the runtime marks it timed out)
            soonest = min(soonest, at)
        self._soonest = soonest
        return taken

    def next_at(self) -> float | None:
        """When the soonest deadline is due; ``None`` when none is."""
        return None if self._soonest == math.inf else self._soonest

    def __len__(self) -> int:
        return len(self._timed)
