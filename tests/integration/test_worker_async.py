"""``async def`` handlers and cancelling running jobs, on a real server with real connections.

Async jobs run as tasks on the worker's own event loop: hundreds at once without threads, their
leases kept by the heartbeat thread, their outcomes batched like threads' outcomes. A cancel
fails the row at once; the worker stops the handler (``job.stopping``, or the task is cancelled)
and drops its outcome.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import Counter
from typing import Any

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import create_async_engine
from worker_helpers import running, scalar, until

import pgqueue
import pgqueue.aio
import pgqueue.testing


def _enqueue(engine: Engine, payloads: list[Any], queue: str, **kw: Any) -> list[int]:
    with engine.begin() as conn:
        return pgqueue.enqueue_many(conn, payloads, queue=queue, **kw)


def _row(engine: Engine, job_id: int) -> Any:
    with engine.connect() as conn:
        return conn.execute(
            text("SELECT status, attempts, last_error FROM jobs WHERE id = :id"), {"id": job_id}
        ).one()


def cancel_now(engine: Engine, job_id: int, *others: int) -> None:
    """Cancel a running job in one call: the worker's own heartbeat and completion lock its row
    for milliseconds, and ``cancel`` waits for them (it used to skip the row, and this helper
    tried again in a loop)."""
    with engine.begin() as conn:
        assert pgqueue.cancel(conn, [job_id, *others]) == [job_id]


class Sleeper:
    """An ``async def`` handler that waits 30 s unless its task is cancelled, and says so."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.cancelled_inside = threading.Event()

    async def __call__(self, job: pgqueue.JobContext) -> None:
        self.started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            self.cancelled_inside.set()
            raise


class Peak:
    """How many handlers run at once, counted inside them."""

    def __init__(self) -> None:
        self.now = 0
        self.peak = 0
        self.lock = threading.Lock()

    def enter(self) -> None:
        with self.lock:
            self.now += 1
            self.peak = max(self.peak, self.now)

    def leave(self) -> None:
        with self.lock:
            self.now -= 1


def test_io_bound_async_jobs_run_together_without_threads(engine: Engine) -> None:
    _enqueue(engine, [{}] * 400, "io")
    peak = Peak()
    threads_seen: list[int] = []
    crowd = asyncio.Event()  # set once 200 handlers wait at once (bound to the worker's loop)

    async def wait_for_the_crowd(job: pgqueue.JobContext) -> None:
        peak.enter()
        threads_seen.append(threading.active_count())
        if peak.peak >= 200:
            crowd.set()
        with contextlib.suppress(TimeoutError):  # then the peak below fails the test
            await asyncio.wait_for(crowd.wait(), 10)
        peak.leave()

    worker = pgqueue.Worker(
        engine, {"io": wait_for_the_crowd}, concurrency=2, async_concurrency=400, listen=False
    )
    stats = worker.run(until_empty=True)
    assert stats.done == 400
    assert stats.claimed == 400
    assert peak.peak >= 200, f"only {peak.peak} coroutines ran at once"
    assert max(threads_seen) < 40, f"{max(threads_seen)} threads"
    assert scalar(engine, "SELECT count(*) FROM jobs WHERE status = 'done'") == 400
    assert scalar(engine, "SELECT max(attempts) FROM jobs") == 1


def test_sync_and_async_handlers_in_one_worker_each_job_once(engine: Engine) -> None:
    sync_ids = _enqueue(engine, [{}] * 300, "sync")
    async_ids = _enqueue(engine, [{}] * 300, "async")
    runs: Counter[int] = Counter()
    lock = threading.Lock()
    loop_threads: set[str] = set()

    def sync_handler(job: pgqueue.JobContext) -> None:
        with lock:
            runs[job.id] += 1

    async def async_handler(job: pgqueue.JobContext) -> None:
        await asyncio.sleep(0.001)
        loop_threads.add(threading.current_thread().name)
        with lock:
            runs[job.id] += 1

    registry = pgqueue.Registry()
    registry.handler("sync")(sync_handler)
    registry.handler("async")(async_handler)
    stats = pgqueue.Worker(engine, registry, concurrency=4, listen=False).run(until_empty=True)
    assert stats.done == 600
    assert set(runs) == set(sync_ids) | set(async_ids)
    assert set(runs.values()) == {1}
    assert loop_threads == {"pgqueue-asyncio"}  # one event loop, in one thread
    assert scalar(engine, "SELECT count(*) FROM jobs WHERE status = 'done'") == 600


def test_async_handler_failures_retry_like_sync_ones(engine: Engine) -> None:
    (job_id,) = _enqueue(engine, [{}], "boom", max_attempts=1)

    async def boom(job: pgqueue.JobContext) -> None:
        await asyncio.sleep(0)
        raise ValueError("async trouble")

    stats = pgqueue.Worker(engine, {"boom": boom}, listen=False).run(until_empty=True)
    assert stats.failed == 1
    row = _row(engine, job_id)
    assert (row.status, row.last_error) == ("failed", "ValueError: async trouble")


