"""Short transactions that survive a lost connection, a deadlock or a lock timeout.

Every database step of the worker (claim, flush, heartbeat, release, reap) is one short
transaction; they share this one helper for "run it again after a transient error" (which errors
are transient: :mod:`pgqueue._sql.driver_errors`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy import Connection, Engine

from pgqueue._base.urls import error_line
from pgqueue._sql.driver_errors import is_transient
from pgqueue._worker import store

log = logging.getLogger("pgqueue.worker")

T = TypeVar("T")


def never() -> bool:
    """``keep_trying`` of a step tried once: the next round of its loop is the retry."""
    return False


def short_transaction(
    engine: Engine,
    work: Callable[[Connection], T],
    *,
    what: str,
    keep_trying: Callable[[], bool] = never,
    lock_timeout_ms: int | None = None,
    autocommit: bool = False,
) -> T | None:
    """Run ``work`` in one short transaction and return its result; retry transient errors.

    With ``lock_timeout_ms`` the transaction starts with ``SET LOCAL lock_timeout``; with
    ``autocommit`` each statement commits on its own (one statement, no BEGIN/COMMIT round
    trips). Backs off from 50 ms to 2 s between attempts while ``keep_trying()``; returns
    ``None`` once it gave up (logged). Non-transient errors propagate.
    """

    def step() -> T:
        with engine.connect() as conn:
            if autocommit:
                conn.execution_options(isolation_level="AUTOCOMMIT")
                return work(conn)
            with conn.begin():
                if lock_timeout_ms is not None:
                    store.set_local_lock_timeout(conn, lock_timeout_ms)
                return work(conn)

    return retrying(step, what=what, keep_trying=keep_trying)


def retrying(
    step: Callable[[], T], *, what: str, keep_trying: Callable[[], bool] = never
) -> T | None:
    """``step()``, run again after each transient error while ``keep_trying()`` (backing off
    from 50 ms to 2 s); ``None`` once it gave up (logged). Non-transient errors propagate."""
    delay = 0.05
    while True:
        try:
            return step()
        except Exception as exc:
            if not is_transient(exc):
                raise
            if not keep_trying():
                log.warning("%s failed: %s", what, error_line(exc))
                return None
            log.warning("%s failed (%s); retrying in %.2fs", what, error_line(exc), delay)
            time.sleep(delay)
            delay = min(delay * 2, 2.0)
