"""Reading and awaiting results (issue #22): ``fetch_result``, ``wait_for`` and their asyncio
twins, on a real database, woken by the real ``jobs_notify_finished`` trigger from other threads
and processes, with the LISTEN connection killed by ``pg_terminate_backend``.

No wall-clock bound: a wait that must have been woken by a notification is given a
``poll_interval`` longer than its ``timeout``, so no poll can end it before the timeout would.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import create_async_engine
from worker_helpers import scalar, until

import pgqueue
import pgqueue.aio
import pgqueue.migrations

#: Longer than any test's timeout: a wait that ends early was woken, never polled.
NEVER = 600.0


def _enqueue(engine: Engine, payload: Any = None, **options: Any) -> int:
    with engine.begin() as conn:
        return pgqueue.enqueue(conn, payload, **options)


def _claim(engine: Engine, job_id: int, queue: str = "default") -> pgqueue.ClaimedJob:
    with engine.begin() as conn:
        (job,) = pgqueue.claim(conn, queue=queue, limit=1)
    assert job.id == job_id
    return job


def _finish(engine: Engine, job: pgqueue.ClaimedJob, value: Any, progress: Any = None) -> None:
    """What a worker's completion writes: ``done`` with its result, in one transaction."""
    with engine.begin() as conn:
        conn.execute(
            text(
                "UPDATE jobs SET result = CAST(:r AS jsonb), progress = CAST(:p AS jsonb) "
                "WHERE id = :id"
            ),
            {"r": json.dumps(value), "p": json.dumps(progress), "id": job.id},
        )
        assert pgqueue.complete(conn, job.id, job.attempts)


@pytest.fixture
def reads(engine: Engine) -> Iterator[list[str]]:
    """Every read of a job's result this engine runs (fetch_result's SELECT)."""
    seen: list[str] = []

    @event.listens_for(engine, "before_cursor_execute")
    def count(_c: Any, _cur: Any, statement: str, *_a: Any) -> None:
        if "jobs.progress" in statement and statement.lstrip().startswith("SELECT"):
            seen.append(statement)

    yield seen
    event.remove(engine, "before_cursor_execute", count)


def _listening(engine: Engine, channel: str = "jobs_done", timeout: float = 30.0) -> None:
    """Block until this process's shared wait connection has run its LISTEN."""
    listening = (
        "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'pgqueue-wait:%' "
        "AND query = :q AND datname = current_database()"
    )
    until(
        lambda: bool(scalar(engine, listening, q=f'LISTEN "{channel}"')),
        timeout,
        "the wait to listen",
    )


#: A process that completes a claimed job (``argv``: URL, id, attempts) once a wait listens.
_COMPLETER_SCRIPT = textwrap.dedent(
    """
    import sys, time, pgqueue
    from sqlalchemy import create_engine, text
    engine = create_engine(sys.argv[1])
    job_id, attempts = int(sys.argv[2]), int(sys.argv[3])
    listening = text(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
        "AND query LIKE 'LISTEN %jobs_done%'"
    )
    while True:
        with engine.connect() as c:
            if c.execute(listening).scalar_one():
                break
        time.sleep(0.05)
    with engine.begin() as c:
        c.execute(text("UPDATE jobs SET result = '42' WHERE id = :i"), {"i": job_id})
        assert pgqueue.complete(c, job_id, attempts)
    """
)


def _in_thread(target: Any) -> threading.Thread:
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


# -- fetch_result ------------------------------------------------------------------------------


