"""The claim window's bookkeeping: how much a worker may claim, and what each job's state costs.

Pure state, no I/O: every transition is driven directly, the way the worker's components drive it
while holding the worker's lock.
"""

from __future__ import annotations

import random

import pytest

from pgqueue._worker.window import ClaimWindow, Held, Lane, State, keys
from pgqueue._worker.window import busy as window_busy
from pgqueue.jobs import JobContext

T = Lane.THREADS
A = Lane.ASYNC


def job(job_id: int, attempts: int = 1) -> JobContext:
    return JobContext(job_id, "q", {"n": job_id}, attempts)


def jobs(*ids: int) -> list[JobContext]:
    return [job(i) for i in ids]


def make_window(
    slots: int = 2,
    prefetch: int = 2,
    *,
    batch_size: int = 10,
    backlog: int = 3,
) -> ClaimWindow:
    """A one-lane (threads) window."""
    return ClaimWindow({T: slots}, {T: prefetch}, batch_size=batch_size, backlog=backlog)


def state_of(held: Held) -> State:
    """Read afresh (an ``is`` check on ``held.state`` would narrow its type for mypy)."""
    return held.state


def run_all(window: ClaimWindow, lane: Lane = T) -> list[Held]:
    started = []
    while (held := window.start_next(lane)) is not None:
        started.append(held)
    return started


# -- capacity --------------------------------------------------------------------------------------


def test_capacity_is_slots_plus_prefetch_minus_pending_and_running() -> None:
    """Pending and running jobs both take a place in the window of ``slots + prefetch``."""
    window = make_window(slots=2, prefetch=3)
    assert window.capacity(T) == 5
    window.accept(T, jobs(1, 2, 3), now=0.0)
    assert window.capacity(T) == 2
    window.start_next(T)  # running costs the same as pending
    assert window.capacity(T) == 2
    window.accept(T, jobs(4, 5), now=0.0)
    assert window.capacity(T) == 0


def test_accept_holds_jobs_as_pending_with_their_claim_time() -> None:
    """Claimed jobs start pending, in their lane, stamped with the claim's time."""
    window = make_window()
    added = window.accept(T, jobs(7, 8), now=12.5)
    assert [h.job.id for h in added] == [7, 8]
    assert all(h.state is State.PENDING and h.lane is T and h.claimed_at == 12.5 for h in added)
    assert all(window.holds(h) for h in added)
    assert len(window) == 2
    assert window.in_flight() == 2
    assert window.has_pending(T)
    assert window.in_state(State.PENDING) == added


def test_accept_of_nothing_changes_nothing() -> None:
    """An empty claim result holds nothing and leaves the capacity as it was."""
    window = make_window()
    assert window.accept(T, [], now=0.0) == []
    assert window.capacity(T) == 4
    assert not window.has_pending(T)


def test_held_key_is_id_and_claimed_attempts() -> None:
    """Every guarded batch statement takes ``(id, attempts)`` pairs, in the window's order."""
    window = make_window()
    held = window.accept(T, [job(3, attempts=2), job(9, attempts=5)], now=0.0)
    assert held[0].key == (3, 2)
    assert keys(held) == [(3, 2), (9, 5)]


# -- when a claim is worth its round trip ----------------------------------------------------------


def test_worth_claim_once_half_the_window_is_free() -> None:
    """A window of 8 claims when 4 places are free, not for every single finished job."""
    window = make_window(slots=4, prefetch=4, batch_size=10)
    assert window.worth_claim(T)
    window.accept(T, jobs(1, 2, 3, 4), now=0.0)  # 4 free: exactly half
    assert window.worth_claim(T)
    window.accept(T, [job(5)], now=0.0)  # 3 free, jobs still pending
    assert window.capacity(T) == 3
    assert not window.worth_claim(T)


def test_worth_claim_when_the_lane_ran_dry_even_with_little_room() -> None:
    """With no job pending the handlers would idle: any free place is worth a claim."""
    window = make_window(slots=4, prefetch=4, batch_size=10)
    window.accept(T, jobs(1, 2, 3, 4, 5, 6, 7), now=0.0)
    assert not window.worth_claim(T)
    run_all(window)  # all seven running, none pending, one place free
    assert window.capacity(T) == 1
    assert not window.has_pending(T)
    assert window.worth_claim(T)


