"""The worker's row in ``jobs_workers`` as calls (see :mod:`pgqueue._sql.calls`)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Result

from pgqueue._sql import worker_statements as statements
from pgqueue._sql.calls import Call


def register(name: str, host: str, pid: int, queues: Sequence[str]) -> Call[datetime]:
    """The row of one run: what it serves, and ``started_at``, which :func:`unregister` names."""
    params = {"worker_name": name, "host": host, "pid": pid, "queues": list(queues)}
    return Call(statements.REGISTER_WORKER, params, _started_at)


def unregister(name: str, started_at: datetime) -> Call[None]:
    """Delete the row this run wrote (not one a later run of the same name replaced it with)."""
    params = {"worker_name": name, "started_at": started_at}
    return Call(statements.UNREGISTER_WORKER, params, _nothing)


def _started_at(result: Result[Any] | None) -> datetime:
    assert result is not None
    started: datetime = result.scalar_one()
    return started


def _nothing(result: Result[Any] | None) -> None:
    return None
