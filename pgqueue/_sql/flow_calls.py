"""The flow-control repository functions as data (see :mod:`pgqueue._sql.calls`).

Each checks its arguments here, before any SQL, so a bad one writes nothing. Pausing or
limiting a queue that nothing knows (no settings row, no queued or running job: a name
``pgqueue queues`` would not list) logs one WARNING on the ``pgqueue.flow`` logger, a typo's
likely sign, and goes ahead: a queue may be configured before its first job.
"""

from __future__ import annotations

import logging
from typing import Any, TypeVar

from sqlalchemy import Result

from pgqueue._base.validation import check_queue
from pgqueue._sql import flow_statements as statements
from pgqueue._sql.calls import Call, Plan
from pgqueue.flow import QueueSettings, Rate, check_limits
from pgqueue.schema import SETTINGS_HINT

log = logging.getLogger("pgqueue.flow")

T = TypeVar("T")


def pause(queue: str, channel: str) -> Plan[bool]:
    params = _change_params(queue, channel)
    return _known_first(params["queue_name"], "paused", Call(statements.PAUSE, params, _changed))


def resume(queue: str, channel: str) -> Call[bool]:
    return Call(statements.RESUME, _change_params(queue, channel), _changed)


def set_limits(
    queue: str, concurrency: int | None, per_key: int | None, rate: Rate | None, channel: str
) -> Plan[QueueSettings]:
    name, concurrency, per_key, rate = check_limits(queue, concurrency, per_key, rate)
    params = {
        **_change_params(name, channel),
        "concurrency": concurrency,
        "per_key": per_key,
        "rate_limit": None if rate is None else rate.limit,
        "rate_period": None if rate is None else rate.period,
    }
    return _known_first(name, "limited", Call(statements.SET_LIMITS, params, _one_setting))


def settings(queue: str | None) -> Call[list[QueueSettings]]:
    """Every queue's row by name; or one queue's settings, its defaults when it has no row."""
    if queue is None:
        return Call(statements.ALL_SETTINGS, {}, _settings)
    name = check_queue(queue)

    def finish(result: Result[Any] | None) -> list[QueueSettings]:
        return _settings(result) or [QueueSettings(name)]

    return Call(statements.SETTINGS, {"queue_name": name}, finish)


def lock_settings(queue: str) -> Plan[QueueSettings]:
    """The settings row locked, inserted when missing: the first step of ``pgqueue limit``, so
    it warns of an unknown queue as :func:`set_limits` does (the row it inserts is known)."""
    name = check_queue(queue)
    call = Call(statements.LOCK_SETTINGS, {"queue_name": name}, _one_setting)
    return _known_first(name, "limited", call)


def forget(queue: str, channel: str) -> Call[bool]:
    return Call(statements.FORGET, _change_params(queue, channel), _changed)


def _known_first(queue: str, done: str, change: Call[T]) -> Plan[T]:
    """``change``, after a WARNING when nothing knows ``queue`` (``done`` says what happens all
    the same). The arguments were checked by the caller, before this plan runs any SQL."""
    known: bool = yield Call(statements.QUEUE_KNOWN, {"queue_name": queue}, _scalar_bool)
    if not known:
        log.warning(
            "queue %r has no queued or running job and no settings: %s all the same "
            "(is the name right? `pgqueue queues` lists the queues)",
            queue,
            done,
        )
    result: T = yield change
    return result


def _scalar_bool(result: Result[Any] | None) -> bool:
    assert result is not None
    return bool(result.scalar_one())


def _change_params(queue: str, channel: str) -> dict[str, Any]:
    return {"queue_name": check_queue(queue), "channel": channel, "notify_payload": SETTINGS_HINT}


def _changed(result: Result[Any] | None) -> bool:
    return result is not None and result.first() is not None


def settings_row(row: Any) -> QueueSettings:
    """A ``jobs_queues`` row (``queue, paused, concurrency, per_key, rate_limit, rate_period``)."""
    rate = None if row.rate_limit is None else Rate(int(row.rate_limit), row.rate_period)
    return QueueSettings(
        queue=row.queue,
        paused=bool(row.paused),
        concurrency=row.concurrency,
        per_key=row.per_key,
        rate=rate,
    )


def _settings(result: Result[Any] | None) -> list[QueueSettings]:
    return [] if result is None else [settings_row(row) for row in result]


def _one_setting(result: Result[Any] | None) -> QueueSettings:
    assert result is not None
    return settings_row(result.one())
