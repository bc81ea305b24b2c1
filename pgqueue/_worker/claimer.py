"""The claimer: the worker's main loop, deciding when to claim from which queue.

Queues are visited round-robin, one claim per visit (one queue per claim keeps the claim's plan
on ``jobs_ready_idx``); a queue whose claim came back full goes to the back of the line, so no
queue starves another. Notifications put their queue in line; the fallback poll puts every queue
in line; reaping runs on its own schedule. An idle worker (scale-to-zero) stretches its poll.

Where a claim goes is the :class:`Intake`'s business, not a mode flag: in lease mode the claim
window (the claimer claims up to a batch, the window holds it), in transaction mode the transaction
lane (it takes the queue as a ticket, and one of its threads claims a job in its own transaction).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Protocol

from sqlalchemy import Engine

from pgqueue._base.urls import error_line
from pgqueue._sql.calls import oldest_run_at_by_queue, rows_taken
from pgqueue._sql.limited_claim import ClaimState
from pgqueue._worker.faults import Faults
from pgqueue._worker.flow import REFRESH_INTERVAL, FlowGate
from pgqueue._worker.low_water import LowWater
from pgqueue._worker.pulse import Pulse
from pgqueue._worker.reaper import reap
from pgqueue._worker.replay import (
    Replay,
    claim_queues_replayed,
    claim_replayed,
    limited_claim_replayed,
    settings_replayed,
)
from pgqueue._worker.runtime import Runtime
from pgqueue._worker.transient import retrying
from pgqueue._worker.window import Held, Lane, completes_plainly, keys
from pgqueue.flow import QueueSettings
from pgqueue.results import ClaimedJob

log = logging.getLogger("pgqueue.worker")

#: ``claim(queue, limit)``: the jobs claimed, or ``None`` once a transient error gave up.
Claim = Callable[[str, int], list[ClaimedJob] | None]
#: ``claim_queues(queues, limit)``: one claim over several queues, or ``None`` as ``Claim``.
ClaimQueues = Callable[[list[str], int], list[ClaimedJob] | None]
#: The most queues one claim reads: a poll of 1,000 queues is 16 round trips, not 1,000.
MAX_CLAIM_QUEUES = 64
#: ``claim_limited(queue, limit, per_key, free_slots, lane_slots)``: the limited claim's jobs and
#: what it left, or ``None`` (``free_slots``: the lane's idle handler slots, which a limit never
#: keeps from a claim; ``lane_slots``: all its slots, the room prefetch leaves for another worker
#: far from a concurrency limit: :func:`pgqueue._sql.limited_claim._prefetch_bound`).
LimitedClaim = Callable[[str, int, bool, int, int], tuple[list[ClaimedJob], ClaimState] | None]
#: ``read_settings(queues)``: the flow settings of the worker's queues, or ``None`` on a
#: transient error (the last ones stay).
ReadSettings = Callable[[list[str]], Mapping[str, QueueSettings] | None]


class Intake(Protocol):
    """Where the claims of a lane go, and whether one is worth its round trip (lock held)."""

    def worth_claim(self, lane: Lane) -> bool: ...

    def any_worth_claim(self) -> bool: ...

    def in_flight(self) -> int:
        """What is claimed and not finished: zero once all is."""
        ...

    def take(self, queue: str, lane: Lane) -> int:
        """The claimer visits ``queue`` for ``lane``: how many jobs it claims now, or 0 when
        the lane claims for itself (it took ``queue`` as a ticket)."""
        ...

    def admits(self, settings: QueueSettings) -> bool:
        """Whether this intake's claims can hold a queue's flow limits: the window's can (its
        claims commit at once, so their jobs count as ``running``), the transaction lane's
        cannot (its jobs are ``running`` only inside their open transaction, invisible to other
        workers' counts), so it leaves queues with limits alone."""
        ...


@dataclass
class _Clock:
    """When the claiming loop next polls, reaps and reads the settings (``time.monotonic()``),
    and whether it was idle at its last round: the loop's own state, one round to the next."""

    next_reap: float
    next_poll: float = 0.0
    next_refresh: float = 0.0  # the settings are read before the first claim
    was_idle: bool = False


@dataclass(frozen=True)
class ClaimerOptions:
    lease: timedelta
    poll_interval: float
    reap_interval: float
    idle_poll_interval: float | None
    idle_after: float
    lock_timeout_ms: int
    #: Recorded in ``jobs.locked_by`` by every claim (``_base.connections.worker_name``).
    worker_name: str | None = None


class Claimer:
    """The main loop of one ``run()``: claims for the lanes of ``lanes`` (queue -> lane).

    ``claim`` makes one claim; the default is the replayed claim on ``engine`` (the unit tests
    pass their own, so the queue choice and the claim sizes are tested without a database).
    ``claim_queues`` claims from the queue in line and the next ready queues of its lane (up to
    :data:`MAX_CLAIM_QUEUES`, none with flow limits) at once: a worker of many queues with a few
    jobs each sends one claim where it would send one per queue. By default the replayed claim
    over several queues, unless ``claim`` is given (then one queue per claim).
    ``claim_limited`` and ``read_settings`` are the flow control's seams
    (:mod:`pgqueue._worker.flow`): by default the limited claim and the settings read on
    ``engine``, but with a ``claim`` of its own and no ``read_settings`` no queue has settings.
    """

    def __init__(
        self,
        runtime: Runtime,
        engine: Engine,
        lanes: Mapping[str, Lane],
        options: ClaimerOptions,
        intake: Intake,
        *,
        claim: Claim | None = None,
        claim_queues: ClaimQueues | None = None,
        claim_limited: LimitedClaim | None = None,
        read_settings: ReadSettings | None = None,
    ) -> None:
        self._rt = runtime
        self._engine = engine
        self._lanes = dict(lanes)
        self._lane_kinds = set(self._lanes.values())
        self._opts = options
        self._intake = intake
        # The claim's connection, held between claims; payloads decoded by the handlers.
        self._replay = Replay(engine, defer_json=True)
        self._claim = claim or self._claim_replayed
        if claim_queues is None and claim is None:
            claim_queues = self._claim_queues_replayed
        self._claim_queues = claim_queues
        self._claim_limited = claim_limited or self._limited_replayed
        if read_settings is None:
            read_settings = self._settings_replayed if claim is None else (lambda queues: {})
        self._read_settings = read_settings
        self._flow = FlowGate()  # under the runtime's lock
        self._low_water = LowWater()  # this loop's thread alone
        self._warned_limits: set[str] = set()
        # All under the runtime's lock, read and reset there (set by the listener's thread).
        self._refresh_requested = False
        self._ready: dict[str, None] = {}  # queues worth a claim, in round-robin order
        self._notified: dict[str, None] = {}
        self._poll_requested = False
        self._claimed_since_poll = 0
        # Whether the last poll began with nothing held: one made while jobs were in flight
        # proves nothing to ``until_empty``, as their outcomes (a snooze, a retry) may queue
        # them again after it.
        self._polled_with_nothing_held = False
        self._idle_polls = 0
        self.pulse = Pulse("claimer")
        self._faults = Faults("claimer", fatal=runtime.fail, max_pause=5.0)
        #: The name every claim of this worker records in ``jobs.locked_by``.
        self.name = options.worker_name

    # -- called from other threads ----------------------------------------------------------------

    def on_notify(self, queue: str) -> None:
        if queue in self._lanes:
            with self._rt.lock:
                self._notified[queue] = None
                self._rt.claimer_wakeup.notify_all()

    def on_settings_changed(self) -> None:
        """A queue's flow settings changed (a notification): read them again now."""
        with self._rt.lock:
            self._refresh_requested = True
            self._rt.claimer_wakeup.notify_all()

    def on_listen_connected(self) -> None:
        with self._rt.lock:
            self._poll_requested = True  # whatever was sent while we were away is gone
            self._refresh_requested = True
            self._rt.claimer_wakeup.notify_all()

    def queue_had_job(self, queue: str) -> None:
        """A lane that claims for itself found a job of ``queue``, so more may wait. Lock held."""
        self._claimed_since_poll += 1
        self._ready.setdefault(queue, None)
        self._rt.claimer_wakeup.notify()

    def idle(self) -> bool:
        """Scale-to-zero: nothing held and no work for ``idle_after`` seconds. Lock held."""
        return (
            self._opts.idle_poll_interval is not None
            and not self._intake.in_flight()
            and time.monotonic() - self._rt.last_work > self._opts.idle_after
        )

    def idle_interval(self) -> float:
        """How long reconnects and reaping wait while idle (0 when not idle)."""
        with self._rt.lock:
            idle = self.idle()
        return self._opts.idle_poll_interval if self._opts.idle_poll_interval and idle else 0.0

    # -- the loop ---------------------------------------------------------------------------------

    def run(self, until_empty: bool) -> None:
        """Claim until stopped; with ``until_empty``, until a whole poll found nothing."""
        self.pulse.attach()
        try:
            self._loop(until_empty)
        finally:
            self._replay.release()
            self.pulse.finish()

    def _loop(self, until_empty: bool) -> None:
        rt = self._rt
        clock = _Clock(
            next_reap=time.monotonic() + (0.0 if until_empty else self._opts.reap_interval)
        )
        while not rt.stop.is_set():
            try:
                if self._step(until_empty, clock):
                    return
            except Exception as exc:
                # Not a transient database error (those are retried where they happen): a bug,
                # or one no retry helps (a privilege revoked). Logged; the loop goes on, and
                # stops the worker when every step fails.
                pause = self._faults.failed(exc)
                self.pulse.waiting()
                rt.stop.wait(pause)
            else:
                self._faults.succeeded()

    def _step(self, until_empty: bool, clock: _Clock) -> bool:
        """One round of the loop: poll, reap, read the settings when due, claim, and wait for
        the next wake-up. True when the run is over (a stop, or ``until_empty`` and nothing
        left)."""
        rt, opts, pulse = self._rt, self._opts, self.pulse
        pulse.step()
        now = time.monotonic()
        # Scale-to-zero: an idle worker sends nothing but its stretched poll, so it re-reads
        # the settings only when told (a notification, a reconnect) and when it wakes up.
        idle = bool(self.idle_interval())
        woke, clock.was_idle = clock.was_idle and not idle, idle
        with rt.lock:  # a request set while the settings are read is kept for the next round
            refresh_asked, self._refresh_requested = self._refresh_requested, False
        if (now >= clock.next_refresh and not idle) or woke or refresh_asked:
            self._refresh_settings()
            clock.next_refresh = time.monotonic() + REFRESH_INTERVAL
            if not self._flow.known:
                rt.stop.wait(1.0)  # never claim before knowing what is paused
                return False
        with rt.lock:
            poll_asked, self._poll_requested = self._poll_requested, False
        if now >= clock.next_poll or poll_asked:
            if now >= clock.next_reap:
                self._reap()
                clock.next_reap = now + max(opts.reap_interval, self.idle_interval())
            self._low_water.forget()  # the poll's claims read every ready range whole
            with rt.lock:
                self._ready.update(dict.fromkeys(self._lanes))
                self._claimed_since_poll = 0
                self._polled_with_nothing_held = self._intake.in_flight() == 0
                interval = self._next_poll_interval()
            clock.next_poll = time.monotonic() + interval
        elif now >= clock.next_reap and not self.idle_interval():
            self._reap()
            clock.next_reap = now + opts.reap_interval
        self._claim_round()
        with rt.lock:
            if rt.stop.is_set():
                return True
            parked = self._flow.any_parked()
            if until_empty and not self._ready and self._intake.in_flight() == 0 and not parked:
                # Everything claimed is finished: stop once a whole poll, begun with nothing
                # held, found nothing.
                if self._claimed_since_poll == 0 and self._polled_with_nothing_held:
                    return True
                self._poll_requested = True
                return False
            if self._next_queue() is not None or (
                (self._notified or self._poll_requested) and self._intake.any_worth_claim()
            ):
                return False
            pulse.waiting()
            if self.idle():
                self._replay.release()  # scale-to-zero: nothing held while idle
            wake_at = min(clock.next_poll, clock.next_reap)
            if not self.idle():
                wake_at = min(wake_at, clock.next_refresh)
            unpark = self._flow.next_unpark()
            if unpark is not None:
                wake_at = min(wake_at, unpark)
            full_due = self._low_water.next_due()
            if full_due is not None:
                wake_at = min(wake_at, full_due)
            rt.claimer_wakeup.wait(max(0.0, wake_at - time.monotonic()))
        return False

    def _next_poll_interval(self) -> float:
        opts = self._opts
        if opts.idle_poll_interval is None or not self.idle():
            self._idle_polls = 0
            return opts.poll_interval
        self._idle_polls += 1
        return min(opts.idle_poll_interval, opts.poll_interval * 2.0 ** min(self._idle_polls, 30))

    def _reap(self) -> None:
        self._replay.release()  # the loop holds one pooled connection at a time
        reaped = reap(
            self._engine, lock_timeout_ms=self._opts.lock_timeout_ms, hooks=self._rt.hooks
        )
        if reaped:
            self._low_water.forget()  # the jobs given back keep their run_at, maybe behind a mark
            with self._rt.lock:
                self._ready.update(dict.fromkeys(self._lanes))

    def _refresh_settings(self) -> None:
        settings = retrying(
            lambda: self._read_settings(list(self._lanes)), what="reading the queues' settings"
        )
        if settings is None:
            return  # a transient error: the settings known so far stay
        with self._rt.lock:
            for queue in self._flow.update(settings):
                self._ready.setdefault(queue, None)
            self._rt.claimer_wakeup.notify_all()

    def _next_queue(self) -> str | None:
        """The first queue in line whose lane has room for a claim and whose flow settings let
        it be claimed (not paused, not parked at a limit). Lock held.

        Asked at every wake-up: the lanes' room is read once, so a worker of 1,000 queues whose
        lanes are full returns at once instead of walking the whole line."""
        intake, flow = self._intake, self._flow
        open_lanes = [lane for lane in self._lane_kinds if intake.worth_claim(lane)]
        if not open_lanes:
            return None
        for queue in self._ready:
            if self._lanes[queue] in open_lanes and flow.claimable(queue):
                if not intake.admits(flow.settings(queue)):
                    self._warn_limits(queue)
                    continue
                return queue
        return None

    def _warn_limits(self, queue: str) -> None:
        if queue not in self._warned_limits:
            self._warned_limits.add(queue)
            log.warning(
                "queue %s has flow limits, which a transaction-mode worker cannot hold: "
                "not claiming from it (run a lease-mode worker for it)",
                queue,
            )

    def _claim_round(self) -> None:
        """Visit ready queues round-robin while there is capacity: one claim per visit (of the
        queue in line and, without flow limits, the next ready queues of its lane)."""
        rt = self._rt
        while not rt.stop.is_set():
            with rt.lock:
                if self._refresh_requested:
                    return  # the settings changed: the loop reads them before the next claim
                for q in self._notified:
                    self._ready.setdefault(q, None)
                self._notified.clear()
                for q in self._flow.unpark(time.monotonic(), rt.finished):
                    self._ready.setdefault(q, None)
                for q in self._low_water.due(time.monotonic()):
                    self._ready.setdefault(q, None)
                queue = self._next_queue()
                if queue is None:
                    return
                lane = self._lanes[queue]
                del self._ready[queue]
                limit = self._intake.take(queue, lane)
                if not limit:
                    continue  # the lane claims for itself
                flow = self._flow.settings(queue)
                group = [queue] if flow.limited else [queue, *self._companions(lane)]
                free, slots = rt.window.idle_slots(lane), rt.window.slots(lane)
                # Room a claim riding on a completion (complete_and_claim) must leave alone.
                rt.window.reserve(lane, limit)
                # The jobs finished before the claim is sent: one that finishes while it is on
                # the wire may free a slot the claim did not see, so a queue it parks at a limit
                # is claimed again on the first finish after this, not after the next one.
                finished_before = rt.finished
            state: ClaimState | None = None
            try:
                if flow.limited:
                    answer = self._claim_limited(
                        queue, limit, flow.per_key is not None, free, slots
                    )
                    claimed, state = (None, None) if answer is None else answer
                elif len(group) > 1:
                    assert self._claim_queues is not None
                    claimed = self._claim_queues(group, limit)
                else:
                    claimed = self._claim(queue, limit)
            except Exception:
                with rt.lock:
                    rt.window.unreserve(lane, limit)
                    for q in group:
                        self._ready.setdefault(q, None)  # visited again after the loop's pause
                raise
            with rt.lock:
                rt.window.unreserve(lane, limit)
                if len(group) > 1:
                    self._took_queues(group, lane, limit, claimed)
                else:
                    self._took(queue, lane, limit, claimed, state, finished_before)
            if claimed is None:
                self.pulse.waiting()
                rt.stop.wait(1.0)
                return

    def _companions(self, lane: Lane) -> list[str]:
        """The ready queues that join a claim of ``lane`` (taken out of the line): the next ones
        of that lane, claimable, without flow limits (their claim counts; theirs is their own).
        None without a claim over several queues. Lock held."""
        if self._claim_queues is None:
            return []
        flow, found = self._flow, list[str]()
        for q in self._ready:
            if len(found) == MAX_CLAIM_QUEUES - 1:
                break
            if self._lanes[q] is lane and flow.claimable(q) and not flow.limited(q):
                found.append(q)
        for q in found:
            del self._ready[q]
        return found

    def _requeue(self, group: list[str], claimed: list[ClaimedJob]) -> None:
        """After a full claim over ``group``: the queues it took jobs of may have more (back of
        the line), the others may not have been read at all (the claim filled before them: front
        of the line, so the round-robin visits them next). A short claim read every queue of the
        group to its end: none goes back. Lock held."""
        took = {job.queue for job in claimed} | set(oldest_run_at_by_queue(claimed))
        served = [q for q in group if q in took]
        unread = [q for q in group if q not in took]
        self._ready = dict.fromkeys([*unread, *(q for q in self._ready if q not in took), *served])

    def _took_queues(
        self, group: list[str], lane: Lane, limit: int, claimed: list[ClaimedJob] | None
    ) -> None:
        """A claim over the queues of ``group`` came back (``None``: it gave up). Lock held."""
        rt = self._rt
        if claimed is None:
            for q in group:
                self._ready.setdefault(q, None)
            return
        taken = rows_taken(claimed)
        if taken == limit:
            self._requeue(group, claimed)
        self._claimed_since_poll += rt.accept(lane, claimed) + taken - len(claimed)
        for q, count in (getattr(claimed, "expired_in", None) or {}).items():
            rt.expired(q, count)

    def _took(
        self,
        queue: str,
        lane: Lane,
        limit: int,
        claimed: list[ClaimedJob] | None,
        state: ClaimState | None,
        finished_before: int,
    ) -> None:
        """A claim of ``queue`` for ``lane`` came back (``None``: it gave up): hold its jobs,
        park the queue at a limit, or line it up again. Lock held."""
        rt = self._rt
        if claimed is None:
            self._ready.setdefault(queue, None)
            return
        # Rows the claim failed as expired count as taken: more may be waiting.
        taken = rows_taken(claimed)
        if state is not None and state.ready and taken < limit and state.flow.concurrency:
            # Short at the prefetch bound, with jobs left: its next finish may leave more room.
            state = replace(state, at_limit=not state.flow.paused)
        # A claim that left its queue at a limit parks it, full or short: claiming again
        # before one of its jobs finishes would take nothing.
        parked = state is not None and self._flow.claimed(
            queue, state, time.monotonic(), finished_before
        )
        if taken == limit and not parked:
            self._ready[queue] = None  # more may be waiting: back of the line
        self._claimed_since_poll += rt.accept(lane, claimed) + taken - len(claimed)
        rt.expired(queue, taken - len(claimed))

    # -- claims that ride on completions (called from the completer's thread) ---------------------

    def waits_for_finish(self, done: list[Held]) -> bool:
        """Whether one of ``done`` (finished jobs the completer is about to write) is of a queue
        parked waiting for this worker's finishes: its write carries the queue's next claim
        (:meth:`complete_and_claim`), so the completer sends it without its gathering wait.

        Read without the worker's lock (the completer's own lock is held): a parked queue's entry
        is read as a whole, and an answer a moment stale costs at most one gathering wait.
        """
        flow = self._flow
        if not flow.any_parked():
            return False
        return any(flow.parked(q) for q in {h.job.queue for h in done})

    def complete_and_claim(
        self, replay: Replay, queue: str, finished: list[Held], beside: bool = False
    ) -> set[int] | None:
        """Write the plain completions among ``finished`` (this worker's finished jobs of
        ``queue``: :func:`pgqueue._worker.window.completes_plainly`) and claim for the slots they
        free, in one transaction and one round trip on ``replay`` (the completer's): a queue at
        its limit (or at the prefetch bound) learns of its freed slots from its own completions,
        without waiting for the claiming loop or a poll. Returns the ids whose completion was
        written, or ``None`` when ``queue`` is not parked waiting for a finish
        (:meth:`pgqueue._worker.flow.FlowGate.parked`; or is paused, or the run stops), or the write
        failed (nothing was: the caller writes them as usual, and the claiming loop visits the
        queue again). The completer reports the written ones right after: the queue's parking
        counts them as seen, since the claim did. ``beside``: another ride may hold the queue's
        lock (the completer's second rider): the completions are written before the lock is
        asked for, so they run beside that ride's claim.
        """
        rt = self._rt
        with rt.lock:
            lane = self._lanes.get(queue)
            flow = self._flow.settings(queue)
            if lane is None or rt.stop.is_set() or not self._flow.parked(queue):
                return None
            completing = keys(h for h in finished if completes_plainly(h))
            if not completing:
                return None
            if not self._intake.admits(flow):
                return None
            limit = self._intake.take(queue, lane)
            if not limit:
                return None
            free, slots = rt.window.idle_slots(lane), rt.window.slots(lane)
            rt.window.reserve(lane, limit)  # the claiming loop's claims leave this room alone
            # As the loop's claim does: a finish reported while this is on the wire may free a
            # slot the claim did not see. This ride's own completions are reported as ridden
            # (``Held.rode``) and do not move the count: the claim saw their slots free.
            finished_before = rt.finished
        try:
            completed, claimed, state = limited_claim_replayed(
                replay,
                queue=queue,
                limit=limit,
                lease=self._opts.lease,
                per_key=flow.per_key is not None,
                free_slots=free,
                lane_slots=slots,
                lock_timeout_ms=self._opts.lock_timeout_ms,
                locked_by=self.name,
                completing=completing,
                completions_first=beside,
            )
        except Exception as exc:
            log.debug("completing and claiming on queue %s failed: %s", queue, error_line(exc))
            with rt.lock:
                rt.window.unreserve(lane, limit)
                self._ready.setdefault(queue, None)
                rt.claimer_wakeup.notify()
            return None
        with rt.lock:
            rt.window.unreserve(lane, limit)
            # Counted, the ride's own completions would unpark the queue for a claim of the
            # loop's own, which finds the room this one left and, sent beside the next ride,
            # contends for the queue's lock.
            self._took(queue, lane, limit, claimed, state, finished_before)
            rt.claimer_wakeup.notify()
        return completed

    def _limited_replayed(
        self, queue: str, limit: int, per_key: bool, free_slots: int, lane_slots: int
    ) -> tuple[list[ClaimedJob], ClaimState] | None:
        def claim() -> tuple[list[ClaimedJob], ClaimState]:
            _, claimed, state = limited_claim_replayed(
                self._replay,
                queue=queue,
                limit=limit,
                lease=self._opts.lease,
                per_key=per_key,
                free_slots=free_slots,
                lane_slots=lane_slots,
                lock_timeout_ms=self._opts.lock_timeout_ms,
                locked_by=self.name,
            )
            return claimed, state

        return retrying(claim, what=f"claim on queue {queue}")

    def _settings_replayed(self, queues: list[str]) -> Mapping[str, QueueSettings]:
        return settings_replayed(self._replay, queues)

    def _claim_queues_replayed(self, queues: list[str], limit: int) -> list[ClaimedJob] | None:
        """The claim over several queues, each from its own low-water mark (as
        :meth:`_claim_replayed`); the marks learn from the queues it read: every queue after a
        short claim, those it took rows of after a full one (it may not have reached the rest)."""
        now = time.monotonic()
        marks = [self._low_water.since(queue, now) for queue in queues]
        claimed = retrying(
            lambda: claim_queues_replayed(
                self._replay,
                queues=queues,
                limit=limit,
                lease=self._opts.lease,
                locked_by=self.name,
                since=marks,
            ),
            what=f"claim on queues {', '.join(queues[:3])}{'...' if len(queues) > 3 else ''}",
        )
        if claimed is not None:
            oldest = oldest_run_at_by_queue(claimed)
            read_all = rows_taken(claimed) < limit
            for queue, mark in zip(queues, marks, strict=True):
                if read_all or queue in oldest:
                    self._low_water.claimed(queue, mark, oldest.get(queue), now)
        return claimed

    def _claim_replayed(self, queue: str, limit: int) -> list[ClaimedJob] | None:
        # One statement in autocommit: committed before it returns, without the BEGIN and COMMIT
        # round trips, and no session state for a transaction-mode pooler. It starts from the
        # queue's low-water mark when it has one (pgqueue._worker.low_water).
        now = time.monotonic()
        since = self._low_water.since(queue, now)
        claimed = retrying(
            lambda: claim_replayed(
                self._replay,
                queue=queue,
                limit=limit,
                lease=self._opts.lease,
                locked_by=self.name,
                since=since,
            ),
            what=f"claim on queue {queue}",
        )
        if claimed is not None:
            oldest = oldest_run_at_by_queue(claimed).get(queue)
            self._low_water.claimed(queue, since, oldest, now)
        return claimed