def test_worth_claim_threshold_is_capped_at_batch_size() -> None:
    """One claim takes at most ``batch_size`` jobs: waiting for more free places gains nothing."""
    window = make_window(slots=10, prefetch=10, batch_size=2)
    window.accept(T, jobs(*range(18)), now=0.0)  # 2 free, jobs pending
    assert window.worth_claim(T)
    window.accept(T, [job(100)], now=0.0)  # 1 free
    assert not window.worth_claim(T)


def test_worth_claim_threshold_is_at_least_one() -> None:
    """A window of one (half of it rounds to zero) still claims, and never with no room."""
    window = make_window(slots=1, prefetch=0, batch_size=10)
    assert window.worth_claim(T)
    window.accept(T, [job(1)], now=0.0)
    assert not window.worth_claim(T)
    window.start_next(T)  # ran dry, but full
    assert not window.worth_claim(T)


def test_the_claimer_takes_a_batch_of_the_room_left() -> None:
    """A visit of the claimer claims up to ``batch_size`` jobs, never more than the lane's room."""
    window = make_window(slots=4, prefetch=4, batch_size=3)
    assert window.take("q", T) == 3  # room 8, a batch is 3
    window.accept(T, jobs(*range(6)), now=0.0)
    assert window.take("q", T) == 2  # room 2
    assert len(window) == 6  # a visit holds nothing: the claimed jobs are accepted after


def test_no_claim_is_worth_it_when_full_even_if_dry() -> None:
    """Running dry never overrides a full window."""
    window = make_window(slots=2, prefetch=0)
    window.accept(T, jobs(1, 2), now=0.0)
    run_all(window)
    assert window.capacity(T) == 0
    assert not window.worth_claim(T)


# -- transitions -----------------------------------------------------------------------------------


def test_start_next_takes_the_oldest_pending_job() -> None:
    """Jobs start in claim order, and ``None`` says nothing waits."""
    window = make_window()
    window.accept(T, jobs(1, 2), now=0.0)
    window.accept(T, [job(3)], now=1.0)
    started = run_all(window)
    assert [h.job.id for h in started] == [1, 2, 3]
    assert all(h.state is State.RUNNING for h in started)
    assert window.start_next(T) is None
    assert not window.has_pending(T)


def test_a_job_lifecycle_frees_its_place_and_its_count() -> None:
    """accept -> start_next -> finishing -> forget gives back the window place, then the backlog."""
    window = make_window(slots=1, prefetch=0, backlog=1)
    (held,) = window.accept(T, [job(1)], now=0.0)
    assert window.capacity(T) == 0

    assert window.start_next(T) is held
    assert held.state is State.RUNNING
    assert window.capacity(T) == 0
    assert window.in_state(State.RUNNING) == [held]

    window.finishing(held)
    assert state_of(held) is State.FINISHING
    assert window.capacity(T) == 1  # the slot is free; the backlog holds the outcome
    assert window.holds(held)
    assert len(window) == 1
    assert window.in_flight() == 1
    assert window.leased() == [held]  # its lease is still kept until the completer wrote it

    window.forget(held)
    assert not window.holds(held)
    assert len(window) == 0
    assert window.in_flight() == 0
    assert window.capacity(T) == 1
    assert window.leased() == []


def test_finishing_jobs_count_against_the_backlog() -> None:
    """A lagging completer stops claims: capacity is also ``window + backlog - held``."""
    window = make_window(slots=1, prefetch=1, backlog=2)  # window 2
    first = window.accept(T, jobs(1, 2), now=0.0)
    run_all(window)
    for held in first:
        window.finishing(held)
    assert window.capacity(T) == 2  # min(2 - 0 busy, 2 + 2 - 2 held)

    window.accept(T, [job(3)], now=0.0)
    (third,) = run_all(window)
    window.finishing(third)
    assert window.capacity(T) == 1  # min(2 - 0, 4 - 3): the backlog binds, not the slots

    window.accept(T, [job(4)], now=0.0)
    assert window.capacity(T) == 0  # min(2 - 1, 4 - 4)
    assert not window.worth_claim(T)

    window.forget(first[0])  # the completer wrote one outcome
    assert window.capacity(T) == 1


