"""Durable steps (``JobContext.step`` / ``astep``, #33) against a real PostgreSQL: memoized
across attempts in lease and transaction mode, sync and async, tasks and queue handlers; a step
that raises stores nothing; a name used twice fails the attempt; a lost lease writes nothing."""

from __future__ import annotations

import json
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, text

import pgqueue
from pgqueue import repository
from pgqueue.jobs import JobContext
from pgqueue.testing import drain


def _row(engine: Engine, job_id: int) -> Any:
    with engine.connect() as conn:
        return conn.execute(
            text(
                "SELECT status, attempts, max_attempts, steps, result, last_error"
                " FROM jobs WHERE id = :id"
            ),
            {"id": job_id},
        ).one()


def _enqueue(engine: Engine, payload: Any = None, **kw: Any) -> int:
    with engine.begin() as conn:
        return pgqueue.enqueue(conn, payload or {}, queue="q", **kw)


def _retry_now(engine: Engine, job_id: int) -> None:
    """Make a retried job ready at once (its backoff is 20 s)."""
    with engine.begin() as conn:
        conn.execute(text("UPDATE jobs SET run_at = now() WHERE id = :id"), {"id": job_id})


class Calls:
    """How often each step's function ran, and whether the ``flaky`` one raises next."""

    def __init__(self) -> None:
        self.count: Counter[str] = Counter()
        self.fail_next = True

    def make(self, name: str, value: Any) -> Any:
        self.count[name] += 1
        if name == "flaky" and self.fail_next:
            self.fail_next = False
            raise RuntimeError("flaky failed once")
        return value


@pytest.mark.parametrize("mode", ["lease", "transaction"])
def test_a_step_that_raises_is_called_again_and_stored_once(engine: Engine, mode: str) -> None:
    calls = Calls()

    def handler(job: JobContext) -> Any:
        first = job.step("first", calls.make, "first", {"n": 1})
        second = job.step("flaky", calls.make, "flaky", [first["n"], 2])
        return job.step("last", calls.make, "last", [*second, 3])

    job_id = _enqueue(engine)
    worker = pgqueue.Worker(engine, {"q": handler}, mode=mode, listen=False)
    worker.run(until_empty=True)
    row = _row(engine, job_id)
    assert row.status == "queued"  # the flaky step failed the first attempt
    if mode == "lease":  # committed before the failure: kept
        assert list(row.steps) == ["first"]
    else:  # the attempt's transaction rolled back, its steps with it
        assert row.steps is None
    _retry_now(engine, job_id)
    pgqueue.Worker(engine, {"q": handler}, mode=mode, listen=False).run(until_empty=True)

    row = _row(engine, job_id)
    assert (row.status, row.attempts, row.result) == ("done", 2, [1, 2, 3])
    assert calls.count == {"first": 1 if mode == "lease" else 2, "flaky": 2, "last": 1}
    assert sorted(row.steps, key=lambda n: row.steps[n]["n"]) == ["first", "flaky", "last"]
    assert row.steps["flaky"]["value"] == [1, 2]
    assert row.steps["flaky"]["attempt"] == 2
    with engine.connect() as conn:
        found = pgqueue.fetch_result(conn, job_id)
    assert found is not None
    assert found.steps == {
        "first": {"n": 1},
        "flaky": [1, 2],
        "last": [1, 2, 3],
    }


def test_steps_of_a_task_and_of_an_async_handler(engine: Engine) -> None:
    registry = pgqueue.Registry()
    calls = Calls()
    calls.fail_next = False

    @registry.task(queue="q")
    def charge(order: int) -> str:
        job = pgqueue.current_job()
        charged = job.step("charge", calls.make, "charge", f"ch-{order}")
        if job.attempts == 1:
            raise RuntimeError("crash after the charge")
        return job.step("ship", calls.make, "ship", f"{charged}-shipped")

    async def make_async(name: str, value: Any) -> Any:
        calls.count[name] += 1
        return value

    @registry.handler("a")
    async def async_handler(job: JobContext) -> Any:
        one = await job.astep("one", make_async, "one", 1)
        if job.attempts == 1:
            raise RuntimeError("crash after one")
        return await job.astep("two", make_async, "two", one + 1)

    with engine.begin() as conn:
        task_id = charge.enqueue(conn, 7)
        async_id = pgqueue.enqueue(conn, {}, queue="a")
    for _ in range(2):
        pgqueue.Worker(engine, registry, listen=False).run(until_empty=True)
        with engine.begin() as conn:
            conn.execute(text("UPDATE jobs SET run_at = now() WHERE status = 'queued'"))
    assert (_row(engine, task_id).result, _row(engine, async_id).result) == ("ch-7-shipped", 2)
    assert calls.count == {"charge": 1, "ship": 1, "one": 1, "two": 1}


