"""The completer's batching: which outcomes go into one flush, when it is written, and close().

No database: the completer is given a write function (its ``write`` seam) that records each batch
and says what was written; its engine refuses connections. What one flush sends to PostgreSQL, and
how a retried flush skips what committed, is ``tests/integration/test_flush.py``'s business.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from pgqueue._worker.completer import SECOND_RIDE_MIN, Completer, Failure, Refill, Urgent
from pgqueue._worker.replay import Replay
from pgqueue._worker.window import Held, completes_plainly
from pgqueue.jobs import Outcome
from pgqueue.retry_policy import RetryPolicy
from tests.worker_parts import held_job, offline_engine, until

POLICY = RetryPolicy()
Batch = tuple[list[int], list[int], list[int]]


class Writes:
    """Records each batch as ``(done ids, failed ids, snoozed ids)`` and writes it: every job's
    outcome is what it asked for. ``fail_with`` makes the first write raise it; ``blocked`` makes
    every write retry until ``keep_trying()`` says stop, then give up; ``gate``: the first write
    waits for it."""

    def __init__(
        self,
        *,
        fail_with: Exception | None = None,
        blocked: bool = False,
        gate: threading.Event | None = None,
    ) -> None:
        self.batches: list[Batch] = []
        self.gave_up_at: float | None = None
        self._fail_with = fail_with
        self._blocked = blocked
        self._gate = gate
        self._lock = threading.Lock()

    def __call__(
        self,
        done: list[Held],
        failed: list[Failure],
        snoozed: list[Held],
        keep_trying: Callable[[], bool],
    ) -> list[tuple[Held, Outcome, str]] | None:
        with self._lock:
            self.batches.append(
                ([h.job.id for h in done], [f.held.job.id for f in failed], ids(snoozed))
            )
        if self._gate is not None:
            gate, self._gate = self._gate, None
            assert gate.wait(10.0)
        if self._fail_with is not None:
            error, self._fail_with = self._fail_with, None
            raise error
        if self._blocked:
            while keep_trying():
                time.sleep(0.01)
            self.gave_up_at = time.monotonic()
            return None
        outcomes = [(h, Outcome.DONE, "") for h in done]
        for f in failed:
            outcomes.append((f.held, Outcome.RETRY if f.retry else Outcome.FAILED, f.error))
        outcomes += [(h, Outcome.SNOOZED, "") for h in snoozed]
        return outcomes


class Reports:
    """The completer's ``report`` callback: each batch's ``{job id: (outcome, detail)}``."""

    def __init__(self) -> None:
        self.batches: list[dict[int, tuple[Outcome, str]]] = []

    def __call__(self, outcomes: list[tuple[Held, Outcome, str]]) -> None:
        self.batches.append({h.job.id: (o, d) for h, o, d in outcomes})


def ids(held: list[Held]) -> list[int]:
    return [h.job.id for h in held]


@contextmanager
def completing(
    writes: Writes,
    *,
    batch_size: int = 500,
    flush_delay: float = 0.5,
    refill: Refill | None = None,
    urgent: Urgent | None = None,
    overlap: bool = False,
) -> Iterator[tuple[Completer, Reports]]:
    """A started completer; closed on the way out (if the test did not close it)."""
    reports = Reports()
    completer = Completer(
        offline_engine(),
        reports,
        lock_timeout_ms=1000,
        batch_size=batch_size,
        flush_delay=flush_delay,
        write=writes,
        refill=refill,
        urgent=urgent,
        overlap=overlap,
    )
    completer.start()
    try:
        yield completer, reports
    finally:
        completer.close(time.monotonic() + 5.0)


def test_outcomes_that_arrive_together_are_one_flush_with_a_list_per_kind() -> None:
    """Completions, failures and snoozes handed over within the linger are written as one batch
    (one statement per kind), reported once, after the write, with each job's outcome."""
    writes = Writes()
    with completing(writes) as (completer, reports):
        for i in (1, 2, 3):
            completer.complete(held_job(i))
        completer.fail(held_job(4), "ValueError: x", retry=True, policy=POLICY)
        completer.fail(held_job(5), "TypeError: y", retry=False, policy=POLICY)
        snoozed = held_job(6)
        completer.snooze(snoozed)
        until(lambda: len(reports.batches) == 1, "the batch reported")
    assert writes.batches == [([1, 2, 3], [4, 5], [6])]
    assert reports.batches == [
        {
            1: (Outcome.DONE, ""),
            2: (Outcome.DONE, ""),
            3: (Outcome.DONE, ""),
            4: (Outcome.RETRY, "ValueError: x"),
            5: (Outcome.FAILED, "TypeError: y"),
            6: (Outcome.SNOOZED, ""),
        }
    ]


