"""A worker's row in ``jobs_workers`` (pgqueue_0010): written once at start, deleted at stop.

The row says what a worker serves (host, pid, queues) and since when; whether the worker is alive
is read from ``pg_stat_activity`` (:func:`pgqueue.admin.connected_workers`), so nothing is written
while it runs and an idle worker lets a scale-to-zero database sleep. Writing the row is a
courtesy to operators, never a condition of work: on a database not migrated to pgqueue_0010, or
for a role without the grant, the worker logs one warning and runs without it.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError

from pgqueue._base.urls import error_line
from pgqueue._worker import store

log = logging.getLogger("pgqueue.worker")


class Registration:
    """The row of one run of one worker; :meth:`add` at start, :meth:`remove` at stop.

    Both run on the caller's thread (the worker's ``run``) and never raise a database error: the
    first failure is logged as a warning, and a row that could not be written is not deleted.
    Each is one statement of :mod:`pgqueue._worker.store` in autocommit that does not wait for
    the disk to commit (see ``pgqueue._sql.worker_statements.REGISTER_WORKER``): both are on the
    critical path of a ``run()``.
    """

    def __init__(self, engine: Engine, name: str, queues: Sequence[str]) -> None:
        self._engine = engine
        self._name = name
        self._host = socket.gethostname()
        self._pid = os.getpid()
        self._queues = list(queues)
        self._started_at: datetime | None = None
        self._warned = False

    def add(self) -> None:
        try:
            with self._autocommit() as conn:
                self._started_at = store.register_worker(
                    conn, self._name, self._host, self._pid, self._queues
                )
        except SQLAlchemyError as exc:
            self._warn("not written", exc)

    def remove(self) -> None:
        if self._started_at is None:
            return
        try:
            with self._autocommit() as conn:
                store.unregister_worker(conn, self._name, self._started_at)
        except SQLAlchemyError as exc:
            self._warn("not deleted", exc)
        self._started_at = None

    def _autocommit(self) -> Connection:
        """A connection whose one statement commits alone: no BEGIN and COMMIT round trips."""
        return self._engine.connect().execution_options(isolation_level="AUTOCOMMIT")

    def _warn(self, what: str, exc: SQLAlchemyError) -> None:
        if not self._warned:
            self._warned = True
            log.warning(
                "worker %s: its jobs_workers row was %s (%s); the worker runs on, and shows as "
                "connected without its queues (pgqueue migrate, and see pgqueue grants)",
                self._name,
                what,
                error_line(getattr(exc, "orig", None) or exc),
            )
