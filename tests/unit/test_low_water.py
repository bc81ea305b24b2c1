"""Each queue's low-water mark: when a claim starts from it, and when a claim is a full one.

Pure bookkeeping on a given ``time.monotonic()``-like clock; the claimer's thread drives it the
same way (``tests/integration/test_pinned_horizon_plan.py`` shows what it saves, and
``test_worker_inprocess.py`` that a job behind the mark still runs without the poll).
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from pgqueue._worker.low_water import FULL_EVERY, MARGIN, LowWater

T0 = datetime(2026, 12, 7, 12, 0, tzinfo=timezone.utc)


def test_a_queue_without_a_claim_yet_gets_a_full_claim() -> None:
    marks = LowWater()
    assert marks.since("q", 0.0) is None
    marks.claimed("q", None, None, 0.0)  # a full claim that took nothing sets no mark
    assert marks.since("q", 0.1) is None


def test_a_full_claim_sets_the_mark_its_margin_behind_its_oldest_job() -> None:
    marks = LowWater()
    marks.claimed("q", None, T0, 0.0)
    assert marks.since("q", 0.1) == T0 - MARGIN
    assert marks.since("other", 0.1) is None


def test_claims_from_the_mark_only_advance_it_and_a_full_claim_may_set_it_back() -> None:
    marks = LowWater()
    marks.claimed("q", None, T0, 0.0)
    since = marks.since("q", 0.1)
    marks.claimed("q", since, T0 + timedelta(seconds=3), 0.1)
    assert marks.since("q", 0.2) == T0 + timedelta(seconds=3) - MARGIN
    marks.claimed("q", marks.since("q", 0.2), T0 + timedelta(seconds=1), 0.2)  # an older row
    assert marks.since("q", 0.3) == T0 + timedelta(seconds=3) - MARGIN
    marks.claimed("q", marks.since("q", 0.3), None, 0.3)  # took nothing: the mark stays
    assert marks.since("q", 0.4) == T0 + timedelta(seconds=3) - MARGIN
    assert marks.since("q", FULL_EVERY) is None  # a full claim once a second
    marks.claimed("q", None, T0 - timedelta(hours=1), FULL_EVERY)  # it found an old job
    assert marks.since("q", FULL_EVERY + 0.1) == T0 - timedelta(hours=1) - MARGIN


def test_a_queue_claimed_from_its_mark_is_owed_a_full_claim_named_once() -> None:
    marks = LowWater()
    marks.claimed("q", None, T0, 10.0)
    marks.claimed("idle", None, T0, 10.0)  # no claim from its mark since: owed nothing
    assert marks.next_due() is None
    marks.claimed("q", marks.since("q", 10.2), T0, 10.2)
    assert marks.next_due() == 10.0 + FULL_EVERY
    assert marks.due(10.0 + FULL_EVERY / 2) == []
    assert marks.due(10.0 + FULL_EVERY) == ["q"]
    assert marks.due(10.0 + FULL_EVERY) == []  # named once: it is in line
    assert marks.next_due() is None
    assert marks.since("q", 10.0 + FULL_EVERY) is None  # its claim is the full one
    marks.claimed("q", None, T0, 11.5)
    assert marks.next_due() is None
    assert marks.since("q", 11.6) == T0 - MARGIN


def test_forget_makes_every_next_claim_a_full_one() -> None:
    marks = LowWater()
    for queue in ("a", "b"):
        marks.claimed(queue, None, T0, 0.0)
        marks.claimed(queue, marks.since(queue, 0.1), T0, 0.1)
    marks.forget()
    assert marks.since("a", 0.2) is None
    assert marks.since("b", 0.2) is None
    assert marks.next_due() is None
    assert marks.due(5.0) == []
