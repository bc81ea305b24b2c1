"""``Registry(find_task=...)``: a task the registry lacks is asked for when a job first names it
(a module the worker did not import at start-up), asked once per name, and run in the lane that
claimed the job: sync and ``async def`` ones on handler threads and on the event loop."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from sqlalchemy import Engine

import pgqueue
import pgqueue.testing
from pgqueue.tasks import Task

QUIET = {"install_signal_handlers": False, "poll_interval": 0.1, "listen": False}


def sync_add(a: int, b: int) -> dict[str, Any]:
    return {"sum": a + b, "thread": threading.current_thread().name}


async def async_add(a: int, b: int) -> dict[str, Any]:
    await asyncio.sleep(0)
    return {"sum": a + b, "thread": threading.current_thread().name}


LATE = {
    "late.sync_add": Task(sync_add, name="late.sync_add", queue="threads"),
    "late.async_add": Task(async_add, name="late.async_add", queue="threads"),
}


def _registry(asked: list[str], *, loop_queue: bool) -> pgqueue.Registry:
    def find(name: str) -> Task[..., Any] | None:
        asked.append(name)
        return LATE.get(name)

    registry = pgqueue.Registry(find_task=find)

    @registry.handler("threads")
    def on_threads(job: pgqueue.JobContext) -> None: ...

    if loop_queue:

        @registry.handler("loop")
        async def on_loop(job: pgqueue.JobContext) -> None: ...

    return registry


def _enqueue(engine: Engine, name: str, queue: str) -> int:
    with engine.begin() as conn:
        return LATE[name].options(queue=queue).enqueue(conn, 2, 3)


@pytest.mark.parametrize("queue", ["threads", "loop"])
def test_found_tasks_run_in_the_lane_that_claimed_them(engine: Engine, queue: str) -> None:
    asked: list[str] = []
    ids = [_enqueue(engine, name, queue) for name in ("late.sync_add", "late.async_add") * 2]
    unknown = 0
    with engine.begin() as conn:
        unknown = pgqueue.enqueue(conn, {"args": [], "kwargs": {}}, queue=queue)
        conn.exec_driver_sql("UPDATE jobs SET task = 'late.missing' WHERE id = %s", (unknown,))
    stats = pgqueue.Worker(engine, _registry(asked, loop_queue=True), **QUIET).run(until_empty=True)
    assert stats.done == 4
    with engine.connect() as conn:
        results = [pgqueue.fetch_result(conn, i) for i in ids]
        missing = pgqueue.fetch_result(conn, unknown)
    assert all(r is not None and r.status == "done" for r in results)
    assert [r.value["sum"] for r in results if r is not None] == [5, 5, 5, 5]
    threads = {r.value["thread"] for r in results if r is not None}
    if queue == "threads":
        assert all(t.startswith("pgqueue-handler-") for t in threads), threads
    else:  # the sync one on asyncio.to_thread's pool, the async one on the loop itself
        assert "pgqueue-asyncio" in threads
    assert missing is not None
    assert "late.missing" in (missing.error or "")
    # Asked once per name, whatever the number of jobs.
    assert sorted(asked) == ["late.async_add", "late.missing", "late.sync_add"]


def test_without_a_finder_an_unknown_task_fails_as_before(engine: Engine) -> None:
    registry = pgqueue.Registry()

    @registry.handler("threads")
    def on_threads(job: pgqueue.JobContext) -> None: ...

    job_id = _enqueue(engine, "late.sync_add", "threads")
    assert registry.find_task("late.sync_add") is None
    pgqueue.Worker(engine, registry, **QUIET).run(until_empty=True)
    with engine.connect() as conn:
        result = pgqueue.fetch_result(conn, job_id)
    assert result is not None
    assert result.status == "queued"  # retried later
    assert "late.sync_add" in (result.error or "")
