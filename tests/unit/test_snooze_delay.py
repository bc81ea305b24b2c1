"""``pgqueue.Snooze``: its delay is checked when it is raised, so a bad one never reaches SQL."""

from __future__ import annotations

import math
import pickle
from datetime import timedelta

import pytest

import pgqueue
from pgqueue import InvalidArgumentError, InvalidArgumentTypeError, PgQueueError
from pgqueue._base.validation import MAX_SNOOZE


@pytest.mark.parametrize(
    ("delay", "expected"),
    [
        (0, timedelta(0)),
        (30, timedelta(seconds=30)),
        (1.5, timedelta(seconds=1.5)),
        (timedelta(minutes=5), timedelta(minutes=5)),
        (timedelta(0), timedelta(0)),
        (MAX_SNOOZE, MAX_SNOOZE),
        (MAX_SNOOZE.total_seconds(), MAX_SNOOZE),
    ],
)
def test_a_delay_is_a_timedelta_or_seconds(delay: object, expected: timedelta) -> None:
    assert pgqueue.Snooze(delay).delay == expected  # type: ignore[arg-type]


def test_the_default_delay_is_zero() -> None:
    assert pgqueue.Snooze().delay == timedelta(0)


@pytest.mark.parametrize(
    ("delay", "problem"),
    [
        (-1, "must not be negative"),
        (-0.001, "must not be negative"),
        (timedelta(seconds=-1), "must not be negative"),
        (math.nan, "finite"),
        (math.inf, "finite"),
        (-math.inf, "finite"),
        (MAX_SNOOZE + timedelta(seconds=1), "at most 365 days"),
        (MAX_SNOOZE.total_seconds() + 1, "at most 365 days"),
        (10**30, "at most 365 days"),  # beyond what timedelta itself can hold
        (timedelta.max, "at most 365 days"),  # would overflow now() + delay in PostgreSQL
    ],
)
def test_a_bad_delay_is_refused_with_the_problem(delay: object, problem: str) -> None:
    with pytest.raises(InvalidArgumentError, match=f"delay: .*{problem}") as raised:
        pgqueue.Snooze(delay)  # type: ignore[arg-type]
    assert isinstance(raised.value, PgQueueError)
    assert raised.value.argument == "delay"


@pytest.mark.parametrize("delay", ["30", None, True, [1], b"1"])
def test_a_delay_that_is_not_a_duration_is_refused(delay: object) -> None:
    with pytest.raises(
        InvalidArgumentTypeError, match=r"delay: expected datetime\.timedelta or seconds, got "
    ):
        pgqueue.Snooze(delay)  # type: ignore[arg-type]


def test_a_snooze_is_an_exception_a_handler_raises_not_an_error_of_pgqueue() -> None:
    """Handlers raise it; ``except PgQueueError`` around pgqueue calls must not catch it."""
    snooze = pgqueue.Snooze(timedelta(seconds=30))
    assert isinstance(snooze, Exception)
    assert not isinstance(snooze, PgQueueError)
    assert str(snooze) == "snoozed for 0:00:30"
    assert repr(snooze) == "Snooze(datetime.timedelta(seconds=30))"
    assert "Snooze" in pgqueue.__all__


def test_a_snooze_pickles_by_its_delay() -> None:
    """Exceptions cross process boundaries (a pool, a supervisor's log): rebuilt, not re-parsed."""
    copy = pickle.loads(pickle.dumps(pgqueue.Snooze(2.5)))
    assert isinstance(copy, pgqueue.Snooze)
    assert copy.delay == timedelta(seconds=2.5)
