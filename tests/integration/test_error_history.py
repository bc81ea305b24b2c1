"""Each failed attempt keeps its traceback in ``jobs.errors`` (issue #20, item 12).

Every path that records a failed attempt appends ``{attempt, at, error, traceback}`` in the
statement that records it: the worker's batched fail (sync and async handlers), transaction mode,
``pgqueue.fail``, ``pgqueue.testing.drain`` and the reaper; the last ten are kept, a traceback is
trimmed to its end, a retry keeps the history, and the worker logs the traceback.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, text
from worker_helpers import running, scalar, until

import pgqueue
import pgqueue.testing
from pgqueue.admin import get_job
from pgqueue.retry_policy import MAX_TRACEBACK_LENGTH
from pgqueue.statements import MAX_ERRORS_KEPT

#: No wait between attempts: ``run(until_empty=True)`` runs every attempt of a job at once.
AT_ONCE = pgqueue.RetryPolicy(base=timedelta(0), cap=timedelta(0))


def send_welcome_email(job: pgqueue.JobContext) -> None:
    """The handler of the issue: the payload has no ``email``."""
    job.payload["email"]


async def send_welcome_email_async(job: pgqueue.JobContext) -> None:
    job.payload["email"]


def ping(n: int) -> None:
    if n == 0:
        raise KeyError("email")
    pong(n - 1)


def pong(n: int) -> None:
    ping(n)  # alternating frames: Python folds only repeats of one frame


def deep_failure(job: pgqueue.JobContext) -> None:
    """A traceback of ~100 KB: 800 frames."""
    ping(400)


def _enqueue(engine: Engine, queue: str, max_attempts: int = 3) -> int:
    with engine.begin() as conn:
        return pgqueue.enqueue(conn, {"user_id": 7}, queue=queue, max_attempts=max_attempts)


def _errors(engine: Engine, job_id: int) -> list[dict[str, Any]]:
    with engine.connect() as conn:
        found = conn.execute(text("SELECT errors FROM jobs WHERE id = :id"), {"id": job_id})
        return list(found.scalar_one() or [])


def _drain(engine: Engine, handlers: dict[str, Any], **options: Any) -> pgqueue.WorkerStats:
    worker = pgqueue.Worker(engine, handlers, listen=False, retry=AT_ONCE, **options)
    return worker.run(until_empty=True)


def test_a_failed_attempt_keeps_its_traceback(engine: Engine) -> None:
    job_id = _enqueue(engine, "emails")
    with engine.connect() as conn:
        db_before = conn.execute(text("SELECT now()")).scalar_one()
    stats = pgqueue.Worker(engine, {"emails": send_welcome_email}, listen=False).run(
        until_empty=True
    )
    assert stats.retried == 1  # the retry waits 20 s: one attempt ran
    (entry,) = _errors(engine, job_id)
    assert set(entry) == {"attempt", "at", "error", "traceback"}
    assert (entry["attempt"], entry["error"]) == (1, "KeyError: 'email'")
    assert "in send_welcome_email" in entry["traceback"]
    assert entry["traceback"].startswith("Traceback (most recent call last):")
    assert entry["traceback"].endswith("KeyError: 'email'")
    with engine.connect() as conn:
        db_after = conn.execute(text("SELECT now()")).scalar_one()
        assert conn.execute(
            text("SELECT last_error FROM jobs WHERE id = :id"), {"id": job_id}
        ).scalar_one() == ("KeyError: 'email'")
    at = datetime.fromisoformat(entry["at"])  # ISO text with its offset, from the database clock
    assert at.tzinfo is not None
    assert db_before <= at <= db_after


def test_three_failed_attempts_keep_three_entries_in_order(engine: Engine) -> None:
    job_id = _enqueue(engine, "emails", max_attempts=3)
    stats = _drain(engine, {"emails": send_welcome_email})
    assert (stats.retried, stats.failed) == (2, 1)
    entries = _errors(engine, job_id)
    assert [e["attempt"] for e in entries] == [1, 2, 3]
    assert all(e["error"] == "KeyError: 'email'" for e in entries)
    assert all("in send_welcome_email" in e["traceback"] for e in entries)
    times = [datetime.fromisoformat(e["at"]) for e in entries]
    assert times == sorted(times)


def test_only_the_last_ten_attempts_are_kept(engine: Engine) -> None:
    job_id = _enqueue(engine, "emails", max_attempts=12)
    stats = _drain(engine, {"emails": send_welcome_email})
    assert (stats.retried, stats.failed) == (11, 1)
    assert MAX_ERRORS_KEPT == 10
    assert [e["attempt"] for e in _errors(engine, job_id)] == list(range(3, 13))


def test_a_huge_traceback_is_trimmed_to_its_end(engine: Engine) -> None:
    job_id = _enqueue(engine, "deep", max_attempts=1)
    _drain(engine, {"deep": deep_failure})
    (entry,) = _errors(engine, job_id)
    tb = entry["traceback"]
    assert len(tb) <= MAX_TRACEBACK_LENGTH
    cut = int(tb.split("\n", 1)[0].removeprefix("[... ").removesuffix(" characters cut ...]"))
    assert cut + len(tb) > 90_000  # the whole traceback was about 100 KB
    assert tb.endswith("KeyError: 'email'")
    assert "in ping" in tb.splitlines()[-3]  # the raising frame is kept


def test_an_async_handlers_failure_keeps_its_traceback(engine: Engine) -> None:
    job_id = _enqueue(engine, "emails", max_attempts=1)
    stats = _drain(engine, {"emails": send_welcome_email_async})
    assert stats.failed == 1
    (entry,) = _errors(engine, job_id)
    assert (entry["attempt"], entry["error"]) == (1, "KeyError: 'email'")
    assert "in send_welcome_email_async" in entry["traceback"]


async def wait_for_ever(started: threading.Event) -> None:
    started.set()
    await asyncio.sleep(600)


def test_an_async_task_cancelled_at_the_shutdown_deadline_says_where_it_waited(
    engine: Engine,
) -> None:
    job_id = _enqueue(engine, "slow")
    started = threading.Event()

    async def handler(job: pgqueue.JobContext) -> None:
        await wait_for_ever(started)

    worker = pgqueue.Worker(engine, {"slow": handler}, listen=False, shutdown_timeout=0.2)
    with running(worker):
        assert started.wait(20)
    (entry,) = _errors(engine, job_id)
    assert entry["error"] == "HandlerCancelled: the handler's task was cancelled"
    assert "in wait_for_ever" in entry["traceback"]
    assert "await asyncio.sleep(600)" in entry["traceback"]
    assert entry["traceback"].endswith("CancelledError")


def test_transaction_mode_appends_in_the_jobs_transaction(engine: Engine) -> None:
    job_id = _enqueue(engine, "emails", max_attempts=2)
    stats = _drain(engine, {"emails": send_welcome_email}, mode="transaction")
    assert (stats.retried, stats.failed) == (1, 1)
    entries = _errors(engine, job_id)
    assert [e["attempt"] for e in entries] == [1, 2]
    assert all("in send_welcome_email" in e["traceback"] for e in entries)


def test_testing_drain_records_failures_as_the_worker_does(engine: Engine) -> None:
    job_id = _enqueue(engine, "emails", max_attempts=1)
    result = pgqueue.testing.drain(engine, {"emails": send_welcome_email})
    assert [j.status for j in result.failed] == ["failed"]
    (entry,) = _errors(engine, job_id)
    assert (entry["attempt"], entry["error"]) == (1, "KeyError: 'email'")
    assert "in send_welcome_email" in entry["traceback"]


def test_fail_takes_an_optional_traceback(engine: Engine) -> None:
    with engine.begin() as conn:
        pgqueue.enqueue_many(conn, [{}, {}], max_attempts=1)
        first, second = pgqueue.claim(conn, limit=2)
        pgqueue.fail(conn, first.id, first.attempts, "ValueError: x", traceback="tb of x")
        pgqueue.fail(conn, second.id, second.attempts, "ValueError: y")
    assert [(e["error"], e["traceback"]) for e in _errors(engine, first.id)] == [
        ("ValueError: x", "tb of x")
    ]
    assert [(e["error"], e["traceback"]) for e in _errors(engine, second.id)] == [
        ("ValueError: y", None)
    ]


def test_an_expired_lease_adds_an_entry_without_a_traceback(engine: Engine) -> None:
    job_id = _enqueue(engine, "emails", max_attempts=3)
    with engine.begin() as conn:
        pgqueue.claim(conn, queue="emails", lease=timedelta(milliseconds=1))
    expired = "SELECT locked_until < now() FROM jobs WHERE id = :id"
    until(lambda: scalar(engine, expired, id=job_id), 10, "the lease to expire")
    with engine.begin() as conn:
        (reaped,) = pgqueue.reap_expired(conn)
    assert (reaped.id, reaped.status) == (job_id, "queued")
    (entry,) = _errors(engine, job_id)
    assert (entry["attempt"], entry["error"], entry["traceback"]) == (1, "lease expired", None)
    # Then a handler's failure comes after it, on the next attempt.
    with engine.begin() as conn:
        (job,) = pgqueue.claim(conn, queue="emails")
        pgqueue.fail(conn, job.id, job.attempts, "KeyError: 'email'", traceback="tb")
    assert [(e["attempt"], e["error"]) for e in _errors(engine, job_id)] == [
        (1, "lease expired"),
        (2, "KeyError: 'email'"),
    ]


def test_retry_keeps_the_history(engine: Engine) -> None:
    job_id = _enqueue(engine, "emails", max_attempts=1)
    _drain(engine, {"emails": send_welcome_email})
    with engine.begin() as conn:
        assert pgqueue.retry(conn, [job_id], attempts=1) == [job_id]
    assert [e["attempt"] for e in _errors(engine, job_id)] == [1]
    _drain(engine, {"emails": send_welcome_email})
    assert [e["attempt"] for e in _errors(engine, job_id)] == [1, 2]


def test_get_job_reads_the_history_with_times(engine: Engine) -> None:
    """What ``pgqueue show`` and the dashboard read: ``at`` as an aware datetime, ``[]`` for
    none."""
    failing, fine = _enqueue(engine, "emails", max_attempts=1), _enqueue(engine, "other")
    _drain(engine, {"emails": send_welcome_email})
    with engine.connect() as conn:
        job = get_job(conn, failing)
        assert job is not None
        assert get_job(conn, fine)["errors"] == []  # type: ignore[index]
    (entry,) = job["errors"]
    assert isinstance(entry["at"], datetime)
    assert entry["at"].tzinfo is not None
    assert entry["error"] == "KeyError: 'email'"


@pytest.mark.parametrize("log_tracebacks", [True, False])
def test_the_worker_logs_the_traceback_at_warning_unless_told_not_to(
    engine: Engine, caplog: pytest.LogCaptureFixture, log_tracebacks: bool
) -> None:
    _enqueue(engine, "emails", max_attempts=2)
    caplog.set_level(logging.WARNING, logger="pgqueue.worker")
    _drain(engine, {"emails": send_welcome_email}, log_tracebacks=log_tracebacks)
    failures = [r for r in caplog.records if "KeyError: 'email'" in r.getMessage()]
    assert [r.levelno for r in failures] == [logging.WARNING, logging.ERROR]  # retry, failed
    for record in failures:
        message = record.getMessage()
        assert ("Traceback (most recent call last):" in message) is log_tracebacks
        assert ("in send_welcome_email" in message) is log_tracebacks
        assert record.exc_info is None  # the text is the message: one record per attempt
    with engine.connect() as conn:  # stored either way
        assert conn.execute(text("SELECT errors->0->>'traceback' FROM jobs")).scalar_one()


def test_log_tracebacks_must_be_a_bool(engine: Engine) -> None:
    with pytest.raises(pgqueue.InvalidArgumentTypeError, match="log_tracebacks"):
        pgqueue.Worker(engine, {"emails": send_welcome_email}, log_tracebacks="no")  # type: ignore[arg-type]
