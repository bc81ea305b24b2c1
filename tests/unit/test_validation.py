"""Bad input is refused before any SQL runs, with an error naming the problem."""

from __future__ import annotations

import json
import math
import random
import sys
from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy import create_engine

from pgqueue import (
    InvalidArgumentError,
    InvalidPayloadError,
    Periodic,
    PgQueueError,
    RetryPolicy,
    Worker,
)
from pgqueue._base.validation import (
    MAX_BIGINT,
    MAX_DURATION,
    MAX_INT32,
    MAX_JSON_DEPTH,
    MAX_QUEUE_NAME_BYTES,
    check_duration,
    check_int,
    check_job_id,
    check_port,
    check_positive_int,
    check_queue,
    check_schedule,
    check_seconds,
    encode_payload,
    encode_payloads,
    json_nested_deeper_than,
    nested_deeper_than,
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
        check_duration("lease", "30", allow_zero=False)


def test_every_duration_is_checked_alike() -> None:
    """The worker's options and the SQL functions' durations share one check (#21), and since
    #30 one rule: a timedelta or seconds, one rule for the sign, one message."""
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
    assert check_duration("lease", 5, allow_zero=False) == timedelta(seconds=5)
    assert check_duration("lease", 0.25, allow_zero=False) == timedelta(milliseconds=250)


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


# -- bounds: what a client cannot read back, or the schema cannot hold, is refused here ----------


def _nested(depth: int, *, kind: str = "list") -> object:
    """A value with ``depth`` levels of arrays (or objects), built without recursion."""
    value: object = 1
    for _ in range(depth):
        value = [value] if kind == "list" else {"k": value}
    return value


def test_durations_longer_than_max_duration_are_refused() -> None:
    assert timedelta(days=36525) == MAX_DURATION  # 100 years, documented
    assert check_duration("lease", MAX_DURATION, allow_zero=False) == MAX_DURATION
    for name in ("delay", "lease", "older_than", "base", "cap"):
        with pytest.raises(InvalidArgumentError, match=rf"{name}: must be at most 36525 days"):
            check_duration(name, MAX_DURATION + timedelta(microseconds=1), allow_zero=True)
    with pytest.raises(InvalidArgumentError, match="delay: must be at most"):
        check_schedule(None, timedelta(days=3_000_000))


@pytest.mark.parametrize(
    "value", [float("nan"), float("inf"), 1e20, MAX_DURATION + timedelta(days=1), -1.0]
)
def test_seconds_must_be_a_finite_duration_within_the_bound(value: object) -> None:
    with pytest.raises(InvalidArgumentError, match="poll_interval"):
        check_seconds("poll_interval", value)


def test_seconds_accept_numbers_and_timedeltas() -> None:
    assert check_seconds("lease", 30) == 30.0
    assert check_seconds("lease", timedelta(minutes=1)) == 60.0
    assert check_seconds("idle_after", 0, allow_zero=True) == 0.0
    with pytest.raises(TypeError, match="lease"):
        check_seconds("lease", "30")


def test_run_at_must_lie_within_max_duration_of_now() -> None:
    now = datetime.now(timezone.utc)
    for fine in (now, now + timedelta(days=36000), now - timedelta(days=36000)):
        assert check_schedule(fine, None) == (fine, timedelta(0))
    far = [
        now + MAX_DURATION + timedelta(days=1),
        now - MAX_DURATION - timedelta(days=1),
        datetime(9999, 12, 31, 23, 0, tzinfo=timezone(timedelta(hours=-14))),  # after 9999 UTC
        datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=14))),  # before year 1 UTC
        datetime.max.replace(tzinfo=timezone.utc),
    ]
    for run_at in far:
        with pytest.raises(InvalidArgumentError, match="run_at: must lie within 36525 days"):
            check_schedule(run_at, None)


def test_integers_are_refused_outside_the_columns_types() -> None:
    assert check_positive_int("max_attempts", MAX_INT32) == MAX_INT32
    with pytest.raises(InvalidArgumentError, match="max_attempts: must be at most 2147483647"):
        check_positive_int("max_attempts", 2**40)
    assert check_int("attempts", -(2**31)) == -(2**31)
    with pytest.raises(InvalidArgumentError, match="attempts: must be from"):
        check_int("attempts", 2**31)
    assert check_job_id(MAX_BIGINT) == MAX_BIGINT
    assert check_job_id(0) == 0  # no job has it: not an error, the statement finds nothing
    for far in (MAX_BIGINT + 1, -(2**63) - 1, 10**20):
        with pytest.raises(InvalidArgumentError, match="job_id: must be from"):
            check_job_id(far)
    with pytest.raises(TypeError, match="job_id"):
        check_job_id("1")


@pytest.mark.parametrize(
    "queue", ["a\nb", "tab\tq", "cr\r", "bell\x07", "del\x7f", "c1\x85", "esc\x1b[31m"]
)
def test_queue_names_with_control_characters_are_refused(queue: str) -> None:
    with pytest.raises(InvalidArgumentError, match="queue: must not contain control characters"):
        check_queue(queue)


@pytest.mark.parametrize("queue", ["emails", "mail/out bound?#", "é", "файлы", "🚀", "a b"])
def test_printable_queue_names_are_accepted(queue: str) -> None:
    assert check_queue(queue) == queue


def test_a_queue_name_that_is_not_valid_unicode_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="queue: not valid Unicode"):
        check_queue("lone\ud800surrogate")


