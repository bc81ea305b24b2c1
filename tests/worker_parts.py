"""What the worker components' tests build them from: a runtime, fakes of their collaborators.

The fakes stand in for the other components (the completer, the hooks), never for PostgreSQL:
a test that needs SQL runs it on a real server. :func:`make_runtime` is the one place a test builds
a :class:`Runtime`, so a change to how one is constructed is adapted here alone.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import timedelta
from typing import Any, cast

from sqlalchemy import Engine, create_engine

from pgqueue._worker.completer import Completer
from pgqueue._worker.runtime import Runtime
from pgqueue._worker.window import ClaimWindow, Held, Lane
from pgqueue.hooks import HookDispatcher, WorkerHooks
from pgqueue.jobs import JobContext, WorkerStats
from pgqueue.results import ClaimedJob
from pgqueue.retry_policy import RetryPolicy

WAIT = 10.0  # seconds a test waits for a component's thread before it fails


class DatabaseTouched(BaseException):
    """A unit test's component opened a database connection (a ``BaseException``: the
    components' ``except Exception`` around their database steps does not swallow it)."""


def offline_engine() -> Engine:
    """An engine for the components that take one, in a unit test: connecting raises
    :class:`DatabaseTouched` (no ``except Exception`` swallows it), so a component that reaches
    for the database where the test gave it a fake fails the test."""

    def refuse() -> Any:
        raise DatabaseTouched("a unit test tried to connect")

    return create_engine("postgresql+psycopg://offline.invalid/none", creator=refuse)


def claimed_jobs(ids: range | list[int], queue: str = "q", attempts: int = 1) -> list[ClaimedJob]:
    return [ClaimedJob(i, queue, {"n": i}, attempts) for i in ids]


def held_job(job_id: int, queue: str = "q", lane: Lane = Lane.THREADS, attempts: int = 1) -> Held:
    """A job as the window holds it (not in any window)."""
    return Held(JobContext(job_id, queue, {"n": job_id}, attempts), lane, time.monotonic())


class Recorder(WorkerHooks):
    """Every per-job hook call, as ``(event, job id, the other arguments)``."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, tuple[Any, ...]]] = []
        self.extended: list[list[int]] = []
        self._lock = threading.Lock()

    def _add(self, event: str, job: JobContext, *args: Any) -> None:
        with self._lock:
            self.calls.append((event, job.id, args))

    def events(self, job_id: int) -> list[str]:
        with self._lock:
            return [event for event, i, _ in self.calls if i == job_id]

    def on_claimed(self, job: JobContext) -> None:
        self._add("on_claimed", job)

    def on_succeeded(self, job: JobContext, duration: float | None) -> None:
        self._add("on_succeeded", job, duration)

    def on_retry(self, job: JobContext, duration: float | None, error: str) -> None:
        self._add("on_retry", job, duration, error)

    def on_failed(self, job: JobContext, duration: float | None, error: str) -> None:
        self._add("on_failed", job, duration, error)

    def on_lost(self, job: JobContext, reason: str) -> None:
        self._add("on_lost", job, reason)

    def on_cancelled(self, job: JobContext, duration: float | None) -> None:
        self._add("on_cancelled", job, duration)

    def on_snoozed(self, job: JobContext, duration: float | None, delay: timedelta) -> None:
        self._add("on_snoozed", job, duration, delay)

    def on_lease_extended(self, jobs: Any) -> None:
        with self._lock:
            self.extended.append([job.id for job in jobs])


class FakeCompleter:
    """Takes the runtime's hand-over of finished jobs and records it: ``(kind, held, args)``."""

    def __init__(self) -> None:
        self.handed: list[tuple[str, Held, tuple[Any, ...]]] = []
        self.tracebacks: list[str | None] = []
        self.hurried = 0  # times the runtime said nothing else runs

    def hurry(self) -> None:
        self.hurried += 1

    def complete(self, held: Held) -> None:
        self.handed.append(("complete", held, ()))

    def snooze(self, held: Held) -> None:
        self.handed.append(("snooze", held, ()))

    def fail(
        self,
        held: Held,
        error: str,
        *,
        retry: bool,
        policy: RetryPolicy,
        traceback: str | None = None,
    ) -> None:
        self.handed.append(("fail", held, (error, retry, policy)))
        self.tracebacks.append(traceback)


def make_runtime(
    window: ClaimWindow,
    *,
    completer: FakeCompleter | Completer | None = None,
    hooks: list[WorkerHooks] | None = None,
    policies: Mapping[str, RetryPolicy] | None = None,
    wake_async: Callable[[], None] | None = None,
) -> Runtime:
    """The runtime of one run over ``window``: the one place the tests construct a Runtime."""
    default = RetryPolicy()
    runtime = Runtime(
        window,
        WorkerStats(),
        HookDispatcher(hooks) if hooks else None,
        lambda queue: (policies or {}).get(queue, default),
        completer=cast(Completer, completer if completer is not None else FakeCompleter()),
        wake_async=wake_async if wake_async is not None else (lambda: None),
    )
    return runtime


def stop(runtime: Runtime) -> None:
    """What the worker's ``stop()`` does to a run: nothing new is claimed or started."""
    runtime.stop.set()
    with runtime.lock:
        runtime.claimer_wakeup.notify_all()
        runtime.work_ready.notify_all()


def finish_pending(runtime: Runtime, lane: Lane, seconds: float, count: int | None = None) -> int:
    """Run ``count`` (default: all) pending jobs of ``lane`` to a written end, each handler having
    taken ``seconds``, in one hold of the lock, as if a completer had reported them; then wake the
    claimer. Returns how many ended."""
    ended = 0
    with runtime.lock:
        window = runtime.window
        while count is None or ended < count:
            held = window.start_next(lane)
            if held is None:
                break
            held.handler_seconds = seconds
            window.finishing(held)
            window.forget(held)
            ended += 1
        runtime.wake_claimer()
    return ended


def until(predicate: Callable[[], bool], what: str, timeout: float = WAIT) -> None:
    """Poll ``predicate`` every 10 ms; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.01)


@contextmanager
def in_thread(target: Callable[[], object], on_exit: Callable[[], None]) -> Iterator[None]:
    """Run ``target`` on a thread for the block; ``on_exit`` asks it to return, and whatever it
    raised is raised here."""
    raised: list[BaseException] = []

    def run() -> None:
        try:
            target()
        except BaseException as exc:
            raised.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield
    finally:
        on_exit()
        thread.join(WAIT)
        assert not thread.is_alive(), "the component's thread did not return"
        if raised:
            raise raised[0]
