"""The claimer's decisions: which queue it claims from next, how many jobs, and when it waits.

No database: the claimer is given a claim function (its ``claim`` seam) that records each
``(queue, limit)`` and answers from the test's script; the engine it holds refuses connections,
so a claim or a reap that reached PostgreSQL would fail the test. The claimer runs its real loop
on a thread of its own, over a real window and runtime; the test plays the handlers, finishing
jobs through the window the way the lanes and the completer do.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import timedelta
from itertools import pairwise

import pytest

from pgqueue._sql.limited_claim import ClaimState
from pgqueue._worker import flow as flow_gate
from pgqueue._worker.claimer import Claimer, ClaimerOptions
from pgqueue._worker.runtime import Runtime
from pgqueue._worker.window import ClaimWindow, Lane
from pgqueue.flow import QueueSettings
from pgqueue.results import ClaimedJob
from tests.worker_parts import (
    FakeCompleter,
    claimed_jobs,
    finish_pending,
    held_job,
    in_thread,
    make_runtime,
    offline_engine,
    stop,
    until,
)

T = Lane.THREADS
A = Lane.ASYNC

#: Nothing happens by the clock unless a test asks: no fallback poll, no reaping, no idling.
OPTIONS = ClaimerOptions(
    lease=timedelta(seconds=30),
    poll_interval=3600.0,
    reap_interval=3600.0,
    idle_poll_interval=None,
    idle_after=60.0,
    lock_timeout_ms=1000,
)

Answer = Callable[[str, int], list[ClaimedJob] | None]


class Claims:
    """The claimer's claim function: records ``(queue, limit)`` and when, answers by ``answer``;
    once ``stop_after`` claims were made it stops the run (so no further claim is made)."""

    def __init__(self, answer: Answer, *, stop_after: int | None = None) -> None:
        self._answer = answer
        self._stop_after = stop_after
        self.runtime: Runtime | None = None
        self.claimer: Claimer | None = None
        self.calls: list[tuple[str, int]] = []
        self.times: list[float] = []
        self._next_id = 1
        self._cond = threading.Condition()

    def jobs(self, queue: str, count: int) -> list[ClaimedJob]:
        """``count`` fresh jobs of ``queue`` (ids never repeat)."""
        first, self._next_id = self._next_id, self._next_id + count
        return claimed_jobs(range(first, first + count), queue)

    def __call__(self, queue: str, limit: int) -> list[ClaimedJob] | None:
        answer = self._answer(queue, limit)
        with self._cond:
            self.calls.append((queue, limit))
            self.times.append(time.monotonic())
            self._cond.notify_all()
            made = len(self.calls)
        if self._stop_after is not None and made >= self._stop_after:
            assert self.runtime is not None
            stop(self.runtime)
        return answer

    def wait_for(self, count: int) -> list[tuple[str, int]]:
        """Block until ``count`` claims were made; the claims so far."""
        with self._cond:
            if not self._cond.wait_for(lambda: len(self.calls) >= count, timeout=10.0):
                raise AssertionError(f"{count} claims expected, got {self.calls}")
            return list(self.calls)


def window_of(
    slots: dict[Lane, int],
    prefetch: dict[Lane, int] | None = None,
    *,
    batch_size: int = 10,
    adaptive: dict[Lane, int] | None = None,
) -> ClaimWindow:
    return ClaimWindow(
        slots,
        prefetch or dict.fromkeys(slots, 0),
        batch_size=batch_size,
        backlog=500,
        adaptive=adaptive,
    )


@contextmanager
def claiming(
    lanes: dict[str, Lane],
    window: ClaimWindow,
    claims: Claims,
    options: ClaimerOptions = OPTIONS,
) -> Iterator[tuple[Claimer, Runtime]]:
    """A claimer running its loop (not ``until_empty``) on a thread; stopped on the way out."""
    runtime = make_runtime(window, completer=FakeCompleter())
    claims.runtime = runtime
    claimer = Claimer(runtime, offline_engine(), lanes, options, window, claim=claims)
    with in_thread(lambda: claimer.run(until_empty=False), lambda: stop(runtime)):
        yield claimer, runtime


def held_count(runtime: Runtime) -> int:
    with runtime.lock:
        return len(runtime.window)


# -- which queue next ------------------------------------------------------------------------------


def test_queues_are_visited_round_robin_and_a_full_claim_goes_to_the_back_of_the_line() -> None:
    """One claim per visit, in turn; a queue whose claim came back short leaves the line (it is
    empty for now) while the others keep taking turns."""
    served = {"b": 0}

    def answer(queue: str, limit: int) -> list[ClaimedJob]:
        if queue == "b":
            served["b"] += 1
            if served["b"] == 2:
                return claims.jobs(queue, limit - 1)  # short: b is empty now
        return claims.jobs(queue, limit)  # full: more may wait

    claims = Claims(answer, stop_after=8)
    lanes = {"a": T, "b": T, "c": T}
    with claiming(lanes, window_of({T: 100}, batch_size=2), claims):
        calls = claims.wait_for(8)
    assert [q for q, _ in calls] == ["a", "b", "c", "a", "b", "c", "a", "c"]
    assert {limit for _, limit in calls} == {2}  # the batch size caps a claim


def test_a_queue_whose_lane_is_full_waits_in_line_while_another_lane_claims() -> None:
    """A threads queue with no free slot is skipped, not dropped: the async queue is claimed
    meanwhile, and the threads queue is claimed again once a job of its lane ended."""
    claims = Claims(lambda q, n: claims.jobs(q, n) if q == "t" else [], stop_after=3)
    lanes = {"t": T, "x": A}
    with claiming(lanes, window_of({T: 1, A: 5}), claims) as (_, runtime):
        assert claims.wait_for(2) == [("t", 1), ("x", 5)]
        until(lambda: held_count(runtime) == 1, "the claimed job held")
        time.sleep(0.1)  # a claimer that claimed for a full lane would do it now
        assert len(claims.calls) == 2
        finish_pending(runtime, T, 0.01)
        calls = claims.wait_for(3)
    assert calls == [("t", 1), ("x", 5), ("t", 1)]


def test_an_empty_queue_waits_for_its_notification_and_a_reconnect_polls_them_all() -> None:
    """After a claim found nothing, only a notification for that queue (or the poll a listener
    reconnect asks for) brings it back; a notification for a queue this worker does not serve is
    ignored."""
    claims = Claims(no_jobs)
    lanes = {"a": T, "b": T, "c": T}
    with claiming(lanes, window_of({T: 4}), claims) as (claimer, _):
        assert [q for q, _ in claims.wait_for(3)] == ["a", "b", "c"]
        time.sleep(0.1)  # nothing is claimed again on its own
        assert len(claims.calls) == 3
        claimer.on_notify("b")
        assert claims.wait_for(4)[3][0] == "b"
        claimer.on_notify("not-served-here")
        claimer.on_listen_connected()
        calls = claims.wait_for(7)
        time.sleep(0.1)
    assert [q for q, _ in claims.calls] == ["a", "b", "c", "b", "a", "b", "c"]
    assert calls == claims.calls


# -- how many --------------------------------------------------------------------------------------


def test_a_claim_takes_the_free_capacity_once_half_the_window_is_free() -> None:
    """The first claim fills the window (slots + prefetch); the next waits until half of it is
    free and takes exactly what is free."""
    claims = Claims(lambda q, n: claims.jobs(q, n), stop_after=2)
    window = window_of({T: 2}, {T: 2})  # a window of 4: claim again at 2 free
    with claiming({"a": T}, window, claims) as (_, runtime):
        assert claims.wait_for(1) == [("a", 4)]
        until(lambda: held_count(runtime) == 4, "the claim held")
        finish_pending(runtime, T, 0.01, count=1)
        time.sleep(0.1)  # one free slot and jobs still waiting: not worth a round trip
        assert len(claims.calls) == 1
        finish_pending(runtime, T, 0.01, count=1)
        calls = claims.wait_for(2)
    assert calls == [("a", 4), ("a", 2)]


def test_claim_sizes_follow_the_adaptive_prefetch() -> None:
    """Short handlers grow the prefetch and so the next claim (up to the adaptive limit); long
    ones shrink it back to its base."""
    claims = Claims(lambda q, n: claims.jobs(q, n), stop_after=3)
    window = window_of({T: 2}, {T: 1}, batch_size=50, adaptive={T: 20})
    with claiming({"a": T}, window, claims) as (_, runtime):
        assert claims.wait_for(1) == [("a", 3)]  # 2 slots + a prefetch of 1
        until(lambda: held_count(runtime) == 3, "the first claim held")
        finish_pending(runtime, T, 0.001)  # 1 ms each: 20 more fit in the target wait
        assert claims.wait_for(2)[1] == ("a", 22)
        until(lambda: held_count(runtime) == 22, "the second claim held")
        finish_pending(runtime, T, 5.0)  # 5 s each: back to one job ahead
        calls = claims.wait_for(3)
    assert calls == [("a", 3), ("a", 22), ("a", 3)]


# -- when nothing comes back -----------------------------------------------------------------------


def test_a_claim_that_gave_up_keeps_its_queue_in_line_and_pauses_the_loop() -> None:
    """A claim whose transient error outlasted its retries (``None``) is not an empty queue: the
    queue goes to the back of the line, not out of it, and the loop pauses a second first."""
    answers: list[list[ClaimedJob] | None] = [None]
    claims = Claims(lambda q, n: answers.pop(0) if answers else [], stop_after=3)
    with claiming({"a": T, "b": T}, window_of({T: 4}), claims):
        calls = claims.wait_for(3)
    assert calls == [("a", 4), ("b", 4), ("a", 4)]  # no poll came between: a stayed in line
    assert claims.times[1] - claims.times[0] >= 0.9


def test_an_idle_worker_stretches_its_poll_up_to_the_idle_interval() -> None:
    """Scale-to-zero: while nothing is held and no work came for ``idle_after``, each fallback
    poll waits twice as long as the last, never longer than ``idle_poll_interval``."""
    claims = Claims(no_jobs, stop_after=9)
    options = replace(OPTIONS, poll_interval=0.01, idle_poll_interval=0.1, idle_after=0.0)
    with claiming({"a": T}, window_of({T: 4}), claims, options):
        claims.wait_for(9)
    gaps = [later - earlier for earlier, later in pairwise(claims.times)]
    for gap, least in zip(gaps, [0.02, 0.04, 0.08, 0.1, 0.1, 0.1, 0.1, 0.1], strict=True):
        assert gap >= least * 0.95, gaps  # (a timer may wake a hair early)
    # Doubling without the cap would wait 2.56 s before the ninth poll.
    assert gaps[-1] < 1.0, gaps


def test_idle_means_nothing_held_and_no_work_for_idle_after() -> None:
    """What ``Worker.idle``, the listener's reconnect and the reaper ask: idle (and how long they
    wait then) only with ``idle_poll_interval`` set, nothing held and no work for ``idle_after``."""

    def idleness(options: ClaimerOptions) -> Callable[[], tuple[float, bool]]:
        window = window_of({T: 4})
        runtime = make_runtime(window, completer=FakeCompleter())
        claimer = Claimer(
            runtime, offline_engine(), {"a": T}, options, window, claim=Claims(no_jobs)
        )
        runtimes.append(runtime)

        def now() -> tuple[float, bool]:
            with runtime.lock:
                idle = claimer.idle()
            return claimer.idle_interval(), idle

        return now

    runtimes: list[Runtime] = []
    assert idleness(OPTIONS)() == (0.0, False)  # no idle_poll_interval: never idle
    recent = idleness(replace(OPTIONS, idle_poll_interval=5.0, idle_after=60.0))
    assert recent() == (0.0, False)  # the run just began: that counts as work

    idle = idleness(replace(OPTIONS, idle_poll_interval=5.0, idle_after=0.0))
    runtime = runtimes[-1]
    assert idle() == (5.0, True)
    with runtime.lock:
        runtime.accept(T, claimed_jobs([1], "a"))
    assert idle() == (0.0, False)  # a job is held
    finish_pending(runtime, T, 0.01)
    time.sleep(0.01)
    assert idle() == (5.0, True)


def no_jobs(queue: str, limit: int) -> list[ClaimedJob]:
    return []


# -- limited queues --------------------------------------------------------------------------------


class LimitedClaims:
    """The claimer's limited-claim seam: records each ``limit``, answers ``limit`` jobs and a
    state at the queue's limit; ``during`` runs while the claim is "on the wire"."""

    def __init__(self, claims: Claims, *, during: Callable[[int], None] = lambda n: None) -> None:
        self._claims = claims
        self._during = during
        self.limits: list[int] = []
        self.free: list[int] = []

    def __call__(
        self, queue: str, limit: int, per_key: bool, free_slots: int, lane_slots: int
    ) -> tuple[list[ClaimedJob], ClaimState]:
        self.limits.append(limit)
        self.free.append(free_slots)
        self._during(len(self.limits))
        jobs = self._claims(queue, limit) or []
        return jobs, ClaimState(QueueSettings(queue, concurrency=10), at_limit=True)


