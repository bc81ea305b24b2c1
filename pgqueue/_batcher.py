"""The worker's completer: batches completions and failures into one guarded statement each.

Handlers hand their outcome over and return at once; a single thread turns everything that
arrived within a few milliseconds into one transaction (``COMPLETE_MANY``, ``FAIL_MANY`` per retry
policy), retried on a lost connection, a deadlock or a lock timeout, so a finished job is not run
again for want of its write.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

from pgqueue import statements
from pgqueue.retry import RetryPolicy

if TYPE_CHECKING:
    from pgqueue.worker import JobContext

log = logging.getLogger("pgqueue.worker")

T = TypeVar("T")

#: Outcomes reported back to the worker for each job.
DONE = "done"
DONE_BY_HANDLER = "done by handler"
RETRY = "retry"
FAILED = "failed"
LOST = "lost"
RELEASED = "released"

#: Most outcomes per completer flush: one statement of 500 ids costs little more than one of 10,
#: and a completer that keeps up keeps the worker's bookkeeping small.
FLUSH_SIZE = 500


def is_transient(exc: BaseException) -> bool:
    """A lost connection, a deadlock, a lock or statement timeout: worth running again."""
    if isinstance(exc, (OperationalError, InterfaceError)):
        return True
    return isinstance(exc, DBAPIError) and exc.connection_invalidated


def run_batch(
    engine: Engine,
    work: Callable[[Connection], T],
    *,
    lock_timeout_ms: int,
    keep_trying: Callable[[], bool],
    what: str,
) -> T | None:
    """Run ``work`` in one short transaction under ``SET LOCAL lock_timeout``; retry transients.

    Backs off from 50 ms to 2 s between attempts while ``keep_trying()``; returns ``None`` when it
    gave up. Non-transient errors propagate.
    """
    delay = 0.05
    while True:
        try:
            with engine.begin() as conn:
                conn.execute(
                    statements.SET_LOCAL_LOCK_TIMEOUT, {"lock_timeout": str(lock_timeout_ms)}
                )
                return work(conn)
        except Exception as exc:
            if not is_transient(exc):
                raise
            if not keep_trying():
                log.error("%s abandoned after a transient error: %s", what, _short(exc))
                return None
            log.warning("%s failed (%s); retrying in %.2fs", what, _short(exc), delay)
            time.sleep(delay)
            delay = min(delay * 2, 2.0)


def _short(exc: BaseException) -> str:
    from pgqueue._urls import mask_text

    return mask_text(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)


def batch_params(jobs: Sequence[JobContext]) -> dict[str, Any]:
    return {"batch_ids": [j.id for j in jobs], "batch_attempts": [j.attempts for j in jobs]}


def matched_ids(conn: Connection, stmt: Any, params: dict[str, Any]) -> set[int]:
    return {int(row.id) for row in conn.execute(stmt, params)}


@dataclass
class _Failure:
    job: JobContext
    error: str
    retry: bool
    policy: RetryPolicy


class Completer:
    """One thread that flushes finished jobs within ``flush_delay`` seconds, ``batch_size`` at most.

    ``report([(job, outcome, detail), ...])`` is called once per batch after its write committed.
    """

    def __init__(
        self,
        engine: Engine,
        report: Callable[[list[tuple[JobContext, str, str]]], None],
        *,
        batch_size: int,
        lock_timeout_ms: int,
        flush_delay: float = 0.002,
    ) -> None:
        self._engine = engine
        self._report = report
        self._batch_size = batch_size
        self._lock_timeout_ms = lock_timeout_ms
        self._flush_delay = flush_delay
        self._cond = threading.Condition()
        self._done: list[JobContext] = []
        self._failed: list[_Failure] = []
        self._busy = False
        self._closing = False
        self._give_up_at: float | None = None
        self._thread = threading.Thread(target=self._run, name="pgqueue-completer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def complete(self, job: JobContext) -> None:
        self._add(lambda: self._done.append(job))

    def fail(self, job: JobContext, error: str, *, retry: bool, policy: RetryPolicy) -> None:
        self._add(lambda: self._failed.append(_Failure(job, error, retry, policy)))

    def _add(self, append: Callable[[], None]) -> None:
        with self._cond:
            append()
            queued = len(self._done) + len(self._failed)
            if queued == 1 or queued >= self._batch_size:
                self._cond.notify()  # the first wakes the thread, a full batch ends its wait

    def pending(self) -> int:
        with self._cond:
            return len(self._done) + len(self._failed) + (1 if self._busy else 0)

    def close(self, deadline: float) -> None:
        """Flush what is buffered, retrying until ``deadline`` (a ``time.monotonic()`` value)."""
        with self._cond:
            self._closing = True
            self._give_up_at = deadline
            self._cond.notify_all()
        self._thread.join(max(0.0, deadline - time.monotonic()) + 1.0)

    def _keep_trying(self) -> bool:
        return self._give_up_at is None or time.monotonic() < self._give_up_at

    def _run(self) -> None:
        while True:
            with self._cond:
                while not (self._done or self._failed or self._closing):
                    self._cond.wait()
                if not (self._done or self._failed):
                    return
                # Let a burst gather: one statement for many jobs.
                if len(self._done) + len(self._failed) < self._batch_size and not self._closing:
                    self._cond.wait(self._flush_delay)
                done, self._done = self._done[: self._batch_size], self._done[self._batch_size :]
                failed = self._failed[: self._batch_size]
                self._failed = self._failed[self._batch_size :]
                self._busy = True
            try:
                self._flush(done, failed)
            except Exception:
                log.exception("flushing %d job outcomes failed", len(done) + len(failed))
                lost = [(job, LOST, "completion not written") for job in done]
                self._report(lost + [(f.job, LOST, "failure not written") for f in failed])
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _flush(self, done: list[JobContext], failed: list[_Failure]) -> None:
        def work(conn: Connection) -> list[tuple[JobContext, str, str]]:
            outcomes: list[tuple[JobContext, str, str]] = []
            if done:
                outcomes += complete_many(conn, done)
            for policy, group in _by_policy(failed):
                outcomes += _fail_many(conn, policy, group)
            return outcomes

        result = run_batch(
            self._engine,
            work,
            lock_timeout_ms=self._lock_timeout_ms,
            keep_trying=self._keep_trying,
            what="flush",
        )
        if result is None:
            result = [(j, LOST, "completion not written") for j in done]
            result += [(f.job, LOST, "failure not written") for f in failed]
        self._report(result)


def complete_many(conn: Connection, jobs: list[JobContext]) -> list[tuple[JobContext, str, str]]:
    """Complete a batch; tell done, done by its handler's own transaction, and lost apart."""
    params = batch_params(jobs)
    matched = matched_ids(conn, statements.COMPLETE_MANY, params)
    missed = [j for j in jobs if j.id not in matched]
    by_handler = matched_ids(conn, statements.DONE_AMONG, batch_params(missed)) if missed else set()
    out: list[tuple[JobContext, str, str]] = []
    for job in jobs:
        if job.id in matched:
            out.append((job, DONE, ""))
        elif job.id in by_handler:
            out.append((job, DONE_BY_HANDLER, ""))
        else:
            out.append((job, LOST, "guard matched no row at completion"))
    return out


def _by_policy(failed: Iterable[_Failure]) -> list[tuple[RetryPolicy, list[_Failure]]]:
    groups: dict[RetryPolicy, list[_Failure]] = {}
    for f in failed:
        groups.setdefault(f.policy, []).append(f)
    return list(groups.items())


def _fail_many(
    conn: Connection, policy: RetryPolicy, group: list[_Failure]
) -> list[tuple[JobContext, str, str]]:
    params = batch_params([f.job for f in group])
    params.update(
        batch_errors=[f.error for f in group],
        batch_retry=[f.retry for f in group],
        base_seconds=policy.base.total_seconds(),
        cap_seconds=policy.cap.total_seconds(),
    )
    rows = {int(r.id): r for r in conn.execute(statements.FAIL_MANY, params)}
    out: list[tuple[JobContext, str, str]] = []
    for f in group:
        row = rows.get(f.job.id)
        if row is None:
            out.append((f.job, LOST, "guard matched no row at failure"))
        elif row.status == "failed":
            out.append((f.job, FAILED, f.error))
        else:
            out.append((f.job, RETRY, f"retry in {row.retry_in}: {f.error}"))
    return out
