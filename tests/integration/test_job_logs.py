"""Per-job logs (#34): ``JobContext.log`` and the ``logging`` capture, written by the statements
the worker sends anyway, read back by ``pgqueue.job_logs`` (and its asyncio twin), bounded,
masked, never failing a job, and deleted with the job."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, event, text
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import create_async_engine
from worker_helpers import running, scalar, until

import pgqueue
import pgqueue.aio
import pgqueue.testing
from pgqueue._worker import store

log = logging.getLogger("tests.job_logs")


@pytest.fixture(autouse=True)
def info_level() -> Iterator[None]:
    """The test logger lets INFO through (the capture sees what logging lets through)."""
    previous = log.level
    log.setLevel(logging.INFO)
    yield
    log.setLevel(previous)


def _enqueue(engine: Engine, queue: str, n: int = 1, **options: Any) -> list[int]:
    with engine.begin() as conn:
        return pgqueue.enqueue_many(conn, [{"i": i} for i in range(n)], queue=queue, **options)


def _lines(engine: Engine, job_id: int, attempt: int | None = None) -> pgqueue.LogLines:
    with engine.connect() as conn:
        lines = pgqueue.job_logs(conn, job_id, attempt=attempt)
    assert isinstance(lines, pgqueue.LogLines)
    return lines


class Kept(logging.Handler):
    """The records that reached the normal handlers."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_job_log_and_captured_records_are_the_jobs_lines(engine: Engine) -> None:
    kept = Kept()
    log.addHandler(kept)

    def handler(job: pgqueue.JobContext) -> None:
        job.log("started", step=1, names=["a", "b"])
        log.info("captured %s", job.payload["i"])
        log.debug("below INFO: not a line")
        log.warning("careful")

    try:
        (job_id,) = _enqueue(engine, "logs")
        (other,) = _enqueue(engine, "quiet")
        worker = pgqueue.Worker(engine, {"logs": handler, "quiet": lambda job: None})
        assert worker.run(until_empty=True).done == 2
    finally:
        log.removeHandler(kept)
    lines = _lines(engine, job_id)
    assert [(x.level, x.message, x.fields, x.logger, x.attempt) for x in lines] == [
        ("info", "started", {"step": 1, "names": ["a", "b"]}, None, 1),
        ("info", "captured 0", {}, "tests.job_logs", 1),
        ("warning", "careful", {}, "tests.job_logs", 1),
    ]
    assert lines[0].time <= lines[1].time <= lines[2].time
    assert lines.dropped == {}
    # The records still reached the normal handlers.
    assert [r.getMessage() for r in kept.records] == ["captured 0", "careful"]
    # A job that logged nothing has no row; an unknown id reads [].
    assert _lines(engine, other) == []
    assert _lines(engine, 10**12) == []
    assert scalar(engine, "SELECT count(*) FROM jobs_logs") == 1


def test_records_outside_a_handler_and_with_capture_off_are_not_lines(engine: Engine) -> None:
    def handler(job: pgqueue.JobContext) -> None:
        job.log("kept")
        log.info("not captured")

    (job_id,) = _enqueue(engine, "off")
    worker = pgqueue.Worker(engine, {"off": handler}, capture_logs=False)
    assert worker.run(until_empty=True).done == 1
    assert [x.message for x in _lines(engine, job_id)] == ["kept"]
    log.info("no job runs here")  # no handler installed, nothing recorded
    with pytest.raises(pgqueue.InvalidArgumentTypeError, match="capture_logs"):
        pgqueue.Worker(engine, {"off": handler}, capture_logs="yes")  # type: ignore[arg-type]


def test_each_attempt_keeps_its_own_lines(engine: Engine) -> None:
    def flaky(job: pgqueue.JobContext) -> None:
        job.log(f"attempt {job.attempts}")
        log.error("failing" if job.attempts == 1 else "fine")
        if job.attempts == 1:
            raise RuntimeError("first try fails")

    (job_id,) = _enqueue(engine, "flaky", max_attempts=2)
    policy = pgqueue.RetryPolicy(base=timedelta(milliseconds=1), cap=timedelta(milliseconds=1))
    worker = pgqueue.Worker(
        engine, {"flaky": flaky}, retry=policy, poll_interval=0.05, listen=False
    )
    with running(worker):
        until(
            lambda: scalar(engine, "SELECT status FROM jobs WHERE id = :i", i=job_id) == "done",
            30,
            "the second attempt",
        )
    worker.stop()
    lines = _lines(engine, job_id)
    assert [(x.attempt, x.message) for x in lines] == [
        (1, "attempt 1"),
        (1, "failing"),
        (2, "attempt 2"),
        (2, "fine"),
    ]
    assert [x.message for x in _lines(engine, job_id, attempt=2)] == ["attempt 2", "fine"]
    with engine.connect() as conn, pytest.raises(pgqueue.InvalidArgumentError):
        pgqueue.job_logs(conn, job_id, attempt=0)


