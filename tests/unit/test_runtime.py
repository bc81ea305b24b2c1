"""How the runtime ends a job: what it hands the completer, what it counts, logs and tells hooks.

No database: the runtime's collaborators are the window (real), the hooks (a recording one) and
the completer (a fake that records the hand-over; the real one's batching is
``test_completer.py``'s). Jobs enter through :meth:`Runtime.accept`, as a claim delivers them.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

import pytest

from pgqueue._worker.runtime import Runtime
from pgqueue._worker.window import ClaimWindow, Held, Lane, State
from pgqueue.jobs import Outcome
from pgqueue.results import Settled
from pgqueue.retry_policy import RetryPolicy
from tests.worker_parts import FakeCompleter, Recorder, claimed_jobs, make_runtime

T = Lane.THREADS
A = Lane.ASYNC

#: Queue ``strict`` fails for good on a ValueError; every other queue retries everything.
STRICT = RetryPolicy(non_retryable=(ValueError,))


def setup(slots: int = 2, lane: Lane = T) -> tuple[Runtime, FakeCompleter, Recorder, list[str]]:
    completer, hooks, woken = FakeCompleter(), Recorder(), []
    window = ClaimWindow({lane: slots}, {lane: 1}, batch_size=10, backlog=5)
    runtime = make_runtime(
        window,
        completer=completer,
        hooks=[hooks],
        policies={"strict": STRICT},
        wake_async=lambda: woken.append("async"),
    )
    return runtime, completer, hooks, woken


def started(runtime: Runtime, *ids: int, queue: str = "q", lane: Lane = T) -> list[Held]:
    """Claim ``ids`` and start each, as a lane would (its handler then runs)."""
    with runtime.lock:
        runtime.accept(lane, claimed_jobs(list(ids), queue))
        held = [runtime.window.start_next(lane) for _ in ids]
    assert all(h is not None for h in held)
    return [h for h in held if h is not None]


def counts(runtime: Runtime) -> dict[str, int]:
    stats = vars(runtime.stats)
    return {name: value for name, value in stats.items() if value}


def test_accept_counts_claims_tells_hooks_and_wakes_the_async_lane() -> None:
    runtime, _, hooks, woken = setup(lane=A)
    with runtime.lock:
        assert runtime.accept(A, claimed_jobs([1, 2])) == 2
        assert runtime.accept(A, []) == 0
        pending = runtime.window.in_state(State.PENDING)
    assert [h.job.id for h in pending] == [1, 2]
    assert counts(runtime) == {"claimed": 2}
    assert (hooks.events(1), hooks.events(2)) == (["on_claimed"], ["on_claimed"])
    assert woken == ["async"]  # once per claim, not per job


def test_a_handler_that_returned_hands_its_job_to_the_completer_and_frees_its_slot() -> None:
    """Once its handler returned a job no longer takes a slot (the next one may be claimed), but
    it stays held (its lease kept) until the completer reports its write."""
    runtime, completer, hooks, _ = setup(slots=2)
    (held,) = started(runtime, 1)
    with runtime.lock:
        before = runtime.window.capacity(T)
    held.handler_seconds = 0.25
    runtime.finish(held, None)
    assert [(kind, h.job.id) for kind, h, _ in completer.handed] == [("complete", 1)]
    with runtime.lock:
        assert runtime.window.capacity(T) == before + 1
        assert runtime.window.holds(held)
        assert held in runtime.window.leased()
    assert counts(runtime) == {"claimed": 1}  # nothing counted before the write

    runtime.report([(held, Outcome.DONE, "")])
    with runtime.lock:
        assert not runtime.window.holds(held)
        assert runtime.window.in_flight() == 0
    assert counts(runtime) == {"claimed": 1, "done": 1}
    assert hooks.calls == [("on_claimed", 1, ()), ("on_succeeded", 1, (0.25,))]


def test_the_last_busy_job_to_finish_hurries_the_completer_and_no_other_does() -> None:
    """While another job is pending or running, an outcome may join this one's batch: the
    completer lingers. The job that leaves nothing busy has it write at once."""
    runtime, completer, _, _ = setup(slots=2)
    first, second = started(runtime, 1, 2)
    with runtime.lock:
        runtime.accept(T, claimed_jobs([3]))  # pending: it will finish too
    runtime.finish(first, None)
    assert completer.hurried == 0
    with runtime.lock:
        third = runtime.window.start_next(T)
    assert third is not None
    runtime.finish(second, None)
    assert completer.hurried == 0
    runtime.finish(third, ValueError("the last one"))
    assert completer.hurried == 1


def test_a_handler_error_is_handed_over_as_a_failure_under_its_queues_policy() -> None:
    runtime, completer, _, _ = setup()
    plain, strict = started(runtime, 1), started(runtime, 2, queue="strict")
    runtime.finish(plain[0], ValueError("bad payload"))
    runtime.finish(strict[0], ValueError("bad payload"))
    assert [(kind, h.job.id, args) for kind, h, args in completer.handed] == [
        ("fail", 1, ("ValueError: bad payload", True, RetryPolicy())),
        ("fail", 2, ("ValueError: bad payload", False, STRICT)),
    ]
    # Each failed attempt hands its traceback over with it, for the job's error history.
    assert [
        t is not None and t.endswith("ValueError: bad payload") for t in completer.tracebacks
    ] == [True, True]


def test_a_cancelled_task_is_a_failed_attempt_and_a_snooze_is_handed_over_as_one() -> None:
    """A coroutine cancelled at the shutdown deadline (a ``BaseException``) spends its attempt, so
    a job that always outlasts the deadline does not run forever; a handler that raised
    :class:`pgqueue.Snooze` (the executors set ``held.snooze``) is snoozed, not failed."""
    runtime, completer, _, _ = setup(lane=A)
    cancelled, snoozed = started(runtime, 1, 2, lane=A)
    runtime.finish(cancelled, asyncio.CancelledError())
    snoozed.snooze = timedelta(seconds=30)
    runtime.finish(snoozed, Exception("the Snooze the executors caught"))
    assert [(kind, h.job.id, args) for kind, h, args in completer.handed] == [
        ("fail", 1, ("HandlerCancelled: the handler's task was cancelled", True, RetryPolicy())),
        ("snooze", 2, ()),
    ]


def test_report_counts_logs_and_tells_hooks_once_per_job(
    caplog: pytest.LogCaptureFixture,
) -> None:
    runtime, _, hooks, _ = setup(slots=5)
    held = started(runtime, 1, 2, 3, 4, 5)
    for h in held:
        h.handler_seconds = 0.5
        runtime.finish(h, None)
    held[3].snooze = timedelta(seconds=7)
    with caplog.at_level(logging.INFO, "pgqueue.worker"):
        runtime.report(
            [
                (held[0], Outcome.DONE, ""),
                (held[1], Outcome.RETRY, "retry in 0:00:20: ValueError: x"),
                (held[2], Outcome.FAILED, "ValueError: x"),
                (held[3], Outcome.SNOOZED, "0:00:07"),
                (held[4], Outcome.LOST, "guard matched no row at completion"),
            ]
        )
    assert counts(runtime) == {
        "claimed": 5,
        "done": 1,
        "retried": 1,
        "failed": 1,
        "snoozed": 1,
        "lost": 1,
    }
    ended = [(event, i, args) for event, i, args in hooks.calls if event != "on_claimed"]
    assert ended == [
        ("on_succeeded", 1, (0.5,)),
        ("on_retry", 2, (0.5, "retry in 0:00:20: ValueError: x")),
        ("on_failed", 3, (0.5, "ValueError: x")),
        ("on_snoozed", 4, (0.5, timedelta(seconds=7))),
        ("on_lost", 5, ("guard matched no row at completion",)),
    ]
    lines = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "pgqueue.worker"]
    assert lines == [
        ("INFO", "job 1 queue=q attempt=1: done"),
        ("WARNING", "job 2 queue=q attempt=1: retry in 0:00:20: ValueError: x"),
        ("ERROR", "job 3 queue=q attempt=1: failed: ValueError: x"),
        ("INFO", "job 4 queue=q attempt=1: snoozed for 0:00:07"),
        (
            "WARNING",
            "job 5 queue=q attempt=1: lost (guard matched no row at completion); outcome dropped",
        ),
    ]
    with runtime.lock:
        assert len(runtime.window) == 0
        assert runtime.window.capacity(T) == 5 + 1  # slots + prefetch, all free again


def test_a_ridden_completion_is_reported_but_frees_nothing_a_parked_queue_waits_for() -> None:
    """A completion written with its queue's next claim (``rode``) is counted, logged and told
    like any other, but does not move ``finished``: that claim saw its slot free, so the report
    must not unpark the queue for a claim of the loop's own. The job beside it that did not ride
    moves it."""
    runtime, _, hooks, _ = setup(slots=2)
    ridden, plain = started(runtime, 1, 2)
    for h in (ridden, plain):
        runtime.finish(h, None)
    ridden.rode = True
    runtime.report([(ridden, Outcome.DONE, "")])
    assert runtime.finished == 0
    assert counts(runtime) == {"claimed": 2, "done": 1}
    assert ("on_succeeded", 1) in [(event, i) for event, i, _ in hooks.calls]
    runtime.report([(plain, Outcome.DONE, "")])
    assert runtime.finished == 1
    assert counts(runtime) == {"claimed": 2, "done": 2}


# -- what the heartbeat learnt ---------------------------------------------------------------------


def test_a_job_the_lease_extension_missed_is_marked_by_how_it_settled() -> None:
    """Done by its own handler: stop extending its lease, let the handler finish. Cancelled or
    lost while running: tell the handler to stop (cancel its task), drop its outcome later.
    Cancelled, lost or done by someone else before it started: dropped at once and counted. A
    job whose lease was kept, whose outcome the completer is writing (its guard will tell), or
    that the window no longer holds, is left alone."""
    runtime, _, hooks, _ = setup(slots=5, lane=A)
    cancels: list[int] = []
    running = started(runtime, 1, 2, 3, 4, 5, lane=A)
    for h in running:
        h.cancel_task = lambda i=h.job.id: cancels.append(i)
    kept, self_done, cancelled, lost, gone = running
    (writing,) = started(runtime, 8, lane=A)
    runtime.finish(writing, None)  # its outcome is with the completer, whose guard will tell
    with runtime.lock:
        runtime.window.forget(gone)
        runtime.accept(A, claimed_jobs([6, 7, 9]))
        unstarted_cancelled, unstarted_lost, unstarted_done = runtime.window.in_state(State.PENDING)
    checked = [*running, unstarted_cancelled, unstarted_lost, unstarted_done, writing]
    runtime.leases_checked(
        checked,
        {kept.job.id},
        {
            self_done.job.id: Settled.DONE_BY_HANDLER,
            cancelled.job.id: Settled.CANCELLED,
            unstarted_cancelled.job.id: Settled.CANCELLED,
            writing.job.id: Settled.CANCELLED,
            # Done, under our attempt, before its handler began: whoever did it, not this worker.
            unstarted_done.job.id: Settled.DONE_BY_HANDLER,
        },
    )
    assert [h.job.id for h in checked if h.job.stopping.is_set()] == [3, 4, 6, 7, 9]
    assert (cancelled.job.cancelled, lost.job.lease_lost) == (True, True)
    assert (kept.job.lease_lost, kept.job.cancelled, kept.job.stopping.is_set()) == (False,) * 3
    assert not gone.job.stopping.is_set()
    assert (writing.job.cancelled, writing.job.stopping.is_set()) == (False, False)
    assert sorted(cancels) == [3, 4]  # the async handlers' tasks
    with runtime.lock:
        assert [h.job.id for h in runtime.window.leased()] == [1, 3, 4, 8]  # 2 completed itself
        assert runtime.window.holds(self_done)
        assert not runtime.window.holds(unstarted_cancelled)
        assert not runtime.window.holds(unstarted_lost)
        assert not runtime.window.holds(unstarted_done)
    assert counts(runtime) == {"claimed": 9, "cancelled": 1, "lost": 2}
    assert hooks.events(6)[-1] == "on_cancelled"
    assert hooks.calls[-2:] == [
        ("on_lost", 7, ("lease lost, unstarted",)),
        ("on_lost", 9, ("lease lost, unstarted",)),
    ]


def test_a_stopped_job_whose_handler_returns_is_dropped_once_without_a_write() -> None:
    """The handler of a cancelled or lost job returns at last: its outcome is not written (the
    row is not ours), the job is counted and told to hooks exactly once, and its slot is free."""
    runtime, completer, hooks, _ = setup(slots=2)
    cancelled, lost = started(runtime, 1, 2)
    runtime.leases_checked([cancelled, lost], set(), {1: Settled.CANCELLED})
    assert counts(runtime) == {"claimed": 2}  # counted when the handler is done, not before
    runtime.finish(cancelled, None)
    runtime.finish(lost, RuntimeError("it noticed job.stopping"))
    assert completer.handed == []
    assert counts(runtime) == {"claimed": 2, "cancelled": 1, "lost": 1}
    assert hooks.events(1) == ["on_claimed", "on_cancelled"]
    assert hooks.calls[-1] == ("on_lost", 2, ("lease lost",))
    with runtime.lock:
        assert runtime.window.in_flight() == 0
        assert runtime.window.capacity(T) == 2 + 1
