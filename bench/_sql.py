"""The SQL pgqueue sends, captured from the driver call, so the raw limits run the same text."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Engine, event

from bench._db import QUEUE
from pgqueue import repository
from pgqueue._worker import store


@dataclass(frozen=True)
class Captured:
    """One statement as psycopg received it (``%(name)s`` placeholders) and its parameters."""

    sql: str
    params: dict[str, Any]

    def pgbench(self) -> str:
        """The same text with pgbench variables (``:name``), for ``pgbench -M prepared``."""
        return re.sub(r"%\((\w+)\)s", r":\1", self.sql).replace("%%", "%")


def capture(engine: Engine, run: Callable[[Connection], object]) -> Captured:
    """Run ``run`` in a transaction that is rolled back; return the last statement it executed."""
    seen: list[Captured] = []

    def before(conn: Any, cursor: Any, stmt: str, params: Any, context: Any, many: bool) -> None:
        seen.append(Captured(stmt, dict(params)))

    event.listen(engine, "before_cursor_execute", before)
    try:
        with engine.connect() as conn, conn.begin() as tx:
            run(conn)
            tx.rollback()
    finally:
        event.remove(engine, "before_cursor_execute", before)
    if not seen:
        raise RuntimeError("nothing was executed")
    return seen[-1]


def enqueue_sql(engine: Engine) -> Captured:
    return capture(engine, lambda c: repository.enqueue(c, {"i": 0}, queue=QUEUE))


def enqueue_many_sql(engine: Engine) -> Captured:
    return capture(engine, lambda c: repository.enqueue_many(c, [{"i": 0}], queue=QUEUE))


def claim_sql(engine: Engine, limit: int) -> Captured:
    return capture(engine, lambda c: repository.claim(c, queue=QUEUE, limit=limit))


def complete_many_sql(engine: Engine) -> Captured:
    """The completer's statement, with the lock timeout a worker sends (5 s, its default)."""
    return capture(
        engine,
        lambda c: store.complete_many(c, [(0, 0)], lock_timeout_ms=5000),
    )
