"""Which code runs a job, what its return value becomes, how progress is numbered (#22).

No database: the dispatch, the result encoding and the progress bookkeeping are decisions on
values; the rows they lead to are tests/integration/test_task_worker.py's.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from typing import Any

import pytest

import pgqueue
from pgqueue._worker.dispatch import Dispatch
from pgqueue._worker.executors import Target, call_async, call_sync, keep_result, retryable
from pgqueue._worker.window import Held, Lane
from pgqueue.errors import InvalidResultError, NoHandlerError, UnknownTaskError
from pgqueue.jobs import JobContext, marks_of
from pgqueue.tasks import encode_call


def job(queue: str = "q", task: str | None = None, payload: Any = None) -> JobContext:
    return JobContext(1, queue, encode_call([], {}) if payload is None else payload, 1, task=task)


def held(ctx: JobContext) -> Held:
    return Held(ctx, Lane.THREADS, time.monotonic())


def make_registry() -> pgqueue.Registry:
    registry = pgqueue.Registry()

    @registry.handler("q")
    def handler(job: JobContext) -> str:
        return "handler"

    @registry.task(queue="q", name="sync")
    def sync_task(a: int = 1) -> int:
        return a

    @registry.task(queue="q", name="async", retry=pgqueue.RetryPolicy(non_retryable=(KeyError,)))
    async def async_task() -> str:
        return "async"

    @registry.task(queue="only-tasks", name="lonely")
    async def lonely() -> None: ...

    return registry


def test_a_job_runs_its_task_by_name_else_its_queues_handler() -> None:
    registry = make_registry()
    dispatch = Dispatch(registry, registry.tasks)
    assert dispatch.target(job()).call(job()) == "handler"
    sync = dispatch.target(job(task="sync"))
    assert (sync.task, sync.is_async) == ("sync", False)
    assert sync.call(job(task="sync", payload=encode_call([7], {}))) == 7
    assert sync.call(job(task="sync", payload=encode_call([], {"a": 3}))) == 3
    run_async = dispatch.target(job(task="async"))
    assert run_async.is_async
    assert run_async.retry == pgqueue.RetryPolicy(non_retryable=(KeyError,))
    assert asyncio.run(run_async.call(job(task="async"))) == "async"  # type: ignore[arg-type]


def test_an_unknown_task_or_a_handler_less_job_gets_a_target_that_fails_it() -> None:
    registry = make_registry()
    dispatch = Dispatch(registry, registry.tasks)
    unknown = dispatch.target(job(task="newer"))
    with pytest.raises(UnknownTaskError, match="unknown task 'newer' \\(queue 'q'\\)"):
        unknown.call(job(task="newer"))
    no_handler = dispatch.target(job(queue="only-tasks"))
    with pytest.raises(NoHandlerError, match="no handler for queue 'only-tasks'"):
        no_handler.call(job(queue="only-tasks"))
    # Retried as usual: neither is a result error.
    assert retryable(pgqueue.RetryPolicy(), UnknownTaskError("x", "q"))
    assert not retryable(pgqueue.RetryPolicy(), InvalidResultError("bad"))


def test_queues_are_claimed_for_one_lane_and_a_mixed_queue_is_split_per_job() -> None:
    registry = make_registry()
    dispatch = Dispatch(registry, registry.tasks)
    assert dispatch.queue_lanes == {"q": Lane.THREADS, "only-tasks": Lane.ASYNC}
    assert dispatch.lanes == {Lane.THREADS, Lane.ASYNC}
    jobs = [job(), job(task="async"), job(task="sync"), job(task="unknown")]
    split = dict(dispatch.split(Lane.THREADS, jobs))
    assert split[Lane.THREADS] == [jobs[0], jobs[2], jobs[3]]  # the unknown stays as claimed
    assert split[Lane.ASYNC] == [jobs[1]]
    lonely = [job(queue="only-tasks", task="lonely")]
    assert dispatch.split(Lane.ASYNC, lonely) == [(Lane.ASYNC, lonely)]  # not mixed: as is
    assert dispatch.async_names() == ["task 'async'", "task 'lonely'"]


def test_a_result_is_encoded_once_none_costs_nothing_and_the_bound_is_in_bytes() -> None:
    task = Target(lambda j: None, False, task="t", max_result_bytes=12)
    handler = Target(lambda j: None, False, max_result_bytes=10)
    h = held(job())
    assert keep_result(task, h, None) is None
    assert h.result is None
    assert keep_result(task, h, [1, "é"]) is None
    assert h.result == '[1,"\\u00e9"]'  # ASCII JSON: its length is its size in bytes
    too_large = keep_result(task, h, "x" * 11)
    assert isinstance(too_large, InvalidResultError)
    assert "is too large: 13 bytes > max_result_bytes 12" in str(too_large)
    assert h.result is None
    not_json = keep_result(task, h, {1, 2})
    assert isinstance(not_json, InvalidResultError)
    assert "the result of task 't' is not JSON: not storable as jsonb" in str(not_json)
    assert keep_result(task, h, float("nan")) is not None
    # A handler's value is dropped, never failed.
    assert keep_result(handler, h, {1, 2}) is None
    assert keep_result(handler, h, "x" * 100) is None
    assert h.result is None


def test_current_job_is_set_around_each_call_on_its_own_thread_and_task() -> None:
    seen: dict[str, JobContext] = {}

    def sync(j: JobContext) -> None:
        seen[threading.current_thread().name] = pgqueue.current_job()

    outer = job()
    call_sync(Target(sync, False), held(outer), None)
    assert seen[threading.current_thread().name] is outer
    with pytest.raises(pgqueue.PgQueueError):
        pgqueue.current_job()  # reset after the call

    async def coro(j: JobContext) -> int:
        await asyncio.sleep(0.01)
        return pgqueue.current_job().id

    async def two() -> list[Held]:
        pair = [held(JobContext(i, "q", None, 1)) for i in (10, 11)]
        target = Target(coro, True)
        await asyncio.gather(*(asyncio.create_task(call_async(target, h, None)) for h in pair))
        return pair

    pair = asyncio.run(two())
    assert [h.result for h in pair] == ["10", "11"]  # each coroutine saw its own job
    # A thread the handler starts sees nothing unless it copies the context.
    context = contextvars.copy_context()
    assert context.run(lambda: pgqueue.jobs.current_job_var.get()) is None


def test_set_progress_keeps_the_last_value_numbered_until_it_is_written() -> None:
    ctx = job()
    assert marks_of(ctx).pending_progress() is None
    for i in range(100):
        ctx.set_progress({"i": i})
    assert marks_of(ctx).pending_progress() == (100, '{"i":99}')
    marks_of(ctx).written(100)
    assert marks_of(ctx).pending_progress() is None
    ctx.set_progress("again")
    marks_of(ctx).written(50)  # an older write landing late changes nothing
    assert marks_of(ctx).pending_progress() == (101, '"again"')
    with pytest.raises(pgqueue.InvalidPayloadError, match=r"^progress: not storable as jsonb"):
        ctx.set_progress(object())
    assert marks_of(ctx).pending_progress() == (101, '"again"')  # a refused value: the last stays


def test_the_workers_marks_live_beside_the_context_the_handler_reads() -> None:
    """A handler reads ``lease_lost`` and ``cancelled`` and cannot set them: the worker's
    bookkeeping (those marks, the progress written) is :class:`pgqueue.jobs.JobMarks`."""
    ctx = job()
    assert (ctx.lease_lost, ctx.cancelled) == (False, False)
    with pytest.raises(AttributeError):
        ctx.lease_lost = True  # type: ignore[misc]
    marks_of(ctx).cancelled = True
    assert ctx.cancelled
    assert not ctx.lease_lost
    assert not hasattr(ctx, "pending_progress")
    assert marks_of(job()) is not marks_of(ctx)