def test_finishing_a_pending_job_frees_its_place_too() -> None:
    """Only pending and running are busy: the state, not the path to it, decides."""
    window = make_window(slots=1, prefetch=0, backlog=5)
    (held,) = window.accept(T, [job(1)], now=0.0)
    window.start_next(T)
    window.finishing(held)
    window.finishing(held)  # twice: counted once
    assert window.capacity(T) == 1
    assert window.in_state(State.FINISHING) == [held]


def test_self_done_frees_the_place_and_leaves_the_heartbeat() -> None:
    """A job its handler completed needs no lease, but stays held until its handler returns."""
    window = make_window(slots=1, prefetch=0, backlog=1)
    (held,) = window.accept(T, [job(1)], now=0.0)
    window.start_next(T)
    window.self_done(held)
    assert held.state is State.SELF_DONE
    assert window.capacity(T) == 1  # min(1 - 0 busy, 1 + 1 - 1 held)
    assert window.leased() == []
    assert window.holds(held)
    assert window.in_flight() == 1

    window.finishing(held)  # its handler returns: it stays self-done
    assert held.state is State.SELF_DONE
    window.forget(held)
    assert window.capacity(T) == 1
    assert len(window) == 0


def test_self_done_only_from_a_busy_state() -> None:
    """A job already finishing keeps its outcome; being told it was self-done changes nothing."""
    window = make_window(slots=1, prefetch=0, backlog=1)
    (held,) = window.accept(T, [job(1)], now=0.0)
    window.start_next(T)
    window.finishing(held)
    window.self_done(held)
    assert held.state is State.FINISHING
    assert window.leased() == [held]
    assert window.capacity(T) == 1


def test_leased_excludes_only_self_done_jobs() -> None:
    """Pending, running and finishing jobs all keep their lease; self-done ones do not."""
    window = make_window(slots=2, prefetch=2, backlog=4)
    a, b, c, d = window.accept(T, jobs(1, 2, 3, 4), now=0.0)
    window.start_next(T)  # a
    window.start_next(T)  # b
    window.start_next(T)  # c
    window.finishing(b)
    window.self_done(c)
    assert {h.job.id for h in window.leased()} == {1, 2, 4}
    assert [h.state for h in (a, b, c, d)] == [
        State.RUNNING,
        State.FINISHING,
        State.SELF_DONE,
        State.PENDING,
    ]


def test_drop_pending_forgets_a_job_that_never_started() -> None:
    """A pending job lost or cancelled before its turn leaves the queue and the window."""
    window = make_window(slots=1, prefetch=2)
    a, b, c = window.accept(T, jobs(1, 2, 3), now=0.0)
    window.drop_pending(b)
    assert not window.holds(b)
    assert window.capacity(T) == 1
    assert [h.job.id for h in run_all(window)] == [1, 3]
    assert window.holds(a)
    assert window.holds(c)


def test_take_all_pending_forgets_every_unstarted_job_of_every_lane() -> None:
    """Shutdown gives back what never started; running jobs stay held."""
    window = ClaimWindow({T: 1, A: 2}, {T: 2, A: 2}, batch_size=10, backlog=2)
    threads = window.accept(T, jobs(1, 2, 3), now=0.0)
    asyncs = window.accept(A, jobs(10, 11), now=0.0)
    running = window.start_next(T)
    assert running is threads[0]

    taken = window.take_all_pending()
    assert {h.job.id for h in taken} == {2, 3, 10, 11}
    assert all(not window.holds(h) for h in taken)
    assert window.holds(running)
    assert not window.has_pending(T)
    assert not window.has_pending(A)
    assert window.start_next(T) is None
    assert window.capacity(T) == 2  # window 3, one running
    assert window.capacity(A) == 4
    assert window.in_flight() == 1
    assert asyncs[0].state is State.PENDING  # given back, never started
    assert window.take_all_pending() == []


