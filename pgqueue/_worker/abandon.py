"""Transaction mode's last resort: a sync handler still running inside its transaction at
timeout + grace. Its session is ended from another one, which rolls its claim back with the
rest of its work, and the attempt's failure is written as its own transaction would have.

The failure is queued on the row before the session is ended. A statement waiting for the row
is woken by the server the moment that session's transaction aborts; one sent after the
termination had to win a race against every claim, and a claim that took the freed row first ran
the attempt again without charging it (seen on a loaded machine: a handler that always hangs
would never reach ``max_attempts``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import suppress
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine

from pgqueue._base.urls import error_line
from pgqueue._sql.statements import BACKEND_PID, CANCEL_BACKEND, TERMINATE_BACKEND, WAITS_FOR
from pgqueue._worker import store
from pgqueue._worker.outcomes import Decision, after_fail
from pgqueue.jobs import Outcome
from pgqueue.results import FailResult
from pgqueue.retry_policy import RetryPolicy

T = TypeVar("T")

#: How long the failure waits for the row, which the ended session holds until the server has
#: rolled it back (milliseconds).
RETAKE_LOCK_TIMEOUT_MS = 5_000

#: How long the session is left running while the failure is not yet seen waiting for its row
#: (a statement that never waits: the row had changed). Then it is ended all the same.
_QUEUE_WAIT = 2.0
_QUEUE_POLL = 0.002


class SessionNotEndedError(Exception):
    """The handler's session could not be ended; its own transaction writes its outcome."""


class Interrupter:
    """Cancels the statement a transaction-mode handler's session runs (``pg_cancel_backend``
    from another connection), so that a query still running at the timeout fails and the
    handler's savepoint rolls back. Only while the handler runs: its own lock orders the cancel
    before the handler's return, so the completion written after it is never the one cancelled
    (a cancel that reaches an idle session is dropped by the server)."""

    def __init__(self, engine: Engine, pid: int) -> None:
        self._engine = engine
        self.pid = pid
        self._lock = threading.Lock()
        self._armed = True

    @classmethod
    def of(cls, engine: Engine, conn: Connection) -> Interrupter:
        """For the session of ``conn``'s transaction, asked of the server (one round trip, for
        a job with a timeout only): behind a pooler the driver's own idea of the pid is the
        pooler's, not the server process that runs the transaction."""
        return cls(engine, int(conn.execute(BACKEND_PID).scalar_one()))

    def around(self, run: Callable[[], T]) -> Callable[[], T]:
        def disarmed_after() -> T:
            try:
                return run()
            finally:
                with self._lock:
                    self._armed = False

        return disarmed_after

    def __call__(self) -> None:
        with self._lock:
            if not self._armed:
                return
            self._send(CANCEL_BACKEND)

    def terminate(self, before: Callable[[], None]) -> bool:
        """End the handler's session if the handler still runs: ``before()`` first, under the
        lock that orders this before the handler's return. False when it had returned (nothing
        done). Disarms: the handler's outcome can no longer be written by its transaction."""
        with self._lock:
            if not self._armed:
                return False
            self._armed = False
            before()
            self._send(TERMINATE_BACKEND)
            return True

    def _send(self, statement: Any) -> None:
        with self._engine.connect() as other:
            other.execute(statement, {"pid": self.pid})
            other.commit()


@dataclass(frozen=True)
class RolledBackFailure:
    """The failure of attempt ``attempts`` of job ``job_id``, for a session about to be ended."""

    job_id: int
    attempts: int
    error: str
    retry: bool
    policy: RetryPolicy
    lease: timedelta
    locked_by: str | None


def end_and_fail(
    engine: Engine, interrupter: Interrupter, failure: RolledBackFailure, before: Callable[[], None]
) -> Decision | None:
    """End the handler's session (``before()`` first, as :meth:`Interrupter.terminate`) and
    write ``failure`` in a transaction of its own, queued on the row before the end. ``None``:
    the handler had returned, and its own transaction writes its outcome. Raises
    :class:`SessionNotEndedError` when the session could not be ended (nor the failure sent)."""
    try:
        conn = engine.connect()
    except Exception as exc:
        raise SessionNotEndedError(error_line(exc)) from exc
    with conn, ThreadPoolExecutor(1, thread_name_prefix="pgqueue-retake") as waiting:
        try:
            waiter = int(conn.execute(BACKEND_PID).scalar_one())
        except Exception as exc:
            raise SessionNotEndedError(error_line(exc)) from exc
        retake = waiting.submit(_retake_and_fail, conn, failure)
        try:
            _until_queued(engine, waiter, interrupter.pid, retake)
            ended = interrupter.terminate(before)
        except Exception as exc:
            _drop(conn, retake)
            raise SessionNotEndedError(error_line(exc)) from exc
        if not ended:
            _drop(conn, retake)
            return None
        try:
            row = retake.result()
            conn.commit()
        except Exception as exc:  # the row is queued again: the job runs again, not charged
            _roll_back(conn)
            return (
                Outcome.LOST,
                f"transaction rolled back; its failure not written: {error_line(exc)}",
            )
    return after_fail(row, failure.error)


def _retake_and_fail(conn: Connection, failure: RolledBackFailure) -> FailResult | None:
    return store.fail_rolled_back(
        conn,
        failure.job_id,
        failure.attempts,
        failure.error,
        retry=failure.retry,
        policy=failure.policy,
        lease=failure.lease,
        locked_by=failure.locked_by,
        lock_timeout_ms=RETAKE_LOCK_TIMEOUT_MS,
    )


def _until_queued(engine: Engine, waiter: int, holder: int, retake: Future[Any]) -> None:
    """Until session ``waiter`` waits for a lock of session ``holder`` (the row the handler's
    claim holds), or its statement ended without waiting, or :data:`_QUEUE_WAIT` passed."""
    deadline = time.monotonic() + _QUEUE_WAIT
    with engine.connect() as other:
        while not retake.done() and time.monotonic() < deadline:
            if other.execute(WAITS_FOR, {"holder": holder, "waiter": waiter}).scalar_one():
                return
            time.sleep(_QUEUE_POLL)


def _drop(conn: Connection, retake: Future[Any]) -> None:
    """The session was not ended: the queued failure ends with the handler's transaction (or
    its lock timeout), and is rolled back whatever it matched."""
    retake.exception()
    _roll_back(conn)


def _roll_back(conn: Connection) -> None:
    """Roll back, on a connection that may be broken: closing it right after (which gives it
    back to the pool, or drops it) rolls back anyway, so there is nothing to say on failure."""
    with suppress(Exception):
        conn.rollback()