def test_the_linger_gathers_outcomes_that_arrive_a_moment_apart() -> None:
    """The first outcome does not go out alone: one that arrives within ``flush_delay`` joins
    its flush."""
    writes = Writes()
    with completing(writes, flush_delay=1.0) as (completer, reports):
        completer.complete(held_job(1))
        time.sleep(0.1)
        completer.complete(held_job(2))
        until(lambda: len(reports.batches) == 1, "the batch reported")
    assert writes.batches == [([1, 2], [], [])]


def test_a_full_batch_ends_the_linger() -> None:
    """``batch_size`` outcomes go out without waiting out the linger, at most ``batch_size`` per
    flush; what is left of a burst waits for the linger."""
    writes = Writes()
    with completing(writes, batch_size=3, flush_delay=60.0) as (completer, reports):
        completer.complete(held_job(1))
        time.sleep(0.2)  # the completer lingers now, for a minute unless its batch fills
        for i in range(2, 8):
            completer.complete(held_job(i))
        until(lambda: len(reports.batches) == 2, "two full batches reported")
        time.sleep(0.1)
        assert writes.batches == [([1, 2, 3], [], []), ([4, 5, 6], [], [])]  # the seventh waits


def test_close_writes_everything_left_at_once() -> None:
    """Once closing, nothing lingers: what was handed over while a write was under way goes out
    right after it, batch after batch, and close() returns when all is reported."""
    gate = threading.Event()
    writes = Writes(gate=gate)
    with completing(writes, batch_size=3, flush_delay=60.0) as (completer, reports):
        for i in (1, 2, 3):
            completer.complete(held_job(i))
        until(lambda: len(writes.batches) == 1, "the first write begun")
        for i in range(4, 8):
            completer.complete(held_job(i))  # while the first write is under way
        threading.Timer(0.2, gate.set).start()  # the first write returns once close() began
        closing = time.monotonic()
        completer.close(closing + 5.0)
        assert time.monotonic() - closing < 5.0  # it did not wait out the linger
        assert writes.batches == [([1, 2, 3], [], []), ([4, 5, 6], [], []), ([7], [], [])]
        assert [sorted(batch) for batch in reports.batches] == [[1, 2, 3], [4, 5, 6], [7]]


def test_a_write_that_cannot_be_made_keeps_trying_until_the_close_deadline() -> None:
    """While the worker runs, a failing write is retried for as long as it takes; once
    :meth:`Completer.close` set a deadline it gives up there, and the batch's jobs are reported
    lost (nothing was written for them)."""
    writes = Writes(blocked=True)
    with completing(writes, flush_delay=0.0) as (completer, reports):
        completer.complete(held_job(1))
        completer.fail(held_job(2), "ValueError: x", retry=True, policy=POLICY)
        completer.snooze(held_job(3))
        until(lambda: len(writes.batches) == 1, "the write begun")
        time.sleep(0.3)
        assert reports.batches == []  # no deadline yet: still trying
        deadline = time.monotonic() + 0.3
        completer.close(deadline)
    assert writes.gave_up_at is not None
    assert writes.gave_up_at >= deadline
    assert reports.batches == [
        {
            1: (Outcome.LOST, "completion not written"),
            2: (Outcome.LOST, "failure not written"),
            3: (Outcome.LOST, "snooze not written"),
        }
    ]


