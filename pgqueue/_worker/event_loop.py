"""The asyncio lane: ``async def`` handlers as tasks on one event loop, in one thread.

At most ``limit`` coroutines run at once; an I/O-bound job takes no thread. Nothing of pgqueue
runs on this loop but the handlers and a few microseconds of bookkeeping per job (the database
work stays on the claimer, completer and heartbeat threads), so pgqueue never blocks it. A lost
lease or a cancel cancels the job's task (``asyncio.CancelledError`` inside the handler); at
shutdown running tasks get the shutdown timeout, then are cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Mapping
from functools import partial

from pgqueue._worker.dispatch import Dispatch, as_dispatch
from pgqueue._worker.executors import call_async
from pgqueue._worker.runtime import Runtime
from pgqueue._worker.window import Held, Lane
from pgqueue.jobs import Handler

log = logging.getLogger("pgqueue.worker")


class AsyncLane:
    def __init__(
        self, runtime: Runtime, handlers: Mapping[str, Handler] | Dispatch, limit: int
    ) -> None:
        self._rt = runtime
        self._dispatch = as_dispatch(handlers)
        self._limit = limit
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run_loop, name="pgqueue-asyncio", daemon=True)
        self._tasks: set[asyncio.Task[None]] = set()  # loop thread only
        self._running = 0  # loop thread only
        self._wake_scheduled = False  # under the runtime's lock

    def start(self) -> None:
        self._thread.start()

    def shutdown(self, deadline: float) -> None:
        """Give running coroutines until ``deadline``, cancel the rest, stop the loop."""
        if self._thread.is_alive():
            done = asyncio.run_coroutine_threadsafe(self._drain(deadline), self._loop)
            try:
                done.result(timeout=max(0.0, deadline - time.monotonic()) + 5.0)
            except Exception:
                log.exception("stopping the worker's event loop failed")
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5.0)
        if not self._thread.is_alive():
            self._loop.close()

    def _run_loop(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()

    def wake(self) -> None:
        """Jobs are pending: the runtime's ``wake_async`` (called under its lock, from any
        thread)."""
        if not self._wake_scheduled and not self._loop.is_closed():
            self._wake_scheduled = True
            self._loop.call_soon_threadsafe(self._start_pending)

    def _start_pending(self) -> None:
        rt = self._rt
        with rt.lock:
            self._wake_scheduled = False
            while self._running < self._limit and not rt.stop.is_set():
                held = rt.window.start_next(Lane.ASYNC)
                if held is None:
                    break
                self._running += 1
                task = self._loop.create_task(self._run_job(held))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
                held.cancel_task = partial(self._cancel, task)
                rt.started(held)
            if not rt.window.has_pending(Lane.ASYNC):
                rt.wake_claimer()

    def _cancel(self, task: asyncio.Task[None]) -> None:
        """From any thread: cancel ``task`` on the loop (a no-op once it finished or closed)."""
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nothing runs
            self._loop.call_soon_threadsafe(task.cancel)

    async def _run_job(self, held: Held) -> None:
        error = await call_async(self._dispatch.target(held.job), held, self._rt.hooks)
        self._running -= 1
        self._rt.finish(held, error)
        self._start_pending()

    async def _drain(self, deadline: float) -> None:
        tasks = set(self._tasks)
        if not tasks:
            return
        _, late = await asyncio.wait(tasks, timeout=max(0.0, deadline - time.monotonic()))
        for task in late:
            task.cancel()
        if late:
            log.warning("%d async handler(s) still running at the deadline: cancelled", len(late))
            await asyncio.wait(late, timeout=5.0)
