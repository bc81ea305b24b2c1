"""Cancel under load (issue #20, item 4): a row another statement holds for milliseconds is
waited for, a row held for long is skipped and named, and the caller's transaction and
``lock_timeout`` come out as they went in. Real concurrent sessions and a real worker."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from sqlalchemy import Connection, Engine, text
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.orm import Session
from worker_helpers import row_locked, running, scalar

import pgqueue
import pgqueue.aio
from pgqueue import repository
from pgqueue.results import CancelledJob


@contextmanager
def _caller(engine: Engine, kind: str) -> Iterator[Connection | Session]:
    if kind == "session":
        with Session(engine) as session:
            yield session
    else:
        with engine.connect() as conn:
            yield conn


@pytest.mark.parametrize("kind", ["connection", "session"])
def test_cancel_gives_the_caller_its_own_lock_timeout_back(engine: Engine, kind: str) -> None:
    """One id waited for and taken (its savepoint released: the 500 ms would outlive it), one
    refused (its savepoint rolled back): the caller's 3 s is in force afterwards either way."""
    with engine.begin() as conn:
        brief, held = pgqueue.enqueue_many(conn, ["brief", "held"])
    with (
        row_locked(engine, brief, 0.3),
        row_locked(engine, held, 30.0) as released,  # held until the block ends
        _caller(engine, kind) as conn,
    ):
        conn.execute(text("SET LOCAL lock_timeout = '3s'"))
        report = repository.cancel_report(conn, [brief, held])
        assert conn.execute(text("SHOW lock_timeout")).scalar_one() == "3s"
        conn.commit()
        assert not released.is_set()
    assert report == pgqueue.CancelReport([CancelledJob(brief, False)], [held])


def test_a_job_its_holder_finished_while_the_cancel_waited_is_left_done(engine: Engine) -> None:
    """The waiting cancel re-reads the row once it gets the lock: a job completed meanwhile is
    neither cancelled nor reported skipped."""
    with engine.begin() as conn:
        job_id = pgqueue.enqueue(conn, {})
    finish = "UPDATE jobs SET status = 'done', finished_at = now() WHERE id = :id"
    with row_locked(engine, job_id, 0.2, sql=finish), engine.begin() as conn:
        report = repository.cancel_report(conn, [job_id])
    assert report == pgqueue.CancelReport([], [])
    assert scalar(engine, "SELECT status FROM jobs WHERE id = :id", id=job_id) == "done"


def test_cancelling_running_jobs_of_a_draining_worker_never_skips_one(engine: Engine) -> None:
    """A real worker drains 300 jobs of 20 ms with 8 threads, a heartbeat every 0.5 s and
    batched completions, all locking rows for milliseconds, while running jobs are cancelled
    three at a time: every one is cancelled, or was done before the cancel got its row."""
    with engine.begin() as conn:
        pgqueue.enqueue_many(conn, [{}] * 300, queue="load")

    def handler(job: pgqueue.JobContext) -> None:
        time.sleep(0.02)

    worker = pgqueue.Worker(
        engine,
        {"load": handler},
        concurrency=8,
        lease=1.5,
        poll_interval=0.1,
        install_signal_handlers=False,
    )
    cancelled: set[int] = set()
    pick = "SELECT id FROM jobs WHERE status = 'running' ORDER BY random() LIMIT 3"
    left = "SELECT count(*) FROM jobs WHERE status IN ('queued', 'running')"
    with running(worker):
        while scalar(engine, left):
            with engine.begin() as conn:
                ids = list(conn.execute(text(pick)).scalars())
                report = repository.cancel_report(conn, ids)
            assert report.skipped == []
            cancelled.update(c.id for c in report.cancelled)
            with engine.connect() as conn:
                others = conn.execute(
                    text("SELECT id, status FROM jobs WHERE id = ANY(:ids)"),
                    {"ids": [i for i in ids if i not in cancelled]},
                ).all()
            assert {status for _, status in others} <= {"done"}, others
    with engine.connect() as conn:
        ended = dict(
            conn.execute(
                text(
                    "SELECT CASE WHEN cancelled_at IS NOT NULL THEN 'cancelled' ELSE status END, "
                    "count(*) FROM jobs GROUP BY 1"
                )
            ).all()
        )
    assert len(cancelled) >= 10, cancelled
    assert ended == {"done": 300 - len(cancelled), "cancelled": len(cancelled)}
    assert worker.stats.lost == 0


def test_an_autocommit_connection_gets_a_clear_error_and_nothing_changes(
    engine: Engine, db_url: URL
) -> None:
    """The bounded wait needs a savepoint, so a transaction: say so, write nothing."""
    with engine.begin() as conn:
        job_id = pgqueue.enqueue(conn, {})
    with (
        engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn,
        pytest.raises(pgqueue.InvalidArgumentError, match="conn: is in autocommit"),
    ):
        pgqueue.cancel(conn, [job_id])

    async def cancel_async() -> None:
        async_engine = create_async_engine(db_url, isolation_level="AUTOCOMMIT")
        try:
            async with async_engine.connect() as conn:
                await pgqueue.aio.cancel(conn, [job_id])
        finally:
            await async_engine.dispose()

    with pytest.raises(pgqueue.InvalidArgumentError, match="conn: is in autocommit"):
        asyncio.run(cancel_async())
    assert scalar(engine, "SELECT status FROM jobs WHERE id = :id", id=job_id) == "queued"
