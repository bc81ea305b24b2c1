"""Flow control as the claimer follows it: its queues' settings, and the queues waiting on a limit.

Pure bookkeeping, no I/O and no lock of its own: the claimer calls it holding the worker's lock.

The settings (:class:`pgqueue.QueueSettings`, the type users read them into) are read at the start
of a run and refreshed about every :data:`REFRESH_INTERVAL` seconds, and at once on a notification:
a paused queue is not claimed from, an unlimited one takes the plain claim, a limited one the
limited claim. The limits themselves are enforced by that claim in the database, never here: what
this keeps is only when a claim is worth sending. A limited claim that came back short at a limit
(:class:`pgqueue._sql.limited_claim.ClaimState`) parks its queue until one of this worker's jobs
finishes (a slot may be free), or :data:`LIMIT_POLL` seconds pass (another worker's may have), or a
spent rate window ends: no claim is sent in a loop while a queue sits at its limit. A queue parked
at a ``concurrency`` or ``per_key`` limit, or at the prefetch bound of a ``concurrency`` limit
(:meth:`FlowGate.parked`), is claimed by the completer, with the completions of its finished jobs,
in one transaction (:meth:`pgqueue._worker.claimer.Claimer.complete_and_claim`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from pgqueue._sql.limited_claim import ClaimState
from pgqueue.flow import QueueSettings

#: Seconds between two reads of the settings (a notification reads them at once).
REFRESH_INTERVAL = 1.0
#: Seconds a queue at its concurrency or per-key limit waits before it is claimed again, when
#: none of this worker's own jobs finished meanwhile (another worker's may have).
LIMIT_POLL = 0.25


@dataclass
class _Parked:
    until: float
    finished: int  # the worker's finished-job count when it was parked
    #: A spent rate window: a finished job frees nothing, only the window's end does.
    by_rate: bool


class FlowGate:
    """Which of the worker's queues may be claimed now, and by which claim."""

    def __init__(self) -> None:
        self._settings: dict[str, QueueSettings] = {}
        self._parked: dict[str, _Parked] = {}
        self.known = False  # settings read at least once this run

    def settings(self, queue: str) -> QueueSettings:
        """The queue's settings; a queue without a row is unpaused and unlimited."""
        return self._settings.get(queue) or QueueSettings(queue)

    def update(self, settings: Mapping[str, QueueSettings]) -> list[str]:
        """New settings; returns the queues worth a claim because of the change (resumed,
        limits raised or removed)."""
        changed = [
            q
            for q in {*settings, *self._settings}
            if settings.get(q, QueueSettings(q)) != self._settings.get(q, QueueSettings(q))
        ]
        self._settings = dict(settings)
        self.known = True
        for queue in changed:
            self._parked.pop(queue, None)
        return [q for q in changed if not self.settings(q).paused]

    def claimable(self, queue: str) -> bool:
        # Asked of every queue in line: no QueueSettings made for a queue without a row.
        known = self._settings.get(queue)
        return (known is None or not known.paused) and queue not in self._parked

    def limited(self, queue: str) -> bool:
        known = self._settings.get(queue)
        return known is not None and known.limited

    def claimed(self, queue: str, state: ClaimState, now: float, finished: int) -> bool:
        """A limited claim of ``queue`` came back short with ``state``: park it when it is at a
        limit; returns whether it was parked."""
        self._settings[queue] = state.flow
        if not state.at_limit:
            return False
        if state.wait is not None:
            self._parked[queue] = _Parked(now + state.wait, finished, by_rate=True)
        else:
            self._parked[queue] = _Parked(now + LIMIT_POLL, finished, by_rate=False)
        return True

    def unpark(self, now: float, finished: int) -> Iterable[str]:
        """The parked queues worth a claim again (their wait ended, or a job finished here)."""
        free = [
            q
            for q, p in self._parked.items()
            if now >= p.until or (not p.by_rate and finished != p.finished)
        ]
        for queue in free:
            del self._parked[queue]
        return free

    def parked(self, queue: str) -> bool:
        """``queue`` waits for one of this worker's jobs to finish (at a ``concurrency`` or
        ``per_key`` limit, or at the prefetch bound; not for a rate window to end): a completion's
        flush claims for it. At the bound too: the room a claim finds there is what the worker's
        own unwritten completions hold (they count as ``running``), so a claim sent apart from
        them takes only what the last flush freed, one claim round trip per flush."""
        parked = self._parked.get(queue)
        return parked is not None and not parked.by_rate

    def any_parked(self) -> bool:
        return bool(self._parked)

    def next_unpark(self) -> float | None:
        """When the first parked queue's wait ends (``time.monotonic()``), if any is parked."""
        return min((p.until for p in self._parked.values()), default=None)