def test_forget_is_idempotent() -> None:
    """Forgetting twice (the completer and a lost lease both report) counts once."""
    window = make_window(slots=1, prefetch=1, backlog=1)
    a, b = window.accept(T, jobs(1, 2), now=0.0)
    window.start_next(T)
    window.forget(a)
    window.forget(a)
    assert window.capacity(T) == 1  # not 2: b still pending
    assert window.holds(b)
    assert len(window) == 1


def test_forget_ignores_a_held_the_window_does_not_hold() -> None:
    """A stale ``Held`` of the same job id (an earlier claim) must not drop the current one."""
    window = make_window(slots=1, prefetch=0, backlog=0)
    (current,) = window.accept(T, [job(1, attempts=2)], now=0.0)
    stale = Held(job(1, attempts=1), T, claimed_at=0.0)
    window.forget(stale)
    assert window.holds(current)
    assert not window.holds(stale)
    assert window.capacity(T) == 0
    assert len(window) == 1

    window.forget(Held(job(99), T, claimed_at=0.0))  # never held at all
    assert len(window) == 1


def test_transitions_of_a_forgotten_job_do_not_touch_the_counts() -> None:
    """A handler returning after its job was forgotten (lost, cancelled) frees nothing twice."""
    window = make_window(slots=1, prefetch=0, backlog=0)
    (held,) = window.accept(T, [job(1)], now=0.0)
    window.start_next(T)
    window.forget(held)
    assert window.capacity(T) == 1
    window.finishing(held)
    window.self_done(held)
    assert window.capacity(T) == 1
    window.accept(T, [job(2)], now=0.0)
    assert window.capacity(T) == 0


def test_counts_match_the_states_after_any_sequence_of_transitions() -> None:
    """Random walks through every transition keep the counters equal to a recount."""
    rng = random.Random(20240601)
    slots, prefetch, backlog = 3, 2, 2
    for _ in range(200):
        window = ClaimWindow(
            {T: slots, A: slots}, {T: prefetch, A: prefetch}, batch_size=4, backlog=backlog
        )
        next_id = 0
        everything: list[Held] = []
        for _ in range(40):
            lane = rng.choice((T, A))
            step = rng.randrange(7)
            held = [h for h in everything if h.lane is lane]
            if step == 0 and window.capacity(lane) > 0:
                count = rng.randint(1, window.capacity(lane))
                everything += window.accept(lane, jobs(*range(next_id, next_id + count)), 0.0)
                next_id += count
            elif step == 1:
                window.start_next(lane)
            elif step == 2 and held:
                window.finishing(rng.choice(held))
            elif step == 3 and held:
                window.self_done(rng.choice(held))
            elif step == 4 and held:
                window.forget(rng.choice(held))
            elif step == 5:
                pending = [h for h in held if h.state is State.PENDING and window.holds(h)]
                if pending:
                    window.drop_pending(rng.choice(pending))
            elif step == 6 and rng.random() < 0.1:
                window.take_all_pending()
            for each in (T, A):
                mine = [h for h in everything if h.lane is each and window.holds(h)]
                busy = sum(window_busy(h.state) for h in mine)
                window_size = slots + prefetch
                expected = min(window_size - busy, window_size + backlog - len(mine))
                assert window.capacity(each) == expected
            assert len(window) == sum(window.holds(h) for h in everything)
            assert window.in_flight() == len(window)


# -- lanes -----------------------------------------------------------------------------------------


