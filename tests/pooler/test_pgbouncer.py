"""pgqueue through a real PgBouncer 1.18 in transaction mode, LISTEN on the direct server URL."""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import Counter
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from sqlalchemy import Engine, event, text
from sqlalchemy.engine import URL

import pgqueue
from pgqueue._base.urls import to_libpq_url
from pgqueue.pooler import check_listen
from tests.cli.conftest import plain, run_pgqueue
from tests.integration.worker_helpers import (
    blocks_first_attempt,
    lock_waiters_at_session_ends,
    replayed_claims,
    scalar,
    two_workers_drain,
    until,
)

JOBS = 5_000
CONCURRENCY = 8
#: Session state a transaction pooler would leak between clients (plain SET, advisory locks).
_SESSION_STATE = re.compile(r"^\s*SET\s+(?!LOCAL\b)|pg_advisory_lock|pg_try_advisory_lock", re.I)


def _record_statements(engine: Engine) -> list[str]:
    seen: list[str] = []

    @event.listens_for(engine, "before_cursor_execute")
    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append(statement)

    return seen


def _run_worker(worker: pgqueue.Worker) -> threading.Thread:
    thread = threading.Thread(target=worker.run, name="test-worker", daemon=True)
    thread.start()
    return thread


@pytest.mark.slow
def test_worker_drains_5000_exactly_once_and_wakes_on_notify(
    pooled_engine: Engine, db_url: URL, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="pgqueue")
    statements = _record_statements(pooled_engine)
    handled: Counter[int] = Counter()
    lock = threading.Lock()

    def handler(job: pgqueue.JobContext) -> None:
        with lock:
            handled[job.id] += 1

    with pooled_engine.begin() as conn:  # the producer goes through the pooler too
        for start in range(0, JOBS, 1_000):
            pgqueue.enqueue_many(conn, [{"n": n} for n in range(start, start + 1_000)])
    worker = pgqueue.Worker(
        pooled_engine,
        {"default": handler},
        concurrency=CONCURRENCY,
        listen_url=db_url,
        poll_interval=60.0,  # only NOTIFY can wake it within the test's bounds
        install_signal_handlers=False,
    )
    started = time.monotonic()
    thread = _run_worker(worker)
    try:
        until(lambda: sum(handled.values()) >= JOBS, 120, f"{JOBS} jobs handled")
        drained = time.monotonic() - started
        until(
            lambda: (
                scalar(pooled_engine, "SELECT count(*) FROM jobs WHERE status = 'done'") == JOBS
            ),
            30,
            "every completion committed",
        )
        time.sleep(2.5)  # past the LISTEN self-test, and idle: the next wake must be a NOTIFY
        with pooled_engine.begin() as conn:
            late = pgqueue.enqueue(conn, {"late": True})
        sent = time.monotonic()
        until(lambda: handled[late] == 1, 5, "the late job, woken by NOTIFY")
        woke = time.monotonic() - sent
    finally:
        worker.stop()
        thread.join(30)
    assert not thread.is_alive()
    assert len(handled) == JOBS + 1
    assert set(handled.values()) == {1}, "a job ran twice"
    assert woke < 5
    assert not [r for r in caplog.records if r.name == "pgqueue.pooler"], caplog.text
    assert not [s for s in statements if _SESSION_STATE.search(s)]
    print(f"\nthrough PgBouncer: {JOBS} jobs in {drained:.2f} s ({JOBS / drained:,.0f} jobs/s); ")
    print(f"NOTIFY wake-up {woke * 1000:.0f} ms")


def test_claim_heartbeat_complete_fail_reap_and_stats(
    pooled_engine: Engine, pooled_url: URL
) -> None:
    statements = _record_statements(pooled_engine)
    with pooled_engine.begin() as conn:
        ids = pgqueue.enqueue_many(conn, [{"n": n} for n in range(4)])
    # Many rounds of the same statements: past psycopg's prepare threshold of 5.
    for _ in range(8):
        with pooled_engine.begin() as conn:
            assert scalar_in(conn, "SELECT count(*) FROM jobs") == 4
    with pooled_engine.begin() as conn:
        a, b, c, d = pgqueue.claim(conn, limit=4, lease=timedelta(seconds=60))
    with pooled_engine.begin() as conn:
        assert pgqueue.extend_lease(conn, a.id, a.attempts, timedelta(seconds=120))
        assert pgqueue.complete(conn, a.id, a.attempts)
        result = pgqueue.fail(conn, b.id, b.attempts, "boom", retry=False)
        assert result is not None
        conn.execute(
            text("UPDATE jobs SET locked_until = now() - interval '1 second' WHERE id IN (:c, :d)"),
            {"c": c.id, "d": d.id},
        )
    with pooled_engine.begin() as conn:
        reaped = pgqueue.reap_expired(conn)
    assert sorted(r.id for r in reaped) == sorted([c.id, d.id])
    assert sorted(ids) == sorted(j.id for j in (a, b, c, d))

    stats = run_pgqueue("stats", "--json", "--url", plain(pooled_url))
    assert stats.code == 0, stats.err
    assert "default" in stats.out
    assert not [s for s in statements if _SESSION_STATE.search(s)]


