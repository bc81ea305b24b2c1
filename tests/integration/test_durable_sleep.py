"""Durable sleeps (``JobContext.sleep`` / ``asleep``, #33) through a real worker: the job is
given back until its wake-up, its slot freed for the queue's other jobs, its earlier steps not
repeated and the sleep not charged to its attempts."""

from __future__ import annotations

import threading
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, text
from worker_helpers import running, scalar, until

import pgqueue
from pgqueue.jobs import JobContext
from pgqueue.testing import drain


def _row(engine: Engine, job_id: int) -> Any:
    with engine.connect() as conn:
        return conn.execute(
            text(
                "SELECT status, attempts, max_attempts, snoozes, steps, result, run_at,"
                " suspended_until, awaiting_signal, finished_at FROM jobs WHERE id = :id"
            ),
            {"id": job_id},
        ).one()


def _state(engine: Engine, job_id: int) -> str:
    from pgqueue.models import JOB_STATE, jobs_table

    with engine.connect() as conn:
        return str(
            conn.execute(
                jobs_table.select().with_only_columns(JOB_STATE).where(jobs_table.c.id == job_id)
            ).scalar_one()
        )


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_sleeping_job_frees_its_slot_and_wakes_without_repeating_its_steps(
    engine: Engine, kind: str
) -> None:
    calls: Counter[str] = Counter()
    seen_while_sleeping: list[str] = []
    lock = threading.Lock()

    def before() -> str:
        with lock:
            calls["before"] += 1
        return "charged"

    def other_job(job: JobContext) -> None:
        sleeper = job.payload["sleeper"]
        seen_while_sleeping.append(_state(engine, sleeper))

    def sync_handler(job: JobContext) -> Any:
        if "sleeper" in job.payload:
            return other_job(job)
        charged = job.step("before", before)
        job.sleep("cool-off", 2)
        return f"{charged}, woke"

    async def before_async() -> str:
        return before()

    async def async_handler(job: JobContext) -> Any:
        if "sleeper" in job.payload:
            return other_job(job)
        charged = await job.astep("before", before_async)
        await job.asleep("cool-off", timedelta(seconds=2))
        return f"{charged}, woke"

    handler = sync_handler if kind == "sync" else async_handler
    with engine.begin() as conn:
        sleeper = pgqueue.enqueue(conn, {}, queue="q", max_attempts=5)
    worker = pgqueue.Worker(
        engine, {"q": handler}, concurrency=1, async_concurrency=1, poll_interval=0.2
    )
    with running(worker):
        until(lambda: _state(engine, sleeper) == "sleeping", 10, "the job to sleep")
        with engine.begin() as conn:
            other = pgqueue.enqueue(conn, {"sleeper": sleeper}, queue="q")
        until(
            lambda: scalar(engine, "SELECT status FROM jobs WHERE id = :id", id=other) == "done",
            10,
            "the other job to run while the first sleeps",
        )
        until(
            lambda: scalar(engine, "SELECT status FROM jobs WHERE id = :id", id=sleeper) == "done",
            15,
            "the sleeper to wake and finish",
        )
    assert seen_while_sleeping == ["sleeping"]
    row = _row(engine, sleeper)
    assert row.result == "charged, woke"
    assert calls == {"before": 1}
    # Two runs, one snooze: the sleep did not use up the budget of 5.
    assert (row.attempts, row.max_attempts, row.snoozes) == (2, 6, 1)
    slept = row.steps["cool-off"]
    assert (slept["kind"], slept["n"], slept["attempt"]) == ("sleep", 2, 1)
    with engine.connect() as conn:
        waited = conn.execute(
            text(
                "SELECT finished_at - (steps -> 'cool-off' ->> 'at')::timestamptz FROM jobs"
                " WHERE id = :id"
            ),
            {"id": sleeper},
        ).scalar_one()
    assert waited >= timedelta(seconds=2)
    assert _state(engine, sleeper) == "done"


def test_a_sleep_in_transaction_mode_keeps_the_steps_before_it(engine: Engine) -> None:
    def handler(job: JobContext) -> Any:
        assert job.connection is not None
        job.connection.execute(text("INSERT INTO marks VALUES (:a)"), {"a": job.attempts})
        job.step("before", lambda: job.attempts)
        job.sleep("nap", 0)
        return "after"

    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE marks (attempt int)"))
        job_id = pgqueue.enqueue(conn, {}, queue="q")
    stats = pgqueue.Worker(engine, {"q": handler}, mode="transaction", listen=False).run(
        until_empty=True
    )
    assert (stats.snoozed, stats.done) == (1, 1)
    row = _row(engine, job_id)
    assert (row.status, row.result, row.steps["before"]["value"]) == ("done", "after", 1)
    assert scalar(engine, "SELECT array_agg(attempt ORDER BY attempt) FROM marks") == [1, 2]


def test_drain_gives_a_sleeping_job_back_until_its_wake_up(engine: Engine) -> None:
    def handler(job: JobContext) -> None:
        job.sleep("long", timedelta(hours=1))

    with engine.begin() as conn:
        job_id = pgqueue.enqueue(conn, {}, queue="q")
    result = drain(engine, {"q": handler})
    assert [j.status for j in result.ran] == ["queued"]
    assert len(result.snoozed) == 1
    row = _row(engine, job_id)
    assert row.run_at == row.suspended_until
    assert row.awaiting_signal is None
    assert _state(engine, job_id) == "sleeping"
    # Woken early (an operator's retry): the sleep gives it back again, until the same time.
    with engine.begin() as conn:
        assert pgqueue.retry(conn, [job_id]) == [job_id]
    assert _state(engine, job_id) == "sleeping"  # its wake-up has not come
    drain(engine, {"q": handler})
    again = _row(engine, job_id)
    assert again.suspended_until == row.suspended_until
    assert again.snoozes == 2


@pytest.mark.parametrize("delay", [-1, float("nan"), "2"])
def test_a_bad_delay_fails_the_attempt_and_records_nothing(engine: Engine, delay: Any) -> None:
    def handler(job: JobContext) -> None:
        job.sleep("x", delay)

    with engine.begin() as conn:
        job_id = pgqueue.enqueue(conn, {}, queue="q", max_attempts=1)
    pgqueue.Worker(engine, {"q": handler}, listen=False).run(until_empty=True)
    row = _row(engine, job_id)
    assert (row.status, row.steps) == ("failed", None)


def test_cancel_of_a_sleeping_or_awaiting_job_cancels_it_and_its_dependents(
    engine: Engine,
) -> None:
    def handler(job: JobContext) -> None:
        if job.payload.get("sleep"):
            job.sleep("nap", 3600)
        job.wait_for_signal("go")

    with engine.begin() as conn:
        sleeper = pgqueue.enqueue(conn, {"sleep": True}, queue="q")
        waiter = pgqueue.enqueue(conn, {}, queue="q")
        child = pgqueue.enqueue(conn, {}, queue="q", depends_on=[waiter])
    drain(engine, {"q": handler})
    assert [_state(engine, i) for i in (sleeper, waiter, child)] == [
        "sleeping",
        "awaiting signal",
        "waiting",
    ]
    with engine.begin() as conn:
        assert pgqueue.cancel(conn, [sleeper, waiter]) == [sleeper, waiter]
    assert [_state(engine, i) for i in (sleeper, waiter, child)] == ["cancelled"] * 3
    with engine.begin() as conn:
        assert pgqueue.signal(conn, waiter, "go") is False  # finished: nothing written
    assert _row(engine, waiter).steps["go"]["received"] is False