def test_fetch_result_of_queued_done_failed_and_unknown_jobs(engine: Engine) -> None:
    queued = _enqueue(engine, {"a": 1}, queue="q")
    done = _enqueue(engine, None, queue="d")
    failed = _enqueue(engine, None, queue="f", max_attempts=1)
    _finish(engine, _claim(engine, done, "d"), {"sum": 3}, progress={"step": 9})
    job = _claim(engine, failed, "f")
    with engine.begin() as conn:
        assert pgqueue.fail(conn, job.id, job.attempts, "boom").status == "failed"  # type: ignore[union-attr]
        conn.execute(text("UPDATE jobs SET task = 'app.t' WHERE id = :id"), {"id": failed})

    with engine.connect() as conn:
        q = pgqueue.fetch_result(conn, queued)
        d = pgqueue.fetch_result(conn, done)
        f = pgqueue.fetch_result(conn, failed)
        assert pgqueue.fetch_result(conn, 10**12) is None
    assert q == pgqueue.JobResult(queued, "queued", None, None, None, None, None, 0, False)
    assert not q.finished
    assert d is not None
    assert f is not None
    assert (d.status, d.value, d.progress, d.error, d.attempts) == (
        "done",
        {"sum": 3},
        {"step": 9},
        None,
        1,
    )
    assert d.finished
    assert d.succeeded
    assert d.finished_at is not None
    assert (f.status, f.value, f.error, f.task, f.cancelled) == (
        "failed",
        None,
        "boom",
        "app.t",
        False,
    )
    assert f.finished
    assert not f.succeeded


def test_fetch_result_sees_a_cancelled_job_and_a_stored_null(engine: Engine) -> None:
    cancelled = _enqueue(engine)
    nothing = _enqueue(engine, queue="n")
    _finish(engine, _claim(engine, nothing, "n"), None)
    with engine.begin() as conn:
        pgqueue.cancel(conn, [cancelled])
    with engine.connect() as conn:
        c = pgqueue.fetch_result(conn, cancelled)
        n = pgqueue.fetch_result(conn, nothing)
    assert c is not None
    assert (c.status, c.cancelled, c.error) == ("failed", True, "cancelled")
    assert n is not None
    assert n.succeeded
    assert n.value is None


@pytest.mark.parametrize("bad", ["1", 1.0, None, True, 2**63])
def test_fetch_result_refuses_a_bad_id_before_any_sql(
    engine: Engine, reads: list[str], bad: Any
) -> None:
    with engine.connect() as conn, pytest.raises(pgqueue.PgQueueError, match="job_id"):
        pgqueue.fetch_result(conn, bad)
    assert reads == []


def test_aio_fetch_result(db_url: URL, engine: Engine) -> None:
    done = _enqueue(engine)
    _finish(engine, _claim(engine, done), [1, "two"])

    async def main() -> tuple[Any, Any]:
        aengine = create_async_engine(db_url.set(drivername="postgresql+psycopg"))
        try:
            async with aengine.connect() as conn:
                return (
                    await pgqueue.aio.fetch_result(conn, done),
                    await pgqueue.aio.fetch_result(conn, done + 1),
                )
        finally:
            await aengine.dispose()

    found, unknown = asyncio.run(main())
    assert found.value == [1, "two"]
    assert found.status == "done"
    assert unknown is None


# -- wait_for ----------------------------------------------------------------------------------


def test_wait_for_is_woken_by_a_completion_from_another_thread(
    engine: Engine, reads: list[str]
) -> None:
    job_id = _enqueue(engine)
    job = _claim(engine, job_id)

    def complete_once_listening() -> None:
        _listening(engine)
        _finish(engine, job, {"ok": True})

    thread = _in_thread(complete_once_listening)
    got = pgqueue.wait_for(engine, job_id, timeout=NEVER / 2, poll_interval=NEVER)
    thread.join()
    assert got.status == "done"
    assert got.value == {"ok": True}
    # The first read, maybe one when the listener connected, one on the notification.
    assert 2 <= len(reads) <= 3


def test_wait_for_is_woken_by_a_completion_from_another_process(
    engine: Engine, db_url: URL
) -> None:
    job_id = _enqueue(engine)
    job = _claim(engine, job_id)
    script = _COMPLETER_SCRIPT
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            script,
            db_url.render_as_string(hide_password=False),
            str(job.id),
            str(job.attempts),
        ]
    )
    try:
        got = pgqueue.wait_for(
            engine, job_id, timeout=timedelta(seconds=NEVER / 2), poll_interval=NEVER
        )
    finally:
        assert proc.wait(timeout=120) == 0
    assert (got.status, got.value) == ("done", 42)


