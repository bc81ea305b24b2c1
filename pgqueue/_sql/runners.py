"""The two runners of a :class:`~pgqueue._sql.calls.Call` and a ``Plan``: one that blocks, on a
``Connection`` or ``Session``, and one that awaits, on an ``AsyncConnection`` or
``AsyncSession``. They differ only by ``await``.

Every door runs its statements through them: the repository and :mod:`pgqueue.aio`, a task's
enqueues, chains and groups. A task reaches them by importing this module, so nothing is wired
at import time and an async enqueue needs no greenlet.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, TypeAlias, TypeVar, Union

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from pgqueue._sql.calls import Call, Plan, lock_refused, translated_errors

#: What the blocking runner accepts: a Core connection or an ORM session.
Executor: TypeAlias = Union[Connection, Session]  # noqa: UP007 (runtime alias on 3.10)

if TYPE_CHECKING:  # the asyncio extension (greenlet) is optional: typing only
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

    AsyncExecutor: TypeAlias = Union[AsyncConnection, AsyncSession]  # noqa: UP007

T = TypeVar("T")


def run(conn: Executor, call: Call[T]) -> T:
    """Execute one call in the caller's transaction; its value."""
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
    """Run a plan's statements in turn, sending each result back into it; its value."""
    call = next(plan)
    while True:
        result = run(conn, call)
        try:
            call = plan.send(result)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]


async def arun(conn: AsyncExecutor, call: Call[T]) -> T:
    """:func:`run` on an ``AsyncConnection`` or ``AsyncSession``."""
    if call.statement is None:
        return call.finish(None)
    if call.on_lock_refused is not None:
        return await _arun_in_savepoint(conn, call, call.on_lock_refused)
    with translated_errors():
        result = await conn.execute(call.statement, call.params)
    return call.finish(result)


async def _arun_in_savepoint(conn: AsyncExecutor, call: Call[T], refused: Callable[[], T]) -> T:
    try:
        async with conn.begin_nested():
            return await arun(conn, replace(call, on_lock_refused=None))
    except DBAPIError as exc:
        if not lock_refused(exc):
            raise
        return refused()


async def adrive(conn: AsyncExecutor, plan: Plan[T]) -> T:
    """:func:`drive` on an ``AsyncConnection`` or ``AsyncSession``."""
    call = next(plan)
    while True:
        result = await arun(conn, call)
        try:
            call = plan.send(result)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
