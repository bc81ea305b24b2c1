"""``pgqueue.Rate``, ``QueueSettings`` and the checks of the flow-control calls (#23): bad input
is refused before any statement is built, with the argument named."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import pytest

import pgqueue
import pgqueue.aio
from pgqueue import InvalidArgumentError, InvalidArgumentTypeError, QueueSettings, Rate
from pgqueue._sql import flow_calls, flow_statements
from pgqueue.schema import CANCEL_HINT, SETTINGS_HINT
from tests.unit.test_statements import sql


def test_rate_is_a_frozen_checked_value() -> None:
    rate = Rate(10, timedelta(seconds=1))
    assert (rate.limit, rate.period) == (10, timedelta(seconds=1))
    assert rate == Rate(10, timedelta(milliseconds=1000))
    with pytest.raises(dataclasses.FrozenInstanceError):
        rate.limit = 5  # type: ignore[misc]


@pytest.mark.parametrize(
    ("limit", "period", "error", "argument"),
    [
        (0, timedelta(seconds=1), InvalidArgumentError, "rate.limit"),
        (-1, timedelta(seconds=1), InvalidArgumentError, "rate.limit"),
        (2**31, timedelta(seconds=1), InvalidArgumentError, "rate.limit"),
        (True, timedelta(seconds=1), InvalidArgumentTypeError, "rate.limit"),
        (1.5, timedelta(seconds=1), InvalidArgumentTypeError, "rate.limit"),
        ("10", timedelta(seconds=1), InvalidArgumentTypeError, "rate.limit"),
        (10, timedelta(0), InvalidArgumentError, "rate.period"),
        (10, timedelta(seconds=-1), InvalidArgumentError, "rate.period"),
        (10, "1s", InvalidArgumentTypeError, "rate.period"),  # seconds are a number (#30)
        (10, timedelta(days=40_000), InvalidArgumentError, "rate.period"),
    ],
)
def test_a_bad_rate_is_refused_when_built(
    limit: Any, period: Any, error: type[Exception], argument: str
) -> None:
    with pytest.raises(error) as raised:
        Rate(limit, period)
    assert raised.value.argument == argument  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("text", "rate", "shown"),
    [
        ("10/1s", Rate(10, timedelta(seconds=1)), "10/1s"),
        (" 100 / 5m ", Rate(100, timedelta(minutes=5)), "100/5m"),
        ("3/250ms", Rate(3, timedelta(milliseconds=250)), "3/250ms"),
        ("1/2", Rate(1, timedelta(seconds=2)), "1/2s"),
        ("5/1.5s", Rate(5, timedelta(seconds=1.5)), "5/1500ms"),
        ("60/1h", Rate(60, timedelta(hours=1)), "60/1h"),
        ("7/1d", Rate(7, timedelta(days=1)), "7/1d"),
    ],
)
def test_rate_parses_and_prints_what_the_cli_takes(text: str, rate: Rate, shown: str) -> None:
    assert Rate.parse(text) == rate
    assert str(rate) == shown
    assert Rate.parse(str(rate)) == rate


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("10", "expected LIMIT/PERIOD"),
        ("/1s", "expected LIMIT/PERIOD"),
        ("ten/1s", "expected LIMIT/PERIOD"),
        ("-1/1s", "expected LIMIT/PERIOD"),
        ("0/1s", "rate.limit: must be at least 1"),
        ("10/0s", "rate.period: must not be zero or negative"),
        ("10/soon", "invalid duration 'soon'"),
    ],
)
def test_rate_parse_refuses_what_it_cannot_read(text: str, match: str) -> None:
    with pytest.raises(InvalidArgumentError, match=match):
        Rate.parse(text)


def test_queue_settings_defaults_are_unpaused_and_unlimited() -> None:
    plain = QueueSettings("q")
    assert (plain.paused, plain.concurrency, plain.per_key, plain.rate) == (False, None, None, None)
    assert not plain.limited
    assert plain.limits_text == "-"
    limited = QueueSettings("q", concurrency=4, rate=Rate(10, timedelta(seconds=1)))
    assert limited.limited
    assert limited.limits_text == "concurrency 4, rate 10/1s"
    assert not QueueSettings("q", paused=True).limited  # a pause is not a limit


@pytest.mark.parametrize(
    ("kwargs", "error", "argument"),
    [
        ({"queue": ""}, InvalidArgumentError, "queue"),
        ({"queue": "a,b"}, InvalidArgumentError, "queue"),
        ({"queue": "a\x00b"}, InvalidArgumentError, "queue"),
        ({"queue": "tab\tq"}, InvalidArgumentError, "queue"),
        ({"queue": "x" * 8000}, InvalidArgumentError, "queue"),
        ({"queue": None}, InvalidArgumentTypeError, "queue"),
        ({"concurrency": 0}, InvalidArgumentError, "concurrency"),
        ({"concurrency": False}, InvalidArgumentTypeError, "concurrency"),
        ({"concurrency": "4"}, InvalidArgumentTypeError, "concurrency"),
        ({"per_key": -1}, InvalidArgumentError, "per_key"),
        ({"per_key": True}, InvalidArgumentTypeError, "per_key"),
        ({"per_key": 2**31}, InvalidArgumentError, "per_key"),
        ({"rate": 10}, InvalidArgumentTypeError, "rate"),
        ({"rate": "10/1s"}, InvalidArgumentTypeError, "rate"),
        ({"rate": (10, timedelta(seconds=1))}, InvalidArgumentTypeError, "rate"),
    ],
)
def test_set_limits_refuses_bad_input_before_any_statement(
    kwargs: dict[str, Any], error: type[Exception], argument: str
) -> None:
    given = {"queue": "q", "concurrency": None, "per_key": None, "rate": None, **kwargs}
    with pytest.raises(error) as raised:
        flow_calls.set_limits(**given, channel="jobs")
    assert raised.value.argument == argument  # type: ignore[attr-defined]


def test_the_calls_bind_the_settings_hint_on_the_given_channel() -> None:
    plan = flow_calls.pause("q", "pgq.jobs")
    known = next(plan)  # first: does anything know the queue (else a warning)
    assert (known.statement, known.params) == (flow_statements.QUEUE_KNOWN, {"queue_name": "q"})
    call = plan.send(True)
    assert call.statement is flow_statements.PAUSE
    assert call.params == {"queue_name": "q", "channel": "pgq.jobs", "notify_payload": ",settings"}
    assert flow_calls.resume("q", "jobs").statement is flow_statements.RESUME
    forget = flow_calls.forget("q", "jobs")
    assert (forget.statement, forget.params["notify_payload"]) == (
        flow_statements.FORGET,
        ",settings",
    )
    rate = Rate(5, timedelta(minutes=1))
    plan = flow_calls.set_limits("q", 4, None, rate, "jobs")
    assert next(plan).statement is flow_statements.QUEUE_KNOWN
    limits = plan.send(True)
    assert limits.params["rate_limit"] == 5
    assert limits.params["rate_period"] == timedelta(minutes=1)
    assert limits.params["per_key"] is None
    # Told from queue names (no comma) and from the cancel hint.
    assert SETTINGS_HINT.startswith(",")
    assert SETTINGS_HINT != CANCEL_HINT


def test_the_statements_notify_only_for_the_row_they_change() -> None:
    pause = sql(flow_statements.PAUSE)
    assert "ON CONFLICT (queue) DO UPDATE SET paused = true" in pause
    assert "WHERE jobs_queues.paused IS false" in pause
    assert "RETURNING jobs_queues.queue, pg_notify(" in pause
    resume = sql(flow_statements.RESUME)
    assert resume.startswith("UPDATE jobs_queues SET paused=false")
    assert "AND jobs_queues.paused IS true RETURNING" in resume
    for stmt in (flow_statements.PAUSE, flow_statements.RESUME, flow_statements.SET_LIMITS):
        assert "window_start" not in sql(stmt)  # the claim's state, never touched here
        assert "window_count" not in sql(stmt)
    forget = sql(flow_statements.FORGET)
    assert forget.startswith("DELETE FROM jobs_queues WHERE jobs_queues.queue = ")
    assert "RETURNING jobs_queues.queue, pg_notify(" in forget


def test_the_known_queue_check_reads_live_jobs_by_their_partial_indexes() -> None:
    known = sql(flow_statements.QUEUE_KNOWN)
    assert known.count("EXISTS") == 3
    assert "jobs.status = 'queued'" in known  # a literal: the partial index's predicate
    assert "jobs.status = 'running'" in known
    assert known.index("jobs_queues") < known.index("'queued'") < known.index("'running'")


def test_the_public_names_are_exported() -> None:
    for name in (
        "Rate",
        "QueueSettings",
        "pause",
        "resume",
        "set_queue_limits",
        "queue_settings",
        "forget_queue_settings",
    ):
        assert name in pgqueue.__all__
        assert name in pgqueue.aio.__all__ or name[0].isupper()