def test_async_handlers_lines_and_the_aio_twin(engine: Engine, db_url: URL) -> None:
    async def handler(job: pgqueue.JobContext) -> None:
        job.log("from a coroutine", n=job.payload["i"])
        await asyncio.sleep(0)
        log.info("coroutine %d", job.payload["i"])

    ids = _enqueue(engine, "aio", 5)
    worker = pgqueue.Worker(engine, {"aio": handler}, async_concurrency=5)
    assert worker.run(until_empty=True).done == 5

    async def read() -> list[list[pgqueue.LogLine]]:
        aengine = create_async_engine(db_url.set(drivername="postgresql+psycopg"))
        try:
            async with aengine.connect() as conn:
                return [await pgqueue.aio.job_logs(conn, i) for i in ids]
        finally:
            await aengine.dispose()

    for i, lines in enumerate(asyncio.run(read())):
        # Each job's lines are its own, though the coroutines ran on one loop together.
        assert [(x.message, x.fields) for x in lines] == [
            ("from a coroutine", {"n": i}),
            (f"coroutine {i}", {}),
        ]


def test_the_bounds_drop_the_oldest_and_count_them(engine: Engine) -> None:
    def chatty(job: pgqueue.JobContext) -> None:
        for i in range(1_100):
            job.log(f"line {i}")

    def large(job: pgqueue.JobContext) -> None:
        for i in range(100):
            job.log(f"{i} " + "x" * 10_000)  # ~10 KB each: 256 KiB keeps the last 25 or so

    (many,) = _enqueue(engine, "chatty")
    (big,) = _enqueue(engine, "large")
    assert (
        pgqueue.Worker(engine, {"chatty": chatty, "large": large}).run(until_empty=True).done == 2
    )
    lines = _lines(engine, many)
    assert len(lines) == 1_000
    assert (lines[0].message, lines[-1].message) == ("line 100", "line 1099")
    assert lines.dropped == {1: 100}
    lines = _lines(engine, big)
    assert lines[-1].message.startswith("99 ")
    assert 20 <= len(lines) <= 26
    assert lines.dropped == {1: 100 - len(lines)}
    stored = scalar(
        engine, "SELECT octet_length(lines::text) FROM jobs_logs WHERE job_id = :i", i=big
    )
    assert stored <= 300 * 1024


class Cyclic:
    def __repr__(self) -> str:
        return "Cyclic()"


def test_lines_no_client_could_read_are_their_repr_and_passwords_are_masked(
    engine: Engine,
) -> None:
    cyclic: dict[str, Any] = {}
    cyclic["self"] = cyclic

    def hostile(job: pgqueue.JobContext) -> None:
        job.log("bad \udcff utf-8 and \x00 nul")
        job.log("cyclic", loop=cyclic)
        job.log("not json", value=Cyclic(), nan=float("nan"))
        job.log("url postgresql://app:s3cret@db/prod", dsn="postgresql://app:s3cret@db/prod")
        job.log(12345)  # type: ignore[arg-type]
        log.info("record with url %s", "postgresql://u:hunter2@h/d")

    (job_id,) = _enqueue(engine, "hostile")
    assert pgqueue.Worker(engine, {"hostile": hostile}).run(until_empty=True).done == 1
    assert scalar(engine, "SELECT status FROM jobs WHERE id = :i", i=job_id) == "done"
    lines = _lines(engine, job_id)
    assert lines[0].message == "bad \\udcff utf-8 and \\x00 nul"
    assert lines[1].message == "cyclic"
    assert lines[1].fields == {"repr": "{'loop': {'self': {...}}}"}
    assert lines[2].fields["repr"].startswith("{'value': Cyclic()")
    assert lines[3].message == "url postgresql://app:***@db/prod"
    assert lines[3].fields == {"dsn": "postgresql://app:***@db/prod"}
    assert lines[4].message == "12345"
    assert lines[5].message == "record with url postgresql://u:***@h/d"
    assert "s3cret" not in str(list(lines))
    assert "hunter2" not in str(list(lines))
    assert len(lines) == 6


