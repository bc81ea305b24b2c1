"""When a periodic definition ticks: cron expressions in a time zone, or fixed intervals.

Ticks are UTC datetimes, computed the same way by every worker from the schedule alone, so any
number of workers agree on them and the database only has to remember the last one enqueued.

- A cron schedule (five fields, parsed by ``cronsim``) ticks at its wall-clock times in its time
  zone, with Debian cron's daylight-saving rules: a job at a fixed time that falls in the hour
  skipped by a spring-forward runs once, at the first minute after the gap; a fixed time that a
  fall-back repeats runs once, at its first occurrence. Expressions whose minute or hour field
  starts with ``*`` (``*/15 * * * *``) tick in real time instead: every 15 minutes of elapsed
  time, through both passes of a repeated hour.
- An interval schedule ticks at whole multiples of the interval since the Unix epoch.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from pgqueue._base.validation import check_duration
from pgqueue.errors import InvalidArgumentError, InvalidArgumentTypeError

UTC = timezone.utc
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
#: The shortest interval schedule: a periodic job is a row in a table, not a timer.
MIN_INTERVAL = timedelta(seconds=1)
#: The common nicknames, as their five-field forms.
NICKNAMES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

_INTERVAL_TEXT = re.compile(r"every ([0-9]+(?:\.[0-9]{1,6})?)s")
_MICROSECOND = timedelta(microseconds=1)


class Schedule(Protocol):
    @property
    def text(self) -> str:
        """The schedule as stored in ``jobs_periodic.schedule``: a cron expression or
        ``every Ns``."""
        ...

    @property
    def timezone(self) -> str: ...

    def next_after(self, moment: datetime) -> datetime:
        """The first tick strictly after ``moment`` (aware), in UTC."""
        ...


@dataclass(frozen=True)
class IntervalSchedule:
    interval: timedelta
    timezone: str = "UTC"

    @property
    def text(self) -> str:
        micros = self.interval // _MICROSECOND
        return f"every {Decimal(micros).scaleb(-6).normalize():f}s"

    def next_after(self, moment: datetime) -> datetime:
        elapsed = (moment - EPOCH) // _MICROSECOND
        step = self.interval // _MICROSECOND
        return EPOCH + (elapsed // step + 1) * self.interval


@dataclass(frozen=True)
class CronSchedule:
    text: str
    timezone: str

    def next_after(self, moment: datetime) -> datetime:
        zone = ZoneInfo(self.timezone)
        moment = moment.astimezone(UTC)
        # Wall-clock iteration can answer a time already passed in a repeated (fall-back) hour:
        # skip those, which keeps a fixed-time job to its first occurrence.
        for tick in CronSim(self.text, moment.astimezone(zone)):
            utc = tick.astimezone(UTC)
            if utc > moment:
                return utc
        raise InvalidArgumentError("schedule", f"{self.text!r} never ticks")  # pragma: no cover


def check_timezone(name: object) -> str:
    if not isinstance(name, str):
        raise InvalidArgumentTypeError("timezone", "str (an IANA time zone name)", name)
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise InvalidArgumentError(
            "timezone", f"unknown time zone {name!r} (an IANA name such as 'Europe/Paris')"
        ) from exc
    return name


def schedule_of(schedule: object, timezone: str = "UTC") -> Schedule:
    """A definition's schedule: a five-field cron expression (or ``@daily``...) or a timedelta."""
    if isinstance(schedule, timedelta):
        if schedule < MIN_INTERVAL:
            raise InvalidArgumentError(
                "schedule", f"an interval must be at least {MIN_INTERVAL}, got {schedule}"
            )
        check_duration("schedule", schedule, allow_zero=False)
        return IntervalSchedule(schedule, check_timezone(timezone))
    if not isinstance(schedule, str):
        raise InvalidArgumentTypeError("schedule", "a cron expression (str) or timedelta", schedule)
    expression = " ".join(NICKNAMES.get(schedule.strip().lower(), schedule).split())
    if len(expression.split()) != 5:
        raise InvalidArgumentError(
            "schedule",
            f"a cron expression has five fields (minute hour day month weekday), got "
            f"{schedule!r}; use a timedelta for schedules under a minute",
        )
    zone = check_timezone(timezone)
    try:
        CronSim(expression, datetime.now(UTC))
    except CronSimError as exc:
        raise InvalidArgumentError(
            "schedule", f"invalid cron expression {schedule!r}: {exc}"
        ) from exc
    return CronSchedule(expression, zone)


def parse_stored(text: str, timezone: str) -> Schedule:
    """The schedule a row of ``jobs_periodic`` names (as written by :attr:`Schedule.text`)."""
    found = _INTERVAL_TEXT.fullmatch(text)
    if found:
        return schedule_of(timedelta(seconds=float(Decimal(found.group(1)))), timezone)
    return schedule_of(text, timezone)


def first_at_or_after(schedule: Schedule, moment: datetime) -> datetime:
    return schedule.next_after(moment - _MICROSECOND)


def gap(schedule: Schedule, moment: datetime) -> timedelta:
    """The time between the two ticks that follow ``moment``: the schedule's period there."""
    first = schedule.next_after(moment)
    return schedule.next_after(first) - first


def due_ticks(
    schedule: Schedule,
    *,
    after: datetime | None,
    since: datetime,
    now: datetime,
    limit: int,
) -> list[datetime]:
    """The most recent ``limit`` ticks not yet enqueued, oldest first.

    Those later than ``after`` (the last tick enqueued, if any), at or after ``since`` (when the
    definition was first seen or its schedule last changed) and at or before ``now``. The search
    starts a few periods back and doubles its window, so a long outage costs a few passes over
    the ticks wanted, not a walk over every tick missed.
    """
    low = since - _MICROSECOND if after is None else max(after, since - _MICROSECOND)
    if low >= now:
        return []
    window = max(gap(schedule, now) * (limit + 1), timedelta(minutes=1))
    while True:
        start = max(low, now - window)
        found: deque[datetime] = deque(maxlen=limit)
        tick = schedule.next_after(start)
        while tick <= now:
            found.append(tick)
            tick = schedule.next_after(tick)
        if start == low or len(found) == limit:
            return list(found)
        window *= 2


def scheduled_for(tick: datetime, timezone: str) -> str:
    """A tick as the ``scheduled_for`` header's ISO 8601 text, in the definition's zone."""
    return tick.astimezone(ZoneInfo(timezone)).isoformat()
