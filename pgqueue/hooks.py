"""Worker hooks: observe every job's way through a :class:`pgqueue.Worker` (metrics, tracing).

Subclass :class:`WorkerHooks`, override the events you care about, and pass instances to the
worker::

    import logging

    import pgqueue

    log = logging.getLogger("myapp.jobs")


    class SlowJobs(pgqueue.WorkerHooks):
        def on_succeeded(self, job: pgqueue.JobContext, duration: float | None) -> None:
            if duration is not None and duration > 10:
                log.warning("job %d of %s took %.1fs", job.id, job.queue, duration)


    worker = pgqueue.Worker(engine, handlers, hooks=[SlowJobs()])

:mod:`pgqueue.contrib.prometheus` and :mod:`pgqueue.contrib.otel` are built on these hooks.

Hooks run on the worker's own threads, some while the worker holds its internal lock
(``on_claimed``, the outcome events): keep them quick (counters, spans) and hand slow work to a
queue of your own. A hook that raises never breaks the worker: the exception is logged (the first
time with its traceback, then at most once a minute per hook and event, with a count) and the
worker goes on. A worker without hooks pays one ``if`` per event.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from pgqueue.errors import InvalidArgumentTypeError
from pgqueue.jobs import JobContext
from pgqueue.jobs import WorkerView as Worker

if TYPE_CHECKING:
    from pgqueue.results import ReapedJob

log = logging.getLogger("pgqueue.hooks")

#: Seconds between two log lines about the same failing hook and event.
ERROR_LOG_INTERVAL = 60.0


class WorkerHooks:
    """Base class of worker hooks: every event is a no-op method; override the ones you need.

    Durations are in seconds. ``duration`` is the handler's run time, ``None`` when the job
    ended without its handler having run on this worker (for example lost before it started).
    The ``job`` of every event is the handler's :class:`pgqueue.JobContext`; its ``headers``
    carry what the producer passed to ``enqueue(..., headers=...)``.

    Events of one job come in this order: ``on_claimed``, ``on_started``, ``on_handled``, then one
    outcome (``on_succeeded``, ``on_retry``, ``on_failed``, ``on_lost``, ``on_cancelled`` or
    ``on_snoozed``); a
    job claimed and then given back at shutdown has no outcome event. For an ``async def``
    handler, ``on_started`` and ``on_handled`` run inside its task on the worker's event loop (so
    a tracing context attached in one is current in the coroutine and detached in the other);
    keep them non-blocking there.

    .. versionadded:: 0.1.0
    """

    def on_worker_started(self, worker: Worker) -> None:
        """``worker.run()`` began (on the thread that called it), before anything is claimed."""

    def on_worker_stopped(self, worker: Worker) -> None:
        """``worker.run()`` is about to return: every thread of the worker has stopped."""

    def on_claimed(self, job: JobContext) -> None:
        """The worker claimed ``job`` (leased it); its handler has not started yet."""

    def on_started(self, job: JobContext, latency: float) -> None:
        """The handler starts, on its own thread; ``latency`` is claim-to-start in seconds."""

    def on_handled(self, job: JobContext, duration: float, error: BaseException | None) -> None:
        """The handler returned (``error is None``) or raised ``error``; on the handler's thread.

        Called before the outcome is written: pair it with :meth:`on_started` for anything bound
        to the handler's thread (a tracing context, for example).
        """

    def on_succeeded(self, job: JobContext, duration: float | None) -> None:
        """``job`` is ``done`` (written by the worker, or by the handler's own transaction)."""

    def on_retry(self, job: JobContext, duration: float | None, error: str) -> None:
        """The attempt failed and ``job`` is queued again for a later retry."""

    def on_failed(self, job: JobContext, duration: float | None, error: str) -> None:
        """The attempt failed and ``job`` failed for good (attempts spent or not retryable)."""

    def on_lost(self, job: JobContext, reason: str) -> None:
        """``job`` is no longer this worker's (lease lost, guard matched nothing): outcome lost."""

    def on_cancelled(self, job: JobContext, duration: float | None) -> None:
        """``job`` was cancelled (:func:`pgqueue.cancel`) while this worker held it.

        ``duration`` is ``None`` when its handler had not started. Nothing was written: the row
        already says ``failed`` / ``'cancelled'``.
        """

    def on_snoozed(self, job: JobContext, duration: float | None, delay: timedelta) -> None:
        """The handler raised :class:`pgqueue.Snooze`: ``job`` is queued again, ready after
        ``delay``, without using up an attempt (its ``max_attempts`` grew by one)."""

    def on_expired(self, queue: str, count: int) -> None:
        """A claim of this worker found ``count`` jobs of ``queue`` past their ``expires_in``
        deadline and failed them instead (``JobResult.expired``): they never reach a handler, so
        no other event of theirs comes."""

    def on_lease_extended(self, jobs: Sequence[JobContext]) -> None:
        """A heartbeat pushed the leases of ``jobs`` (only those still held)."""

    def on_reaped(self, jobs: Sequence[ReapedJob]) -> None:
        """This worker's reaper requeued or failed ``jobs`` whose lease had expired (anyone's)."""


_EVENTS = (
    "on_worker_started",
    "on_worker_stopped",
    "on_claimed",
    "on_started",
    "on_handled",
    "on_succeeded",
    "on_retry",
    "on_failed",
    "on_lost",
    "on_cancelled",
    "on_snoozed",
    "on_expired",
    "on_lease_extended",
    "on_reaped",
)


def check_hooks(hooks: object) -> list[WorkerHooks]:
    """The worker's ``hooks`` argument: ``None`` or a sequence of :class:`WorkerHooks`."""
    if hooks is None:
        return []
    if isinstance(hooks, (WorkerHooks, str, bytes)) or not isinstance(hooks, Sequence):
        raise InvalidArgumentTypeError("hooks", "a list of pgqueue.WorkerHooks", hooks)
    for i, hook in enumerate(hooks):
        if not isinstance(hook, WorkerHooks):
            raise InvalidArgumentTypeError(f"hooks[{i}]", "a pgqueue.WorkerHooks", hook)
    return list(hooks)


class HookDispatcher:
    """Calls each event on the hooks that override it (a worker has one only with hooks)."""

    def __init__(self, hooks: Sequence[WorkerHooks]) -> None:
        self._by_event: dict[str, list[Callable[..., object]]] = {}
        for event in _EVENTS:
            base = getattr(WorkerHooks, event)
            self._by_event[event] = [
                getattr(h, event) for h in hooks if getattr(type(h), event, base) is not base
            ]
        self._lock = threading.Lock()
        self._errors: dict[tuple[int, str], list[float]] = {}  # -> [count since log, logged at]

    def _call(self, event: str, *args: Any) -> None:
        for method in self._by_event[event]:
            try:
                method(*args)
            except Exception:
                self._log_error(method, event)

    def _log_error(self, method: Callable[..., object], event: str) -> None:
        owner = getattr(method, "__self__", method)
        key = (id(owner), event)
        now = time.monotonic()
        with self._lock:
            seen = self._errors.get(key)
            if seen is None:
                self._errors[key] = [0, now]
                first = True
            else:
                seen[0] += 1
                if now - seen[1] < ERROR_LOG_INTERVAL:
                    return
                count, seen[0], seen[1] = int(seen[0]), 0, now
                first = False
        name = f"{type(owner).__name__}.{event}"
        if first:
            log.exception("hook %s raised; the worker goes on (repeats are summarised)", name)
        else:
            log.error("hook %s raised %d more times; last:", name, count, exc_info=True)

    # -- events -----------------------------------------------------------------------------------

    def worker_started(self, worker: Worker) -> None:
        self._call("on_worker_started", worker)

    def worker_stopped(self, worker: Worker) -> None:
        self._call("on_worker_stopped", worker)

    def claimed(self, job: JobContext) -> None:
        self._call("on_claimed", job)

    def started(self, job: JobContext, latency: float) -> None:
        self._call("on_started", job, latency)

    def handled(self, job: JobContext, duration: float, error: BaseException | None) -> None:
        self._call("on_handled", job, duration, error)

    def outcome(
        self,
        job: JobContext,
        event: str | None,
        detail: str,
        duration: float | None,
        snooze: timedelta | None = None,
    ) -> None:
        """A job's outcome ``event``, the one its row in the worker's outcome table names (none:
        ``None``), called with the arguments that event takes (``snooze``: the delay of a
        snoozed job)."""
        if event is None:
            return
        if event == "on_lost":
            self._call(event, job, detail or "lost")
        elif event in ("on_retry", "on_failed"):
            self._call(event, job, duration, detail)
        elif event == "on_snoozed":
            self._call(event, job, duration, snooze or timedelta(0))
        else:
            self._call(event, job, duration)

    def expired(self, queue: str, count: int) -> None:
        if count:
            self._call("on_expired", queue, count)

    def lease_extended(self, jobs: Sequence[JobContext]) -> None:
        if jobs:
            self._call("on_lease_extended", jobs)

    def reaped(self, jobs: Sequence[ReapedJob]) -> None:
        if jobs:
            self._call("on_reaped", jobs)


__all__ = ["ERROR_LOG_INTERVAL", "HookDispatcher", "WorkerHooks", "check_hooks"]
