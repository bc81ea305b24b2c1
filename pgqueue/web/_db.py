"""Every database round of the dashboard: off the event loop, once more after a lost connection.

A dashboard idles for hours between two visits, and its pooled connections die meanwhile (a
restart, a failover, ``pg_terminate_backend``, an idle timeout of a proxy). The first request
would then be a 503 for nothing: when a round fails because its connection was lost
(SQLAlchemy's ``connection_invalidated``, which also retires the pool's other connections of that
age), it runs once more on a fresh one. Nothing was committed by the failed round (the loss
rolled it back), except when the connection died during ``COMMIT`` itself: then the action runs
twice, which each of them allows (a retry or cancel of a job already changed changes nothing
more; a purge deletes old done jobs again). ``pgqueue web`` also pings at checkout
(``pool_pre_ping``); an engine of yours is used as you built it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy.exc import DBAPIError
from starlette.concurrency import run_in_threadpool

from pgqueue._base.urls import error_line

log = logging.getLogger("pgqueue.web")

T = TypeVar("T")


def once_more_on_disconnect(work: Callable[[], T]) -> T:
    """``work()``, and once more if it failed on a connection the database had closed."""
    try:
        return work()
    except DBAPIError as exc:
        if not exc.connection_invalidated:
            raise
        log.info(
            "database connection lost (%s); once more on a new one", error_line(exc.orig or exc)
        )
    return work()


async def in_thread(work: Callable[[], T]) -> T:
    """:func:`once_more_on_disconnect` in Starlette's thread pool (the engine is sync)."""
    return await run_in_threadpool(once_more_on_disconnect, work)
