"""The periodic repository functions as data (see :mod:`pgqueue._sql.calls`)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Result

from pgqueue._base.validation import check_run_at
from pgqueue._sql import periodic_statements as statements
from pgqueue._sql.calls import Call
from pgqueue.errors import InvalidArgumentTypeError
from pgqueue.periodic import Periodic
from pgqueue.results import Fired, PeriodicRow


def declare(definitions: Sequence[Periodic], now: datetime) -> Call[list[PeriodicRow]]:
    params = {
        "names": [d.name for d in definitions],
        "schedules": [d.schedule_text for d in definitions],
        "timezones": [d.timezone for d in definitions],
        "queues": [d.queue for d in definitions],
        "now": check_run_at(now),
    }
    return Call(statements.DECLARE if definitions else None, params, _rows)


def refresh(names: Sequence[str]) -> Call[None]:
    return Call(statements.REFRESH if names else None, {"names": list(names)}, _nothing)


def states(names: Iterable[str] | None) -> Call[list[PeriodicRow]]:
    if names is None:
        return Call(statements.ALL_STATES, {}, _rows)
    if isinstance(names, (str, bytes)):
        raise InvalidArgumentTypeError("names", "a sequence of definition names", names)
    wanted = list(names)
    return Call(statements.STATES if wanted else None, {"names": wanted}, _rows)


def fire(definition: Periodic, prev: datetime | None, ticks: Sequence[datetime]) -> Call[Fired]:
    """Enqueue ``ticks`` (ascending) of ``definition`` if ``last_tick`` is still ``prev``."""
    params = {
        "definition": definition.name,
        "stored_schedule": definition.schedule_text,
        "stored_timezone": definition.timezone,
        "prev": prev,
        "tick": ticks[-1],
        "headers_list": [json.dumps(definition.headers_for(t)) for t in ticks],
        "queue_name": definition.queue,
        "payload_json": definition.payload_json,
        "attempt_budget": definition.max_attempts,
        "priority_level": definition.priority,
        "key": definition.unique_key,
        "task_name": definition.task,
        "timeout": definition.timeout,
        "expires_in": definition.expires_in,
    }
    return Call(statements.FIRE, params, _fired)


def remove(name: str) -> Call[bool]:
    if not isinstance(name, str):
        raise InvalidArgumentTypeError("name", "str", name)
    return Call(statements.REMOVE, {"definition": name}, _removed)


def _rows(result: Result[Any] | None) -> list[PeriodicRow]:
    if result is None:
        return []
    return [PeriodicRow(**row._mapping) for row in result]


def _nothing(result: Result[Any] | None) -> None:
    return None


def _fired(result: Result[Any] | None) -> Fired:
    assert result is not None
    row = result.one()
    return Fired(bool(row.advanced), sorted(row.ids or []))


def _removed(result: Result[Any] | None) -> bool:
    return result is not None and result.first() is not None
