"""Helpers shared by the worker tests: bounded waits and one-value queries."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Engine, event, text

import pgqueue


def until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``predicate`` every 50 ms; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


def scalar(engine: Engine, sql: str, **params: Any) -> Any:
    with engine.connect() as conn:
        return conn.execute(text(sql), params).scalar_one()


@contextmanager
def running(worker: pgqueue.Worker, **kw: Any) -> Iterator[threading.Thread]:
    """Run the worker in a thread; stop it and wait (bounded) on the way out."""
    thread = threading.Thread(target=worker.run, kwargs=kw, daemon=True)
    thread.start()
    try:
        yield thread
    finally:
        worker.stop()
        thread.join(30)
        assert not thread.is_alive(), "worker did not stop"


@contextmanager
def statements_sent(engine: Engine, needle: str) -> Iterator[list[tuple[str, dict[str, Any]]]]:
    """Every statement (and its parameters) the engine sends that names ``needle``, while
    inside the block."""
    seen: list[tuple[str, dict[str, Any]]] = []

    def before(conn: Any, cursor: Any, statement: str, parameters: Any, *args: Any) -> None:
        if needle in statement:
            seen.append((statement, dict(parameters or {})))

    event.listen(engine, "before_cursor_execute", before)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", before)


def captured_claim(engine: Engine, queue: str = "default", limit: int = 10) -> tuple[str, Any]:
    """The exact SQL and parameters the driver receives for one claim (rolled back)."""
    with statements_sent(engine, "FOR UPDATE SKIP LOCKED") as seen, engine.connect() as conn:
        pgqueue.claim(conn, queue=queue, limit=limit)
        conn.rollback()
    (captured,) = seen
    return captured
