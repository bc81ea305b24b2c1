"""What a worker's loop does with an error it did not expect: log it, go on, give up only when it
cannot go on.

The claimer, the completer, the heartbeat and the scheduler each run one loop (the claimer on
``run()``'s thread, the others on threads of their own). A transient database error is retried
where it happens (:mod:`pgqueue._worker.transient`); anything else a step raises reaches the
loop, whose :class:`Faults` logs it with its traceback and says how long to pause before the next
step (doubling from :data:`FIRST_PAUSE` while the steps keep failing, up to the loop's own
bound), and the loop goes on. One step that goes through ends the series.

A loop that keeps the worker's jobs true (the claimer, the completer, the heartbeat) cannot go on
once :data:`MAX_FAULTS` steps in a row failed, or its steps kept failing for ``give_up_after``
seconds (the heartbeat's: one beat period, so the worker stops before the leases it could not
extend expire): without its heartbeat a worker would claim jobs it
cannot keep (each runs again on another worker when its lease expires, while still running here),
without its completer it would run jobs whose outcomes are never written. Its ``fatal`` callback
then stops the worker as a stop would (no more claims, unstarted jobs given back, running ones
given the shutdown grace), and :meth:`pgqueue.Worker.run` raises
:class:`pgqueue.WorkerFailedError` (``pgqueue worker`` exits 1). The scheduler has no ``fatal``:
a tick that cannot be fired costs no job its truth, so it goes on trying.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

log = logging.getLogger("pgqueue.worker")

#: Steps in a row that fail before a loop with a ``fatal`` callback gives up.
MAX_FAULTS = 5
#: Seconds of the first pause after a failed step; each further failure in a row doubles it.
FIRST_PAUSE = 0.5
#: The longest pause between two failed steps, unless the loop bounds it lower.
MAX_PAUSE = 60.0

#: ``fatal(loop, error)``: the loop named ``loop`` cannot go on; ``error`` is its last.
Fatal = Callable[[str, BaseException], None]


class Faults:
    """The unexpected failures of one loop's steps, in a row; used by that loop's thread only.

    Args:
        loop: The loop's name in log lines and in :class:`pgqueue.WorkerFailedError`.
        fatal: Called once, at the :data:`MAX_FAULTS`-th failure in a row; ``None``: the loop
            goes on trying, however long.
        max_pause: The longest pause between two steps, in seconds.
        give_up_after: With ``fatal``: seconds after the first failure of a series at which a
            failure is fatal, however few came before. Default: none (only their number).
    """

    def __init__(
        self,
        loop: str,
        *,
        fatal: Fatal | None = None,
        max_pause: float = MAX_PAUSE,
        give_up_after: float | None = None,
    ) -> None:
        self.loop = loop
        self._fatal = fatal
        self._max_pause = max_pause
        self._give_up_after = give_up_after
        self._in_a_row = 0
        self._since = 0.0
        self.gave_up = False

    def failed(self, exc: BaseException) -> float:
        """A step raised ``exc``: log it with its traceback; the seconds to pause before the next
        step."""
        now = time.monotonic()
        if not self._in_a_row:
            self._since = now
        self._in_a_row += 1
        pause = min(self._max_pause, FIRST_PAUSE * 2.0 ** min(self._in_a_row - 1, 16))
        too_long = self._give_up_after is not None and now - self._since >= self._give_up_after
        if (
            self._fatal is not None
            and (self._in_a_row >= MAX_FAULTS or too_long)
            and not self.gave_up
        ):
            self.gave_up = True
            log.critical(
                "%s: %d steps in a row failed over %.1fs; the worker stops (no more claims, "
                "unstarted jobs given back)",
                self.loop,
                self._in_a_row,
                now - self._since,
                exc_info=exc,
            )
            self._fatal(self.loop, exc)
            return pause
        log.error(
            "%s: a step failed (%d in a row); going on in %.1fs",
            self.loop,
            self._in_a_row,
            pause,
            exc_info=exc,
        )
        return pause

    def succeeded(self) -> None:
        """A step went through: the failures in a row are over."""
        self._in_a_row = 0
