"""The worker runs tasks (#22): by the name in ``jobs.task``, results stored by the completion,
``current_job()`` in threads and coroutines, ``set_progress`` coalesced into the heartbeat.

Real workers on a real PostgreSQL. Task jobs are enqueued here as the producer side stores them
(``encode_call`` in ``payload``, the name in ``task``), so these tests do not depend on how
``Task.enqueue`` is spelt.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, event, text
from worker_helpers import running, scalar, until

import pgqueue
import pgqueue.testing
from pgqueue.errors import NoCurrentJobError, PgQueueError
from pgqueue.tasks import Task, encode_call

QUIET: dict[str, Any] = {"listen": False, "install_signal_handlers": False, "poll_interval": 0.1}


def enqueue_task(engine: Engine, task: Task[..., Any], *args: Any, **kwargs: Any) -> int:
    """A job of ``task`` as the producer writes one: its call as the payload, its name in
    ``task``, its queue and attempt budget."""
    with engine.begin() as conn:
        job_id = pgqueue.enqueue(
            conn, encode_call(args, kwargs), queue=task.queue, max_attempts=task.max_attempts
        )
        conn.execute(text("UPDATE jobs SET task = :t WHERE id = :i"), {"t": task.name, "i": job_id})
    return job_id


def enqueue_named(engine: Engine, name: str, queue: str, payload: Any = None) -> int:
    with engine.begin() as conn:
        job_id = pgqueue.enqueue(conn, payload or encode_call([], {}), queue=queue)
        conn.execute(text("UPDATE jobs SET task = :t WHERE id = :i"), {"t": name, "i": job_id})
    return job_id


def row(engine: Engine, job_id: int) -> Any:
    with engine.connect() as conn:
        return conn.execute(
            text(
                "SELECT status, attempts, result, result IS NULL AS result_is_null, progress, "
                "last_error, run_at > now() + interval '5 seconds' AS later "
                "FROM jobs WHERE id = :i"
            ),
            {"i": job_id},
        ).one()


def drain_with(engine: Engine, registry: pgqueue.Registry, **kw: Any) -> pgqueue.WorkerStats:
    return pgqueue.Worker(engine, registry, **{**QUIET, **kw}).run(until_empty=True)


def test_sync_and_async_tasks_results_are_stored_by_their_completion(engine: Engine) -> None:
    registry = pgqueue.Registry()

    @registry.task(queue="emails")
    def send_email(user_id: int, *, template: str = "welcome") -> dict[str, Any]:
        return {"user": user_id, "template": template, "thread": threading.current_thread().name}

    @registry.task(queue="hooks")
    async def call_webhook(url: str, body: dict[str, int]) -> int:
        await asyncio.sleep(0)
        return len(url) + sum(body.values())

    @registry.task(queue="emails", name="nothing")
    def returns_none() -> None:
        return None

    sent = enqueue_task(engine, send_email, 42, template="reset")
    hooked = enqueue_task(engine, call_webhook, "https://x", {"a": 1, "b": 2})
    empty = enqueue_task(engine, returns_none)

    stats = drain_with(engine, registry)

    assert stats.done == 3
    assert stats.failed == stats.retried == 0
    result = row(engine, sent).result
    assert result["user"] == 42
    assert result["template"] == "reset"
    assert result["thread"].startswith("pgqueue-handler-")  # a sync task runs on a thread
    assert row(engine, hooked).result == 12
    none = row(engine, empty)
    assert none.status == "done"
    assert none.result_is_null


def test_results_ride_on_the_batched_completion_statement(engine: Engine) -> None:
    """No statement of its own: every result reaches the row through ``COMPLETE_MANY``'s twin."""
    registry = pgqueue.Registry()

    @registry.task(queue="q")
    def double(n: int) -> list[int]:
        return [n, n * 2]

    ids = [enqueue_task(engine, double, n) for n in range(20)]
    sent: list[str] = []

    def before(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.lstrip().upper().startswith(("UPDATE", "WITH")) and "result" in statement:
            sent.append(statement)

    event.listen(engine, "before_cursor_execute", before)
    try:
        drain_with(engine, registry)
    finally:
        event.remove(engine, "before_cursor_execute", before)
    assert [row(engine, i).result for i in ids] == [[n, n * 2] for n in range(20)]
    assert sent
    assert all("status='done'" in s.replace(" ", "") for s in sent)
    assert len(sent) < len(ids)  # batched: fewer completion statements than jobs


def test_a_task_result_that_is_not_json_or_too_large_fails_for_good(engine: Engine) -> None:
    registry = pgqueue.Registry()

    @registry.task(queue="q", max_attempts=5)
    def returns_a_set() -> Any:
        return {1, 2}

    @registry.task(queue="q", max_attempts=5)
    def returns_too_much() -> str:
        return "x" * 500

    @registry.task(queue="q", max_attempts=5)
    def returns_little() -> str:
        return "x" * 10

    bad = enqueue_task(engine, returns_a_set)
    big = enqueue_task(engine, returns_too_much)
    small = enqueue_task(engine, returns_little)

    stats = drain_with(engine, registry, max_result_bytes=100)

    assert (stats.failed, stats.retried, stats.done) == (2, 0, 1)
    not_json = row(engine, bad)
    assert (not_json.status, not_json.attempts) == ("failed", 1)  # no retry: 1 of 5 attempts
    assert not_json.last_error.startswith("InvalidResultError: ")
    assert "returns_a_set" in not_json.last_error
    assert "is not JSON" in not_json.last_error
    too_large = row(engine, big)
    assert (too_large.status, too_large.attempts) == ("failed", 1)
    assert "is too large: 502 bytes > max_result_bytes 100" in too_large.last_error
    assert row(engine, small).result == "x" * 10


def test_max_result_bytes_is_checked() -> None:
    """Only the argument check runs: the engine never connects."""
    offline = create_engine("postgresql+psycopg://nobody@127.0.0.1:9/never")
    for bad in (0, -1, True, "10", 1.5):
        with pytest.raises(PgQueueError, match="max_result_bytes"):
            pgqueue.Worker(offline, {"q": lambda job: None}, max_result_bytes=bad)  # type: ignore[arg-type]
    assert pgqueue.Worker(offline, {"q": lambda job: None}).max_result_bytes == 1_000_000


def test_a_queue_handler_json_return_is_stored_and_a_non_json_one_ignored(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    returns: list[Any] = [{"ok": True}, object(), None, "x" * 200]

    def handler(job: pgqueue.JobContext) -> Any:
        return returns[job.payload["i"]]

    with engine.begin() as conn:
        ids = pgqueue.enqueue_many(conn, [{"i": i} for i in range(4)], queue="plain")
    with caplog.at_level(logging.WARNING, logger="pgqueue.worker"):
        stats = pgqueue.Worker(engine, {"plain": handler}, max_result_bytes=100, **QUIET).run(
            until_empty=True
        )
    assert stats.done == 4
    assert stats.failed == 0
    rows = [row(engine, i) for i in ids]
    assert rows[0].result == {"ok": True}
    assert rows[1].result_is_null
    assert rows[2].result_is_null
    assert rows[3].result_is_null
    warned = [r.getMessage() for r in caplog.records if "not stored" in r.getMessage()]
    assert len(warned) == 1  # once per handler, not once per job
    assert "queue plain" in warned[0]


def test_an_unknown_task_fails_the_attempt_and_is_retried_not_lost(engine: Engine) -> None:
    old = pgqueue.Registry()

    @old.handler("emails")
    def queue_handler(job: pgqueue.JobContext) -> None:
        raise AssertionError("a task's job must never reach the queue's handler")

    @old.task(queue="emails", name="emails.old")
    def old_task() -> str:
        return "old"

    job_id = enqueue_named(engine, "emails.new", "emails")
    stats = drain_with(engine, old)
    assert (stats.retried, stats.failed, stats.done) == (1, 0, 0)
    retried = row(engine, job_id)
    assert (retried.status, retried.attempts) == ("queued", 1)
    assert retried.last_error.startswith("UnknownTaskError: unknown task 'emails.new'")
    assert retried.later  # the usual backoff

    new = pgqueue.Registry()

    @new.task(queue="emails", name="emails.new")
    def new_task() -> str:
        return "new"

    with engine.begin() as conn:
        conn.execute(text("UPDATE jobs SET run_at = now() WHERE id = :i"), {"i": job_id})
    assert drain_with(engine, new).done == 1
    done = row(engine, job_id)
    assert (done.status, done.attempts, done.result) == ("done", 2, "new")


def test_a_queue_keyed_job_on_a_queue_of_tasks_only_fails_the_attempt(engine: Engine) -> None:
    registry = pgqueue.Registry()

    @registry.task(queue="tasks-only")
    def a_task() -> None: ...

    with engine.begin() as conn:
        job_id = pgqueue.enqueue(conn, {"raw": 1}, queue="tasks-only")
    assert drain_with(engine, registry).retried == 1
    assert row(engine, job_id).last_error.startswith("NoHandlerError: no handler for queue")


def test_a_task_payload_that_is_not_a_call_fails_the_attempt(engine: Engine) -> None:
    registry = pgqueue.Registry()

    @registry.task(queue="q", name="t")
    def t() -> None: ...

    job_id = enqueue_named(engine, "t", "q", payload={"not": "a call"})
    assert drain_with(engine, registry).retried == 1
    assert "InvalidPayloadError" in row(engine, job_id).last_error


def test_a_registry_mixes_tasks_and_handlers_even_on_one_queue(engine: Engine) -> None:
    registry = pgqueue.Registry()
    ran: list[str] = []

    @registry.handler("mixed")
    def handler(job: pgqueue.JobContext) -> str:
        ran.append("handler")
        return "by handler"

    @registry.task(queue="mixed")
    async def async_task() -> str:
        ran.append("async task")
        return "by async task"

    @registry.task(queue="mixed")
    def sync_task() -> str:
        ran.append("sync task")
        return "by sync task"

    with engine.begin() as conn:
        plain = pgqueue.enqueue(conn, {}, queue="mixed")
    a = enqueue_task(engine, async_task)
    s = enqueue_task(engine, sync_task)
    worker = pgqueue.Worker(engine, registry, **QUIET)
    assert worker.queues == ("mixed",)
    assert worker.run(until_empty=True).done == 3
    assert sorted(ran) == ["async task", "handler", "sync task"]
    assert [row(engine, i).result for i in (plain, a, s)] == [
        "by handler",
        "by async task",
        "by sync task",
    ]


def test_a_worker_of_tasks_only_claims_their_queues_and_registers_them(engine: Engine) -> None:
    registry = pgqueue.Registry()
    release = threading.Event()

    @registry.task(queue="reports")
    def build_report() -> str:
        release.wait(10)
        return "built"

    job_id = enqueue_task(engine, build_report)
    worker = pgqueue.Worker(engine, registry, **QUIET)
    assert worker.handlers == {}
    assert worker.queues == ("reports",)
    with running(worker):
        until(lambda: row(engine, job_id).status == "running", 10, "the task to start")
        queues = scalar(engine, "SELECT queues FROM jobs_workers")
        assert queues == ["reports"]
        release.set()
        until(lambda: row(engine, job_id).status == "done", 10, "the task to finish")
    assert row(engine, job_id).result == "built"


def test_a_tasks_own_retry_policy_applies_to_its_jobs(engine: Engine) -> None:
    registry = pgqueue.Registry()

    @registry.task(queue="q", retry=pgqueue.RetryPolicy(base=timedelta(minutes=30)))
    def slow_retry() -> None:
        raise ValueError("again")

    @registry.task(queue="q", retry=pgqueue.RetryPolicy(non_retryable=(KeyError,)))
    def never_retry() -> None:
        raise KeyError("final")

    @registry.task(queue="q")
    def default_retry() -> None:
        raise ValueError("again")

    slow = enqueue_task(engine, slow_retry)
    final = enqueue_task(engine, never_retry)
    default = enqueue_task(engine, default_retry)
    drain_with(engine, registry)

    def retry_in(job_id: int) -> float:
        seconds: float = scalar(
            engine, "SELECT extract(epoch FROM run_at - now()) FROM jobs WHERE id = :i", i=job_id
        )
        return seconds

    assert retry_in(slow) > 1800  # 30 min * 2^1 (capped at 1 h), against the worker's 20 s
    assert retry_in(default) < 60
    assert row(engine, final).status == "failed"


def test_current_job_in_a_thread_in_coroutines_and_outside(engine: Engine) -> None:
    registry = pgqueue.Registry()
    seen: dict[str, Any] = {}
    both_started = asyncio.Event()
    lock = threading.Lock()

    @registry.task(queue="sync")
    def in_thread(tag: str) -> int:
        job = pgqueue.current_job()
        with lock:
            seen[tag] = (job.id, job.task, threading.current_thread().name)
        return job.id

    @registry.task(queue="async")
    async def in_coroutine(tag: str) -> int:
        before = pgqueue.current_job()
        if tag == "first":
            await asyncio.wait_for(both_started.wait(), 10)  # the second runs meanwhile
        else:
            both_started.set()
        after = pgqueue.current_job()
        assert before is after
        seen[tag] = (after.id, after.task)
        return after.id

    @registry.handler("plain")
    def handler(job: pgqueue.JobContext) -> int:
        assert pgqueue.current_job() is job
        return job.id

    sync_id = enqueue_task(engine, in_thread, "sync")
    first = enqueue_task(engine, in_coroutine, "first")
    second = enqueue_task(engine, in_coroutine, "second")
    with engine.begin() as conn:
        plain = pgqueue.enqueue(conn, {}, queue="plain")
    assert drain_with(engine, registry).done == 4

    assert seen["sync"][:2] == (sync_id, in_thread.name)
    assert seen["sync"][2].startswith("pgqueue-handler-")
    assert seen["first"] == (first, in_coroutine.name)
    assert seen["second"] == (second, in_coroutine.name)
    for job_id in (sync_id, first, second, plain):
        assert row(engine, job_id).result == job_id  # each saw its own job
    with pytest.raises(NoCurrentJobError, match="no job is running here") as raised:
        pgqueue.current_job()
    assert isinstance(raised.value, PgQueueError)


def test_set_progress_is_coalesced_into_the_heartbeat_and_the_completion(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(
            text(
                "CREATE TABLE progress_writes (job_id bigint, progress jsonb);"
                "CREATE FUNCTION count_progress() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                "IF NEW.progress IS DISTINCT FROM OLD.progress THEN "
                "INSERT INTO progress_writes VALUES (NEW.id, NEW.progress); END IF; "
                "RETURN NEW; END $$;"
                "CREATE TRIGGER count_progress AFTER UPDATE ON jobs FOR EACH ROW "
                "EXECUTE FUNCTION count_progress();"
            )
        )
    registry = pgqueue.Registry()
    go_on = threading.Event()
    bad: list[BaseException] = []

    @registry.task(queue="long")
    def long_task(steps: int) -> str:
        job = pgqueue.current_job()
        try:
            job.set_progress({"step": "x", "payload": {1, 2}})  # not JSON: raises at the call
        except pgqueue.InvalidPayloadError as exc:
            bad.append(exc)
        for i in range(steps):
            job.set_progress({"step": i})
        go_on.wait(20)
        job.set_progress("almost")
        job.set_progress("finished")
        return "ok"

    job_id = enqueue_task(engine, long_task, 1000)
    worker = pgqueue.Worker(engine, registry, lease=1.5, **QUIET)  # a beat every 0.5 s
    with running(worker):
        until(
            lambda: row(engine, job_id).progress == {"step": 999}, 10, "the progress to be stored"
        )
        writes_while_running = scalar(engine, "SELECT count(*) FROM progress_writes")
        go_on.set()
        until(lambda: row(engine, job_id).status == "done", 10, "the task to finish")
    done = row(engine, job_id)
    assert (done.result, done.progress) == ("ok", "finished")  # the completion wrote the last
    # 1,000 calls: one write, two if a beat fell inside the burst; then the completion's.
    assert 1 <= writes_while_running <= 2
    assert scalar(engine, "SELECT count(*) FROM progress_writes") == writes_while_running + 1
    assert len(bad) == 1
    assert str(bad[0]).startswith("progress: not storable as jsonb")


def test_transaction_mode_stores_results_and_progress_with_the_completion(engine: Engine) -> None:
    registry = pgqueue.Registry()

    @registry.task(queue="tx")
    def in_transaction(n: int) -> dict[str, int]:
        job = pgqueue.current_job()
        assert job.connection is not None
        job.set_progress({"at": n})
        return {"n": n}

    @registry.task(queue="tx", name="tx.bad")
    def bad_result() -> object:
        return object()

    ids = [enqueue_task(engine, in_transaction, n) for n in range(3)]
    bad = enqueue_task(engine, bad_result)
    stats = drain_with(engine, registry, mode="transaction")
    assert (stats.done, stats.failed) == (3, 1)
    for n, job_id in enumerate(ids):
        r = row(engine, job_id)
        assert (r.status, r.result, r.progress) == ("done", {"n": n}, {"at": n})
    assert row(engine, bad).last_error.startswith("InvalidResultError")


def test_transaction_mode_refuses_async_tasks() -> None:
    registry = pgqueue.Registry()

    @registry.task(queue="q", name="a")
    async def a() -> None: ...

    offline = create_engine("postgresql+psycopg://nobody@127.0.0.1:9/never")
    with pytest.raises(pgqueue.InvalidArgumentError, match="task 'a'"):
        pgqueue.Worker(offline, registry, mode="transaction")


@pytest.mark.parametrize("on", ["engine", "connection"])
def test_drain_runs_tasks_and_returns_their_results(engine: Engine, on: str) -> None:
    registry = pgqueue.Registry()

    @registry.task(queue="q")
    def add(a: int, b: int) -> int:
        pgqueue.current_job().set_progress("adding")
        return a + b

    @registry.task(queue="q")
    async def pair(a: int) -> tuple[int, int]:
        return (a, a)

    @registry.handler("plain")
    def handler(job: pgqueue.JobContext) -> None:
        return None

    added = enqueue_task(engine, add, 2, 3)
    paired = enqueue_task(engine, pair, 7)
    unknown = enqueue_named(engine, "nobody.knows", "q")
    with engine.begin() as conn:
        plain = pgqueue.enqueue(conn, {}, queue="plain")

    if on == "engine":
        result = pgqueue.testing.drain(engine, registry)
    else:
        with engine.begin() as conn:
            result = pgqueue.testing.drain(conn, registry)
    assert result.results == {added: 5, paired: [7, 7], plain: None}
    by_id = {j.id: j for j in result.ran}
    assert by_id[added].task == add.name
    assert by_id[plain].task is None
    assert by_id[unknown].status == "queued"
    assert "unknown task" in str(by_id[unknown].error)
    assert [j.id for j in result.failed] == [unknown]  # the old views still work
    r = row(engine, added)
    assert (r.result, r.progress) == (5, "adding")
    assert json.loads(json.dumps(row(engine, paired).result)) == [7, 7]