def test_a_retried_failure_does_not_end_the_wait(engine: Engine) -> None:
    job_id = _enqueue(engine, max_attempts=3)
    outcome: dict[str, Any] = {}

    def fail_then_succeed() -> None:
        _listening(engine)
        first = _claim(engine, job_id)
        with engine.begin() as conn:
            outcome["first"] = pgqueue.fail(
                conn, first.id, first.attempts, "flaky", base=timedelta(0)
            )
        second = _claim(engine, job_id)
        _finish(engine, second, "second time")

    thread = _in_thread(fail_then_succeed)
    got = pgqueue.wait_for(engine, job_id, timeout=NEVER / 2, poll_interval=NEVER)
    thread.join()
    assert outcome["first"].status == "queued"
    assert (got.status, got.value, got.attempts, got.error) == ("done", "second time", 2, "flaky")


def test_a_final_failure_ends_the_wait(engine: Engine) -> None:
    job_id = _enqueue(engine, max_attempts=1)

    def fail_for_good() -> None:
        _listening(engine)
        job = _claim(engine, job_id)
        with engine.begin() as conn:
            pgqueue.fail(conn, job.id, job.attempts, "no luck")

    thread = _in_thread(fail_for_good)
    got = pgqueue.wait_for(engine, job_id, timeout=NEVER / 2, poll_interval=NEVER)
    thread.join()
    assert (got.status, got.error, got.finished) == ("failed", "no luck", True)


def test_wait_for_times_out_with_job_timeout_error(engine: Engine, reads: list[str]) -> None:
    job_id = _enqueue(engine)
    with pytest.raises(pgqueue.JobTimeoutError) as raised:
        pgqueue.wait_for(engine, job_id, timeout=0.3, poll_interval=0.1)
    error = raised.value
    assert isinstance(error, TimeoutError)
    assert isinstance(error, pgqueue.PgQueueError)
    assert (error.job_id, error.timeout, error.last.status) == (job_id, 0.3, "queued")
    assert str(job_id) in str(error)
    assert len(reads) >= 2  # it polled meanwhile
    with pytest.raises(pgqueue.JobTimeoutError):
        pgqueue.wait_for(engine, job_id, timeout=0)


def test_wait_for_an_unknown_job_raises_at_once(engine: Engine, reads: list[str]) -> None:
    with pytest.raises(pgqueue.JobNotFoundError) as raised:
        pgqueue.wait_for(engine, 10**12, timeout=NEVER, poll_interval=NEVER)
    assert isinstance(raised.value, LookupError)
    assert raised.value.job_id == 10**12
    assert len(reads) == 1


def test_wait_for_a_finished_job_returns_at_once(engine: Engine) -> None:
    job_id = _enqueue(engine)
    _finish(engine, _claim(engine, job_id), "already")
    got = pgqueue.wait_for(engine, job_id, timeout=0, listen=False)
    assert got.value == "already"


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        ({"job_id": "7", "timeout": 1}, "job_id"),
        ({"job_id": 7, "timeout": -1}, "timeout"),
        ({"job_id": 7, "timeout": "1s"}, "timeout"),
        ({"job_id": 7, "timeout": 1, "poll_interval": 0}, "poll_interval"),
        ({"job_id": 7, "timeout": 1, "listen": "yes"}, "listen"),
        ({"job_id": 7, "timeout": 1, "listen_url": 5432}, "listen_url"),
    ],
)
def test_wait_for_refuses_bad_arguments_before_any_sql(
    engine: Engine, reads: list[str], arguments: dict[str, Any], named: str
) -> None:
    with pytest.raises(pgqueue.PgQueueError, match=named):
        pgqueue.wait_for(engine, **arguments)
    assert reads == []
    with engine.connect() as conn, pytest.raises(pgqueue.PgQueueError, match="engine"):
        pgqueue.wait_for(conn, 7, timeout=1)  # type: ignore[arg-type]


def test_polling_only_still_returns(engine: Engine, reads: list[str]) -> None:
    job_id = _enqueue(engine)
    job = _claim(engine, job_id)

    def complete_after_two_reads() -> None:
        until(lambda: len(reads) >= 2, 30, "two reads of the polling wait")
        _finish(engine, job, "polled")

    thread = _in_thread(complete_after_two_reads)
    got = pgqueue.wait_for(engine, job_id, timeout=NEVER, poll_interval=0.1, listen=False)
    thread.join()
    assert got.value == "polled"
    assert len(reads) >= 3
    with engine.connect() as conn:
        listening = conn.execute(
            text(
                "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN%jobs_done%' "
                "AND datname = current_database()"
            )
        ).scalar_one()
    assert listening == 0  # listen=False never opened a LISTEN


