"""``JobContext.stopping`` is a :class:`~pgqueue._base.events.LazyEvent`: a real ``threading.Event``
whose condition is built on first use. It must behave as the standard library's, across threads."""

from __future__ import annotations

import sys
import threading

import pytest

from pgqueue._base import events
from pgqueue._base.events import LazyEvent, stopping_event
from pgqueue.jobs import JobContext


def test_this_python_gets_the_lazy_event_and_a_job_carries_one() -> None:
    assert events._stdlib_matches()
    job = JobContext(1, "q", {}, 1)
    assert type(job.stopping) is LazyEvent
    assert isinstance(job.stopping, threading.Event)
    assert job.stopping is not JobContext(2, "q", {}, 1).stopping


def test_no_condition_is_built_until_the_event_is_used() -> None:
    event = stopping_event()
    assert not event.is_set()
    assert vars(event)["_lazy_cond"] is None
    assert event.wait(0) is False
    assert isinstance(vars(event)["_lazy_cond"], threading.Condition)


def test_set_clear_and_wait_as_the_standard_library() -> None:
    event = stopping_event()
    plain = threading.Event()
    for e in (event, plain):
        assert e.wait(0.01) is False
        e.set()
        assert e.is_set()
        assert e.wait() is True
        assert e.wait(0) is True
        e.clear()
        assert not e.is_set()
        assert e.wait(0.01) is False
    assert repr(event).endswith(": unset>")
    event.set()
    assert repr(event).endswith(": set>")


@pytest.mark.parametrize("waiters", [1, 4])
def test_a_set_from_another_thread_wakes_every_waiter(waiters: int) -> None:
    event = stopping_event()
    woke: list[bool] = []
    lock = threading.Lock()
    started = threading.Barrier(waiters + 1)

    def wait() -> None:
        started.wait(10)
        got = event.wait(30)
        with lock:
            woke.append(got)

    threads = [threading.Thread(target=wait) for _ in range(waiters)]
    for t in threads:
        t.start()
    started.wait(10)
    event.set()
    for t in threads:
        t.join(30)
    assert woke == [True] * waiters


def _touch(event: threading.Event, go: threading.Barrier, seen: list[threading.Condition]) -> None:
    go.wait(10)
    seen.append(event._cond)  # type: ignore[attr-defined]  # list.append is atomic


def test_threads_that_touch_a_fresh_event_together_share_one_condition() -> None:
    # Switch threads as often as CPython can, so an unguarded build would race (it does: with
    # the lock taken out, this fails).
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        _touch_together(50)
    finally:
        sys.setswitchinterval(interval)


def _touch_together(rounds: int) -> None:
    for _ in range(rounds):
        event = stopping_event()
        go = threading.Barrier(8)
        seen: list[threading.Condition] = []
        threads = [threading.Thread(target=_touch, args=(event, go, seen)) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert len(seen) == 8
        assert len({id(c) for c in seen}) == 1


def test_a_standard_library_that_keeps_its_state_elsewhere_gets_plain_events(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(events, "_LAZY", False)
    assert type(stopping_event()) is threading.Event
