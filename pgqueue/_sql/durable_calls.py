"""The calls of durable jobs (:mod:`pgqueue._sql.durable_statements`): parameters checked,
statement, row mapping, for :class:`pgqueue.JobContext`'s steps, the worker's give-back and
:func:`pgqueue.signal` (and its async twin)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Optional

from sqlalchemy import Result

from pgqueue._base.validation import check_job_id, check_name, encode_payload
from pgqueue._sql import durable_statements
from pgqueue._sql.calls import Call


@dataclass(frozen=True)
class DurableRow:
    """What a durable job remembers, as its attempt read it: ``steps`` by name, ``signals`` by
    name, and the database's ``now`` (the clock sleeps and timeouts are compared with)."""

    steps: dict[str, dict[str, Any]]
    signals: dict[str, dict[str, Any]]
    now: datetime


#: One job a worker gives back until a time: ``(job_id, attempts, until, signal)``, ``signal``
#: ``None`` for a sleep.
SuspendRow = tuple[int, int, datetime, Optional[str]]  # noqa: UP045 (a runtime alias on 3.10)


def check_step_name(name: object) -> str:
    """A step's, sleep's or signal's name: a non-empty ``str`` of at most 63 bytes."""
    return check_name("name", name)


def durable_state(job_id: int, attempts: int) -> Call[DurableRow | None]:
    params = {"job_id": job_id, "claimed_attempts": attempts}
    return Call(durable_statements.DURABLE_STATE, params, _durable_row)


def record_step(
    job_id: int,
    attempts: int,
    name: str,
    entry: dict[str, Any],
    delay: timedelta | None = None,
    value_json: str | None = None,
) -> Call[tuple[bool, datetime | None]]:
    """Record ``entry`` (a small JSON object of pgqueue's own) under ``name``, with ``value``
    the JSON text ``value_json`` the caller checked (spliced in, not encoded again);
    ``(matched, until)``."""
    text = json.dumps(entry, separators=(",", ":"))
    if value_json is not None:
        text = text[:-1] + ("," if entry else "") + '"value":' + value_json + "}"
    params = {
        "job_id": job_id,
        "claimed_attempts": attempts,
        "step_name": name,
        "entry_json": text,
        "delay": delay,
    }
    return Call(durable_statements.RECORD_STEP, params, _recorded)


def signal(job_id: int, name: str, payload: Any, channel: str) -> Call[bool]:
    params = {
        "job_id": check_job_id(job_id),
        "signal_name": check_step_name(name),
        "payload_json": encode_payload(payload),
        "channel": channel,
    }
    return Call(durable_statements.SIGNAL, params, _matched)


def suspend_many(
    suspensions: Sequence[SuspendRow], lock_timeout_ms: int | None = None
) -> Call[set[int]]:
    if not suspensions:
        return Call(None, {}, lambda _: set())
    params = {
        "batch_ids": [s[0] for s in suspensions],
        "batch_attempts": [s[1] for s in suspensions],
        "batch_until": [s[2] for s in suspensions],
        "batch_signals": [s[3] for s in suspensions],
        "lock_timeout": None if lock_timeout_ms is None else str(int(lock_timeout_ms)),
    }
    return Call(durable_statements.SUSPEND_MANY, params, _ids)


def reset_steps(job_ids: Iterable[int]) -> Call[None]:
    ids = list(job_ids)
    if not ids:
        return Call(None, {}, lambda _: None)
    return Call(durable_statements.RESET_STEPS, {"job_ids": ids}, lambda _: None)


def _durable_row(result: Result[Any] | None) -> DurableRow | None:
    assert result is not None
    row = result.first()
    if row is None:
        return None
    return DurableRow(dict(row.steps or {}), dict(row.signals or {}), row.now)


def _recorded(result: Result[Any] | None) -> tuple[bool, datetime | None]:
    assert result is not None
    row = result.first()
    return (False, None) if row is None else (True, row.until)


def _matched(result: Result[Any] | None) -> bool:
    assert result is not None
    return result.first() is not None


def _ids(result: Result[Any] | None) -> set[int]:
    assert result is not None
    return {row.id for row in result}


__all__ = [
    "DurableRow",
    "SuspendRow",
    "check_step_name",
    "durable_state",
    "record_step",
    "reset_steps",
    "signal",
    "suspend_many",
]
