"""The completer's writes on a real PostgreSQL: one statement per kind, the resumable retry.

A flush is SQL through and through (its outcomes are what the guarded statements matched), so it
is tested here, with real row locks as the fault: a ``lock_timeout`` is a transient error the
completer retries, raised after the statements before it committed. The completer's batching
without a database is ``tests/unit/test_completer.py``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import OperationalError
from worker_helpers import statements_sent

import pgqueue
from pgqueue._worker.completer import Completer, Failure, Flush
from pgqueue._worker.transient import is_transient
from pgqueue._worker.window import Held, Lane, State
from pgqueue.jobs import JobContext, Outcome
from tests.worker_parts import until

SHORT = pgqueue.RetryPolicy(base=timedelta(seconds=1))
LONG = pgqueue.RetryPolicy(base=timedelta(hours=1), cap=timedelta(hours=2))


def claim_held(engine: Engine, count: int) -> list[Held]:
    """``count`` jobs claimed and handled: their outcomes wait for a flush."""
    with engine.begin() as conn:
        pgqueue.enqueue_many(conn, [{"n": n} for n in range(count)], queue="q")
        claimed = pgqueue.claim(conn, queue="q", limit=count)
    assert len(claimed) == count
    return [
        Held(JobContext.of(c), Lane.THREADS, time.monotonic(), State.FINISHING) for c in claimed
    ]


def statuses(engine: Engine) -> dict[int, str]:
    with engine.connect() as conn:
        return {row.id: row.status for row in conn.execute(text("SELECT id, status FROM jobs"))}


def kind(statement: str, params: dict[str, Any]) -> str:
    """Which of the flush's statements this is, told by its parameters."""
    if statement.startswith("SELECT"):
        return "settled"
    if "batch_delays" in params:
        return "snooze"
    return "fail" if "batch_errors" in params else "complete"


def kinds(sent: list[tuple[str, dict[str, Any]]]) -> list[str]:
    return [kind(statement, params) for statement, params in sent]


def by_id(outcomes: list[tuple[Held, Outcome, str]]) -> dict[int, tuple[Outcome, str]]:
    return {h.job.id: (o, d) for h, o, d in outcomes}


@contextmanager
def autocommit(engine: Engine) -> Iterator[Connection]:
    """A connection as the completer's flush gets one."""
    with engine.connect() as conn:
        conn.execution_options(isolation_level="AUTOCOMMIT")
        yield conn


@contextmanager
def row_locked(engine: Engine, job_id: int) -> Iterator[Connection]:
    """Another session holds the job's row lock (a real fault for the flush's statements);
    ``rollback()`` on the connection yielded lets go early."""
    with engine.connect() as blocker:
        blocker.execute(text("SELECT 1 FROM jobs WHERE id = :i FOR UPDATE"), {"i": job_id})
        yield blocker
        blocker.rollback()


def test_a_flush_sends_one_statement_per_kind_and_per_retry_policy(engine: Engine) -> None:
    """Completions in one statement, failures in one per retry policy (each with its backoff),
    snoozes in one; only a guard that matched nothing costs one more (to learn how it ended)."""
    held = claim_held(engine, 9)
    done, short, long, snoozed = held[:3], held[3:5], held[5:6], held[6:8]
    cancelled = held[8]
    for h in snoozed:
        h.snooze = timedelta(minutes=5)
    with engine.begin() as conn:
        pgqueue.cancel(conn, [cancelled.job.id])
    failures = [Failure(h, "ValueError: short", True, SHORT) for h in short]
    failures.append(Failure(long[0], "ValueError: long", True, LONG))
    flush = Flush([*done, cancelled], failures, snoozed, lock_timeout_ms=5000)
    with statements_sent(engine, "jobs") as sent, autocommit(engine) as conn:
        outcomes = by_id(flush(conn))
    assert kinds(sent) == ["complete", "fail", "fail", "snooze", "settled"]
    assert [p["batch_ids"] for s, p in sent if kind(s, p) == "fail"] == [
        [h.job.id for h in short],
        [long[0].job.id],
    ]
    assert outcomes == {
        **{h.job.id: (Outcome.DONE, "") for h in done},
        **{h.job.id: (Outcome.RETRY, "retry in 0:00:02: ValueError: short") for h in short},
        long[0].job.id: (Outcome.RETRY, "retry in 2:00:00: ValueError: long"),
        **{h.job.id: (Outcome.SNOOZED, "0:05:00") for h in snoozed},
        cancelled.job.id: (Outcome.CANCELLED, ""),
    }


