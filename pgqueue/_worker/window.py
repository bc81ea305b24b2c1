"""The claim window: the claimed jobs a worker holds, their states, and how much more it may claim.

Pure bookkeeping, no I/O and no lock of its own: the worker's components call it while holding
the worker's one lock, and the unit tests call it directly.

Each job runs in a lane: ``THREADS`` (sync handlers on the worker's threads) or ``ASYNC``
(coroutine handlers on its event loop). A lane holds at most ``slots + prefetch`` jobs that are
pending or running; jobs whose outcome waits for the completer count against a further backlog
bound, so claims wait for a lagging completer instead of piling up rows and memory. Transaction
mode holds nothing here: its jobs are locked by their handlers' transactions, and its lane
(:class:`pgqueue._worker.threads.TransactionLane`) keeps its own tickets.

A lane's prefetch may be adaptive: from its base (one waiting job per slot) up to a limit, as far
as the lane's recent handler runs say a claimed job would still start within
:data:`TARGET_WAIT`. Short jobs are then claimed by the batch, long ones one per free slot.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta

from pgqueue.durable import Suspension
from pgqueue.flow import QueueSettings
from pgqueue.jobs import JobContext, marks_of
from pgqueue.retry_policy import RetryPolicy

#: An adaptive prefetch keeps the jobs claimed ahead to about this many seconds of work.
TARGET_WAIT = 0.05
#: Weight of the newest handler run in a lane's average run time.
_SMOOTHING = 0.2

# IntEnums: they key dicts and compare on the hot path, where int's own hash and comparison cost
# a fraction of a plain Enum's (whose __hash__ is Python code).


class Lane(enum.IntEnum):
    THREADS = 0
    ASYNC = 1


class State(enum.IntEnum):
    PENDING = 0  # claimed, waiting for a thread or a task
    RUNNING = 1  # its handler is running
    FINISHING = 2  # its outcome waits for the completer
    SELF_DONE = 3  # its handler completed it in its own transaction


def busy(state: State) -> bool:
    """Takes a slot of its lane: pending or running."""
    return state <= State.RUNNING


@dataclass(eq=False)
class Held:
    """One job the worker holds, with the timings the hooks report (``time.monotonic()``)."""

    job: JobContext
    lane: Lane
    claimed_at: float
    state: State = State.PENDING
    started_at: float = 0.0
    handler_seconds: float | None = None
    #: The delay of the :class:`pgqueue.Snooze` its handler raised, if it raised one.
    snooze: timedelta | None = None
    #: Its handler's durable sleep or signal wait: until when, for which signal (``snooze`` is
    #: set too, so it is written and counted as a snooze).
    suspension: Suspension | None = None
    #: Cancels an async handler's task (thread-safe); ``None`` for threads and unstarted jobs.
    cancel_task: Callable[[], None] | None = field(default=None, repr=False)
    #: The traceback of the handler's exception (formatted, trimmed), for the outcome's log line.
    traceback: str | None = field(default=None, repr=False)
    #: What its handler or task returned, as the JSON text its completion stores (``None``: it
    #: returned ``None``, or a handler's value that is not JSON).
    result: str | None = field(default=None, repr=False)
    #: The retry policy of the task it ran, when the task has one (else its queue's).
    retry: RetryPolicy | None = field(default=None, repr=False)
    #: Seconds its handler may run (the job's ``timeout``, else the worker's default); ``None``
    #: for no bound. Set when it starts.
    timeout: float | None = field(default=None, repr=False)
    #: ``time.monotonic()`` by which its failure is written if its handler has not returned
    #: (start + timeout + grace): the heartbeat extends its lease no further. ``None``: no bound.
    deadline: float | None = field(default=None, repr=False)
    #: Its timeout passed while the handler ran: the attempt fails with ``HandlerTimeoutError``
    #: whatever the handler does next.
    timed_out: bool = field(default=False, repr=False)
    #: Its completion was written with its queue's next claim, which saw its slot free
    #: (:meth:`pgqueue._worker.claimer.Claimer.complete_and_claim`): its end frees nothing a
    #: parked queue waits for.
    rode: bool = field(default=False, repr=False)
    #: Its failure was written without waiting for its handler (timeout + grace): the handler
    #: still holds its slot, and whatever it returns is dropped.
    abandoned: bool = field(default=False, repr=False)
    #: Its handler returned (lease and transaction mode alike): nothing is timed out after.
    ended: bool = field(default=False, repr=False)
    #: The thread running its sync handler (``threading.get_ident()``), for a stuck one's stack.
    thread_id: int | None = field(default=None, repr=False)
    #: ``time.monotonic()`` when its thread was found stuck (timeout + grace passed).
    stuck_since: float | None = field(default=None, repr=False)
    #: Transaction mode: stops the statement its handler runs (``pg_cancel_backend``), so the
    #: handler's transaction rolls back to its savepoint at the timeout. I/O: called unlocked.
    interrupt: Callable[[], None] | None = field(default=None, repr=False)
    #: Transaction mode: at timeout + grace, ends the session of a handler that still runs (its
    #: transaction rolled back) and writes the attempt's failure. I/O: called unlocked.
    abandon_transaction: Callable[[], None] | None = field(default=None, repr=False)

    @property
    def key(self) -> tuple[int, int]:
        """``(job id, claimed attempts)``: what every guarded batch statement takes."""
        return self.job.id, self.job.attempts


def keys(held: Iterable[Held]) -> list[tuple[int, int]]:
    return [h.key for h in held]


def completes_plainly(held: Held) -> bool:
    """Its completion has nothing to write but itself: no result, no progress, no log lines."""
    if held.result is not None:
        return False
    marks = marks_of(held.job)
    return marks.pending_progress() is None and (marks.logs is None or marks.logs.pending() is None)


class ClaimWindow:
    """Capacity and job states of one worker.

    Args:
        slots: Handlers that may run at once, per lane.
        prefetch: Jobs claimed beyond the free slots, per lane.
        batch_size: Most jobs per claim.
        backlog: Finished jobs that may wait for the completer beyond the window.
        adaptive: Per lane, the most it may prefetch when its handlers are short: its prefetch
            then grows from ``prefetch`` towards this while ``prefetch`` jobs take less than
            :data:`TARGET_WAIT` per slot (see :meth:`ran`).
    """

    def __init__(
        self,
        slots: Mapping[Lane, int],
        prefetch: Mapping[Lane, int],
        *,
        batch_size: int,
        backlog: int,
        adaptive: Mapping[Lane, int] | None = None,
    ) -> None:
        self._lanes = tuple(slots)
        self._slots = dict(slots)
        self._backlog = backlog
        self._batch_size = batch_size
        self._base = {lane: prefetch[lane] for lane in slots}
        self._limit = {lane: max(self._base[lane], (adaptive or {}).get(lane, 0)) for lane in slots}
        self._average_run: dict[Lane, float | None] = dict.fromkeys(slots)
        self._window: dict[Lane, int] = {}
        self._claim_at: dict[Lane, int] = {}
        for lane in slots:
            self._resize(lane, self._base[lane])
        self._held: dict[int, Held] = {}
        self._pending: dict[Lane, deque[Held]] = {lane: deque() for lane in slots}
        self._busy = dict.fromkeys(slots, 0)
        self._count = dict.fromkeys(slots, 0)
        #: Room taken by claims on the wire (:meth:`reserve`): two claimers, the claiming loop
        #: and a claim riding on the completer's flush, never both claim the same room.
        self._reserved = dict.fromkeys(slots, 0)

    # -- capacity ---------------------------------------------------------------------------------

    def lanes(self) -> tuple[Lane, ...]:
        """The lanes this window has slots for, in the order given."""
        return self._lanes

    def _resize(self, lane: Lane, prefetch: int) -> None:
        self._window[lane] = window = self._slots[lane] + prefetch
        # Claim when this many slots are free (or the lane runs dry): half the window, so one
        # round trip serves many jobs while the other half keeps the handlers busy.
        self._claim_at[lane] = max(1, min(self._batch_size, window // 2))

    def prefetch(self, lane: Lane) -> int:
        """The lane's prefetch now (adaptive lanes move between their base and limit)."""
        return self._window[lane] - self._slots[lane]

    def ran(self, lane: Lane, seconds: float) -> None:
        """A handler of ``lane`` ran for ``seconds``: an adaptive lane resizes its prefetch."""
        if self._limit[lane] == self._base[lane]:
            return
        average = self._average_run[lane]
        average = seconds if average is None else average + _SMOOTHING * (seconds - average)
        self._average_run[lane] = average
        fits = self._slots[lane] * TARGET_WAIT / max(average, 1e-6)
        prefetch = max(self._base[lane], min(self._limit[lane], int(fits)))
        if prefetch != self.prefetch(lane):
            self._resize(lane, prefetch)

    def capacity(self, lane: Lane) -> int:
        """How many more jobs this lane may claim now."""
        window = self._window[lane] - self._reserved[lane]
        return min(window - self._busy[lane], window + self._backlog - self._count[lane])

    def slots(self, lane: Lane) -> int:
        """Handler slots of ``lane``, busy or not."""
        return self._slots[lane]

    def idle_slots(self, lane: Lane) -> int:
        """Handler slots of ``lane`` with nothing to run, nor a claim on the wire for them: what
        a claim may take of a limited queue beyond any prefetch."""
        return max(0, self._slots[lane] - self._busy[lane] - self._reserved[lane])

    def reserve(self, lane: Lane, room: int) -> None:
        """A claim of up to ``room`` jobs for ``lane`` is on the wire: that room is not free."""
        self._reserved[lane] += room

    def unreserve(self, lane: Lane, room: int) -> None:
        """The claim that :meth:`reserve` d ``room`` came back (its jobs accepted, if any)."""
        self._reserved[lane] -= room

    def any_worth_claim(self) -> bool:
        """Some lane has room for a claim worth its round trip."""
        for lane in self._lanes:  # noqa: SIM110 (no generator: this runs once per job)
            if self.worth_claim(lane):
                return True
        return False

    def worth_claim(self, lane: Lane) -> bool:
        """Room for a claim worth its round trip: half the window is free, or the lane ran dry."""
        capacity = self.capacity(lane)
        return capacity > 0 and (capacity >= self._claim_at[lane] or not self._pending[lane])

    def take(self, queue: str, lane: Lane) -> int:
        """The claimer visits ``queue`` for ``lane``: it claims a batch of the room left."""
        return min(self._batch_size, self.capacity(lane))

    def in_flight(self) -> int:
        """Jobs held: zero once all is finished."""
        return len(self._held)

    def admits(self, settings: QueueSettings) -> bool:
        """The window's claims commit at once: they hold any queue's limits."""
        return True

    def __len__(self) -> int:
        return len(self._held)

    def any_busy(self) -> bool:
        """A held job is pending or running: its outcome may join the completer's next batch."""
        return any(self._busy.values())

    # -- transitions ------------------------------------------------------------------------------

    def accept(self, lane: Lane, jobs: Iterable[JobContext], now: float) -> list[Held]:
        """Hold freshly claimed jobs as pending."""
        added = [Held(job, lane, now) for job in jobs]
        for held in added:
            self._held[held.job.id] = held
            self._count[lane] += 1
            self._busy[lane] += 1
            self._pending[lane].append(held)
        return added

    def has_pending(self, lane: Lane) -> bool:
        return bool(self._pending[lane])

    def start_next(self, lane: Lane) -> Held | None:
        """The oldest pending job of ``lane``, now running; ``None`` when none waits."""
        pending = self._pending[lane]
        if not pending:
            return None
        held = pending.popleft()
        held.state = State.RUNNING  # still busy: it keeps its slot
        return held

    def finishing(self, held: Held) -> None:
        """Its handler returned: the outcome goes to the completer (a self-done job stays so)."""
        if held.handler_seconds is not None:
            self.ran(held.lane, held.handler_seconds)
        if held.state is State.RUNNING:
            if self.holds(held):
                self._busy[held.lane] -= 1
            held.state = State.FINISHING

    def self_done(self, held: Held) -> None:
        """A heartbeat found its running job completed by its handler's own transaction."""
        if held.state is State.RUNNING and self.holds(held):
            self._busy[held.lane] -= 1
            held.state = State.SELF_DONE

    def abandon(self, held: Held) -> None:
        """Its handler outlived timeout + grace: out of the window (the heartbeat, the completer's
        report) while it keeps its slot, until :meth:`returned` gives the slot back."""
        if held.state is State.RUNNING and self._held.get(held.job.id) is held:
            del self._held[held.job.id]
            self._count[held.lane] -= 1  # its slot stays busy

    def returned(self, held: Held) -> None:
        """An abandoned job's handler returned at last: its slot is free."""
        if held.state is State.RUNNING:
            held.state = State.FINISHING
            self._busy[held.lane] -= 1

    def drop_pending(self, held: Held) -> None:
        """Forget a job that never started (lost or cancelled before its turn)."""
        self.forget(held)

    def take_all_pending(self) -> list[Held]:
        """Shutdown: every job that never started, forgotten (out of the heartbeat) in one go."""
        taken = [h for lane in self._pending for h in self._pending[lane]]
        for pending in self._pending.values():
            pending.clear()
        for held in taken:
            self._forget(held)
        return taken

    def forget(self, held: Held) -> None:
        """Drop a job from the window (a pending one from its lane's line too); idempotent."""
        if self._forget(held) and held.state is State.PENDING:
            self._pending[held.lane].remove(held)

    def _forget(self, held: Held) -> bool:
        if self._held.get(held.job.id) is not held:
            return False
        del self._held[held.job.id]
        self._count[held.lane] -= 1
        if busy(held.state):
            self._busy[held.lane] -= 1
        return True

    # -- views ------------------------------------------------------------------------------------

    def holds(self, held: Held) -> bool:
        return self._held.get(held.job.id) is held

    def leased(self) -> list[Held]:
        """Jobs whose lease the heartbeat keeps (all but those their handler completed)."""
        return [h for h in self._held.values() if h.state is not State.SELF_DONE]

    def in_state(self, state: State) -> list[Held]:
        return [h for h in self._held.values() if h.state is state]