@pytest.mark.parametrize("kind", ["list", "dict"])
def test_payloads_nested_up_to_max_json_depth_encode(kind: str) -> None:
    assert MAX_JSON_DEPTH == 100
    assert encode_payload(_nested(MAX_JSON_DEPTH, kind=kind))


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 999, 5_000, 100_000])
@pytest.mark.parametrize("kind", ["list", "dict"])
def test_payloads_nested_deeper_are_refused_without_recursion_error(kind: str, depth: int) -> None:
    with pytest.raises(InvalidPayloadError, match="payload: nested more than 100 levels deep"):
        encode_payload(_nested(depth, kind=kind))


def test_a_deep_payload_in_a_batch_rejects_the_batch_and_names_its_index() -> None:
    with pytest.raises(InvalidPayloadError, match=r"payloads\[1\]: nested more than 100") as info:
        encode_payloads([{"ok": 1}, _nested(5_000), {"ok": 2}])
    assert info.value.index == 1


def test_brackets_inside_strings_are_not_nesting() -> None:
    assert encode_payload({"text": "[" * 10_000 + "{" * 10_000})
    assert encode_payload([[i] for i in range(10_000)])  # many arrays, two levels


def _random_json(rng: random.Random, depth: int) -> object:
    """A value up to ``depth`` levels deep, with strings full of brackets, quotes, backslashes."""
    if depth == 0 or rng.random() < 0.25:
        return rng.choice([1, None, "", "[[", "]]}", '"', "\\", '\\"]', 'a\\\\"{', "é]"])
    children = [_random_json(rng, depth - 1) for _ in range(rng.randint(0, 3))]
    if rng.random() < 0.5:
        return children
    return {f"k{i}]{{": child for i, child in enumerate(children)}


def _depth(value: object) -> int:
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    return 0


def test_the_text_and_the_value_measure_the_same_depth() -> None:
    """The enqueue path reads the depth off the JSON text, ignoring brackets inside strings: it
    agrees with a walk of the value on 3,000 random values, at every limit around their depth."""
    rng = random.Random(6)
    for _ in range(3_000):
        value = _random_json(rng, rng.randint(1, 12))
        depth = _depth(value)
        for text in (json.dumps(value), json.dumps(value, ensure_ascii=False)):
            for limit in (max(depth - 1, 0), depth, depth + 1):
                expected = depth > limit
                assert nested_deeper_than(value, limit) is expected, (value, limit)
                # The counts' shortcut stays out of the way at these small limits.
                assert json_nested_deeper_than(text, limit) is expected, (text, limit)


def test_nesting_is_measured_without_recursion_and_ends_on_a_cycle() -> None:
    assert not nested_deeper_than(_nested(100), 100)
    assert nested_deeper_than(_nested(101), 100)
    assert nested_deeper_than(_nested(1_000_000), 100)
    assert not nested_deeper_than("scalar", 0)
    cycle: list[object] = []
    cycle.append(cycle)
    assert nested_deeper_than(cycle, 100)
    with pytest.raises(InvalidPayloadError):  # json reports the cycle: still a clear error
        encode_payload(cycle)


def test_a_shallow_payload_on_an_exhausted_stack_is_not_called_deep() -> None:
    """A RecursionError of the caller's own stack is re-raised, never blamed on the payload:
    with the stack cut shorter and shorter, a two-level payload encodes or fails with
    RecursionError, and is never refused as too deep."""
    limit = sys.getrecursionlimit()
    outcomes = set()
    try:
        for room in range(limit, 0, -1):
            try:
                sys.setrecursionlimit(room)  # refused once below the current depth
            except RecursionError:
                break
            try:
                encode_payload({"a": [1]})
                outcomes.add("encoded")
            except RecursionError:
                outcomes.add("RecursionError")
    finally:
        sys.setrecursionlimit(limit)
    assert outcomes == {"encoded", "RecursionError"}


@pytest.mark.parametrize(
    "options",
    [
        {"lease": timedelta(days=3_000_000)},
        {"lease": 1e20},
        {"poll_interval": float("nan")},
        {"poll_interval": float("inf")},
        {"shutdown_timeout": MAX_DURATION.total_seconds() + 1},
        {"reap_interval": timedelta(days=999_999_999)},
        {"idle_poll_interval": 1e15},
        {"idle_after": float("nan")},
        {"stuck_after": float("inf")},
        {"lock_timeout": timedelta(days=30)},  # PostgreSQL's lock_timeout: int milliseconds
    ],
)
def test_worker_durations_are_bounded(options: dict[str, object]) -> None:
    engine = create_engine("postgresql+psycopg://nobody@127.0.0.1:1/never")  # never connects
    (name,) = options
    with pytest.raises(InvalidArgumentError, match=f"^{name}: "):
        Worker(engine, {"q": lambda job: None}, **options)  # type: ignore[arg-type]
    engine.dispose()


def test_retry_policies_and_periodic_intervals_are_bounded() -> None:
    with pytest.raises(InvalidArgumentError, match="cap: must be at most"):
        RetryPolicy(cap=MAX_DURATION * 2)
    with pytest.raises(InvalidArgumentError, match="schedule: must be at most"):
        Periodic("far", timedelta(days=999_999_999), "q")
    assert Periodic("yearly", timedelta(days=365), "q").schedule_text == "every 31536000s"