def test_lines_ride_on_the_outcome_statements(engine: Engine) -> None:
    """200 jobs logging 10 lines each send no statement the same drain logging nothing does
    not: the lines are in the completer's statements (within the issue's bound of 50 more)."""
    statements: list[str] = []

    @event.listens_for(engine, "before_cursor_execute")
    def count(_c: Any, _cur: Any, statement: str, *_a: Any) -> None:
        statements.append(statement)

    def chatty(job: pgqueue.JobContext) -> None:
        for i in range(5):
            job.log("line", i=i)
            log.info("record %d", i)

    def quiet(job: pgqueue.JobContext) -> None:
        pass

    try:
        _enqueue(engine, "quiet", 200)
        assert pgqueue.Worker(engine, {"quiet": quiet}).run(until_empty=True).done == 200
        silent = list(statements)
        statements.clear()
        ids = _enqueue(engine, "chatty", 200)
        assert pgqueue.Worker(engine, {"chatty": chatty}).run(until_empty=True).done == 200
        logging_run = list(statements)
    finally:
        event.remove(engine, "before_cursor_execute", count)
    assert not [s for s in silent if "INSERT INTO jobs_logs" in s]
    carrying = [s for s in logging_run if "INSERT INTO jobs_logs" in s]
    assert carrying, "no statement wrote the lines"
    # Every statement that writes lines is an outcome's (an UPDATE of jobs in the same one).
    assert all("UPDATE jobs SET status" in s for s in carrying), carrying[0][:300]
    assert len(logging_run) <= len(silent) + 50, (len(logging_run), len(silent))
    assert scalar(engine, "SELECT count(*) FROM jobs_logs") == 200
    assert len(_lines(engine, ids[-1])) == 10


@pytest.mark.parametrize("timeout", [None, 60.0], ids=["lease", "bounded-lease"])
def test_the_heartbeat_writes_a_running_jobs_lines(engine: Engine, timeout: float | None) -> None:
    """Both of the heartbeat's statements carry the lines: the plain lease extension, and the
    one with a lease per job that a job with a timeout makes it send."""
    release = threading.Event()

    def long(job: pgqueue.JobContext) -> None:
        job.log("still going")
        release.wait(30)
        log.info("finished")

    (job_id,) = _enqueue(engine, "long", timeout=timeout)
    worker = pgqueue.Worker(
        engine, {"long": long}, lease=timedelta(seconds=1.5), poll_interval=0.05, listen=False
    )
    try:
        with running(worker):
            until(lambda: len(_lines(engine, job_id)) == 1, 20, "the heartbeat's write")
            assert scalar(engine, "SELECT status FROM jobs WHERE id = :i", i=job_id) == "running"
            release.set()
            until(lambda: len(_lines(engine, job_id)) == 2, 20, "the completion's write")
            worker.stop()
    finally:
        release.set()
    assert [x.message for x in _lines(engine, job_id)] == ["still going", "finished"]


def test_transaction_mode_and_drain_write_the_lines_with_the_outcome(engine: Engine) -> None:
    def handler(job: pgqueue.JobContext) -> None:
        job.log("in a transaction", mode=job.payload["i"])
        log.info("captured in transaction mode")

    (tx,) = _enqueue(engine, "tx")
    worker = pgqueue.Worker(engine, {"tx": handler}, mode="transaction")
    assert worker.run(until_empty=True).done == 1
    assert [x.message for x in _lines(engine, tx)] == [
        "in a transaction",
        "captured in transaction mode",
    ]
    (drained,) = _enqueue(engine, "drained")
    pgqueue.testing.drain(engine, {"drained": handler})
    # drain records job.log lines (it captures no logging records: it has no worker).
    assert [x.message for x in _lines(engine, drained)] == ["in a transaction"]


def test_lines_are_deleted_with_their_job(engine: Engine) -> None:
    def handler(job: pgqueue.JobContext) -> None:
        job.log("soon gone")

    ids = _enqueue(engine, "gone", 3)
    assert pgqueue.Worker(engine, {"gone": handler}).run(until_empty=True).done == 3
    assert scalar(engine, "SELECT count(*) FROM jobs_logs") == 3
    with engine.begin() as conn:
        assert pgqueue.purge(conn, older_than=0) == 3
    assert scalar(engine, "SELECT count(*) FROM jobs_logs") == 0
    assert all(_lines(engine, i) == [] for i in ids)
    # The retention pruner's delete takes them too, and counts jobs, not lines.
    kept = _enqueue(engine, "pruned", 2)
    assert pgqueue.Worker(engine, {"pruned": handler}).run(until_empty=True).done == 2
    with engine.begin() as conn:
        conn.execute(text("UPDATE jobs SET finished_at = now() - interval '2 days'"))
        assert store.prune_finished(conn, "pruned", "done", timedelta(days=1)) == 2
    assert all(_lines(engine, i) == [] for i in kept)
    assert scalar(engine, "SELECT count(*) FROM jobs_logs") == 0