def test_two_lanes_are_independent() -> None:
    """Thread and asyncio jobs have their own slots, prefetch, pending queue and backlog count."""
    window = ClaimWindow({T: 2, A: 10}, {T: 1, A: 0}, batch_size=4, backlog=1)
    assert window.lanes() == (T, A)
    assert window.capacity(T) == 3
    assert window.capacity(A) == 10

    threads = window.accept(T, jobs(1, 2, 3), now=0.0)
    assert window.capacity(T) == 0
    assert window.capacity(A) == 10
    assert window.worth_claim(A)
    assert not window.worth_claim(T)
    assert window.has_pending(T)
    assert not window.has_pending(A)
    assert window.start_next(A) is None

    asyncs = window.accept(A, jobs(10, 11), now=0.0)
    started = window.start_next(A)
    assert started is asyncs[0]
    assert started.lane is A
    assert window.start_next(T) is threads[0]

    run_all(window, T)
    for held in threads:
        window.finishing(held)
    assert window.capacity(T) == 1  # min(3 - 0, 3 + 1 - 3)
    assert window.capacity(A) == 8
    assert len(window) == 5
    assert window.in_flight() == 5


@pytest.mark.parametrize("lane", [T, A])
def test_a_single_lane_window_serves_either_lane(lane: Lane) -> None:
    """A worker with only sync or only async handlers has one lane."""
    window = ClaimWindow({lane: 2}, {lane: 2}, batch_size=10, backlog=0)
    assert window.lanes() == (lane,)
    (held,) = window.accept(lane, [job(1)], now=0.0)
    assert window.start_next(lane) is held
    assert window.capacity(lane) == 3


def test_adaptive_prefetch_grows_for_short_jobs_and_shrinks_for_long_ones() -> None:
    """From one waiting job per slot up to the limit while the jobs claimed ahead stay under
    ``TARGET_WAIT`` of work per slot, and back down when runs get long."""
    from pgqueue._worker.window import TARGET_WAIT

    window = ClaimWindow({T: 4}, {T: 4}, batch_size=50, backlog=500, adaptive={T: 50})
    assert (window.prefetch(T), window.capacity(T)) == (4, 8)  # nothing measured yet
    for _ in range(20):
        window.ran(T, 0.0001)  # 0.1 ms jobs: 50 ahead is 1.25 ms of work per thread
    assert (window.prefetch(T), window.capacity(T)) == (50, 54)
    for _ in range(40):
        window.ran(T, 0.5)  # half-second jobs: one waiting job per thread already waits 0.5 s
    assert window.prefetch(T) == 4
    # In between: as many as fit in TARGET_WAIT per slot.
    middle = ClaimWindow({T: 4}, {T: 4}, batch_size=50, backlog=500, adaptive={T: 50})
    middle.ran(T, 0.01)
    assert middle.prefetch(T) == int(4 * TARGET_WAIT / 0.01) == 20
    # A claim is still worth it at half the (new) window.
    assert not middle.worth_claim(T) or middle.capacity(T) >= 12


def test_fixed_prefetch_ignores_run_times() -> None:
    window = make_window(slots=2, prefetch=3)
    for _ in range(10):
        window.ran(T, 0.00001)
    assert window.prefetch(T) == 3


def test_a_shrinking_window_never_reports_room_it_does_not_have() -> None:
    window = ClaimWindow({T: 2}, {T: 2}, batch_size=50, backlog=500, adaptive={T: 50})
    window.ran(T, 0.0001)
    held = window.accept(T, jobs(*range(1, 41)), 0.0)
    assert len(held) == 40
    window.ran(T, 5.0)  # long jobs now: the window is back to 2 + 2
    assert window.capacity(T) < 0
    assert not window.worth_claim(T)


def test_room_reserved_by_a_claim_on_the_wire_is_neither_capacity_nor_idle_slots() -> None:
    """Two claimers (the claiming loop, a claim riding on a completion) never claim the same
    room: each reserves what it asks for until its jobs are held."""
    window = make_window(slots=4, prefetch=4, batch_size=100)
    assert (window.capacity(T), window.idle_slots(T)) == (8, 4)
    window.reserve(T, 3)
    assert (window.capacity(T), window.idle_slots(T)) == (5, 1)
    window.unreserve(T, 3)
    window.accept(T, jobs(1, 2, 3), 0.0)
    assert (window.capacity(T), window.idle_slots(T)) == (5, 1)
    window.reserve(T, 5)
    assert (window.capacity(T), window.idle_slots(T)) == (0, 0)