def test_a_missed_notification_costs_at_most_a_poll(engine: Engine, reads: list[str]) -> None:
    """The LISTEN connection is killed, the job completed while it is down: the wait still
    returns (after the listener's reconnection, or the next poll)."""
    job_id = _enqueue(engine)
    job = _claim(engine, job_id)

    def kill_listener_then_complete() -> None:
        _listening(engine)
        with engine.begin() as conn:
            killed = (
                conn.execute(
                    text(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE application_name LIKE 'pgqueue-wait:%' "
                        "AND datname = current_database()"
                    )
                )
                .scalars()
                .all()
            )
            assert killed
            assert all(killed)
        _finish(engine, job, "after the kill")

    thread = _in_thread(kill_listener_then_complete)
    got = pgqueue.wait_for(engine, job_id, timeout=NEVER, poll_interval=0.5)
    thread.join()
    assert got.value == "after the kill"


def test_many_threads_wait_on_one_listen_connection(engine: Engine) -> None:
    ids = [_enqueue(engine, i, queue="many") for i in range(20)]
    results: dict[int, Any] = {}

    def wait(job_id: int) -> None:
        results[job_id] = pgqueue.wait_for(engine, job_id, timeout=NEVER / 2, poll_interval=NEVER)

    threads = [_in_thread(lambda j=j: wait(j)) for j in ids]
    _listening(engine)
    with engine.begin() as conn:
        claimed = pgqueue.claim(conn, queue="many", limit=20)
    with engine.begin() as conn:  # one statement finishes them all: one notification
        conn.execute(text("UPDATE jobs SET result = payload WHERE queue = 'many'"))
        for job in claimed:
            assert pgqueue.complete(conn, job.id, job.attempts)
    for thread in threads:
        thread.join()
    assert {j: r.value for j, r in results.items()} == {j: i for i, j in enumerate(ids)}
    with engine.connect() as conn:
        listeners = conn.execute(
            text(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE "
                "'pgqueue-wait:%' AND datname = current_database()"
            )
        ).scalar_one()
    assert listeners == 1


def test_wait_for_in_a_schema_of_its_own_listens_on_its_channel(empty_db_url: URL) -> None:
    pgqueue.migrations.upgrade(empty_db_url, schema="queue")
    engine = pgqueue.use_schema(create_engine(empty_db_url), "queue")
    try:
        job_id = _enqueue(engine)
        job = _claim(engine, job_id)

        def complete_once_listening() -> None:
            _listening(engine, channel="queue.done")
            with engine.begin() as conn:
                assert pgqueue.complete(conn, job.id, job.attempts)

        thread = _in_thread(complete_once_listening)
        got = pgqueue.wait_for(engine, job_id, timeout=NEVER / 2, poll_interval=NEVER)
        thread.join()
        assert got.status == "done"
    finally:
        engine.dispose()


# -- the asyncio twin --------------------------------------------------------------------------


def test_aio_wait_for_woken_and_timing_out(db_url: URL, engine: Engine) -> None:
    job_id = _enqueue(engine)
    other = _enqueue(engine, queue="other")
    job = _claim(engine, job_id)

    async def main() -> Any:
        aengine = create_async_engine(db_url.set(drivername="postgresql+psycopg"))
        try:
            with pytest.raises(pgqueue.JobTimeoutError):
                await pgqueue.aio.wait_for(aengine, other, timeout=0.2, poll_interval=0.05)
            with pytest.raises(pgqueue.JobNotFoundError):
                await pgqueue.aio.wait_for(aengine, 10**12, timeout=NEVER)
            with pytest.raises(pgqueue.PgQueueError, match="engine"):
                await pgqueue.aio.wait_for(engine, job_id, timeout=1)  # type: ignore[arg-type]
            finisher = asyncio.get_running_loop().run_in_executor(
                None, lambda: (_listening(engine), _finish(engine, job, "async"))
            )
            got = await pgqueue.aio.wait_for(
                aengine, job_id, timeout=NEVER / 2, poll_interval=NEVER
            )
            await finisher
            return got
        finally:
            await aengine.dispose()

    got = asyncio.run(main())
    assert (got.status, got.value) == ("done", "async")