def test_a_flush_retried_after_a_lock_timeout_skips_the_statements_that_committed(
    engine: Engine,
) -> None:
    """The resumable retry: the completions and the first policy's failures commit, the second
    policy's statement times out on a locked row; run again, the flush sends only what did not
    commit, and reports the committed jobs as its own (done, retried), never as "done by their
    handler" or lost, which a second completion or failure of the same rows would say."""
    done_1, done_2, short, long, snoozed = claim_held(engine, 5)
    snoozed.snooze = timedelta(minutes=5)
    flush = Flush(
        [done_1, done_2],
        [Failure(short, "ValueError: a", True, SHORT), Failure(long, "ValueError: b", True, LONG)],
        [snoozed],
        lock_timeout_ms=200,
    )
    with row_locked(engine, long.job.id), autocommit(engine) as conn:
        with pytest.raises(OperationalError, match="lock timeout") as raised:
            flush(conn)
        assert is_transient(raised.value)  # what the completer retries
    ids = [h.job.id for h in (done_1, done_2, short, long, snoozed)]
    assert [statuses(engine)[i] for i in ids] == ["done", "done", "queued", "running", "running"]

    with statements_sent(engine, "jobs") as sent, autocommit(engine) as conn:
        outcomes = by_id(flush(conn))
    assert kinds(sent) == ["fail", "snooze"]  # what had not committed, nothing else
    assert sent[0][1]["batch_ids"] == [long.job.id]
    assert outcomes == {
        done_1.job.id: (Outcome.DONE, ""),
        done_2.job.id: (Outcome.DONE, ""),
        short.job.id: (Outcome.RETRY, "retry in 0:00:02: ValueError: a"),
        long.job.id: (Outcome.RETRY, "retry in 2:00:00: ValueError: b"),
        snoozed.job.id: (Outcome.SNOOZED, "0:05:00"),
    }
    assert [statuses(engine)[i] for i in ids] == ["done", "done", "queued", "queued", "queued"]


class Reports:
    def __init__(self) -> None:
        self.batches: list[dict[int, tuple[Outcome, str]]] = []

    def __call__(self, outcomes: list[tuple[Held, Outcome, str]]) -> None:
        self.batches.append(by_id(outcomes))


def test_the_completer_retries_a_blocked_flush_until_it_goes_through(engine: Engine) -> None:
    """Through the completer's own write: a flush whose failure statement keeps timing out on a
    locked row is retried (backing off) until the lock goes, and its batch is reported once, with
    the completion that committed at the first try reported done."""
    done, failed = claim_held(engine, 2)
    reports = Reports()
    completer = Completer(engine, reports, lock_timeout_ms=50, flush_delay=0.01)
    completer.start()
    try:
        with row_locked(engine, failed.job.id):
            completer.complete(done)
            completer.fail(failed, "ValueError: x", retry=True, policy=SHORT)
            until(lambda: statuses(engine)[done.job.id] == "done", "the completion committed")
            time.sleep(0.5)  # a few retries against the lock
            assert reports.batches == []
        until(lambda: len(reports.batches) == 1, "the batch reported")
    finally:
        completer.close(time.monotonic() + 5.0)
    assert reports.batches == [
        {
            done.job.id: (Outcome.DONE, ""),
            failed.job.id: (Outcome.RETRY, "retry in 0:00:02: ValueError: x"),
        }
    ]


def test_close_gives_up_on_a_blocked_flush_at_its_deadline(engine: Engine) -> None:
    """Shutdown's deadline bounds the retries: a completion that cannot be written by then is
    reported lost (its row still says running: another worker runs it again after its lease)."""
    (held,) = claim_held(engine, 1)
    reports = Reports()
    completer = Completer(engine, reports, lock_timeout_ms=50, flush_delay=0.01)
    completer.start()
    with row_locked(engine, held.job.id):
        completer.complete(held)
        time.sleep(0.3)
        deadline = time.monotonic() + 0.5
        completer.close(deadline)
        closed = time.monotonic()
        assert reports.batches == [{held.job.id: (Outcome.LOST, "completion not written")}]
    assert closed >= deadline
    assert statuses(engine)[held.job.id] == "running"
