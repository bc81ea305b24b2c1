"""A job waiting for its dependencies through the API: ``retry`` refuses it with
:class:`pgqueue.JobWaitingError` and writes nothing, and ``unblock`` frees one whose dependency
row was deleted by hand (sync and async), counting each edge once while a dependency's completion
races it on another connection."""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import create_async_engine
from worker_helpers import until

import pgqueue
import pgqueue.aio
from pgqueue import JobWaitingError

LEASE = timedelta(minutes=5)


def _row(engine: Engine, job_id: int) -> Any:
    with engine.connect() as conn:
        return conn.execute(
            text(
                "SELECT status, waiting_on, run_at <= now() AS due, max_attempts "
                "FROM jobs WHERE id = :id"
            ),
            {"id": job_id},
        ).one()


def _delete(engine: Engine, job_id: int) -> None:
    """What an operator's ``DELETE`` by hand does: the edges go with the row (CASCADE)."""
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM jobs WHERE id = :id"), {"id": job_id})


def _failed_job(engine: Engine) -> int:
    with engine.begin() as conn:
        job_id = pgqueue.enqueue(conn, {}, queue="other", max_attempts=1)
        (job,) = pgqueue.claim(conn, queue="other", limit=1)
        pgqueue.fail(conn, job.id, job.attempts, "boom")
    return job_id


def test_retry_of_a_waiting_job_raises_naming_what_it_waits_for(engine: Engine) -> None:
    with engine.begin() as conn:
        first = pgqueue.enqueue(conn, {})
        second = pgqueue.enqueue(conn, {})
        child = pgqueue.enqueue(conn, {}, depends_on=[first, second])
    failed = _failed_job(engine)
    before = (_row(engine, child), _row(engine, failed))
    with engine.begin() as conn, pytest.raises(JobWaitingError) as raised:
        pgqueue.retry(conn, [failed, child])
    assert raised.value.waiting == {child: [first, second]}
    assert str(raised.value) == (
        f"job {child} waits for jobs {first}, {second} (depends_on): it runs once they are "
        f"done, a retry cannot run it sooner; nothing was retried (cancel it: `pgqueue cancel "
        f"{child}`)"
    )
    assert isinstance(raised.value, pgqueue.PgQueueError)
    assert (_row(engine, child), _row(engine, failed)) == before  # nothing of the call written
    with engine.begin() as conn:
        assert pgqueue.retry(conn, [failed]) == [failed]


def test_the_async_retry_raises_the_same(engine: Engine, db_url: URL) -> None:
    with engine.begin() as conn:
        parent = pgqueue.enqueue(conn, {})
        child = pgqueue.enqueue(conn, {}, depends_on=[parent])

    async def retry() -> None:
        async_engine = create_async_engine(db_url)
        try:
            async with async_engine.begin() as conn:
                await pgqueue.aio.retry(conn, [child])
        finally:
            await async_engine.dispose()

    with pytest.raises(JobWaitingError) as raised:
        asyncio.run(retry())
    assert raised.value.waiting == {child: [parent]}


def test_unblock_stops_waiting_for_a_deleted_dependency(engine: Engine, db_url: URL) -> None:
    with engine.begin() as conn:
        gone = pgqueue.enqueue(conn, {})
        kept = pgqueue.enqueue(conn, {})
        orphan = pgqueue.enqueue(conn, {}, depends_on=[gone])
        half = pgqueue.enqueue(conn, {}, depends_on=[gone, kept])
        fine = pgqueue.enqueue(conn, {}, depends_on=[kept])
    _delete(engine, gone)
    with engine.begin() as conn:
        assert pgqueue.unblock(conn, [fine, kept, 10**12]) == []  # nothing missing: untouched
        assert pgqueue.unblock(conn, [half, orphan, orphan]) == [orphan, half]
        assert pgqueue.unblock(conn, [orphan, half]) == []  # twice: nothing more to do
    assert (_row(engine, orphan).waiting_on, _row(engine, orphan).due) == (0, True)
    assert (_row(engine, half).waiting_on, _row(engine, half).due) == (1, False)
    with engine.begin() as conn:
        claimed = {job.id for job in pgqueue.claim(conn, limit=10, lease=LEASE)}
    assert claimed == {kept, orphan}  # `half` still waits for `kept`, which exists
    with engine.begin() as conn:
        for job_id in (kept, orphan):
            assert pgqueue.complete(conn, job_id, 1)
    assert {_row(engine, i).due for i in (half, fine)} == {True}  # released by `kept` as usual
    with engine.begin() as conn, pytest.raises(pgqueue.InvalidArgumentError, match="job_id"):
        pgqueue.unblock(conn, [2**63])  # no bigint: refused before any SQL

    # The async twin, on a second orphan.
    with engine.begin() as conn:
        gone = pgqueue.enqueue(conn, {})
        orphan = pgqueue.enqueue(conn, {}, depends_on=[gone])
    _delete(engine, gone)

    async def unblock() -> list[int]:
        async_engine = create_async_engine(db_url)
        try:
            async with async_engine.begin() as conn:
                return await pgqueue.aio.unblock(conn, [orphan])
        finally:
            await async_engine.dispose()

    assert asyncio.run(unblock()) == [orphan]
    assert _row(engine, orphan).due is True


def test_unblock_waiting_on_a_completion_that_decrements_the_job_counts_each_edge_once(
    engine: Engine,
) -> None:
    """The completion of ``parent`` settles its edge and decrements ``child`` in a transaction
    that stays open; ``unblock`` on another connection waits for the child's row, then counts the
    edges the completion committed: the child ends ready, not waiting for ever on a stale count."""
    with engine.begin() as conn:
        parent = pgqueue.enqueue(conn, {})
        gone = pgqueue.enqueue(conn, {}, queue="elsewhere")
        child = pgqueue.enqueue(conn, {}, depends_on=[parent, gone])
    _delete(engine, gone)
    assert _row(engine, child).waiting_on == 2
    outcome: list[Any] = []
    with engine.connect() as completing:
        (job,) = pgqueue.claim(completing, limit=1, lease=LEASE)
        assert job.id == parent
        completing.commit()
        assert pgqueue.complete(completing, parent, job.attempts)  # child: 2 -> 1, row locked

        def unblock() -> None:
            try:
                with engine.begin() as conn:
                    outcome.append(pgqueue.unblock(conn, [child]))
            except BaseException as exc:  # reported by the test's thread
                outcome.append(exc)

        thread = threading.Thread(target=unblock, daemon=True)
        thread.start()
        until(lambda: _waiting_for_a_lock(engine), 10, "unblock waiting for the child's row")
        completing.commit()
    thread.join(30)
    assert outcome == [[child]]
    row = _row(engine, child)
    assert (row.status, row.waiting_on, row.due) == ("queued", 0, True)


def _waiting_for_a_lock(engine: Engine) -> bool:
    with engine.connect() as conn:
        found = conn.execute(
            text(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock'"
            )
        ).scalar_one()
    return bool(found)
