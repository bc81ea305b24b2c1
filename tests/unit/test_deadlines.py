"""The bookkeeping of handler timeouts (:mod:`pgqueue._worker.deadlines`) and the window's side
of a job given up at timeout + grace: no database, no thread."""

from __future__ import annotations

from worker_parts import held_job

from pgqueue._worker.deadlines import Deadlines, Due
from pgqueue._worker.window import ClaimWindow, Lane, State
from pgqueue.jobs import JobContext


def test_a_job_without_a_timeout_costs_nothing_and_the_default_applies_to_it() -> None:
    none = Deadlines(None, 1.0)
    held = held_job(1)
    assert not none.started(held, now=100.0)
    assert len(none) == 0
    assert held.deadline is None
    default = Deadlines(2.0, 1.0)
    assert default.started(held, now=100.0)
    assert (held.timeout, held.deadline) == (2.0, 103.0)


def test_each_job_is_due_at_its_timeout_then_at_the_grace_soonest_first() -> None:
    deadlines = Deadlines(None, 0.5)
    slow, fast = held_job(1), held_job(2)
    slow.job.timeout, fast.job.timeout = 5.0, 1.0
    assert deadlines.started(slow, now=0.0)  # the first deadline
    assert deadlines.started(fast, now=0.0)  # sooner than the one before: wake the watchdog
    assert deadlines.next_at() == 1.0
    assert deadlines.due(0.9) == []
    assert deadlines.due(1.0) == [(Due.TIMEOUT, fast)]
    fast.timed_out = True  # what the runtime does with it
    assert deadlines.next_at() == 1.5
    assert deadlines.due(1.2) == []
    assert deadlines.due(1.5) == [(Due.GIVE_UP, fast)]
    assert deadlines.next_at() == 5.0
    assert deadlines.due(10.0) == [(Due.TIMEOUT, slow)]
    assert len(deadlines) == 1


def test_a_job_that_ended_is_never_due_and_not_kept() -> None:
    """Only running jobs are held: jobs shorter than their timeouts leave nothing behind."""
    deadlines = Deadlines(1.0, 0.0)
    held = held_job(1)
    deadlines.started(held, now=0.0)
    deadlines.ended(held)
    assert len(deadlines) == 0
    other = held_job(2)
    deadlines.started(other, now=0.0)
    other.ended = True  # ended without being dropped: dropped when next looked at
    assert deadlines.due(5.0) == []
    assert len(deadlines) == 0
    assert deadlines.next_at() is None


def test_an_abandoned_job_leaves_the_window_and_keeps_its_slot_until_it_returns() -> None:
    window = ClaimWindow({Lane.THREADS: 2}, {Lane.THREADS: 0}, batch_size=10, backlog=10)
    (held,) = window.accept(Lane.THREADS, [JobContext(1, "q", {}, 1)], now=0.0)
    assert window.start_next(Lane.THREADS) is held
    assert window.capacity(Lane.THREADS) == 1
    window.abandon(held)
    assert not window.holds(held)  # out of the heartbeat's and the completer's view
    assert window.leased() == []
    assert window.capacity(Lane.THREADS) == 1  # its thread is still taken
    window.forget(held)  # the completer's report of its failure: nothing more to drop
    assert window.capacity(Lane.THREADS) == 1
    window.returned(held)
    assert held.state is State.FINISHING
    assert window.capacity(Lane.THREADS) == 2
