"""Execution timeouts and not-started deadlines (#31 items 1-2) on a real server, real workers.

Timeouts are short (0.5-1 s) and the grace small, so each test ends in seconds; every wait is
on a condition (the row, a counter, an event), bounded by :func:`worker_helpers.until`. A
handler that "hangs" waits on an event the test sets on its way out, so no thread outlives it
by more than a moment.
"""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import create_async_engine
from worker_helpers import (
    blocks_first_attempt,
    lock_waiters_at_session_ends,
    running,
    scalar,
    until,
)

import pgqueue
import pgqueue.aio
from pgqueue import admin
from pgqueue._worker import store
from pgqueue.models import JobState

FAST_RETRY = pgqueue.RetryPolicy(base=timedelta(milliseconds=1), cap=timedelta(milliseconds=1))


def _row(engine: Engine, job_id: int) -> Any:
    with engine.connect() as conn:
        return conn.execute(
            text(
                "SELECT status, attempts, last_error, errors, expired_at, finished_at, "
                "locked_until, result FROM jobs WHERE id = :id"
            ),
            {"id": job_id},
        ).one()


def _enqueue(engine: Engine, payload: Any = None, **kw: Any) -> int:
    with engine.begin() as conn:
        return pgqueue.enqueue(conn, {} if payload is None else payload, **kw)


def _worker(engine: Engine, handlers: Any, **kw: Any) -> pgqueue.Worker:
    options: dict[str, Any] = {
        "poll_interval": 0.2,
        "install_signal_handlers": False,
        "retry": FAST_RETRY,
        "timeout_grace": 0.3,
        "shutdown_timeout": 2.0,
    }
    options.update(kw)
    return pgqueue.Worker(engine, handlers, **options)


def test_an_async_handler_is_cancelled_at_its_timeout_retried_then_failed(engine: Engine) -> None:
    """Each attempt fails with HandlerTimeoutError within timeout + grace; the worker runs
    other jobs meanwhile; with max_attempts=2 the job ends failed with two history entries."""
    cancelled = threading.Event()
    others: list[int] = []

    async def slow(job: pgqueue.JobContext) -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    async def quick(job: pgqueue.JobContext) -> None:
        others.append(job.id)

    slow_id = _enqueue(engine, queue="slow", timeout=0.5, max_attempts=2)
    worker = _worker(engine, {"slow": slow, "quick": quick})
    started = time.monotonic()
    with running(worker):
        quick_ids = [_enqueue(engine, queue="quick") for _ in range(3)]
        until(lambda: _row(engine, slow_id).status == "failed", 10, "the slow job failed")
        took = time.monotonic() - started
        until(lambda: len(others) == 3, 10, "the quick jobs ran")
    row = _row(engine, slow_id)
    assert cancelled.is_set()
    assert row.attempts == 2
    assert row.last_error == "HandlerTimeoutError: timed out after 0.5 s"
    assert [e["error"] for e in row.errors] == [row.last_error] * 2
    assert sorted(others) == quick_ids
    assert took < 2 * (0.5 + 0.3) + 5  # two attempts, each ended by its timeout
    assert worker.stats.timed_out == 2
    assert worker.stats.stuck == 0


def test_a_sync_handler_that_honours_stopping_fails_within_the_bound(engine: Engine) -> None:
    stopped_after: list[float] = []

    def polite(job: pgqueue.JobContext) -> str:
        began = time.monotonic()
        job.stopping.wait(20)
        stopped_after.append(time.monotonic() - began)
        return "returned anyway"  # a timed-out attempt fails whatever the handler returns

    job_id = _enqueue(engine, queue="polite", timeout=0.5, max_attempts=1)
    worker = _worker(engine, {"polite": polite})
    with running(worker):
        until(lambda: _row(engine, job_id).status == "failed", 10, "the job failed")
    row = _row(engine, job_id)
    assert row.last_error == "HandlerTimeoutError: timed out after 0.5 s"
    assert row.result is None
    assert stopped_after
    assert 0.4 < stopped_after[0] < 5
    assert worker.stats.stuck == 0