def scalar_in(conn: Any, sql: str) -> Any:
    return conn.execute(text(sql)).scalar_one()


def test_listen_through_the_pooler_is_detected(
    pooled_engine: Engine, pooled_url: URL, db_url: URL, caplog: pytest.LogCaptureFixture
) -> None:
    assert check_listen(db_url, pooled_engine) is True
    assert check_listen(pooled_url, pooled_engine, timeout=1.0) is False

    caplog.set_level(logging.WARNING, logger="pgqueue")
    worker = pgqueue.Worker(  # the mistake: no listen_url, so it LISTENs through PgBouncer
        pooled_engine,
        {"default": lambda job: None},
        poll_interval=1.0,
        install_signal_handlers=False,
    )
    thread = _run_worker(worker)
    try:
        until(
            lambda: any(r.name == "pgqueue.pooler" for r in caplog.records),
            10,
            "the worker's warning about LISTEN through a pooler",
        )
    finally:
        worker.stop()
        thread.join(30)
    (warning,) = [r for r in caplog.records if r.name == "pgqueue.pooler"]
    assert "listen_url" in warning.getMessage()


def test_default_prepare_threshold_is_what_breaks(pooled_url: URL) -> None:
    """Why the options exist: psycopg's auto-prepare breaks on PgBouncer 1.18, deterministically.

    Client A runs one query past psycopg's threshold, so it is prepared on server connection S1;
    client B then holds S1 in a transaction, and A's next execution lands on another server
    connection that never saw the PREPARE.
    """
    conninfo = to_libpq_url(pooled_url)
    with psycopg.connect(conninfo, autocommit=True) as a, psycopg.connect(conninfo) as b:
        for n in range(6):
            a.execute("SELECT %s::int + 1", (n,))
        b.execute("SELECT 1")  # B's transaction now holds the server connection A just used
        try:
            with pytest.raises(psycopg.errors.InvalidSqlStatementName, match="prepared statement"):
                a.execute("SELECT %s::int + 1", (7,))
        finally:
            b.rollback()
    unprepared = psycopg.connect(conninfo, autocommit=True, prepare_threshold=None)
    with unprepared as a, psycopg.connect(conninfo) as b:
        for n in range(6):
            a.execute("SELECT %s::int + 1", (n,))
        b.execute("SELECT 1")
        assert a.execute("SELECT %s::int + 1", (7,)).fetchone() == (8,)
        b.rollback()


def test_doctor_through_the_pooler_says_listen_cannot_work(pooled_url: URL, db_url: URL) -> None:
    through = run_pgqueue("doctor", "--json", "--url", plain(pooled_url))
    assert through.code == 0, through.out + through.err
    (listen,) = [f for f in through.json()["findings"] if f["check"] == "listen"]
    assert listen["severity"] == "info"
    assert "listen_url" in listen["fix"]
    direct = run_pgqueue("doctor", "--json", "--url", plain(db_url))
    (listen,) = [f for f in direct.json()["findings"] if f["check"] == "listen"]
    assert listen["severity"] == "ok"


def test_periodic_ticks_fire_once_through_the_pooler(pooled_engine: Engine, db_url: URL) -> None:
    """Three workers through PgBouncer in transaction mode declare one definition: one job per
    tick, and the scheduler sends no session state (no plain SET, no advisory lock)."""
    statements = _record_statements(pooled_engine)
    every = pgqueue.Periodic("pooled", timedelta(seconds=1), "ticks")
    workers = [
        pgqueue.Worker(
            pooled_engine,
            {"ticks": lambda job: None},
            periodic=[every],
            listen_url=db_url,
            poll_interval=0.5,
            install_signal_handlers=False,
        )
        for _ in range(3)
    ]
    threads = [_run_worker(w) for w in workers]
    try:
        until(
            lambda: scalar(pooled_engine, "SELECT count(*) FROM jobs WHERE status = 'done'") >= 4,
            20,
            "four ticks done through the pooler",
        )
    finally:
        for w in workers:
            w.stop()
        for t in threads:
            t.join(30)
    with pooled_engine.connect() as conn:
        ticks = (
            conn.execute(text("SELECT headers->>'scheduled_for' FROM jobs WHERE queue = 'ticks'"))
            .scalars()
            .all()
        )
    assert len(ticks) >= 4
    assert len(set(ticks)) == len(ticks), ticks
    periodic_sql = [s for s in statements if "jobs_periodic" in s]
    assert periodic_sql
    assert not [s for s in statements if _SESSION_STATE.search(s)]