@contextmanager
def claiming_limited(
    limited: LimitedClaims, claims: Claims, window: ClaimWindow
) -> Iterator[Runtime]:
    """A claimer over queue ``q`` with ``concurrency=10``, claims through ``limited``."""
    runtime = make_runtime(window, completer=FakeCompleter())
    claims.runtime = runtime
    claimer = Claimer(
        runtime,
        offline_engine(),
        {"q": T},
        OPTIONS,
        window,
        claim=claims,
        claim_limited=limited,
        read_settings=lambda queues: {"q": QueueSettings("q", concurrency=10)},
    )
    claims.claimer = claimer
    with in_thread(lambda: claimer.run(until_empty=False), lambda: stop(runtime)):
        yield runtime


def _reported(runtime: Runtime) -> None:
    """What the completer's report of a written outcome does for the claimer: a job finished."""
    with runtime.lock:
        runtime.finished += 1
        runtime.wake_claimer()


def test_a_limited_claim_asks_for_the_room_and_says_how_many_slots_are_idle(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Room for 20 (10 slots, 10 prefetched), a limit of 10: the claim asks for the room and
    tells the database the 10 idle slots, which decides how much of it a limit leaves to
    prefetch (the statement's business, tested against PostgreSQL)."""
    monkeypatch.setattr(flow_gate, "LIMIT_POLL", 60.0)
    claims = Claims(lambda q, n: claims.jobs(q, n))
    limited = LimitedClaims(claims)
    with claiming_limited(limited, claims, window_of({T: 10}, {T: 10}, batch_size=100)):
        claims.wait_for(1)
    assert (limited.limits[0], limited.free[0]) == (20, 10)


def test_a_full_claim_at_the_limit_parks_its_queue_until_a_job_finishes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A claim that took all it asked for but left the queue at its limit is not followed by
    one that would take nothing: the next waits for a finished job (the poll is a minute)."""
    monkeypatch.setattr(flow_gate, "LIMIT_POLL", 60.0)
    claims = Claims(lambda q, n: claims.jobs(q, n))
    limited = LimitedClaims(claims)
    with claiming_limited(limited, claims, window_of({T: 20}, batch_size=10)) as runtime:
        claims.wait_for(1)
        time.sleep(0.3)
        assert len(limited.limits) == 1  # parked: no empty claim behind the full one
        _reported(runtime)
        claims.wait_for(2)


def test_a_finish_of_a_parked_queue_is_urgent_for_the_completer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The completer asks whether a batch holds a finish some claim waits for (its queue parked
    at its limit: the claim rides on the write): after a claim left ``q`` at its limit a job of
    ``q`` is, a job of another queue is not."""
    monkeypatch.setattr(flow_gate, "LIMIT_POLL", 60.0)
    claims = Claims(lambda q, n: claims.jobs(q, n))
    limited = LimitedClaims(claims)
    with claiming_limited(limited, claims, window_of({T: 20}, batch_size=10)):
        claimer = claims.claimer
        assert claimer is not None
        claims.wait_for(1)
        until(lambda: claimer.waits_for_finish([held_job(1, queue="q")]), "q parked")
        assert not claimer.waits_for_finish([held_job(2, queue="other")])
        assert not claimer.waits_for_finish([])


def test_a_job_finished_while_the_limited_claim_was_on_the_wire_unparks_its_queue(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The claim saw the queue full, but a job finished before it returned: that finish may
    have freed a slot the claim did not see, so the queue is claimed again at once, not after
    the next finish (none may come) or the poll (a minute here)."""
    monkeypatch.setattr(flow_gate, "LIMIT_POLL", 60.0)

    def finish_during_first(n: int) -> None:
        if n == 1:
            assert claims.runtime is not None
            _reported(claims.runtime)

    claims = Claims(lambda q, n: claims.jobs(q, n))
    limited = LimitedClaims(claims, during=finish_during_first)
    with claiming_limited(limited, claims, window_of({T: 20}, batch_size=10)):
        claims.wait_for(2)


# -- one claim over several queues -----------------------------------------------------------------


class GroupClaims:
    """The claim-over-several-queues seam: records each ``(queues, limit)``; ``stock`` holds
    each queue's jobs, taken in the queues' order up to ``limit`` (as the statement does)."""

    def __init__(self, claims: Claims, stock: dict[str, int]) -> None:
        self._claims = claims
        self.stock = stock
        self.calls: list[tuple[list[str], int]] = []
        self._lock = threading.Lock()

    def __call__(self, queues: list[str], limit: int) -> list[ClaimedJob]:
        with self._lock:
            self.calls.append((list(queues), limit))
            taken: list[ClaimedJob] = []
            for queue in queues:
                n = min(self.stock.get(queue, 0), limit - len(taken))
                self.stock[queue] = self.stock.get(queue, 0) - n
                taken += self._claims.jobs(queue, n)
                if len(taken) == limit:
                    break
            return taken


@contextmanager
def claiming_groups(
    lanes: dict[str, Lane],
    window: ClaimWindow,
    claims: Claims,
    groups: GroupClaims,
    settings: dict[str, QueueSettings] | None = None,
) -> Iterator[Runtime]:
    runtime = make_runtime(window, completer=FakeCompleter())
    claims.runtime = runtime
    claimer = Claimer(
        runtime,
        offline_engine(),
        lanes,
        OPTIONS,
        window,
        claim=claims,
        claim_queues=groups,
        claim_limited=LimitedClaims(claims),
        read_settings=lambda queues: dict(settings or {}),
    )
    with in_thread(lambda: claimer.run(until_empty=False), lambda: stop(runtime)):
        yield runtime


def test_one_claim_reads_the_next_ready_queues_of_its_lane_without_limits_or_pauses() -> None:
    """A claim takes the queue in line and the next ready ones of the same lane (at most 64), not
    a paused queue, nor one with flow limits (claimed on its own), nor another lane's."""
    claims = Claims(lambda q, n: claims.jobs(q, n) if q == "limited" else [])
    lanes = {f"q{i:03d}": T for i in range(70)} | {"paused": T, "limited": T, "loop": A}
    groups = GroupClaims(claims, {})
    settings = {
        "paused": QueueSettings("paused", paused=True),
        "limited": QueueSettings("limited", concurrency=5),
    }
    with claiming_groups(lanes, window_of({T: 20, A: 4}), claims, groups, settings):
        until(lambda: len(groups.calls) >= 2 and claims.calls, "the claims")
        time.sleep(0.1)
    first, second = groups.calls[0][0], groups.calls[1][0]
    assert first == [f"q{i:03d}" for i in range(64)]
    assert second == [f"q{i:03d}" for i in range(64, 70)]
    assert ("limited", 10) in claims.calls  # on its own, through the limited claim
    claimed_alone = {q for q, _ in claims.calls}
    assert "paused" not in claimed_alone | set(first) | set(second)
    assert claimed_alone <= {"limited", "loop"}  # "loop" is alone in its lane


def test_a_short_claim_over_several_queues_read_them_all_and_none_is_claimed_again() -> None:
    """Fewer jobs than asked for: every queue of the claim was read to its end, so none goes
    back in line (a notification brings one back, as after a short claim of one queue)."""
    claims = Claims(lambda q, n: [])
    groups = GroupClaims(claims, {"a": 1, "b": 0, "c": 2})
    lanes = {"a": T, "b": T, "c": T}
    with claiming_groups(lanes, window_of({T: 5}, batch_size=5), claims, groups) as runtime:
        until(lambda: len(groups.calls) >= 1, "the first claim")
        until(lambda: held_count(runtime) == 3, "the claimed jobs held")
        finish_pending(runtime, T, 0.01)
        time.sleep(0.2)  # a claimer that put a queue back would claim it now: room for 5
        assert groups.calls == [(["a", "b", "c"], 5)]
        assert claims.calls == []


def test_the_line_after_a_full_claim_puts_unserved_queues_first() -> None:
    """Two full claims in a row: the second starts with the queues the first never took from."""
    claims = Claims(lambda q, n: [])
    groups = GroupClaims(claims, {"a": 3, "b": 10, "c": 10})
    lanes = {"a": T, "b": T, "c": T}
    with claiming_groups(lanes, window_of({T: 8}, batch_size=4), claims, groups) as rt:
        until(lambda: len(groups.calls) >= 2, "the second claim")
        finish_pending(rt, T, 0.01)
        until(lambda: len(groups.calls) >= 3, "the third claim")
    # Claim 1 took a's 3 and 1 of b: c (never read) goes first, then a and b (served, maybe
    # more). Claim 2 took 4 of c: a and b (not served by it) first, c last.
    assert groups.calls[0] == (["a", "b", "c"], 4)
    assert groups.calls[1] == (["c", "a", "b"], 4)
    assert groups.calls[2][0] == ["a", "b", "c"]
