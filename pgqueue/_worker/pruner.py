"""The pruner: a worker's thread that deletes the finished jobs past their queue's retention.

Every :data:`PRUNE_INTERVAL` seconds it goes through the worker's queues. A queue is pruned by
one worker at a time, at most once per interval over all of them: each of the pruner's short
transactions first takes the queue's ``jobs_retention`` row (locked ``FOR UPDATE SKIP LOCKED``:
a worker that finds it locked, or pruned within the interval by another, skips the queue), then
deletes at most 1,000 rows of each kind (:mod:`pgqueue._sql.retention_statements`) and commits.
It goes on with the next batch while a batch was full, so a long backlog is worked through in
one visit, each batch renewing the worker's claim on the queue. Row locks are transaction-scoped,
so this works through a transaction-mode pooler, where session advisory locks would not.

While the worker is idle (scale-to-zero) it sends nothing: no job finished meanwhile, and the
rows that age past their retention wait for the next busy minute.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from datetime import timedelta

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import ProgrammingError

from pgqueue._base.urls import error_line
from pgqueue._sql.driver_errors import DriverError, classify
from pgqueue._sql.retention_statements import PRUNE_BATCH
from pgqueue._worker import store
from pgqueue._worker.faults import Faults
from pgqueue._worker.transient import short_transaction
from pgqueue.retention_policy import KINDS

log = logging.getLogger("pgqueue.worker")

#: Seconds between two visits of a queue, over every worker: once a minute.
PRUNE_INTERVAL = 60.0


class Pruner:
    """Prunes ``queues`` on a thread of its own until ``stop`` is set.

    Args:
        engine: Where the jobs live.
        queues: The queues to prune (the worker's).
        worker: The worker's name, written in ``jobs_retention.pruned_by``.
        stop: Set when the worker stops; the pruner's waits end on it.
        idle: Whether the worker is idle (scale-to-zero): then no visit.
        interval: Seconds between two visits of a queue; default :data:`PRUNE_INTERVAL` (a
            test may give a shorter one).
        lock_timeout_ms: How long each transaction waits for a row lock.
    """

    def __init__(
        self,
        engine: Engine,
        queues: Sequence[str],
        *,
        worker: str,
        stop: threading.Event,
        idle: Callable[[], bool],
        interval: float | None = None,
        lock_timeout_ms: int | None = None,
    ) -> None:
        self._engine = engine
        self._queues = list(queues)
        self._worker = worker
        self._stop = stop
        self._idle = idle
        self.interval = PRUNE_INTERVAL if interval is None else interval
        self._lock_timeout_ms = lock_timeout_ms
        self._faults = Faults("pruner")
        self._thread = threading.Thread(target=self._loop, name="pgqueue-pruner", daemon=True)
        #: Rows deleted by this pruner so far.
        self.deleted = 0
        #: The ``jobs_retention`` table is not there, or the role may not prune: nothing is.
        self.missing_table = False

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float) -> None:
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _loop(self) -> None:
        while not self._stop.is_set() and not self.missing_table:
            if not self._idle():
                pause = self.prune_once()
                if pause is not None:
                    self._stop.wait(pause)
                    continue
            self._stop.wait(self.interval)

    def prune_once(self) -> float | None:
        """:meth:`prune_all`, an error it did not expect logged with its traceback (a prune that
        fails costs no job its truth): ``None``, or the seconds to pause before the next try.
        What ``run(until_empty=True)`` calls after its drain."""
        try:
            self.prune_all()
        except Exception as exc:
            return self._faults.failed(exc)
        self._faults.succeeded()
        return None

    def prune_all(self) -> int:
        """Visit each queue once (:meth:`prune`); how many rows were deleted. Without the
        ``jobs_retention`` table (revisions not applied up to pgqueue_0016), or without the
        privileges to prune, it logs an ERROR once saying which and the pruner stops: the worker
        runs on without pruning."""
        total = 0
        for queue in self._queues:
            if self._stop.is_set() or self.missing_table:
                break
            try:
                total += self.prune(queue)
            except ProgrammingError as exc:
                self.missing_table = True
                fix = (
                    "grant the worker's role DELETE on jobs and jobs_logs and SELECT, INSERT, "
                    "UPDATE on jobs_retention (`pgqueue grants --role-worker`), or run it with "
                    "prune=False"
                    if classify(exc) is DriverError.DENIED
                    else "is the jobs_retention table there? apply pgqueue's revisions up to "
                    "pgqueue_0016"
                )
                log.error(
                    "pruner: %s (%s); finished jobs are not pruned by this worker",
                    error_line(exc),
                    fix,
                )
        return total

    def prune(self, queue: str) -> int:
        """Visit ``queue`` once: nothing when another worker has it or pruned it within the
        interval; else delete batch after batch while they come back full. Returns how many
        rows were deleted."""
        total, continuing = 0, False
        while not self._stop.is_set():
            deleted = self._run(queue, continuing)
            if deleted is None:  # skipped, or a transient error (logged): the next visit
                break
            total += sum(deleted)
            if max(deleted, default=0) < PRUNE_BATCH:
                break
            continuing = True
        if total:
            self.deleted += total
            log.info("queue %s: %d finished job(s) past their retention deleted", queue, total)
        return total

    def _batch(self, conn: Connection, queue: str, *, continuing: bool) -> list[int] | None:
        """One transaction: take the queue, delete one batch of each kind it does not keep for
        ever; ``None`` when the queue is not ours to prune now."""
        interval = timedelta(seconds=self.interval)
        kept = store.take_prune(conn, queue, self._worker, interval, continuing=continuing)
        if kept is None and not continuing and store.ensure_retention_row(conn, queue):
            # The queue's first visit: its row now exists, locked by this transaction.
            kept = store.take_prune(conn, queue, self._worker, interval, continuing=False)
        if kept is None:
            return None
        return [
            store.prune_finished(conn, queue, kind, age)
            for kind in KINDS
            if (age := kept[kind]) is not None
        ]

    def _run(self, queue: str, continuing: bool) -> list[int] | None:
        return short_transaction(
            self._engine,
            lambda conn: self._batch(conn, queue, continuing=continuing),
            what="pruner",
            lock_timeout_ms=self._lock_timeout_ms,
        )
