"""The retention repository functions as data (see :mod:`pgqueue._sql.calls`).

Each checks its arguments first (:func:`pgqueue.retention_policy.check_retention`), so a bad one
writes nothing. The prune's steps (:func:`ensure_row`, :func:`take`, :func:`prune`) are the
worker's: their arguments come from the worker itself.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sqlalchemy import Result

from pgqueue._sql import log_statements
from pgqueue._sql import retention_statements as statements
from pgqueue._sql.calls import Call, Plan
from pgqueue.retention_policy import DEFAULT_ROW, KINDS, Retention, check_retention


def set_retention(
    queue: object, done: object, failed: object, unknown: dict[str, object]
) -> Plan[Retention]:
    change = check_retention(queue, done, failed, unknown)
    params: dict[str, Any] = {"queue_name": change.row, **change.kinds}
    yield Call(statements.set_statement(frozenset(change.kinds)), params, lambda _: None)
    entry: Retention = yield Call(statements.ONE_RETENTION, {"queue_name": change.row}, _one_entry)
    return entry


def retention() -> Plan[list[Retention]]:
    """The default first (the built-in when nothing is stored), then each queue with its own."""
    entries: list[Retention] = yield Call(statements.ALL_RETENTION, {}, _entries)
    if entries and entries[0].queue is None:
        return entries
    return [Retention(None, inherited=KINDS), *entries]


def has_row(queue: str) -> Call[bool]:
    return Call(statements.HAS_ROW, {"queue_name": queue}, _scalar_bool)


def ensure_row(queue: str) -> Call[None]:
    return Call(statements.ENSURE_ROW, {"queue_name": queue}, lambda _: None)


def take(
    queue: str, worker: str, interval: timedelta, *, continuing: bool
) -> Call[dict[str, timedelta | None] | None]:
    params = {
        "queue_name": queue,
        "worker": worker,
        "interval": interval,
        "continuing": continuing,
    }
    return Call(statements.TAKE, params, _taken)


def prune(queue: str, kind: str, kept: timedelta) -> Call[int]:
    params = {"queue_name": queue, "kept": kept}
    stmt = log_statements.with_lines_deleted(statements.prune_statement(kind))
    return Call(stmt, params, _count)


def entry(row: Any) -> Retention:
    """A row of :data:`~pgqueue._sql.retention_statements.ALL_RETENTION`."""
    return Retention(
        queue=None if row.queue == DEFAULT_ROW else row.queue,
        done=row.done,
        failed=row.failed,
        inherited=tuple(kind for kind in KINDS if getattr(row, f"{kind}_inherited")),
    )


def _entries(result: Result[Any] | None) -> list[Retention]:
    return [] if result is None else [entry(row) for row in result]


def _one_entry(result: Result[Any] | None) -> Retention:
    assert result is not None
    return entry(result.one())


def _taken(result: Result[Any] | None) -> dict[str, timedelta | None] | None:
    row = None if result is None else result.first()
    return None if row is None else {kind: getattr(row, kind) for kind in KINDS}


def _scalar_bool(result: Result[Any] | None) -> bool:
    assert result is not None
    return bool(result.scalar_one())


def _count(result: Result[Any] | None) -> int:
    return 0 if result is None else int(result.scalar_one())
