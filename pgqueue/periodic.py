"""Periodic jobs: a definition a worker enqueues once per tick of its schedule.

Any number of workers may declare the same definition: each tick yields one job, because the
tick is enqueued by a compare-and-set of ``jobs_periodic.last_tick`` in the same statement as the
job's insert (see :mod:`pgqueue._worker.scheduler`). Nothing here touches the database.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from pgqueue._base import schedule as schedules
from pgqueue._base.validation import (
    check_positive_int,
    check_priority,
    check_queue,
    check_unique_key,
    encode_payload,
)
from pgqueue.enqueue_options import DEFAULT_MAX_ATTEMPTS, DEFAULT_PRIORITY
from pgqueue.errors import InvalidArgumentError, InvalidArgumentTypeError
from pgqueue.results import PeriodicRow


class PeriodicTask(Protocol):
    """What a definition reads of a :class:`pgqueue.Task`: its name, queue and defaults, and the
    payload of a call (a definition never enqueues through the task: the worker's scheduler
    does, for every definition alike)."""

    name: str
    queue: str
    priority: int
    max_attempts: int

    def payload_of(self, args: Any, kwargs: Any) -> dict[str, Any]:
        """The payload of a call, once it binds to the task's signature."""
        ...


#: ``catch_up=True`` enqueues at most this many missed ticks (the most recent ones).
CATCH_UP_LIMIT = 1000
#: The header naming the definition a job came from, and the one giving its tick.
PERIODIC_HEADER = "periodic"
SCHEDULED_FOR_HEADER = "scheduled_for"
#: The unique key of a ``skip_if_running`` definition's jobs (in the definition's queue).
_KEY_PREFIX = "pgqueue.periodic:"
#: Most characters of a definition's name (it is a primary key and part of a unique key).
MAX_NAME_LENGTH = 200


