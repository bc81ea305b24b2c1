"""Worker hooks: every event in order, durations, a raising hook that never breaks the worker."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, text

import pgqueue
from pgqueue.errors import InvalidArgumentTypeError
from pgqueue.hooks import HookDispatcher
from pgqueue.results import ReapedJob


class Recorder(pgqueue.WorkerHooks):
    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []
        self.lock = threading.Lock()

    def _add(self, *event: Any) -> None:
        with self.lock:
            self.events.append(event)

    def on_worker_started(self, worker: pgqueue.Worker) -> None:
        self._add("worker_started")

    def on_worker_stopped(self, worker: pgqueue.Worker) -> None:
        self._add("worker_stopped")

    def on_claimed(self, job: pgqueue.JobContext) -> None:
        self._add("claimed", job.id)

    def on_started(self, job: pgqueue.JobContext, latency: float) -> None:
        assert latency >= 0
        self._add("started", job.id)

    def on_handled(
        self, job: pgqueue.JobContext, duration: float, error: BaseException | None
    ) -> None:
        self._add("handled", job.id, type(error).__name__ if error else None)

    def on_succeeded(self, job: pgqueue.JobContext, duration: float | None) -> None:
        assert duration is not None
        self._add("succeeded", job.id, duration)

    def on_retry(self, job: pgqueue.JobContext, duration: float | None, error: str) -> None:
        self._add("retry", job.id, error)

    def on_failed(self, job: pgqueue.JobContext, duration: float | None, error: str) -> None:
        self._add("failed", job.id, error)

    def on_lost(self, job: pgqueue.JobContext, reason: str) -> None:
        self._add("lost", job.id, reason)

    def on_lease_extended(self, jobs: Sequence[pgqueue.JobContext]) -> None:
        self._add("extended", *sorted(j.id for j in jobs))

    def on_reaped(self, jobs: Sequence[ReapedJob]) -> None:
        self._add("reaped", *sorted(j.id for j in jobs))

    def of(self, job_id: int) -> list[str]:
        return [e[0] for e in self.events if len(e) > 1 and e[1] == job_id]


def _enqueue(engine: Engine, payloads: list[Any], queue: str, **kw: Any) -> list[int]:
    with engine.begin() as conn:
        return pgqueue.enqueue_many(conn, payloads, queue=queue, **kw)


def _handler(job: pgqueue.JobContext) -> None:
    if job.payload == "boom":
        raise ValueError("boom")
    if job.payload == "slow":
        time.sleep(0.3)


@pytest.mark.parametrize("mode", ["lease", "transaction"])
def test_every_outcome_in_order(engine: Engine, mode: Any) -> None:
    ok, slow = _enqueue(engine, ["ok", "slow"], "q")
    (retried,) = _enqueue(engine, ["boom"], "q", max_attempts=2)
    (failed,) = _enqueue(engine, ["boom"], "q", max_attempts=1)
    rec = Recorder()
    worker = pgqueue.Worker(
        engine, {"q": _handler}, mode=mode, hooks=[rec], listen=False, poll_interval=0.1
    )
    stats = worker.run(until_empty=True)
    assert (stats.done, stats.retried, stats.failed) == (2, 1, 1)
    assert rec.events[0] == ("worker_started",)
    assert rec.events[-1] == ("worker_stopped",)
    for job_id in (ok, slow):
        assert rec.of(job_id) == ["claimed", "started", "handled", "succeeded"]
    assert rec.of(retried) == ["claimed", "started", "handled", "retry"]
    assert rec.of(failed) == ["claimed", "started", "handled", "failed"]
    slow_seconds = next(e[2] for e in rec.events if e[:2] == ("succeeded", slow))
    assert 0.25 < slow_seconds < 5
    assert ("handled", failed, "ValueError") in rec.events
    assert "boom" in next(e[2] for e in rec.events if e[:2] == ("failed", failed))


def test_heartbeat_and_reaper_events(engine: Engine) -> None:
    (stale,) = _enqueue(engine, ["x"], "other")
    with engine.begin() as conn:
        pgqueue.claim(conn, queue="other", lease=timedelta(seconds=1))
        conn.execute(
            text("UPDATE jobs SET locked_until = now() - interval '1 minute' WHERE id = :i"),
            {"i": stale},
        )
    (long,) = _enqueue(engine, ["slow"], "q")
    rec = Recorder()

    def handler(job: pgqueue.JobContext) -> None:
        time.sleep(1.5)

    worker = pgqueue.Worker(
        engine, {"q": handler}, lease=timedelta(seconds=1.2), hooks=[rec], listen=False
    )
    worker.run(until_empty=True)
    assert ("reaped", stale) in rec.events
    assert ("extended", long) in rec.events
    assert rec.of(long)[-1] == "succeeded"


def test_lost_job_is_reported(engine: Engine) -> None:
    (job_id,) = _enqueue(engine, ["x"], "q")
    rec = Recorder()

    def handler(job: pgqueue.JobContext) -> None:
        with engine.begin() as conn:  # another worker's reaper took it back
            conn.execute(
                text("UPDATE jobs SET attempts = attempts + 1 WHERE id = :i"), {"i": job.id}
            )

    worker = pgqueue.Worker(engine, {"q": handler}, hooks=[rec], listen=False)
    stats = worker.run(until_empty=True)
    assert stats.lost == 1
    assert rec.of(job_id) == ["claimed", "started", "handled", "lost"]


class Broken(pgqueue.WorkerHooks):
    def on_started(self, job: pgqueue.JobContext, latency: float) -> None:
        raise RuntimeError("hook bug")

    def on_succeeded(self, job: pgqueue.JobContext, duration: float | None) -> None:
        raise RuntimeError("hook bug")


def test_a_raising_hook_never_breaks_the_worker(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    _enqueue(engine, list(range(20)), "q")
    rec = Recorder()
    worker = pgqueue.Worker(engine, {"q": _handler}, hooks=[Broken(), rec], listen=False)
    with caplog.at_level(logging.ERROR, logger="pgqueue.hooks"):
        stats = worker.run(until_empty=True)
    assert stats.done == 20
    assert sum(1 for e in rec.events if e[0] == "succeeded") == 20  # later hooks still called
    logged = [r for r in caplog.records if r.name == "pgqueue.hooks"]
    assert len(logged) == 2  # once per hook and event, not once per job
    assert {r.getMessage().split()[1] for r in logged} == {
        "Broken.on_started",
        "Broken.on_succeeded",
    }


def test_dispatcher_skips_events_a_hook_does_not_override() -> None:
    class Only(pgqueue.WorkerHooks):
        def on_claimed(self, job: pgqueue.JobContext) -> None: ...

    dispatcher = HookDispatcher([Only(), pgqueue.WorkerHooks()])
    assert len(dispatcher._by_event["on_claimed"]) == 1
    assert dispatcher._by_event["on_succeeded"] == []


def test_hooks_argument_is_checked(engine: Engine) -> None:
    with pytest.raises(InvalidArgumentTypeError):
        pgqueue.Worker(engine, {"q": _handler}, hooks=pgqueue.WorkerHooks())  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentTypeError):
        pgqueue.Worker(engine, {"q": _handler}, hooks=[object()])  # type: ignore[list-item]
    assert pgqueue.Worker(engine, {"q": _handler}).hooks == []