def test_worker_claims_replayed_through_the_pooler_run_each_job_once(
    pooled_engine: Engine, db_url: URL, caplog: pytest.LogCaptureFixture
) -> None:
    """No statement recorder here: with nobody watching, the claim loop replays its statement
    on the driver connection, and the pooler must still see nothing but plain statements."""
    ids, tally = two_workers_drain(pooled_engine, 1_500, caplog, listen_url=db_url)
    assert sorted(tally.runs) == ids
    assert set(tally.runs.values()) == {1}, "a job ran twice"
    assert replayed_claims(caplog.records) > 0, "the claims were never replayed"
    problems = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert not problems, caplog.text  # no prepared-statement collision, no failed claim


@pytest.mark.parametrize("listen", ["direct", "polling"])
def test_wait_for_through_the_pooler(pooled_engine: Engine, db_url: URL, listen: str) -> None:
    """#22: a producer behind PgBouncer waits with LISTEN on the direct URL (woken: its poll
    interval is longer than its timeout), or by polling only; no session state either way."""
    seen = _record_statements(pooled_engine)
    with pooled_engine.begin() as conn:
        job_id = pgqueue.enqueue(conn, {"n": 1}, queue="waited")
    with pooled_engine.begin() as conn:
        (job,) = pgqueue.claim(conn, queue="waited")

    def complete() -> None:
        until(lambda: any("jobs.progress" in s for s in seen), 30, "the first read")
        time.sleep(0.2)
        with pooled_engine.begin() as conn:
            conn.execute(text("UPDATE jobs SET result = '\"ok\"' WHERE id = :id"), {"id": job_id})
            assert pgqueue.complete(conn, job.id, job.attempts)

    thread = threading.Thread(target=complete, daemon=True)
    thread.start()
    if listen == "direct":
        got = pgqueue.wait_for(
            pooled_engine, job_id, timeout=120, poll_interval=600, listen_url=db_url
        )
    else:
        got = pgqueue.wait_for(pooled_engine, job_id, timeout=120, poll_interval=0.2, listen=False)
    thread.join()
    assert (got.status, got.value) == ("done", "ok")
    assert [s for s in seen if _SESSION_STATE.search(s)] == []


def test_a_stuck_transaction_mode_handler_behind_the_pooler_has_its_attempt_charged(
    pooled_engine: Engine, db_url: URL, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Transaction mode through the pooler: the pids the worker asks the server for (the
    handler's session, and the session of the failure that waits for its row) are the server's,
    so at timeout + grace the failure is seen waiting, the handler's session is ended, and the
    attempt is charged; the retry runs once the thread is back. No session state either."""
    seen = _record_statements(pooled_engine)
    waiting_at_end = lock_waiters_at_session_ends(pooled_engine, monkeypatch)
    release = threading.Event()

    def column(name: str) -> Any:
        return scalar(pooled_engine, f"SELECT {name} FROM jobs WHERE id = :id", id=job_id)

    with pooled_engine.begin() as conn:
        job_id = pgqueue.enqueue(conn, {}, queue="stuck_tx", timeout=0.5, max_attempts=3)
    worker = pgqueue.Worker(
        pooled_engine,
        {"stuck_tx": blocks_first_attempt(release)},
        mode="transaction",
        concurrency=1,
        listen_url=db_url,
        poll_interval=0.2,
        timeout_grace=0.3,
        install_signal_handlers=False,
        retry=pgqueue.RetryPolicy(base=timedelta(milliseconds=1), cap=timedelta(milliseconds=1)),
    )
    thread = _run_worker(worker)
    try:
        until(lambda: column("jsonb_array_length(errors)") == 1, 30, "the failure written")
        assert waiting_at_end == [1]
        assert (column("status"), column("attempts")) == ("queued", 1)
        release.set()
        until(lambda: column("status") == "done", 30, "the retry ran to the end")
    finally:
        release.set()
        worker.stop()
        thread.join(30)
    assert column("attempts") == 2
    assert [s for s in seen if _SESSION_STATE.search(s)] == []
