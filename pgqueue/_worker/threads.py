"""Handler threads: the lane of sync handlers, in lease mode or in transaction mode.

Lease mode (R9): a thread takes the next claimed job, runs its handler outside any transaction
and hands the outcome to the completer. Transaction mode (R8): a thread takes a ticket (a queue
name), then claims one job, runs its handler and writes its outcome in one transaction, so a
crash rolls everything back and the job is ready again at once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from datetime import timedelta
from functools import partial

from sqlalchemy import Engine

from pgqueue import repository
from pgqueue._base.urls import error_line
from pgqueue._sql.driver_errors import is_transient
from pgqueue._worker.executors import call_sync, run_in_savepoint
from pgqueue._worker.runtime import Runtime
from pgqueue._worker.window import Held, Lane, State
from pgqueue.jobs import Handler, JobContext, Outcome

log = logging.getLogger("pgqueue.worker")


class ThreadLane:
    def __init__(
        self,
        runtime: Runtime,
        handlers: Mapping[str, Handler],
        concurrency: int,
        *,
        transaction: tuple[Engine, timedelta, Callable[[str], None]] | None = None,
    ) -> None:
        self._rt = runtime
        self._handlers = handlers
        self._transaction = transaction
        self._threads = [
            threading.Thread(target=self._loop, name=f"pgqueue-handler-{i}", daemon=True)
            for i in range(concurrency)
        ]

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def join(self, deadline: float) -> None:
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))

    def _loop(self) -> None:
        rt = self._rt
        window = rt.window
        while True:
            held: Held | None = None
            with rt.lock:
                while not (rt.stop.is_set() or window.has_pending(Lane.THREADS) or window.tickets):
                    rt.work_ready.wait()
                if rt.stop.is_set():
                    return
                if window.transaction:
                    queue = window.tickets.popleft()
                    window.tx_running += 1
                else:
                    held = window.start_next(Lane.THREADS)
                    assert held is not None
                    if not window.has_pending(Lane.THREADS):
                        rt.wake_claimer()
            if held is not None:
                error = call_sync(self._handlers[held.job.queue], held, rt.hooks)
                rt.finish(held, error)
                continue
            assert self._transaction is not None
            try:
                self._run_in_transaction(queue, *self._transaction)
            finally:
                with rt.lock:
                    window.tx_running -= 1
                    rt.claimer_wakeup.notify()

    def _run_in_transaction(
        self, queue: str, engine: Engine, lease: timedelta, queue_had_job: Callable[[str], None]
    ) -> None:
        rt = self._rt
        held: Held | None = None
        outcome, detail = Outcome.LOST, ""
        try:
            with engine.begin() as conn:
                claimed = repository.claim(conn, queue=queue, limit=1, lease=lease)
                if not claimed:
                    return
                job = JobContext.of(claimed[0], connection=conn)
                with rt.lock:
                    rt.last_work = time.monotonic()
                    rt.stats.claimed += 1
                    queue_had_job(queue)
                # Not in the window: its row is locked by this transaction, so the heartbeat
                # must not try to extend it (it is counted as a running ticket instead).
                held = Held(job, Lane.THREADS, rt.last_work, State.RUNNING)
                if rt.hooks is not None:
                    rt.hooks.claimed(job)
                run = partial(call_sync, self._handlers[queue], held, rt.hooks)
                _, outcome, detail = run_in_savepoint(conn, held, run, rt.policy(queue))
        except Exception as exc:
            if held is None and is_transient(exc):
                log.warning("claim on queue %s failed: %s", queue, error_line(exc))
                rt.stop.wait(1.0)
                return
            if held is None:
                raise
            outcome, detail = Outcome.LOST, f"transaction rolled back: {error_line(exc)}"
        finally:
            if held is not None:
                held.job.connection = None
        if held is not None:
            with rt.lock:
                rt.record(held, outcome, detail)
