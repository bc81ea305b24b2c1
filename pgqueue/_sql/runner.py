"""The one synchronous runner of :class:`~pgqueue._sql.calls.Call` and plan: execute, map rows.

:mod:`pgqueue.repository` (the users' functions) and :mod:`pgqueue._worker.store` (the worker's
batched statements and its row) both run their calls here, so a call means the same thing
whichever door it came through: the same savepoint when a row lock may be refused, the same
translation of a unique key's conflict. :mod:`pgqueue.aio` is the ``await`` twin of this module.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TypeAlias, TypeVar, Union

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from pgqueue._sql.calls import Call, Plan, lock_refused, translated_errors

#: What every runner accepts: a Core connection or an ORM session.
Executor: TypeAlias = Union[Connection, Session]  # noqa: UP007 (runtime alias on 3.10)

T = TypeVar("T")


def run(conn: Executor, call: Call[T]) -> T:
    """Execute one call in the caller's transaction and map its result."""
    if call.statement is None:
        return call.finish(None)
    if call.on_lock_refused is not None:
        return _run_in_savepoint(conn, call, call.on_lock_refused)
    with translated_errors():
        result = conn.execute(call.statement, call.params)
    return call.finish(result)


def _run_in_savepoint(conn: Executor, call: Call[T], refused: Callable[[], T]) -> T:
    """``call`` inside a savepoint; a row lock the database gave up on rolls back to it."""
    try:
        with conn.begin_nested():
            return run(conn, replace(call, on_lock_refused=None))
    except DBAPIError as exc:
        if not lock_refused(exc):
            raise
        return refused()


def drive(conn: Executor, plan: Plan[T]) -> T:
    """Run a plan's statements in turn, sending each result back into it."""
    call = next(plan)
    while True:
        result = run(conn, call)
        try:
            call = plan.send(result)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
