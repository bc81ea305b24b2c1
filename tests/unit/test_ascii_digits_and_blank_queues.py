"""A queue name must say something, and numbers are written in ASCII digits.

A blank queue name (``" "``) used to be stored, and became a row no link could reach; Unicode
digits (ARABIC-INDIC THREE and FIVE, U+0663 and U+0665) were read as numbers by ``int()``,
``float()`` and ``\\d``, so ``show \u0663`` showed job 3 and ``--delay=\u0665s`` waited 5 s.
Both are refused before any SQL.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import create_engine

import pgqueue
from pgqueue import InvalidArgumentError, Periodic, Rate, Worker
from pgqueue._base.durations import parse_duration
from pgqueue._base.validation import check_queue
from pgqueue.enqueue_options import EnqueueOptions

BLANKS = [" ", "   ", "\u00a0", "\u3000", " \u2003 "]


@pytest.mark.parametrize("queue", BLANKS)
def test_a_blank_queue_name_is_refused(queue: str) -> None:
    with pytest.raises(InvalidArgumentError, match="queue: must not be blank"):
        check_queue(queue)


@pytest.mark.parametrize("queue", [" padded", "a b", "x "])
def test_a_name_with_blanks_and_something_else_is_kept(queue: str) -> None:
    assert check_queue(queue) == queue


def _task_with_queue(queue: str) -> object:
    return pgqueue.Registry().task(queue=queue)(lambda: None)


def _task_options(queue: str) -> object:
    registry = pgqueue.Registry()

    @registry.task
    def job() -> None: ...

    return job.options(queue=queue)


@pytest.mark.parametrize(
    "make",
    [
        lambda q: EnqueueOptions(queue=q),
        _task_with_queue,
        _task_options,
        lambda q: pgqueue.Registry().handler(q),
        lambda q: Periodic("nightly", timedelta(minutes=1), queue=q, payload={}),
        lambda q: Worker(create_engine("postgresql+psycopg://u@h/d"), {q: lambda job: None}),
    ],
    ids=["enqueue-options", "task", "task-options", "handler", "periodic", "worker"],
)
@pytest.mark.parametrize("queue", [" ", "\u3000"])
def test_every_way_to_name_a_queue_refuses_a_blank_one(make: object, queue: str) -> None:
    with pytest.raises(InvalidArgumentError, match="queue: must not be blank"):
        make(queue)  # type: ignore[operator]


@pytest.mark.parametrize(
    "text", ["\u0665s", "\u0665", "1\u0665m", "\uff15s", "\u06f3d", "1.\u0665s", "\u0663\u0660ms"]
)
def test_durations_take_ascii_digits_only(text: str) -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("5s", 5.0), ("1.5", 1.5), ("250ms", 0.25), (" 2m ", 120.0), ("7d", 604800.0)],
)
def test_ascii_durations_still_parse(text: str, expected: float) -> None:
    assert parse_duration(text) == timedelta(seconds=expected)


@pytest.mark.parametrize("text", ["\u0665/1s", "10/\u0665s", "\uff110/1s"])
def test_rates_take_ascii_digits_only(text: str) -> None:
    with pytest.raises(InvalidArgumentError, match="rate"):
        Rate.parse(text)