def test_async_handler_with_transaction_mode_is_refused(engine: Engine) -> None:
    async def handler(job: pgqueue.JobContext) -> None: ...

    with pytest.raises(pgqueue.PgQueueError, match="transaction mode") as caught:
        pgqueue.Worker(engine, {"a": handler}, mode="transaction")
    assert isinstance(caught.value, ValueError)


def test_cancel_a_running_sync_job(engine: Engine) -> None:
    (job_id,) = _enqueue(engine, [{}], "slow")
    started = threading.Event()
    saw_stopping = threading.Event()

    def slow(job: pgqueue.JobContext) -> None:
        started.set()
        if job.stopping.wait(30):
            saw_stopping.set()

    worker = pgqueue.Worker(engine, {"slow": slow}, poll_interval=0.2)
    with running(worker):
        assert started.wait(20)
        cancel_now(engine, job_id, 999_999)
        assert saw_stopping.wait(10), "the handler never saw job.stopping"
        until(lambda: worker.stats.cancelled == 1, 10, "the cancel to be counted")
    row = _row(engine, job_id)
    assert (row.status, row.last_error) == ("failed", "cancelled")
    assert worker.stats.done == 0
    assert worker.stats.lost == 0


def test_cancel_reaches_a_worker_without_listen_at_its_heartbeat(engine: Engine) -> None:
    (job_id,) = _enqueue(engine, [{}], "slow")
    started = threading.Event()

    def slow(job: pgqueue.JobContext) -> None:
        started.set()
        job.stopping.wait(30)

    # lease 1.5 s: a heartbeat every 0.5 s.
    worker = pgqueue.Worker(engine, {"slow": slow}, listen=False, lease=1.5, poll_interval=0.2)
    with running(worker):
        assert started.wait(20)
        cancel_now(engine, job_id)
        until(lambda: worker.stats.cancelled == 1, 10, "the heartbeat to tell the handler")
    assert _row(engine, job_id).status == "failed"


def test_cancel_a_running_async_job_cancels_its_task(engine: Engine) -> None:
    (job_id,) = _enqueue(engine, [{}], "slow")
    slow = Sleeper()

    class Told(pgqueue.WorkerHooks):
        def __init__(self) -> None:
            self.cancelled: list[int] = []

        def on_cancelled(self, job: pgqueue.JobContext, duration: float | None) -> None:
            self.cancelled.append(job.id)

    told = Told()
    worker = pgqueue.Worker(engine, {"slow": slow}, poll_interval=0.2, hooks=[told])
    with running(worker):
        assert slow.started.wait(20)
        cancel_now(engine, job_id)
        assert slow.cancelled_inside.wait(10), "CancelledError never reached the handler"
        until(lambda: worker.stats.cancelled == 1, 10, "the cancel to be counted")
    assert told.cancelled == [job_id]
    row = _row(engine, job_id)
    assert (row.status, row.last_error) == ("failed", "cancelled")
    assert worker.stats.done == worker.stats.retried == worker.stats.lost == 0


def test_cancel_skips_a_row_locked_by_an_open_transaction(engine: Engine) -> None:
    (job_id,) = _enqueue(engine, [{}], "held")
    with engine.connect() as holder:
        holder.execute(text("SELECT 1 FROM jobs WHERE id = :id FOR UPDATE"), {"id": job_id})
        with engine.begin() as conn:
            # The caller's own 1 s does not apply: the cancel waits its 500 ms, gives up in a
            # savepoint (no LockNotAvailable reaches the caller) and says it skipped the job.
            conn.execute(text("SET LOCAL lock_timeout = '1s'"))
            report = pgqueue.repository.cancel_report(conn, [job_id])
            assert (report.cancelled, report.skipped) == ([], [job_id])
            assert conn.execute(text("SHOW lock_timeout")).scalar_one() == "1s"
        holder.rollback()
    assert _row(engine, job_id).status == "queued"


def test_async_lost_lease_cancels_the_task_and_drops_the_outcome(engine: Engine) -> None:
    (job_id,) = _enqueue(engine, [{}], "slow")
    slow = Sleeper()

    worker = pgqueue.Worker(engine, {"slow": slow}, listen=False, lease=1.5, poll_interval=0.2)
    with running(worker):
        assert slow.started.wait(20)
        # Another worker took it: reaped and claimed again (attempts 2).
        with engine.begin() as conn:
            conn.execute(text("UPDATE jobs SET attempts = 2 WHERE id = :id"), {"id": job_id})
        assert slow.cancelled_inside.wait(10)
        until(lambda: worker.stats.lost == 1, 10, "the lost job to be counted")
    row = _row(engine, job_id)
    assert (row.status, row.attempts) == ("running", 2)  # the new owner's, untouched
    assert worker.stats.done == worker.stats.retried == 0