def test_a_sync_handler_that_ignores_stopping_is_failed_at_the_grace_and_counted_stuck(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    """The failure is written at timeout + grace while the thread still blocks; ``stuck``
    counts it (and the log names the job with the thread's stack); its late return changes
    nothing on the row."""
    release = threading.Event()
    returned = threading.Event()

    def deaf(job: pgqueue.JobContext) -> str:
        release.wait(20)
        returned.set()
        return "too late"

    job_id = _enqueue(engine, queue="deaf", timeout=0.5, max_attempts=1)
    worker = _worker(engine, {"deaf": deaf}, concurrency=2)
    with running(worker):
        until(lambda: _row(engine, job_id).status == "failed", 10, "the failure was written")
        assert not returned.is_set()  # written while the handler still blocks
        until(lambda: worker.stats.stuck == 1, 5, "the stuck thread counted")
        health = worker.liveness()
        assert health.ok  # one thread of two can still run jobs
        assert health.checks["handler_threads"] == f"1 of 2 stuck: jobs {job_id}"
        assert scalar(engine, "SELECT stuck FROM jobs_workers") == 1
        before = _row(engine, job_id)
        release.set()
        until(lambda: worker.stats.stuck == 0, 5, "the thread came back")
        until(lambda: scalar(engine, "SELECT stuck FROM jobs_workers") == 0, 5, "row updated")
    assert _row(engine, job_id) == before
    assert before.last_error == "HandlerTimeoutError: timed out after 0.5 s"
    stuck_lines = [r for r in caplog.records if "the thread is stuck" in r.getMessage()]
    assert len(stuck_lines) == 1
    assert f"job {job_id} " in stuck_lines[0].getMessage()
    assert "release.wait(20)" in stuck_lines[0].getMessage()  # the thread's stack


def test_the_worker_default_timeout_applies_to_jobs_without_their_own(engine: Engine) -> None:
    def deaf(job: pgqueue.JobContext) -> None:
        job.stopping.wait(20)

    job_id = _enqueue(engine, queue="q", max_attempts=1)
    worker = _worker(engine, {"q": deaf}, default_timeout=timedelta(milliseconds=500))
    with running(worker):
        until(lambda: _row(engine, job_id).status == "failed", 10, "the job failed")
    assert _row(engine, job_id).last_error == "HandlerTimeoutError: timed out after 0.5 s"


def test_a_hung_job_frees_its_queue_concurrency_slot_at_the_timeout(engine: Engine) -> None:
    """``concurrency=1`` on the queue: the next job runs soon after the hung one times out."""
    release = threading.Event()
    ran: list[int] = []

    def handler(job: pgqueue.JobContext) -> None:
        if job.payload.get("hang"):
            release.wait(20)
        ran.append(job.id)

    with engine.begin() as conn:
        pgqueue.set_queue_limits(conn, "limited", concurrency=1)
    hung = _enqueue(engine, {"hang": True}, queue="limited", timeout=1, max_attempts=1)
    worker = _worker(engine, {"limited": handler}, concurrency=2)
    try:
        with running(worker):
            until(lambda: _row(engine, hung).status == "running", 10, "the hung job started")
            nxt = _enqueue(engine, queue="limited")
            until(lambda: nxt in ran, 10, "the next job of the queue ran")
            assert _row(engine, hung).status == "failed"
            release.set()
    finally:
        release.set()


def test_the_heartbeat_never_extends_a_lease_past_timeout_plus_grace(engine: Engine) -> None:
    release = threading.Event()

    def deaf(job: pgqueue.JobContext) -> None:
        release.wait(20)

    job_id = _enqueue(engine, queue="q", timeout=2, max_attempts=1)
    worker = _worker(engine, {"q": deaf}, lease=3.0, timeout_grace=1.0)
    try:
        with running(worker):
            until(lambda: _row(engine, job_id).status == "running", 10, "the job started")
            # Beats every second; each must end the lease by the start + 2 s + 1 s.
            bound = scalar(
                engine, "SELECT locked_at + interval '3 s' FROM jobs WHERE id = :i", i=job_id
            )
            seen: list[datetime] = []

            def beat_seen() -> bool:
                row = _row(engine, job_id)
                if row.locked_until is not None:
                    seen.append(row.locked_until)
                return len(set(seen)) >= 2 or row.status != "running"

            until(beat_seen, 5, "a lease extension")
            assert all(s <= bound + timedelta(milliseconds=200) for s in seen), (seen, bound)
            until(lambda: _row(engine, job_id).status == "failed", 10, "the failure")
            release.set()
    finally:
        release.set()


def test_transaction_mode_rolls_back_the_handler_at_its_timeout(engine: Engine) -> None:
    """The handler's statement is cancelled at the timeout: its writes roll back with its
    savepoint and the attempt fails the same way, in the job's own transaction."""
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE tx_effects (job_id bigint)"))

    def writes_then_sleeps(job: pgqueue.JobContext) -> None:
        assert job.connection is not None
        job.connection.execute(text("INSERT INTO tx_effects VALUES (:id)"), {"id": job.id})
        job.connection.execute(text("SELECT pg_sleep(20)"))

    job_id = _enqueue(engine, queue="tx", timeout=0.5, max_attempts=1)
    worker = _worker(engine, {"tx": writes_then_sleeps}, mode="transaction")
    started = time.monotonic()
    with running(worker):
        until(lambda: _row(engine, job_id).status == "failed", 10, "the job failed")
    assert time.monotonic() - started < 10
    assert _row(engine, job_id).last_error == "HandlerTimeoutError: timed out after 0.5 s"
    assert scalar(engine, "SELECT count(*) FROM tx_effects") == 0


def test_transaction_mode_ends_the_session_of_a_handler_stuck_in_python_and_retries_it(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    """A handler that wrote, then blocks in Python (no statement to cancel): at timeout + grace
    its session is ended, so its transaction rolls back (its write and its row lock gone), and
    the attempt fails with HandlerTimeoutError, charged and retried by its policy, while the
    thread still blocks. The retry runs on the other thread; the late return changes nothing."""
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE tx_stuck_effects (job_id bigint, attempt int)"))
    release = threading.Event()
    returned = threading.Event()

    def writes_then_blocks(job: pgqueue.JobContext) -> None:
        assert job.connection is not None
        job.connection.execute(
            text("INSERT INTO tx_stuck_effects VALUES (:id, :attempt)"),
            {"id": job.id, "attempt": job.attempts},
        )
        if job.attempts == 1:
            release.wait(20)  # deaf to job.stopping, and not in the database
            returned.set()

    job_id = _enqueue(engine, queue="txs", timeout=0.5, max_attempts=3)
    worker = _worker(engine, {"txs": writes_then_blocks}, mode="transaction", concurrency=2)
    with running(worker):
        until(lambda: _row(engine, job_id).status == "done", 15, "the retry ran to the end")
        assert not returned.is_set()  # the first attempt's handler still blocks
        assert worker.stats.stuck == 1
        row = _row(engine, job_id)
        assert row.attempts == 2
        assert [e["error"] for e in row.errors] == ["HandlerTimeoutError: timed out after 0.5 s"]
        assert [e["attempt"] for e in row.errors] == [1]
        # The first attempt's write was rolled back with its session; the retry's committed.
        effects = conn_rows(engine, "SELECT job_id, attempt FROM tx_stuck_effects")
        assert effects == [(job_id, 2)]
        release.set()
        until(lambda: worker.stats.stuck == 0, 10, "the thread came back")
        until(
            lambda: any(
                "returned after its session was ended" in r.getMessage() for r in caplog.records
            ),
            5,
            "the late return logged",
        )
    assert _row(engine, job_id).attempts == 2  # the late return wrote nothing
    assert worker.stats.retried == 1
    assert worker.stats.done == 1


def test_transaction_mode_queues_the_failure_on_the_row_before_it_ends_the_session(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When the stuck handler's session is ended, the attempt's failure is already waiting for
    its row (seen from the server: one session blocked by the handler's). The server then wakes
    that failure as the row is freed; a failure sent after the end raced every claim, and a claim
    that won ran the attempt again without charging it (this file's test above failed so in CI:
    the other thread took the row, ran attempt 1 again and got stuck in turn)."""
    waiting_at_end = lock_waiters_at_session_ends(engine, monkeypatch)
    release = threading.Event()
    job_id = _enqueue(engine, queue="txq", timeout=0.5, max_attempts=3)
    worker = _worker(
        engine, {"txq": blocks_first_attempt(release)}, mode="transaction", concurrency=1
    )
    with running(worker):
        until(lambda: len(_row(engine, job_id).errors or []) == 1, 15, "the failure written")
        assert waiting_at_end == [1]
        row = _row(engine, job_id)
        assert (row.status, row.attempts) == ("queued", 1)  # charged; its one thread is stuck
        release.set()
        until(lambda: _row(engine, job_id).status == "done", 15, "the retry ran to the end")
    assert _row(engine, job_id).attempts == 2


def conn_rows(engine: Engine, sql: str) -> list[tuple[Any, ...]]:
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(text(sql))]


# -- expires_in ------------------------------------------------------------------------------------


def test_jobs_past_their_deadline_never_run_and_fresh_ones_of_the_batch_do(engine: Engine) -> None:
    """100 jobs due 2 s ago with ``expires_in=1`` (as if enqueued while no worker ran, the
    worker started 2 s later) and fresh jobs in the same queue, claimed in the same batches:
    none of the late ones reaches the handler, all are expired; the fresh ones run."""
    ran: list[int] = []
    two_seconds_ago = datetime.now(timezone.utc) - timedelta(seconds=2)
    with engine.begin() as conn:
        late = pgqueue.enqueue_many(
            conn, [{"n": i} for i in range(100)], queue="q", run_at=two_seconds_ago, expires_in=1
        )
        fresh = pgqueue.enqueue_many(conn, [{"n": i} for i in range(20)], queue="q", expires_in=60)
        plain = pgqueue.enqueue_many(conn, [{}] * 5, queue="q", run_at=two_seconds_ago)
    told: list[tuple[str, int]] = []

    class Told(pgqueue.WorkerHooks):
        def on_expired(self, queue: str, count: int) -> None:
            told.append((queue, count))

    worker = _worker(engine, {"q": lambda job: ran.append(job.id)}, batch_size=50, hooks=[Told()])
    stats = worker.run(until_empty=True)
    assert sorted(ran) == sorted(fresh + plain)
    assert stats.expired == 100
    assert {q for q, _ in told} == {"q"}
    assert sum(n for _, n in told) == 100
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT status, attempts, last_error, expired_at IS NOT NULL AS expired "
                "FROM jobs WHERE id = ANY(:ids)"
            ),
            {"ids": late},
        ).all()
        result = pgqueue.fetch_result(conn, late[0])
        fresh_result = pgqueue.fetch_result(conn, fresh[0])
    assert {(r.status, r.attempts, r.expired) for r in rows} == {("failed", 0, True)}
    assert {r.last_error for r in rows} == {"expired: not started within 1 s of its run_at"}
    assert result is not None
    assert result.expired
    assert result.status == "failed"
    assert result.error is not None
    assert result.error.startswith("expired")
    assert fresh_result is not None
    assert not fresh_result.expired
    assert fresh_result.succeeded
    with engine.connect() as conn:
        stats = {s["queue"]: s for s in admin.queue_stats(conn)}
        listed = admin.list_jobs(conn, status=JobState.EXPIRED, limit=200)
        failed = admin.list_jobs(conn, status=JobState.FAILED, limit=200)
    assert stats["q"]["expired"] == 100
    assert stats["q"]["failed"] == 0
    assert sorted(j["id"] for j in listed) == late
    assert {j["status"] for j in listed} == {"expired"}
    assert failed == []


def test_an_expired_job_settles_its_dependents_as_failed(engine: Engine) -> None:
    ran: list[int] = []
    with engine.begin() as conn:
        parent = pgqueue.enqueue(
            conn,
            {},
            queue="q",
            run_at=datetime.now(timezone.utc) - timedelta(seconds=2),
            expires_in=1,
        )
        child = pgqueue.enqueue(conn, {}, queue="q", depends_on=[parent])
        runs_anyway = pgqueue.enqueue(
            conn, {}, queue="q", depends_on=[parent], on_dependency_failure="run"
        )
    _worker(engine, {"q": lambda job: ran.append(job.id)}).run(until_empty=True)
    assert ran == [runs_anyway]
    row = _row(engine, child)
    assert (row.status, row.last_error) == ("failed", f"dependency {parent} failed")


def test_retry_failed_skips_expired_jobs_unless_asked(engine: Engine) -> None:
    with engine.begin() as conn:
        expired = pgqueue.enqueue(
            conn,
            {},
            queue="q",
            run_at=datetime.now(timezone.utc) - timedelta(seconds=5),
            expires_in=1,
        )
    _worker(engine, {"q": lambda job: None}).run(until_empty=True)
    with engine.begin() as conn:
        assert pgqueue.retry_failed(conn) == []
        assert pgqueue.retry_failed(conn, include_expired=True) == [expired]
    row = _row(engine, expired)
    assert (row.status, row.expired_at) == ("queued", None)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("timeout", 0),
        ("timeout", -1),
        ("timeout", float("nan")),
        ("timeout", timedelta(days=40_000)),
        ("expires_in", 0),
        ("expires_in", timedelta(seconds=-1)),
        ("expires_in", float("nan")),
        ("expires_in", 10**12),
    ],
)
def test_a_bad_bound_is_refused_before_any_sql(engine: Engine, name: str, value: Any) -> None:
    with engine.begin() as conn:
        with pytest.raises(pgqueue.InvalidArgumentError, match=name):
            pgqueue.enqueue(conn, {}, **{name: value})
        with pytest.raises(pgqueue.InvalidArgumentError, match=name):
            pgqueue.enqueue_many(conn, [{}, {}], **{name: value})
    assert scalar(engine, "SELECT count(*) FROM jobs") == 0


def test_the_worker_refuses_bad_timeouts_and_takes_a_zero_grace(engine: Engine) -> None:
    for bad in (0, -1.0, float("nan"), timedelta(days=40_000)):
        with pytest.raises(pgqueue.InvalidArgumentError, match="default_timeout"):
            pgqueue.Worker(engine, {"q": lambda job: None}, default_timeout=bad)
    with pytest.raises(pgqueue.InvalidArgumentError, match="timeout_grace"):
        pgqueue.Worker(engine, {"q": lambda job: None}, timeout_grace=-1)
    assert pgqueue.Worker(engine, {"q": lambda job: None}, timeout_grace=0).timeout_grace == 0


# -- the doors -------------------------------------------------------------------------------------


def test_every_door_stores_the_bounds_on_the_job(engine: Engine, db_url: URL) -> None:
    """``enqueue``, ``enqueue_unique``, ``enqueue_many``, ``aio.enqueue``, a task's own bounds,
    ``Task.options`` over them, and a periodic definition's (fired by a worker)."""
    registry = pgqueue.Registry()

    @registry.task(queue="tasks", timeout=timedelta(seconds=7), expires_in=70)
    def bounded(n: int) -> None: ...

    with engine.begin() as conn:
        ids = {
            "enqueue": pgqueue.enqueue(conn, {}, timeout=1, expires_in=10),
            "unique": pgqueue.enqueue_unique(conn, {}, unique_key="k", timeout=2, expires_in=20).id,
            "many": pgqueue.enqueue_many(conn, [{}, {}], timeout=3, expires_in=30)[1],
            "task": bounded.enqueue(conn, 1),
            "options": bounded.options(timeout=8).enqueue(conn, 2),
            "plain": pgqueue.enqueue(conn, {}),
        }

    async def via_aio() -> int:
        aengine = create_async_engine(db_url)
        try:
            async with aengine.begin() as conn:
                return await pgqueue.aio.enqueue(conn, {}, timeout=4, expires_in=40)
        finally:
            await aengine.dispose()

    ids["aio"] = asyncio.run(via_aio())
    tick = pgqueue.Periodic("every-second", timedelta(seconds=1), "ticks", timeout=5, expires_in=50)
    with engine.begin() as conn:  # what a worker's scheduler runs at a tick
        now = datetime.now(timezone.utc)
        store.declare_periodic(conn, [tick], now - timedelta(seconds=5))
        store.fire_periodic(conn, tick, None, [now.replace(microsecond=0)])
    with engine.connect() as conn:
        rows = {
            r.id: (r.timeout, r.expires_in)
            for r in conn.execute(text("SELECT id, timeout, expires_in FROM jobs"))
        }
        fired = conn.execute(
            text("SELECT timeout, expires_in FROM jobs WHERE queue = 'ticks'")
        ).one()

    def s(seconds: float) -> timedelta:
        return timedelta(seconds=seconds)

    assert rows[ids["enqueue"]] == (s(1), s(10))
    assert rows[ids["unique"]] == (s(2), s(20))
    assert rows[ids["many"]] == (s(3), s(30))
    assert rows[ids["aio"]] == (s(4), s(40))
    assert rows[ids["task"]] == (s(7), s(70))
    assert rows[ids["options"]] == (s(8), s(70))
    assert rows[ids["plain"]] == (None, None)
    assert tuple(fired) == (s(5), s(50))
    assert (bounded.timeout, bounded.expires_in) == (s(7), s(70))


def test_a_task_and_a_periodic_definition_refuse_a_bad_bound_when_built() -> None:
    registry = pgqueue.Registry()
    with pytest.raises(pgqueue.InvalidArgumentError, match="timeout"):
        registry.task(timeout=0)(lambda: None)
    with pytest.raises(pgqueue.InvalidArgumentError, match="expires_in"):
        pgqueue.Periodic("p", timedelta(seconds=1), "q", expires_in=-1)


def test_transaction_mode_never_runs_expired_jobs_and_drains_past_them(engine: Engine) -> None:
    """Each transaction claims one job: a claim that found one expired says more may wait, so
    a backlog of expired jobs does not stall the queue until the next poll."""
    ran: list[int] = []
    with engine.begin() as conn:
        late = pgqueue.enqueue_many(
            conn,
            [{}] * 10,
            queue="tx",
            run_at=datetime.now(timezone.utc) - timedelta(seconds=5),
            expires_in=1,
        )
        fresh = pgqueue.enqueue_many(conn, [{}] * 2, queue="tx")
    worker = _worker(
        engine, {"tx": lambda job: ran.append(job.id)}, mode="transaction", poll_interval=30
    )
    started = time.monotonic()
    stats = worker.run(until_empty=True)
    assert time.monotonic() - started < 20  # not one poll interval per expired job
    assert sorted(ran) == fresh
    assert stats.expired == len(late)
    assert scalar(
        engine,
        "SELECT count(*) FROM jobs WHERE expired_at IS NOT NULL AND id = ANY(:ids)",
        ids=late,
    ) == len(late)


def test_the_deadline_is_about_starting_a_job_that_started_once_is_not_expired(
    engine: Engine,
) -> None:
    """A retried attempt (or a reaped one) due long after the deadline still runs; a job given
    back unstarted at shutdown is still bound by it."""
    with engine.begin() as conn:
        started = pgqueue.enqueue(conn, {}, queue="q", expires_in=60)
        (job,) = pgqueue.claim(conn, queue="q")
        pgqueue.fail(conn, job.id, job.attempts, "boom")  # retried later
        released = pgqueue.enqueue(conn, {}, queue="q", expires_in=60)
        (unstarted,) = pgqueue.claim(conn, queue="q")
        assert store.release_many(conn, [(unstarted.id, unstarted.attempts)]) == {released}
        conn.execute(text("UPDATE jobs SET run_at = now() - interval '5 min'"))
        claimed = pgqueue.claim(conn, queue="q")
    assert [c.id for c in claimed] == [started]
    row = _row(engine, released)
    assert (row.status, row.attempts, row.expired_at is not None) == ("failed", 0, True)
