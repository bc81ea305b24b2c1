"""Bad input is refused before any SQL runs, with an error naming the problem."""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone

import pytest

from pgqueue import InvalidArgumentError, InvalidPayloadError, PgQueueError
from pgqueue._base.validation import (
    MAX_QUEUE_NAME_BYTES,
    check_duration,
    check_port,
    check_positive_int,
    check_queue,
    check_schedule,
    check_seconds,
    encode_payload,
    encode_payloads,
)


@pytest.mark.parametrize(
    "payload",
    [{"a": 1}, [1, "x", None], "text", 42, 3.5, True, None, {"nested": {"deep": [1, {"b": []}]}}],
)
def test_every_json_type_encodes(payload: object) -> None:
    assert isinstance(encode_payload(payload), str)


@pytest.mark.parametrize(
    ("payload", "problem"),
    [
        ({"x": math.nan}, "jsonb"),
        ({"x": math.inf}, "jsonb"),
        ([-math.inf], "jsonb"),
        ({"x": object()}, "jsonb"),
        ({"x": {1, 2}}, "jsonb"),
        ("nul\x00here", r"U\+0000"),
        ({"k\x00": 1}, r"U\+0000"),
    ],
)
def test_unstorable_payload_is_refused(payload: object, problem: str) -> None:
    with pytest.raises(InvalidPayloadError, match=problem) as info:
        encode_payload(payload)
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, PgQueueError)


def test_escaped_backslash_before_u0000_text_is_not_a_nul() -> None:
    # The six characters \u0000 as text (not the NUL character) are valid jsonb.
    assert encode_payload("\\u0000") == '"\\\\u0000"'


def test_one_bad_payload_rejects_the_batch_and_names_its_index() -> None:
    with pytest.raises(InvalidPayloadError, match=r"payloads\[2\]") as info:
        encode_payloads([{"ok": 1}, {"ok": 2}, {"bad": math.nan}, {"ok": 3}])
    assert info.value.index == 2


@pytest.mark.parametrize("payloads", ["abc", b"abc", {"a": 1}])
def test_batch_must_be_an_iterable_of_payloads(payloads: object) -> None:
    with pytest.raises(TypeError, match="payloads"):
        encode_payloads(payloads)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("queue", "problem"),
    [
        ("", "empty"),
        ("a,b", "comma"),
        ("x" * (MAX_QUEUE_NAME_BYTES + 1), "NOTIFY"),
        ("é" * (MAX_QUEUE_NAME_BYTES // 2 + 1), "NOTIFY"),
        ("a\x00b", r"U\+0000"),
    ],
)
def test_bad_queue_names(queue: str, problem: str) -> None:
    with pytest.raises(InvalidArgumentError, match=problem):
        check_queue(queue)


def test_queue_must_be_a_string() -> None:
    with pytest.raises(TypeError, match="queue"):
        check_queue(3)


def test_longest_queue_name_is_accepted() -> None:
    assert check_queue("q" * MAX_QUEUE_NAME_BYTES)


@pytest.mark.parametrize("value", [0, -1])
def test_counts_below_one_are_refused(value: int) -> None:
    with pytest.raises(InvalidArgumentError, match="max_attempts: must be at least 1"):
        check_positive_int("max_attempts", value)


@pytest.mark.parametrize("value", [True, 1.5, "3"])
def test_counts_must_be_ints(value: object) -> None:
    with pytest.raises(TypeError):
        check_positive_int("limit", value)


def test_negative_durations_are_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="delay"):
        check_duration("delay", timedelta(seconds=-1), allow_zero=True)
    with pytest.raises(InvalidArgumentError, match="lease"):
        check_duration("lease", timedelta(0), allow_zero=False)
    with pytest.raises(TypeError, match="lease"):
        check_duration("lease", 30, allow_zero=False)


def test_every_duration_is_checked_alike() -> None:
    """The worker's options (a timedelta or seconds) and the SQL functions' (a timedelta) share
    one check (#21): one rule for the sign, one message."""
    assert check_seconds("poll_interval", 2) == 2.0
    assert check_seconds("poll_interval", timedelta(milliseconds=1500)) == 1.5
    assert check_seconds("shutdown_timeout", 0, allow_zero=True) == 0.0
    for seconds, duration in ((-1, timedelta(seconds=-1)), (0, timedelta(0))):
        with pytest.raises(InvalidArgumentError) as from_seconds:
            check_seconds("lease", seconds)
        with pytest.raises(InvalidArgumentError) as from_duration:
            check_duration("lease", duration, allow_zero=False)
        assert from_seconds.value.problem.split(", got")[0] == "must not be zero or negative"
        assert from_duration.value.problem.split(", got")[0] == "must not be zero or negative"
    with pytest.raises(InvalidArgumentError, match=r"must not be negative, got -0\.5"):
        check_seconds("idle_after", -0.5, allow_zero=True)
    for bad in (True, "5", None):
        with pytest.raises(TypeError, match="timedelta or seconds"):
            check_seconds("lease", bad)
    with pytest.raises(TypeError, match=r"expected datetime\.timedelta, got int"):
        check_seconds("lease", 5, numbers=False)


@pytest.mark.parametrize("port", [-1, 65536, True, 80.0, "80", None])
def test_ports_outside_0_to_65535_are_refused(port: object) -> None:
    with pytest.raises(InvalidArgumentError, match=r"health_port: must be a TCP port 0-65535"):
        check_port("health_port", port)


def test_ports_in_range_pass_and_the_lowest_is_the_callers() -> None:
    assert [check_port("p", p) for p in (0, 1, 8080, 65535)] == [0, 1, 8080, 65535]
    with pytest.raises(InvalidArgumentError, match="must be a TCP port 1-65535, got 0"):
        check_port("port", 0, lowest=1)


def test_the_command_line_and_the_api_check_ports_alike() -> None:
    """``--health-port`` takes what ``Worker(health_port=...)`` takes; ``pgqueue web --port``
    refuses 0 (it prints the address it serves)."""
    import argparse

    from pgqueue.cli.web import web_port
    from pgqueue.cli.worker import probe_port

    assert (probe_port("0"), probe_port("65535"), web_port("1")) == (0, 65535, 1)
    for text in ("-1", "65536", "x", "", "1.5"):
        with pytest.raises(argparse.ArgumentTypeError, match="expected a TCP port from 0 to"):
            probe_port(text)
    for text in ("0", "65536", "x"):
        with pytest.raises(argparse.ArgumentTypeError, match="expected a TCP port from 1 to"):
            web_port(text)


def test_schedule_rules() -> None:
    aware = datetime(2030, 1, 1, tzinfo=timezone.utc)
    assert check_schedule(aware, None) == (aware, timedelta(0))
    assert check_schedule(None, timedelta(seconds=5)) == (None, timedelta(seconds=5))
    assert check_schedule(None, None) == (None, timedelta(0))
    with pytest.raises(InvalidArgumentError, match="not both"):
        check_schedule(aware, timedelta(seconds=1))
    with pytest.raises(InvalidArgumentError, match="timezone-aware"):
        check_schedule(datetime(2030, 1, 1), None)