@pytest.fixture
def effects(engine: Engine) -> Engine:
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE effects (job_id bigint PRIMARY KEY)"))
    return engine


@pytest.mark.parametrize("stolen", [False, True])
def test_async_handler_completes_its_own_job_exactly_once(
    effects: Engine, db_url: URL, stolen: bool
) -> None:
    (job_id,) = _enqueue(effects, [{}], "pay")
    aengine = create_async_engine(db_url)
    completed: list[bool] = []

    async def pay(job: pgqueue.JobContext) -> None:
        if stolen:  # reaped and claimed by another worker before we write
            async with aengine.begin() as conn:
                await conn.execute(
                    text("UPDATE jobs SET attempts = 2 WHERE id = :id"), {"id": job.id}
                )
        async with aengine.connect() as conn:
            await conn.execute(text("INSERT INTO effects VALUES (:id)"), {"id": job.id})
            ok = await pgqueue.aio.complete(conn, job.id, job.attempts)
            completed.append(ok)
            await (conn.commit() if ok else conn.rollback())
        await aengine.dispose()

    stats = pgqueue.Worker(effects, {"pay": pay}, listen=False).run(until_empty=True)
    if stolen:
        assert completed == [False]
        assert stats.lost == 1
        assert scalar(effects, "SELECT count(*) FROM effects") == 0
        assert tuple(_row(effects, job_id)[:2]) == ("running", 2)
    else:
        assert completed == [True]
        assert (stats.done_by_handler, stats.done, stats.lost) == (1, 0, 0)
        assert scalar(effects, "SELECT count(*) FROM effects") == 1
        assert tuple(_row(effects, job_id)[:2]) == ("done", 1)


def test_shutdown_cancels_async_handlers_after_the_timeout(engine: Engine) -> None:
    ids = _enqueue(engine, [{}] * 5, "slow")
    slow = Sleeper()

    worker = pgqueue.Worker(
        engine,
        {"slow": slow},
        async_concurrency=2,
        prefetch=2,
        listen=False,
        shutdown_timeout=0.5,
        poll_interval=0.2,
    )
    with running(worker):
        assert slow.started.wait(20)
        until(
            lambda: scalar(engine, "SELECT count(*) FROM jobs WHERE attempts = 1") == 4,
            10,
            "claims",
        )
    assert slow.cancelled_inside.is_set()
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT id, status, attempts, last_error FROM jobs")).all()
    interrupted = [r for r in rows if r.attempts == 1]
    untouched = [r for r in rows if r.attempts == 0]  # two released, one never claimed
    assert len(interrupted) == 2
    assert len(untouched) == 3
    for r in interrupted:  # a failed, retryable attempt
        assert r.status == "queued"
        assert r.last_error == "HandlerCancelled: the handler's task was cancelled"
    assert all(r.status == "queued" and r.last_error is None for r in untouched)
    assert worker.stats.released == 2
    assert worker.stats.retried == 2
    assert {r.id for r in rows} == set(ids)


def test_hooks_see_async_jobs_like_sync_ones(engine: Engine) -> None:
    _enqueue(engine, [{}] * 20, "a")
    _enqueue(engine, [{}] * 20, "s")
    events: Counter[tuple[str, str]] = Counter()

    class Count(pgqueue.WorkerHooks):
        def on_started(self, job: pgqueue.JobContext, latency: float) -> None:
            events["started", job.queue] += 1

        def on_handled(self, job: pgqueue.JobContext, duration: float, error: Any) -> None:
            events["handled", job.queue] += 1

        def on_succeeded(self, job: pgqueue.JobContext, duration: float | None) -> None:
            assert duration is not None
            events["succeeded", job.queue] += 1

    async def a(job: pgqueue.JobContext) -> None:
        await asyncio.sleep(0)

    def s(job: pgqueue.JobContext) -> None: ...

    worker = pgqueue.Worker(engine, {"a": a, "s": s}, listen=False, hooks=[Count()])
    assert worker.run(until_empty=True).done == 40
    assert events == {(e, q): 20 for e in ("started", "handled", "succeeded") for q in ("a", "s")}


def test_testing_drain_runs_async_handlers_through_the_worker_executor(engine: Engine) -> None:
    ok, bad = _enqueue(engine, [{"n": 1}, {"n": 2}], "a")

    async def handler(job: pgqueue.JobContext) -> None:
        await asyncio.sleep(0)
        if job.payload["n"] == 2:
            raise RuntimeError("x" * 5000)

    result = pgqueue.testing.drain(engine, {"a": handler})
    assert [(j.id, j.status) for j in result.ran] == [(ok, "done"), (bad, "queued")]
    error = _row(engine, bad).last_error
    assert len(error) == 2000
    assert error.endswith("...")
