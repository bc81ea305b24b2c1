"""The ``jobs_logs`` operations as data (see :mod:`pgqueue._sql.calls`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from functools import lru_cache
from typing import Any, TypeVar

from sqlalchemy import Result, Update

from pgqueue._base.validation import check_int, check_job_id
from pgqueue._sql import log_statements as statements
from pgqueue._sql.calls import Call
from pgqueue.results import LogLine, LogLines

T = TypeVar("T")

#: One job's lines as the worker sends them: ``(job_id, attempt, dropped, lines)``, ``lines``
#: the JSON array text of its buffer (:meth:`pgqueue._base.joblog.LogBuffer.pending`).
JobLines = tuple[int, int, int, str]


def lines_json(entries: Sequence[JobLines]) -> str:
    """The ``batch_lines`` parameter: one JSON text, joined (the lines are JSON texts already)."""
    return (
        "["
        + ",".join(
            f'{{"id":{e[0]},"attempt":{e[1]},"dropped":{e[2]},"lines":{e[3]}}}' for e in entries
        )
        + "]"
    )


@lru_cache(maxsize=32)
def _wrapped(outcome: Update) -> Any:
    return statements.with_lines(outcome)


def with_lines(call: Call[T], entries: Sequence[JobLines]) -> Call[T]:
    """``call`` (a batched outcome or lease update) that also writes ``entries`` in its one
    statement; ``call`` itself when there are none (jobs that logged nothing: what it was)."""
    if not entries or call.statement is None:
        return call
    assert isinstance(call.statement, Update)
    return replace(
        call,
        statement=_wrapped(call.statement),
        params={**call.params, "batch_lines": lines_json(entries)},
        from_rows=None,
    )


def write_lines(entries: Sequence[JobLines]) -> Call[None]:
    """The lines of jobs whose outcome was written alone, in the caller's transaction."""
    stmt = statements.WRITE_LINES if entries else None
    return Call(stmt, {"batch_lines": lines_json(entries)}, _nothing)


def job_lines(job_id: int, attempt: int | None) -> Call[LogLines]:
    params: dict[str, Any] = {"job_id": check_job_id(job_id)}
    if attempt is not None:
        params["attempt"] = check_int("attempt", attempt, least=1)
    stmt = statements.job_lines_statement(one_attempt=attempt is not None)
    return Call(stmt, params, _log_lines)


def _log_lines(result: Result[Any] | None) -> LogLines:
    lines: list[LogLine] = []
    dropped: dict[int, int] = {}
    for row in result or []:
        if row.dropped:
            dropped[row.attempt] = row.dropped
        lines += [
            LogLine(
                time=_time(when),
                attempt=row.attempt,
                level=level,
                message=message,
                fields=fields,
                logger=logger,
            )
            for when, level, logger, fields, message in row.lines
        ]
    return LogLines(lines, dropped)


#: Where a line's time counts from.
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _time(when: int | float) -> datetime:
    """A line's time: microseconds since the epoch (seconds, a float, in the lines that
    development builds before the integer wrote)."""
    if type(when) is int:
        return _EPOCH + timedelta(microseconds=when)
    return datetime.fromtimestamp(when, timezone.utc)


def _nothing(result: Result[Any] | None) -> None:
    return None