@dataclass(frozen=True, init=False)
class Periodic:
    """One periodic definition: enqueue ``payload`` on ``queue`` at every tick of ``schedule``,
    or a call of a task (``task=send_report, args=(...), kwargs={...}``).

    Give either ``queue`` (and ``payload``) or ``task`` (and ``args``, ``kwargs``)::

        pgqueue.Periodic("nightly", "0 3 * * *", "reports", {"kind": "daily"})
        pgqueue.Periodic("nightly-email", "0 3 * * *", task=send_report, args=(7,),
                         kwargs={"month": "last"})

    Args:
        name: What the database knows the definition by (its state is keyed on it): unique among
            the definitions of every worker sharing the database. Changing a definition's
            schedule under the same name keeps its history; a new name starts afresh.
        schedule: A five-field cron expression (``"0 3 * * *"``; ``@hourly``, ``@daily``,
            ``@weekly``, ``@monthly``, ``@yearly`` too), read in ``timezone``; or a
            ``timedelta`` of at least one second, ticking at whole multiples of it since the
            Unix epoch (``timedelta(minutes=1)`` ticks at every minute's 0th second).
        queue: The queue of the jobs (not with ``task``: a task's jobs wait in its queue).
        payload: Each job's payload, unchanged (any JSON value). Default ``{}``.
        task: A :class:`pgqueue.Task` to call at every tick instead: each job carries its name
            (``jobs.task``) and ``args``/``kwargs`` as its payload, in the task's queue, with the
            task's priority and attempts unless given here. (``.. versionadded:: 0.1.0``)
        args: The task's positional arguments (JSON values). Default none.
        kwargs: The task's keyword arguments (JSON values). Default none.
        timezone: IANA name of the zone a cron expression is read in. Default ``"UTC"``.
        priority: The jobs' priority, 0-9. Default 0 (a task's: its own).
        max_attempts: The jobs' attempts. Default 5 (a task's: its own).
        catch_up: After every worker was down, enqueue every missed tick (at most
            :data:`CATCH_UP_LIMIT`, the most recent) instead of only the most recent one.
            Default False.
        skip_if_running: Skip a tick while the previous tick's job is still queued or running
            (the jobs share the unique key ``"pgqueue.periodic:<name>"``). Default False: every
            tick is a job, even when the previous one has not finished.

    Raises:
        InvalidArgumentError: an empty or too long name, an invalid cron expression, an unknown
            time zone, an interval under one second, a bad queue, payload, priority or attempts;
            both a queue and a task, or neither; arguments that do not bind to the task.
    """

    name: str
    schedule: str | timedelta
    queue: str
    payload: Any = field(default_factory=dict)
    timezone: str = "UTC"
    priority: int = DEFAULT_PRIORITY
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    catch_up: bool = False
    skip_if_running: bool = False
    #: The name of the task each tick calls, or ``None`` for a queue-keyed job.
    task: str | None = None
    _ticks: schedules.Schedule = field(init=False, repr=False, compare=False)
    _payload_json: str = field(init=False, repr=False, compare=False)

    def __init__(
        self,
        name: str,
        schedule: str | timedelta,
        queue: str | None = None,
        payload: Any = None,
        *,
        task: PeriodicTask | None = None,
        args: Iterable[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        timezone: str = "UTC",
        priority: int | None = None,
        max_attempts: int | None = None,
        catch_up: bool = False,
        skip_if_running: bool = False,
    ) -> None:
        if task is None:
            if queue is None:
                raise InvalidArgumentError("queue", "give a queue (and a payload), or a task")
            if args != () or kwargs is not None:
                raise InvalidArgumentError("args", "args and kwargs are a task's: give task=")
            payload = {} if payload is None else payload
            task_name = None
        else:
            if not callable(getattr(task, "payload_of", None)):
                raise InvalidArgumentTypeError("task", "a pgqueue.Task", task)
            if queue is not None or payload is not None:
                raise InvalidArgumentError(
                    "task", "give a queue and a payload, or a task and its arguments, not both"
                )
            if isinstance(args, (str, bytes, Mapping)):
                raise InvalidArgumentTypeError("args", "a sequence of arguments", args)
            queue, payload, task_name = (
                task.queue,
                task.payload_of(tuple(args), kwargs or {}),
                task.name,
            )
            priority = task.priority if priority is None else priority
            max_attempts = task.max_attempts if max_attempts is None else max_attempts
        values = {
            "name": _check_name(name),
            "schedule": schedule,
            "queue": check_queue(queue),
            "payload": payload,
            "timezone": timezone,
            "priority": check_priority(DEFAULT_PRIORITY if priority is None else priority),
            "max_attempts": check_positive_int(
                "max_attempts", DEFAULT_MAX_ATTEMPTS if max_attempts is None else max_attempts
            ),
            "catch_up": _check_flag("catch_up", catch_up),
            "skip_if_running": _check_flag("skip_if_running", skip_if_running),
            "task": task_name,
            "_ticks": schedules.schedule_of(schedule, timezone),
            "_payload_json": encode_payload(payload),
        }
        for key, value in values.items():
            object.__setattr__(self, key, value)

    @property
    def schedule_text(self) -> str:
        """The schedule as stored in the database: the cron expression, or ``every Ns``."""
        return self._ticks.text

    @property
    def payload_json(self) -> str:
        return self._payload_json

    @property
    def unique_key(self) -> str | None:
        """The key the jobs share when ``skip_if_running``, else ``None``."""
        return _KEY_PREFIX + self.name if self.skip_if_running else None

    def next_tick(self, after: datetime) -> datetime:
        """The first tick strictly after ``after`` (an aware datetime), in UTC."""
        return self._ticks.next_after(after)

    def due_ticks(
        self, *, after: datetime | None, since: datetime, now: datetime
    ) -> list[datetime]:
        """The ticks to enqueue now: the latest missed one, or (``catch_up``) up to the limit."""
        limit = CATCH_UP_LIMIT if self.catch_up else 1
        return schedules.due_ticks(self._ticks, after=after, since=since, now=now, limit=limit)

    def headers_for(self, tick: datetime) -> dict[str, str]:
        """The headers of a tick's job: where it came from and which run it is."""
        return {
            PERIODIC_HEADER: self.name,
            SCHEDULED_FOR_HEADER: schedules.scheduled_for(tick, self.timezone),
        }


def check_definitions(definitions: Iterable[object]) -> list[Periodic]:
    """A worker's definitions: :class:`Periodic` objects with distinct names."""
    if isinstance(definitions, (str, bytes, Periodic)):
        raise InvalidArgumentTypeError("periodic", "a sequence of pgqueue.Periodic", definitions)
    checked: dict[str, Periodic] = {}
    for item in definitions:
        if not isinstance(item, Periodic):
            raise InvalidArgumentTypeError("periodic", "a sequence of pgqueue.Periodic", item)
        if item.name in checked:
            raise InvalidArgumentError(
                "periodic", f"two definitions are named {item.name!r}: names must be unique"
            )
        checked[item.name] = item
    return list(checked.values())


def _check_name(name: object) -> str:
    if not isinstance(name, str):
        raise InvalidArgumentTypeError("name", "str", name)
    if not name.strip():
        raise InvalidArgumentError("name", "must not be empty")
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidArgumentError("name", f"longer than {MAX_NAME_LENGTH} characters")
    return check_unique_key(name, name="name")


def _check_flag(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise InvalidArgumentTypeError(name, "bool", value)
    return value


# -- what an operator reads from a stored row (``pgqueue periodic``, ``pgqueue doctor``) ---------

#: A definition no worker declared for this long (or two of its periods, if longer) is stale.
STALE_AFTER = timedelta(hours=1)
#: A tick unfired this long after it was due (or two periods, if longer) means nobody fires it.
LATE_AFTER = timedelta(minutes=1)


def stored_schedule(row: PeriodicRow) -> schedules.Schedule:
    return schedules.parse_stored(row.schedule, row.timezone)


def next_tick(row: PeriodicRow, now: datetime) -> datetime:
    """The next tick a worker will enqueue: the first one after ``now`` and the last tick."""
    schedule = stored_schedule(row)
    after = now if row.last_tick is None else max(now, row.last_tick)
    return schedule.next_after(max(after, row.ticks_from - timedelta(microseconds=1)))


def is_stale(row: PeriodicRow, now: datetime) -> bool:
    """No worker has declared the definition for a while: safe to remove."""
    period = schedules.gap(stored_schedule(row), now)
    return now - row.declared_at > max(STALE_AFTER, 2 * period)


def overdue(row: PeriodicRow, now: datetime) -> timedelta | None:
    """How late the oldest unfired tick is, when later than a worker firing it would be."""
    schedule = stored_schedule(row)
    if row.last_tick is None:
        pending = schedules.first_at_or_after(schedule, row.ticks_from)
    else:
        pending = schedule.next_after(max(row.last_tick, row.ticks_from))
    late = now - pending
    return late if late > max(LATE_AFTER, 2 * schedules.gap(schedule, now)) else None