def test_a_write_that_raises_reports_its_batch_lost_and_the_next_batch_is_written(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An error that is not transient ends that flush (logged), not the completer."""
    writes = Writes(fail_with=RuntimeError("a bug"))
    with caplog.at_level(logging.ERROR, "pgqueue.worker"), completing(writes) as (completer, rep):
        completer.complete(held_job(1))
        until(lambda: len(rep.batches) == 1, "the failed batch reported")
        completer.complete(held_job(2))
        until(lambda: len(rep.batches) == 2, "the next batch reported")
    assert rep.batches == [{1: (Outcome.LOST, "completion not written")}, {2: (Outcome.DONE, "")}]
    assert "flushing 1 job outcomes failed" in caplog.text
    assert "RuntimeError: a bug" in caplog.text


def test_a_hurried_outcome_is_written_without_the_linger() -> None:
    """``hurry()`` (the runtime: nothing else runs, so nothing can join the batch) ends the next
    linger at once, and only that one: the following outcome lingers again."""
    writes = Writes()
    with completing(writes, flush_delay=60.0) as (completer, reports):
        completer.hurry()
        completer.complete(held_job(1))
        until(lambda: len(reports.batches) == 1, "the hurried outcome written")
        completer.complete(held_job(2))
        time.sleep(0.3)
        assert writes.batches == [([1], [], [])]  # the second lingers (a minute here)


def test_an_outcome_a_parked_queue_waits_for_is_written_without_the_linger() -> None:
    """``urgent`` (the claimer: a job of a queue parked at its flow limit, whose next claim rides
    on this write) ends the linger for the batch it is asked about; a batch it does not call
    urgent lingers as before."""
    writes = Writes()
    asked: list[list[int]] = []

    def urgent(done: list[Held]) -> bool:
        asked.append(ids(done))
        return any(h.job.queue == "limited" for h in done)

    with completing(writes, flush_delay=60.0, urgent=urgent) as (completer, reports):
        completer.complete(held_job(1, queue="limited"))
        until(lambda: len(reports.batches) == 1, "the urgent outcome written")
        completer.complete(held_job(2, queue="plain"))
        time.sleep(0.3)
        assert writes.batches == [([1], [], [])]  # the plain one lingers (a minute here)
    assert asked[:2] == [[1], [2]]


class Refills:
    """The completer's ``refill`` seam: records ``(queue, ids)``; takes the queues of ``limited``
    and writes all their completions but those of ``lost`` (guard matched nothing)."""

    def __init__(self, limited: set[str], lost: frozenset[int] = frozenset()) -> None:
        self.calls: list[tuple[str, list[int]]] = []
        #: ``beside`` of each call, in order: True for the second rider's rides.
        self.beside: list[bool] = []
        self._limited = limited
        self._lost = lost

    def __call__(
        self, replay: Replay, queue: str, held: list[Held], beside: bool
    ) -> set[int] | None:
        self.calls.append((queue, ids(held)))
        self.beside.append(beside)
        if queue not in self._limited:
            return None
        return {h.job.id for h in held if completes_plainly(h) and h.job.id not in self._lost}


def test_plain_completions_of_a_limited_queue_ride_on_its_claim() -> None:
    """Completions without a result go to ``refill`` by queue; those it wrote are reported
    done and not written again; a queue it declines, a completion with a result, a failure and
    a completion whose guard matched nothing go to the usual write, in the same report."""
    writes = Writes()
    refills = Refills({"limited"}, lost=frozenset({3}))
    with completing(writes, refill=refills) as (completer, reports):
        completed = [held_job(i, queue="limited") for i in (1, 2, 3, 4)]
        completed[3].result = "42"
        completed.append(held_job(5, queue="plain"))
        for held in completed:
            completer.complete(held)
        completer.fail(held_job(6, queue="limited"), "ValueError: x", retry=True, policy=POLICY)
        until(lambda: len(reports.batches) == 1, "the batch reported")
    assert sorted(refills.calls) == [("limited", [1, 2, 3, 4]), ("plain", [5])]
    assert writes.batches == [([3, 4, 5], [6], [])]
    # Those the ride wrote are marked as ridden (their report frees nothing a claim waits for).
    assert {h.job.id for h in completed if h.rode} == {1, 2}
    assert reports.batches[0] == {
        1: (Outcome.DONE, ""),
        2: (Outcome.DONE, ""),
        3: (Outcome.DONE, ""),
        4: (Outcome.DONE, ""),
        5: (Outcome.DONE, ""),
        6: (Outcome.RETRY, "ValueError: x"),
    }


def test_a_batch_written_whole_by_refill_needs_no_other_write() -> None:
    writes = Writes()
    refills = Refills({"limited"})
    with completing(writes, refill=refills) as (completer, reports):
        completer.complete(held_job(1, queue="limited"))
        completer.complete(held_job(2, queue="limited"))
        until(lambda: len(reports.batches) == 1, "the batch reported")
    assert writes.batches == []
    assert set(reports.batches[0]) == {1, 2}


class HeldRides(Refills):
    """Refills whose first ride waits on ``release`` (a ride on the wire), the later ones not."""

    def __init__(self, limited: set[str]) -> None:
        super().__init__(limited)
        self.release = threading.Event()
        self.first_on_wire = threading.Event()
        self._lock = threading.Lock()
        self.replays: list[Replay] = []

    def __call__(
        self, replay: Replay, queue: str, held: list[Held], beside: bool
    ) -> set[int] | None:
        with self._lock:
            first = not self.calls
            written = super().__call__(replay, queue, held, beside)
            self.replays.append(replay)
        if first:
            self.first_on_wire.set()
            assert self.release.wait(10.0)
        return written


@contextmanager
def first_ride_on_wire(
    writes: Writes, rides: HeldRides, *, then_finished: int
) -> Iterator[Reports]:
    """A completer with a second rider, whose own ride of job 1 (queue ``limited``) is on the
    wire (held by ``rides``) when jobs 2 to ``1 + then_finished`` finish."""
    with completing(
        writes, flush_delay=0.001, refill=rides, urgent=lambda done: True, overlap=True
    ) as (completer, reports):
        completer.complete(held_job(1, queue="limited"))
        assert rides.first_on_wire.wait(5.0)
        for i in range(2, 2 + then_finished):
            completer.complete(held_job(i, queue="limited"))
        yield reports


def test_a_second_ride_goes_out_while_the_first_is_on_the_wire() -> None:
    """With ``overlap``, finished jobs of a parked queue that gather while the completer's own
    ride is on the wire (at least SECOND_RIDE_MIN) ride at once on another connection, marked
    ``beside`` (its completions go before the lock); both are reported; fewer wait for the
    completer."""
    writes = Writes()
    rides = HeldRides({"limited"})
    with first_ride_on_wire(writes, rides, then_finished=SECOND_RIDE_MIN) as reports:
        until(lambda: len(rides.calls) == 2, "the second ride sent while the first waits")
        assert rides.calls[1] == ("limited", list(range(2, 2 + SECOND_RIDE_MIN)))
        assert rides.beside == [False, True]
        assert rides.replays[0] is not rides.replays[1]
        rides.release.set()
        until(lambda: len(reports.batches) == 2, "both rides reported")
    assert writes.batches == []
    assert sorted(i for batch in reports.batches for i in batch) == list(
        range(1, 2 + SECOND_RIDE_MIN)
    )


def test_too_few_finished_jobs_wait_for_the_completers_own_ride() -> None:
    """Under SECOND_RIDE_MIN jobs gathered during a ride go with the completer's next one (a
    binding limit of a few slots keeps one ride at a time)."""
    writes = Writes()
    rides = HeldRides({"limited"})
    with first_ride_on_wire(writes, rides, then_finished=SECOND_RIDE_MIN - 1) as reports:
        time.sleep(0.2)
        assert len(rides.calls) == 1
        rides.release.set()
        until(lambda: len(reports.batches) == 2, "the rest ride next, reported")
    assert rides.beside == [False, False]
    assert rides.calls[1] == ("limited", list(range(2, 1 + SECOND_RIDE_MIN)))
