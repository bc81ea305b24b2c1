"""Periodic definitions without a database: ticks, time zones and DST on a fixed clock."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from itertools import pairwise
from zoneinfo import ZoneInfo

import pytest

import pgqueue
from pgqueue import InvalidArgumentError, InvalidArgumentTypeError
from pgqueue.periodic import CATCH_UP_LIMIT, check_definitions

UTC = timezone.utc
PARIS = ZoneInfo("Europe/Paris")


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)  # type: ignore[misc]


def ticks(definition: pgqueue.Periodic, start: datetime, count: int) -> list[datetime]:
    out = []
    moment = start
    for _ in range(count):
        moment = definition.next_tick(moment)
        out.append(moment)
    return out


def test_interval_ticks_are_whole_multiples_since_the_epoch() -> None:
    every_7s = pgqueue.Periodic("p", timedelta(seconds=7), "q")
    got = ticks(every_7s, utc(2026, 12, 1, 12, 0, 0), 3)
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    assert all((t - epoch) % timedelta(seconds=7) == timedelta(0) for t in got)
    assert [b - a for a, b in pairwise(got)] == [timedelta(seconds=7)] * 2
    # Strictly after: a tick is not its own successor.
    assert every_7s.next_tick(got[0]) == got[1]
    minute = pgqueue.Periodic("m", timedelta(minutes=1), "q")
    assert minute.next_tick(utc(2026, 12, 1, 12, 0, 30)) == utc(2026, 12, 1, 12, 1, 0)
    assert minute.schedule_text == "every 60s"
    assert pgqueue.Periodic("h", timedelta(seconds=1.5), "q").schedule_text == "every 1.5s"


def test_cron_ticks_in_its_time_zone() -> None:
    nightly = pgqueue.Periodic("n", "0 3 * * *", "q", timezone="Europe/Paris")
    # 3:00 in Paris is 02:00 UTC in winter (CET, +01:00).
    assert nightly.next_tick(utc(2026, 12, 1, 12, 0)) == utc(2026, 12, 2, 2, 0)
    assert nightly.headers_for(utc(2026, 12, 2, 2, 0)) == {
        "periodic": "n",
        "scheduled_for": "2026-12-02T03:00:00+01:00",
    }
    assert pgqueue.Periodic("d", "@daily", "q").schedule_text == "0 0 * * *"
    assert pgqueue.Periodic("s", "  */5   *  * * * ", "q").schedule_text == "*/5 * * * *"


def test_dst_spring_forward_runs_a_skipped_time_once() -> None:
    """2026-03-29 in Paris: 02:00 jumps to 03:00, so 02:30 does not exist that day."""
    job = pgqueue.Periodic("spring", "30 2 * * *", "q", timezone="Europe/Paris")
    got = ticks(job, datetime(2026, 3, 27, 12, 0, tzinfo=PARIS), 4)
    local = [t.astimezone(PARIS) for t in got]
    days = [t.date().isoformat() for t in local]
    assert days == ["2026-03-28", "2026-03-29", "2026-03-30", "2026-03-31"]  # once a day
    assert local[0].strftime("%H:%M%z") == "02:30+0100"
    # The skipped day runs once, at the first minute after the gap (Debian cron's rule).
    assert local[1].strftime("%H:%M%z") == "03:00+0200"
    assert local[2].strftime("%H:%M%z") == "02:30+0200"


def test_dst_fall_back_runs_a_repeated_time_once() -> None:
    """2026-10-25 in Paris: 03:00 goes back to 02:00, so 02:30 happens twice; it runs once."""
    job = pgqueue.Periodic("fall", "30 2 * * *", "q", timezone="Europe/Paris")
    got = ticks(job, datetime(2026, 10, 23, 12, 0, tzinfo=PARIS), 4)
    days = [t.astimezone(PARIS).date().isoformat() for t in got]
    assert days == ["2026-10-24", "2026-10-25", "2026-10-26", "2026-10-27"]
    assert got[1] == utc(2026, 10, 25, 0, 30)  # the first 02:30, still +02:00
    # From between the two 02:30s, the next one is the next day's: never twice in a night.
    assert job.next_tick(utc(2026, 10, 25, 0, 45)) == utc(2026, 10, 26, 1, 30)
    # A schedule in elapsed time goes through both passes of the repeated hour.
    quarter = pgqueue.Periodic("q15", "*/15 * * * *", "q", timezone="Europe/Paris")
    night = ticks(quarter, utc(2026, 10, 24, 23, 59), 12)
    assert [b - a for a, b in pairwise(night)] == [timedelta(minutes=15)] * 11


def test_due_ticks_latest_missed_only_or_every_one_with_catch_up() -> None:
    hourly = pgqueue.Periodic("h", "0 * * * *", "q")
    since = utc(2026, 12, 1, 0, 0)
    now = utc(2026, 12, 1, 5, 30)
    assert hourly.due_ticks(after=utc(2026, 12, 1, 1, 0), since=since, now=now) == [
        utc(2026, 12, 1, 5, 0)
    ]
    catching = pgqueue.Periodic("h", "0 * * * *", "q", catch_up=True)
    assert catching.due_ticks(after=utc(2026, 12, 1, 1, 0), since=since, now=now) == [
        utc(2026, 12, 1, h, 0) for h in (2, 3, 4, 5)
    ]
    # Never seen before: the first tick is at or after `since`, none for the past.
    assert catching.due_ticks(after=None, since=utc(2026, 12, 1, 3, 0), now=now) == [
        utc(2026, 12, 1, h, 0) for h in (3, 4, 5)
    ]
    assert catching.due_ticks(after=None, since=utc(2026, 12, 1, 3, 0, 1), now=now)[0] == utc(
        2026, 12, 1, 4, 0
    )
    # Nothing due yet, or everything already enqueued.
    assert hourly.due_ticks(after=utc(2026, 12, 1, 5, 0), since=since, now=now) == []
    assert hourly.due_ticks(after=None, since=now, now=now) == []


def test_catch_up_is_bounded_and_a_long_outage_stays_cheap() -> None:
    minutely = pgqueue.Periodic("m", "* * * * *", "q", catch_up=True)
    since = utc(2025, 1, 1)
    now = utc(2026, 12, 1, 12, 0, 30)
    due = minutely.due_ticks(after=since, since=since, now=now)
    assert len(due) == CATCH_UP_LIMIT
    assert due[-1] == utc(2026, 12, 1, 12, 0)
    assert due[0] == due[-1] - timedelta(minutes=CATCH_UP_LIMIT - 1)
    yearly = pgqueue.Periodic("y", "@yearly", "q")
    assert yearly.due_ticks(after=utc(2000, 1, 1), since=utc(2000, 1, 1), now=now) == [
        utc(2026, 1, 1)
    ]


@pytest.mark.parametrize(
    ("args", "options", "argument", "message"),
    [
        (("", "* * * * *", "q"), {}, "name", "must not be empty"),
        (("  ", "* * * * *", "q"), {}, "name", "must not be empty"),
        (("n" * 201, "* * * * *", "q"), {}, "name", "longer than 200"),
        (("n", "61 * * * *", "q"), {}, "schedule", "invalid cron expression"),
        (("n", "* * * *", "q"), {}, "schedule", "five fields"),
        (("n", "0 * * * * *", "q"), {}, "schedule", "use a timedelta"),
        (("n", "0 0 30 2 *", "q"), {}, "schedule", "invalid cron expression"),
        (("n", timedelta(0), "q"), {}, "schedule", "at least 0:00:01"),
        (("n", timedelta(seconds=-5), "q"), {}, "schedule", "at least"),
        (("n", timedelta(milliseconds=500), "q"), {}, "schedule", "at least"),
        (("n", "* * * * *", "q"), {"timezone": "Mars/Olympus"}, "timezone", "unknown time zone"),
        (("n", "* * * * *", "q"), {"timezone": ""}, "timezone", "unknown time zone"),
        (("n", "* * * * *", ""), {}, "queue", "must not be empty"),
        (("n", "* * * * *", "q"), {"priority": 10}, "priority", "from 0 to 9"),
        (("n", "* * * * *", "q"), {"max_attempts": 0}, "max_attempts", "at least 1"),
        (("n", "* * * * *", "q", {"x": float("nan")}), {}, "payload", "jsonb"),
    ],
)
def test_bad_definitions_are_refused_at_construction(
    args: tuple[object, ...], options: dict[str, object], argument: str, message: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=message) as info:
        pgqueue.Periodic(*args, **options)  # type: ignore[arg-type]
    assert info.value.argument == argument
    assert isinstance(info.value, ValueError)


def test_bad_types_are_refused() -> None:
    with pytest.raises(InvalidArgumentTypeError, match="schedule"):
        pgqueue.Periodic("n", 60, "q")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentTypeError, match="name"):
        pgqueue.Periodic(None, "* * * * *", "q")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentTypeError, match="catch_up"):
        pgqueue.Periodic("n", "* * * * *", "q", catch_up="yes")  # type: ignore[arg-type]


def test_payload_defaults_to_an_empty_object() -> None:
    assert pgqueue.Periodic("n", "* * * * *", "q").payload == {}
    assert pgqueue.Periodic("n", "* * * * *", "q", [1, 2]).payload == [1, 2]


def test_two_definitions_with_one_name_are_refused() -> None:
    a = pgqueue.Periodic("same", "* * * * *", "q")
    b = pgqueue.Periodic("same", timedelta(seconds=5), "other")
    with pytest.raises(InvalidArgumentError, match="two definitions are named 'same'"):
        check_definitions([a, b])
    registry = pgqueue.Registry()
    registry.periodic(a)
    with pytest.raises(InvalidArgumentError, match="already registered"):
        registry.periodic("same", "0 * * * *", "q")
    added = registry.periodic("other", "0 * * * *", "q", {"k": 1}, priority=3)
    assert registry.periodic_definitions == (a, added)
    assert added.priority == 3


def test_worker_refuses_duplicate_names_before_running() -> None:
    from sqlalchemy import create_engine

    engine = create_engine("postgresql+psycopg://nobody@127.0.0.1:1/none")
    registry = pgqueue.Registry()
    registry.handler("q")(lambda job: None)
    registry.periodic("same", "* * * * *", "q")
    with pytest.raises(InvalidArgumentError, match="two definitions are named 'same'"):
        pgqueue.Worker(engine, registry, periodic=[pgqueue.Periodic("same", "@hourly", "q")])
    worker = pgqueue.Worker(engine, registry)
    assert [d.name for d in worker.periodic] == ["same"]
    engine.dispose()
