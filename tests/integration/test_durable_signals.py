"""Signals (``pgqueue.signal``, ``JobContext.wait_for_signal`` / ``await_signal``, #33)
against a real PostgreSQL and a real worker: a signal sent before the wait and one sent during
it both arrive, the waiting job is woken by NOTIFY, a rolled-back signal is never seen, a
timeout raises ``SignalTimeoutError`` in the next attempt."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import create_async_engine
from worker_helpers import running, scalar, until

import pgqueue
import pgqueue.aio
from pgqueue.jobs import JobContext
from pgqueue.models import JOB_STATE, jobs_table
from pgqueue.testing import drain


def _state(engine: Engine, job_id: int) -> str:
    with engine.connect() as conn:
        return str(
            conn.execute(
                jobs_table.select().with_only_columns(JOB_STATE).where(jobs_table.c.id == job_id)
            ).scalar_one()
        )


def _status(engine: Engine, job_id: int) -> str:
    return str(scalar(engine, "SELECT status FROM jobs WHERE id = :id", id=job_id))


def _row(engine: Engine, job_id: int) -> Any:
    with engine.connect() as conn:
        return conn.execute(
            text(
                "SELECT status, attempts, snoozes, steps, signals, result, last_error,"
                " suspended_until, awaiting_signal FROM jobs WHERE id = :id"
            ),
            {"id": job_id},
        ).one()


def _waiter(job: JobContext) -> Any:
    approved = job.wait_for_signal("approved")
    return {"approved": approved, "attempt": job.attempts}


def test_a_signal_before_the_wait_and_one_during_it_both_arrive(engine: Engine) -> None:
    with engine.begin() as conn:
        early, late = pgqueue.enqueue_many(conn, [{}, {}], queue="q")
        assert pgqueue.signal(conn, early, "approved", {"by": "ann"}) is True
    # A long fallback poll: only the signal's NOTIFY can wake the worker within the bound.
    worker = pgqueue.Worker(engine, {"q": _waiter}, poll_interval=60)
    with running(worker):
        until(lambda: _status(engine, early) == "done", 10, "the signalled job")
        until(lambda: _state(engine, late) == "awaiting signal", 10, "the other job to wait")
        row = _row(engine, late)
        assert (row.awaiting_signal, row.signals) == ("approved", None)
        with engine.begin() as conn:  # never seen: rolled back
            assert pgqueue.signal(conn, late, "approved", "no") is True
            conn.rollback()
        with engine.begin() as conn:
            assert pgqueue.signal(conn, late, "other", 1) is True  # kept, wakes nothing
        assert _state(engine, late) == "awaiting signal"
        with engine.begin() as conn:
            assert pgqueue.signal(conn, late, "approved", {"by": "bob"}) is True
        sent = time.monotonic()
        until(lambda: _status(engine, late) == "done", 5, "the NOTIFY to wake the worker")
        woke_in = time.monotonic() - sent
    assert woke_in < 5  # the poll would have taken 60 s
    assert scalar(engine, "SELECT result FROM jobs WHERE id = :id", id=early) == {
        "approved": {"by": "ann"},
        "attempt": 1,
    }
    row = _row(engine, late)
    assert row.result == {"approved": {"by": "bob"}, "attempt": 2}
    assert (row.snoozes, row.awaiting_signal, row.suspended_until) == (1, None, None)
    assert set(row.signals) == {"approved", "other"}
    with engine.connect() as conn:
        found = pgqueue.fetch_result(conn, late)
    assert found is not None
    assert found.steps == {"approved": {"by": "bob"}}


def test_a_received_payload_is_remembered_by_later_attempts(engine: Engine) -> None:
    def handler(job: JobContext) -> Any:
        got = job.wait_for_signal("go")
        if job.attempts == 1:
            raise RuntimeError("crash after the signal")
        return got

    with engine.begin() as conn:
        job_id = pgqueue.enqueue(conn, {}, queue="q")
        pgqueue.signal(conn, job_id, "go", "first")
    drain(engine, {"q": handler})
    with engine.begin() as conn:  # a second signal of the name: the job already has its payload
        assert pgqueue.signal(conn, job_id, "go", "second") is True
        conn.execute(text("UPDATE jobs SET run_at = now() WHERE id = :id"), {"id": job_id})
    assert drain(engine, {"q": handler}).results == {job_id: "first"}


def test_a_timeout_raises_in_the_next_attempt_and_may_be_caught(engine: Engine) -> None:
    def handler(job: JobContext) -> Any:
        try:
            return job.wait_for_signal("approved", timeout=1)
        except pgqueue.SignalTimeoutError as exc:
            return f"refunded: {exc.name} of {exc.job_id}"

    with engine.begin() as conn:
        job_id = pgqueue.enqueue(conn, {}, queue="q")
    worker = pgqueue.Worker(engine, {"q": handler}, poll_interval=0.2, listen=False)
    with running(worker):
        until(lambda: _state(engine, job_id) == "awaiting signal", 10, "the wait")
        until(lambda: _status(engine, job_id) == "done", 10, "the timeout's attempt")
    row = _row(engine, job_id)
    assert (row.result, row.attempts, row.snoozes) == (f"refunded: approved of {job_id}", 2, 1)
    assert row.steps["approved"]["timed_out"] is True


def test_an_uncaught_timeout_fails_the_attempt(engine: Engine) -> None:
    def handler(job: JobContext) -> Any:
        return job.wait_for_signal("approved", timeout=0)

    with engine.begin() as conn:
        job_id = pgqueue.enqueue(conn, {}, queue="q", max_attempts=1)
    # Given back, due at once (timeout 0): the drain runs it again, and the wait times out.
    assert [j.status for j in drain(engine, {"q": handler}).ran] == ["queued", "failed"]
    row = _row(engine, job_id)
    assert row.status == "failed"
    assert "signal 'approved' did not arrive within its timeout" in row.last_error


def test_a_signal_to_an_unknown_or_finished_job_writes_nothing(engine: Engine) -> None:
    with engine.begin() as conn:
        job_id = pgqueue.enqueue(conn, {}, queue="q")
    drain(engine, {"q": lambda job: None})
    with engine.begin() as conn:
        assert pgqueue.signal(conn, job_id, "approved") is False
        assert pgqueue.signal(conn, job_id + 1000, "approved") is False
    assert _row(engine, job_id).signals is None
    with engine.begin() as conn, pytest.raises(pgqueue.InvalidPayloadError):
        pgqueue.signal(conn, job_id, "approved", {1, 2})
    with engine.begin() as conn, pytest.raises(pgqueue.InvalidArgumentError, match="name"):
        pgqueue.signal(conn, job_id, "", None)


def test_await_signal_and_the_async_twin(engine: Engine, db_url: URL) -> None:
    async def handler(job: JobContext) -> Any:
        return await job.await_signal("go")

    with engine.begin() as conn:
        job_id = pgqueue.enqueue(conn, {}, queue="q")
    worker = pgqueue.Worker(engine, {"q": handler}, poll_interval=60)

    async def send() -> bool:
        aengine = create_async_engine(db_url.render_as_string(hide_password=False))
        try:
            async with aengine.begin() as conn:
                return await pgqueue.aio.signal(conn, job_id, "go", [1, 2])
        finally:
            await aengine.dispose()

    with running(worker):
        until(lambda: _state(engine, job_id) == "awaiting signal", 10, "the wait")
        assert asyncio.run(send()) is True
        until(lambda: _status(engine, job_id) == "done", 5, "the NOTIFY to wake the worker")
    assert _row(engine, job_id).result == [1, 2]


def test_a_signal_that_lands_while_the_handler_runs_is_not_missed(engine: Engine) -> None:
    """The handler read no signal; the signal commits before the give-back: ready at once."""

    def handler(job: JobContext) -> Any:
        if job.attempts == 1:
            with engine.begin() as conn:  # after the handler's read, before its give-back
                pgqueue.signal(conn, job.id, "go", "raced")
        return job.wait_for_signal("go")

    with engine.begin() as conn:
        job_id = pgqueue.enqueue(conn, {}, queue="q")

    def reading_first(job: JobContext) -> Any:
        job.step("read", lambda: None)  # the attempt's first durable call reads the row
        return handler(job)

    result = drain(engine, {"q": reading_first})
    assert result.results == {job_id: "raced"}
    assert [j.status for j in result.ran] == ["queued", "done"]


def test_the_claim_keeps_its_plan_with_10_000_jobs_awaiting_signals(engine: Engine) -> None:
    """The article's shape (Limit over LockRows over an index scan of jobs_ready_idx, no Sort,
    no Seq Scan) with 10,000 jobs of the queue given back awaiting a signal by the worker's own
    statement, ANALYZE'd; the claim takes only the ready jobs, and a signal readies one."""
    from test_article import _assert_article_shape as assert_article_shape
    from worker_helpers import claim_plan

    from pgqueue._worker import store
    from pgqueue.enqueue_options import WAITING_RUN_AT

    with engine.begin() as conn:
        waiting = pgqueue.enqueue_many(conn, [{}] * 10_000)
        conn.execute(text("UPDATE jobs SET status = 'running', attempts = 1"))
        suspended = store.suspend_many(conn, [(i, 1, WAITING_RUN_AT, "approved") for i in waiting])
        assert len(suspended) == 10_000
        ready = pgqueue.enqueue_many(conn, [{}] * 5)
        conn.execute(text("ANALYZE jobs"))
    assert_article_shape(claim_plan(engine))
    with engine.begin() as conn:
        assert sorted(j.id for j in pgqueue.claim(conn, limit=20)) == ready
        assert pgqueue.signal(conn, waiting[7], "approved") is True
    with engine.begin() as conn:
        assert [j.id for j in pgqueue.claim(conn, limit=20)] == [waiting[7]]
