"""``raise pgqueue.Snooze(delay)`` through the worker (lease and transaction mode, threads and
asyncio), the completer's batch, and ``pgqueue.testing.drain``, against a real PostgreSQL."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import create_async_engine
from worker_helpers import row_locked, statements_sent

import pgqueue
import pgqueue.aio
from pgqueue import repository
from pgqueue._worker.completer import Failure, Flush
from pgqueue._worker.window import Held, Lane
from pgqueue.jobs import JobContext, Outcome
from pgqueue.testing import drain

THIRTY = timedelta(seconds=30)


class Seen(pgqueue.WorkerHooks):
    """The outcome events of each job, in order, with the snooze delay."""

    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []
        self._lock = threading.Lock()

    def _add(self, *event: Any) -> None:
        with self._lock:
            self.events.append(event)

    def on_claimed(self, job: JobContext) -> None:
        self._add("claimed", job.id)

    def on_handled(self, job: JobContext, duration: float, error: BaseException | None) -> None:
        self._add("handled", job.id, type(error).__name__ if error else None)

    def on_succeeded(self, job: JobContext, duration: float | None) -> None:
        self._add("succeeded", job.id)

    def on_retry(self, job: JobContext, duration: float | None, error: str) -> None:
        self._add("retry", job.id)

    def on_failed(self, job: JobContext, duration: float | None, error: str) -> None:
        self._add("failed", job.id)

    def on_snoozed(self, job: JobContext, duration: float | None, delay: timedelta) -> None:
        assert duration is not None
        self._add("snoozed", job.id, delay)


def _row(engine: Engine, job_id: int) -> Any:
    with engine.connect() as conn:
        return conn.execute(
            text(
                "SELECT status, attempts, max_attempts, snoozes, last_error, locked_until,"
                " finished_at, extract(epoch FROM run_at - now()) AS wait FROM jobs WHERE id = :id"
            ),
            {"id": job_id},
        ).one()


def _enqueue(engine: Engine, payloads: list[Any], queue: str = "q", **kw: Any) -> list[int]:
    with engine.begin() as conn:
        return pgqueue.enqueue_many(conn, payloads, queue=queue, **kw)


@pytest.fixture
def effects(engine: Engine) -> Engine:
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE effects (job_id bigint)"))
    return engine


def _sync_snoozer(job: JobContext) -> None:
    if job.connection is not None:  # transaction mode: this write must be rolled back
        job.connection.execute(text("INSERT INTO effects VALUES (:j)"), {"j": job.id})
    raise pgqueue.Snooze(THIRTY)


async def _async_snoozer(job: JobContext) -> None:
    raise pgqueue.Snooze(THIRTY)


@pytest.mark.parametrize(
    ("mode", "handler"),
    [("lease", _sync_snoozer), ("lease", _async_snoozer), ("transaction", _sync_snoozer)],
    ids=["lease-threads", "lease-asyncio", "transaction"],
)
def test_a_snoozed_job_is_queued_after_its_delay_without_using_up_an_attempt(
    effects: Engine, mode: Any, handler: Callable[[JobContext], object]
) -> None:
    (job_id,) = _enqueue(effects, [{}], max_attempts=1)
    with effects.begin() as conn:  # an earlier attempt's error stays for the operator
        conn.execute(text("UPDATE jobs SET last_error = 'earlier' WHERE id = :id"), {"id": job_id})
    seen = Seen()
    worker = pgqueue.Worker(effects, {"q": handler}, mode=mode, hooks=[seen], listen=False)
    stats = worker.run(until_empty=True)

    assert (stats.claimed, stats.snoozed) == (1, 1)
    assert (stats.done, stats.retried, stats.failed, stats.lost) == (0, 0, 0, 0)
    row = _row(effects, job_id)
    assert tuple(row)[:7] == ("queued", 1, 2, 1, "earlier", None, None)
    assert 25 < row.wait <= 30
    assert [e for e in seen.events if e[1] == job_id] == [
        ("claimed", job_id),
        ("handled", job_id, "Snooze"),
        ("snoozed", job_id, THIRTY),
    ]
    with effects.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM effects")).scalar_one() == 0


def test_snooze_zero_runs_the_job_again_at_once_with_all_its_attempts(engine: Engine) -> None:
    (job_id,) = _enqueue(engine, [{}], max_attempts=1)
    runs: list[int] = []

    def handler(job: JobContext) -> None:
        runs.append(job.attempts)
        if job.attempts == 1:
            raise pgqueue.Snooze(0)

    worker = pgqueue.Worker(engine, {"q": handler}, listen=False, poll_interval=0.1)
    stats = worker.run(until_empty=True)
    assert runs == [1, 2]
    assert (stats.snoozed, stats.done, stats.failed) == (1, 1, 0)
    assert tuple(_row(engine, job_id))[:4] == ("done", 2, 2, 1)


def test_a_drain_does_not_end_on_a_poll_made_while_a_snooze_was_still_being_written(
    engine: Engine,
) -> None:
    """The snooze's write waits for another session's row lock (a real transaction) while the
    claimer polls every 50 ms and finds nothing: those polls came before the job was queued
    again, so ``until_empty`` must poll once more after the write, not return."""
    (job_id,) = _enqueue(engine, [{}], max_attempts=1)
    runs: list[int] = []
    with ExitStack() as holder:

        def handler(job: JobContext) -> None:
            runs.append(job.attempts)
            if job.attempts == 1:  # held for a second: the flush waits, the claimer polls
                holder.enter_context(row_locked(engine, job.id, 1.0))
                raise pgqueue.Snooze(0)

        worker = pgqueue.Worker(engine, {"q": handler}, listen=False, poll_interval=0.05)
        stats = worker.run(until_empty=True)
    assert runs == [1, 2]
    assert (stats.snoozed, stats.done, stats.failed) == (1, 1, 0)
    assert tuple(_row(engine, job_id))[:4] == ("done", 2, 2, 1)


def test_a_flush_snoozes_many_jobs_in_one_statement_and_drops_those_no_longer_ours(
    engine: Engine,
) -> None:
    """The completer's batch: one statement for every snooze beside the completions and the
    failures; a job reaped or cancelled meanwhile is not requeued by the snooze."""
    ids = _enqueue(engine, [{"n": n} for n in range(30)])
    with engine.begin() as conn:
        claimed = pgqueue.claim(conn, queue="q", limit=30)
    held = [Held(JobContext.of(c), Lane.THREADS, time.monotonic()) for c in claimed]
    for n, h in enumerate(held):
        h.snooze = timedelta(seconds=n % 3)
    done, failed, snoozed = held[:5], held[5:10], held[10:]
    stolen, cancelled = snoozed[0].job.id, snoozed[1].job.id
    with engine.begin() as conn:
        conn.execute(text("UPDATE jobs SET attempts = 2 WHERE id = :id"), {"id": stolen})
        pgqueue.cancel(conn, [cancelled])
    policy = pgqueue.RetryPolicy()
    flush = Flush(
        done,
        [Failure(h, "ValueError: x", True, policy) for h in failed],
        snoozed,
        lock_timeout_ms=5000,
    )
    with statements_sent(engine, "UPDATE jobs") as updates, engine.connect() as conn:
        conn.execution_options(isolation_level="AUTOCOMMIT")
        outcomes = flush(conn)
        again = flush(conn)  # a retried flush skips what already committed
    assert [s for s, _ in updates if "snoozes" in s] == [updates[2][0]]
    assert len(updates) == 3  # complete_many, fail_many, snooze_many: one each

    by_id = {h.job.id: outcome for h, outcome, _ in outcomes}
    assert {h.job.id: o for h, o, _ in again} == by_id
    assert by_id[stolen] is Outcome.LOST
    assert by_id[cancelled] is Outcome.CANCELLED
    requeued = [h.job.id for h in snoozed[2:]]
    assert {by_id[i] for i in requeued} == {Outcome.SNOOZED}
    assert {by_id[h.job.id] for h in done} == {Outcome.DONE}
    assert {by_id[h.job.id] for h in failed} == {Outcome.RETRY}
    with engine.connect() as conn:
        rows = {
            r.id: r
            for r in conn.execute(
                text(
                    "SELECT id, status, attempts, max_attempts, snoozes,"
                    " extract(epoch FROM run_at - now()) AS wait FROM jobs"
                )
            )
        }
    assert len(rows) == len(ids)
    for h in snoozed[2:]:
        row = rows[h.job.id]
        assert (row.status, row.attempts, row.max_attempts, row.snoozes) == ("queued", 1, 6, 1)
        assert h.snooze is not None
        assert h.snooze.total_seconds() - 5 < row.wait <= h.snooze.total_seconds()
    assert (rows[stolen].status, rows[stolen].max_attempts, rows[stolen].snoozes) == (
        "running",
        5,
        0,
    )
    assert (rows[cancelled].status, rows[cancelled].snoozes) == ("failed", 0)


@pytest.mark.parametrize("inside", [False, True], ids=["engine", "transaction"])
def test_drain_puts_a_snoozed_job_back_and_does_not_call_it_failed(
    engine: Engine, inside: bool
) -> None:
    (job_id,) = _enqueue(engine, [{}])

    def handler(job: JobContext) -> None:
        raise pgqueue.Snooze(60)

    if inside:
        with engine.begin() as conn:
            result = drain(conn, {"q": handler})
            row = conn.execute(
                text("SELECT status, attempts, max_attempts, snoozes FROM jobs")
            ).one()
    else:
        result = drain(engine, {"q": handler})
        row = _row(engine, job_id)
    assert [(j.id, j.status) for j in result.snoozed] == [(job_id, "queued")]
    assert result.failed == []
    assert result.succeeded == []
    assert tuple(row)[:4] == ("queued", 1, 6, 1)


def test_repository_snooze_and_its_async_twin_are_guarded_and_check_the_delay_first(
    engine: Engine, db_url: URL
) -> None:
    """For loops of your own (``claim`` ... ``complete``): the same write as the worker's."""
    first, second = _enqueue(engine, [1, 2])
    with engine.begin() as conn:
        claimed = {c.id: c for c in pgqueue.claim(conn, queue="q", limit=2)}
    with engine.begin() as conn:
        with pytest.raises(pgqueue.InvalidArgumentError, match="delay"):
            repository.snooze(conn, first, 1, -5)
        assert repository.snooze(conn, first, claimed[first].attempts + 1, 10) is False
        assert repository.snooze(conn, first, claimed[first].attempts, THIRTY) is True
        assert repository.snooze(conn, first, claimed[first].attempts, THIRTY) is False

    async def twin() -> tuple[bool, bool]:
        aengine = create_async_engine(db_url)
        try:
            async with aengine.begin() as conn:
                with pytest.raises(pgqueue.InvalidArgumentTypeError, match="delay"):
                    await pgqueue.aio.snooze(conn, second, 1, "soon")  # type: ignore[arg-type]
                wrong = await pgqueue.aio.snooze(conn, second, 2)
                right = await pgqueue.aio.snooze(conn, second, claimed[second].attempts)
            return wrong, right
        finally:
            await aengine.dispose()

    assert asyncio.run(twin()) == (False, True)
    first_row, second_row = _row(engine, first), _row(engine, second)
    assert tuple(first_row)[:4] == tuple(second_row)[:4] == ("queued", 1, 6, 1)
    assert 25 < first_row.wait <= 30
    assert -5 < second_row.wait <= 0