def test_drain_runs_steps_on_an_engine_and_in_a_transaction(engine: Engine) -> None:
    calls = Calls()
    calls.fail_next = False

    def handler(job: JobContext) -> Any:
        return job.step("only", calls.make, "only", {"attempt": job.attempts})

    first = _enqueue(engine)
    assert drain(engine, {"q": handler}).results == {first: {"attempt": 1}}
    with engine.begin() as conn:
        second = pgqueue.enqueue(conn, {}, queue="q")
        assert drain(conn, {"q": handler}).results == {second: {"attempt": 1}}
    assert _row(engine, second).steps["only"]["value"] == {"attempt": 1}


def test_a_name_used_twice_in_one_attempt_fails_it(engine: Engine) -> None:
    def handler(job: JobContext) -> None:
        job.step("same", lambda: 1)
        job.step("same", lambda: 2)

    job_id = _enqueue(engine, max_attempts=1)
    pgqueue.Worker(engine, {"q": handler}, listen=False).run(until_empty=True)
    row = _row(engine, job_id)
    assert row.status == "failed"
    assert "the name 'same' was already used in this attempt" in row.last_error
    assert row.steps["same"]["value"] == 1


@pytest.mark.parametrize(
    ("value", "problem"),
    [({1, 2}, "is not JSON"), ("x" * 2000, "is too large: 2002 bytes > max_result_bytes 1000")],
)
def test_a_step_value_that_is_not_storable_fails_the_job_for_good(
    engine: Engine, value: Any, problem: str
) -> None:
    def handler(job: JobContext) -> None:
        job.step("bad", lambda: value)

    job_id = _enqueue(engine, max_attempts=5)
    pgqueue.Worker(engine, {"q": handler}, listen=False, max_result_bytes=1000).run(
        until_empty=True
    )
    row = _row(engine, job_id)
    assert (row.status, row.steps) == ("failed", None)
    assert f"the value of step 'bad' {problem}" in row.last_error


def test_a_worker_that_lost_its_lease_writes_no_step(engine: Engine) -> None:
    job_id = _enqueue(engine)
    with engine.begin() as conn:
        (claimed,) = repository.claim(conn, queue="q", lease=timedelta(seconds=30))
    job = JobContext.of(claimed, engine=engine)
    with engine.begin() as conn:  # the lease ran out and another worker claimed the job
        conn.execute(text("UPDATE jobs SET locked_until = now() - interval '1 s'"))
        assert [r.id for r in repository.reap_expired(conn)] == [job_id]
        (again,) = repository.claim(conn, queue="q")
    assert again.attempts == 2
    called = []
    with pytest.raises(pgqueue.StepNotStoredError, match="no longer this attempt's"):
        job.step("late", lambda: called.append(1))
    assert called == []  # the stored steps are read first: nothing ran, nothing written
    newer = JobContext.of(again, engine=engine)
    assert newer.step("late", lambda: "mine") == "mine"
    with engine.begin() as conn:  # the stale attempt's write, once it has read: nothing
        conn.execute(text("UPDATE jobs SET steps = NULL"))
    stale = JobContext.of(claimed, engine=engine)
    stale._marks.durable = None
    with pytest.raises(pgqueue.StepNotStoredError):
        stale.step("late", lambda: "stale")
    assert _row(engine, job_id).steps is None


def test_a_context_without_a_database_cannot_keep_steps() -> None:
    job = JobContext(1, "q", {}, 1)
    with pytest.raises(pgqueue.PgQueueError, match="no database to keep its steps in"):
        job.step("x", lambda: 1)


def test_step_values_keep_their_json(engine: Engine) -> None:
    value = {"text": "café ☕", "n": [1, 2.5, None, True]}

    def handler(job: JobContext) -> Any:
        got = job.step("v", lambda: value)
        if job.attempts == 1:
            raise RuntimeError("again")
        return got

    job_id = _enqueue(engine)
    pgqueue.Worker(engine, {"q": handler}, listen=False).run(until_empty=True)
    _retry_now(engine, job_id)
    pgqueue.Worker(engine, {"q": handler}, listen=False).run(until_empty=True)
    row = _row(engine, job_id)
    assert row.result == value
    assert json.loads(json.dumps(row.steps["v"]["value"])) == value


def test_a_name_stored_as_another_kind_is_refused(engine: Engine) -> None:
    def handler(job: JobContext) -> None:
        if job.attempts == 1:
            job.step("x", lambda: 1)
            raise RuntimeError("again")
        job.sleep("x", 1)

    job_id = _enqueue(engine, max_attempts=2)
    pgqueue.Worker(engine, {"q": handler}, listen=False).run(until_empty=True)
    _retry_now(engine, job_id)
    pgqueue.Worker(engine, {"q": handler}, listen=False).run(until_empty=True)
    row = _row(engine, job_id)
    assert row.status == "failed"
    assert "'x' is stored as a step, not a sleep" in row.last_error
