"""Each queue's low-water mark: where the worker's claim starts reading the ready range.

Why: a claim reads ``jobs_ready_idx`` (``WHERE status = 'queued'``) from the front of each
priority level, oldest ``run_at`` first. A job it claims leaves the index only when vacuum
removes the row version that was ``queued``, and while a snapshot older than the claim is open
(a transaction left idle, a long report: the xmin horizon pinned) vacuum can remove none of
them, and no index scan can mark them dead either. So the entries of every job claimed since the
snapshot was taken stay at the front of the range, and every claim walked all of them and read
each one's heap row to learn it was gone: at 2,000 jobs/s the claim read thousands of buffers
more each minute (``tests/integration/test_pinned_horizon_plan.py``; docs/benchmarks.md, "A
pinned horizon").

The mark: :data:`MARGIN` before the oldest ``run_at`` of the queue's last claim. A claim
given a mark reads each level's range from it on (``run_at >= mark``, the start of an index
range), past the dead entries behind it: its cost follows the jobs claimed in the last
:data:`MARGIN`, not since the snapshot.

The mark is a hint, never a promise. A job can become ready behind it: a producer's transaction
open longer than :data:`MARGIN` (``run_at`` defaults to its ``now()``), an explicit ``run_at``
in the past, a job the reaper gave back. So every claim of a queue is a full one (no mark) when

- the queue has no mark yet, or its last full claim was :data:`FULL_EVERY` seconds ago or more;
- the fallback poll visits it, or the reaper gave jobs back (:meth:`LowWater.forget`).

and a queue that had a claim with a mark since its last full claim is owed one within
:data:`FULL_EVERY` seconds of that full claim, even with nothing notified (:meth:`due`): a job
behind the mark waits at most that long, never for the poll. Exactly-once claiming does not
depend on the mark (the claim's row locks decide it); priority order holds among the jobs the
mark lets a claim see, and a job behind it is claimed by the next full claim.

One owner: the claimer's thread, the only one to read or change it (no lock).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

#: How far the mark stays behind the oldest ``run_at`` of a queue's last claim: room for the
#: producers' transactions (a job committed after a later one was claimed, with an earlier
#: ``run_at``). Under a pinned horizon a claim walks the dead entries of this much of the flow.
MARGIN = timedelta(seconds=0.5)

#: Seconds between a queue's full claims while it has a mark: the longest a job behind the mark
#: waits. Under a pinned horizon the full claim still walks every dead entry, once per this.
FULL_EVERY = 1.0


@dataclass
class _Queue:
    mark: datetime | None = None
    last_full: float = float("-inf")  # time.monotonic() of the last full claim
    owed: bool = False  # a claim with a mark since the last full claim
    called: bool = False  # :meth:`LowWater.due` named it since (its full claim is in line)


class LowWater:
    """The marks of one worker's queues (``time.monotonic()`` clock for the full claims)."""

    def __init__(self, *, margin: timedelta = MARGIN, full_every: float = FULL_EVERY) -> None:
        self._margin = margin
        self._full_every = full_every
        self._queues: dict[str, _Queue] = {}

    def since(self, queue: str, now: float) -> datetime | None:
        """The mark the next claim of ``queue`` starts from, or ``None`` for a full claim."""
        state = self._queues.get(queue)
        if state is None or state.mark is None or now - state.last_full >= self._full_every:
            return None
        return state.mark

    def claimed(
        self, queue: str, since: datetime | None, oldest_run_at: datetime | None, now: float
    ) -> None:
        """A claim of ``queue`` from ``since`` (``None``: a full one) took rows, the oldest
        ``run_at`` among them ``oldest_run_at`` (``None``: it took none)."""
        state = self._queues.setdefault(queue, _Queue())
        if since is None:
            state.last_full, state.owed, state.called = now, False, False
        else:
            state.owed = True
        if oldest_run_at is None:
            return
        mark = oldest_run_at - self._margin
        # A full claim may set it back (it saw everything); a claim from a mark only advances it.
        if since is None or state.mark is None or mark > state.mark:
            state.mark = mark

    def forget(self) -> None:
        """Every queue's next claim is a full one (the fallback poll, the reaper's jobs)."""
        for state in self._queues.values():
            state.mark, state.owed, state.called = None, False, False

    def due(self, now: float) -> list[str]:
        """The queues owed a full claim whose time has come, each named once: the caller puts
        them in line, and their next claim is a full one (:meth:`since`)."""
        found = [
            queue
            for queue, state in self._queues.items()
            if state.owed and not state.called and now - state.last_full >= self._full_every
        ]
        for queue in found:
            self._queues[queue].called = True
        return found

    def next_due(self) -> float | None:
        """When the first owed full claim not yet named falls due (``time.monotonic()``),
        ``None``: none."""
        owed = [
            s.last_full + self._full_every for s in self._queues.values() if s.owed and not s.called
        ]
        return min(owed, default=None)
