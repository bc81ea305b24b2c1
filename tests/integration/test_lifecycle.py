"""Enqueue, claim, complete, fail, reap, extend, purge on a real server (R3, R7, R10-R14, R20)."""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

import pgqueue
from pgqueue import InvalidArgumentError, InvalidPayloadError
from pgqueue._worker import store


def _row(engine: Engine, job_id: int) -> dict[str, object]:
    with engine.connect() as conn:
        row = conn.execute(
            text(
                "SELECT status, attempts, max_attempts, last_error, locked_until, "
                "run_at > now() AS scheduled FROM jobs WHERE id = :id"
            ),
            {"id": job_id},
        ).one()
    return dict(row._mapping)


def _count(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text("SELECT count(*) FROM jobs")).scalar_one())


def _make_ready(engine: Engine, job_id: int) -> None:
    with engine.begin() as conn:
        conn.execute(text("UPDATE jobs SET run_at = now() WHERE id = :id"), {"id": job_id})


def _expire_lease(engine: Engine, job_id: int) -> None:
    with engine.begin() as conn:
        conn.execute(
            text("UPDATE jobs SET locked_until = now() - interval '1 second' WHERE id = :id"),
            {"id": job_id},
        )


@pytest.mark.parametrize(
    "payload",
    [
        {"email_id": 1, "to": "a@example.com"},
        [1, 2.5, None],
        "plain",
        7,
        1.25,
        False,
        None,
        {"unicode": "héllo ✓", "nested": {"list": [{"a": []}]}},
        "\\u0000 as text",
    ],
)
def test_any_json_payload_round_trips(engine: Engine, payload: object) -> None:
    with engine.begin() as conn:
        job_id = pgqueue.enqueue(conn, payload, queue="rt")
    with engine.begin() as conn:
        (job,) = pgqueue.claim(conn, queue="rt")
    assert job.id == job_id
    assert job.payload == payload
    assert type(job.payload) is type(payload)


def test_enqueue_defaults_match_r1(engine: Engine) -> None:
    with engine.begin() as conn:
        job_id = pgqueue.enqueue(conn, {"x": 1})
    row = _row(engine, job_id)
    assert row["status"] == "queued"
    assert row["attempts"] == 0
    assert row["max_attempts"] == 5
    assert row["scheduled"] is False


def test_enqueue_joins_the_callers_transaction(engine: Engine) -> None:
    with engine.connect() as conn:
        conn.execute(text("CREATE TABLE users (id int PRIMARY KEY)"))
        conn.commit()
        conn.execute(text("INSERT INTO users VALUES (1)"))
        pgqueue.enqueue(conn, {"welcome": 1}, queue="emails")
        conn.rollback()
    assert _count(engine) == 0
    with Session(engine) as session:
        session.execute(text("INSERT INTO users VALUES (2)"))
        pgqueue.enqueue(session, {"welcome": 2}, queue="emails")
        session.commit()
    assert _count(engine) == 1


def test_enqueue_many_returns_ids_in_input_order(engine: Engine) -> None:
    payloads = [{"n": i} for i in range(500)]
    with engine.begin() as conn:
        ids = pgqueue.enqueue_many(conn, payloads, queue="bulk", max_attempts=3)
        assert pgqueue.enqueue_many(conn, [], queue="bulk") == []
    with engine.connect() as conn:
        stored = dict(
            conn.execute(
                text("SELECT id, (payload->>'n')::int FROM jobs WHERE queue = 'bulk'")
            ).all()
        )
        budgets = conn.execute(text("SELECT DISTINCT max_attempts FROM jobs")).scalars().all()
    assert [stored[i] for i in ids] == list(range(500))
    assert budgets == [3]


def test_one_bad_payload_writes_nothing(engine: Engine) -> None:
    with engine.begin() as conn, pytest.raises(InvalidPayloadError, match=r"payloads\[1\]"):
        pgqueue.enqueue_many(conn, [{"ok": 1}, {"bad": math.nan}], queue="q")
    with engine.begin() as conn, pytest.raises(InvalidPayloadError):
        pgqueue.enqueue(conn, "nul\x00")
    with engine.begin() as conn, pytest.raises(InvalidArgumentError, match="comma"):
        pgqueue.enqueue_many(conn, [{"ok": 1}], queue="a,b")
    with engine.begin() as conn, pytest.raises(InvalidArgumentError, match="max_attempts"):
        pgqueue.enqueue(conn, {}, max_attempts=0)
    with engine.begin() as conn, pytest.raises(InvalidArgumentError, match="not both"):
        pgqueue.enqueue(conn, {}, run_at=datetime.now(timezone.utc), delay=timedelta(seconds=1))
    with engine.begin() as conn, pytest.raises(InvalidArgumentError, match="limit"):
        pgqueue.claim(conn, limit=0)
    with engine.begin() as conn, pytest.raises(InvalidArgumentError, match="lease"):
        pgqueue.claim(conn, lease=timedelta(seconds=-5))
    assert _count(engine) == 0


def test_only_ready_jobs_are_claimed_oldest_first(engine: Engine) -> None:
    now = datetime.now(timezone.utc)
    with engine.begin() as conn:
        later = pgqueue.enqueue(conn, {"n": "later"}, delay=timedelta(hours=1))
        at_past = pgqueue.enqueue(conn, {"n": "past"}, run_at=now - timedelta(minutes=5))
        plain = pgqueue.enqueue(conn, {"n": "now"})
        other = pgqueue.enqueue(conn, {"n": "other"}, queue="other")
    with engine.begin() as conn:
        jobs = pgqueue.claim(conn, limit=10, lease=timedelta(seconds=30))
    assert [j.id for j in jobs] == [at_past, plain]
    assert all(j.attempts == 1 and j.queue == "default" for j in jobs)
    row = _row(engine, plain)
    assert row["status"] == "running"
    assert row["locked_until"] is not None
    assert _row(engine, later)["status"] == "queued"
    assert _row(engine, other)["status"] == "queued"
    with engine.begin() as conn:
        assert pgqueue.claim(conn) == []


def test_claim_respects_limit(engine: Engine) -> None:
    with engine.begin() as conn:
        pgqueue.enqueue_many(conn, list(range(25)))
    with engine.begin() as conn:
        assert len(pgqueue.claim(conn, limit=10)) == 10
        assert len(pgqueue.claim(conn, limit=10)) == 10
        assert len(pgqueue.claim(conn, limit=10)) == 5


def test_complete_is_guarded(engine: Engine) -> None:
    with engine.begin() as conn:
        job_id = pgqueue.enqueue(conn, {})
    with engine.begin() as conn:
        (job,) = pgqueue.claim(conn)
    with engine.begin() as conn:
        assert pgqueue.complete(conn, job.id, job.attempts + 1) is False
        assert pgqueue.complete(conn, job.id, job.attempts) is True
        assert pgqueue.complete(conn, job.id, job.attempts) is False
    row = _row(engine, job_id)
    assert (row["status"], row["locked_until"]) == ("done", None)


def test_backoff_series_and_failed_after_max_attempts(engine: Engine) -> None:
    """R11: 20 s, 40 s, 80 s, 160 s, then failed for good with the default 5 attempts."""
    with engine.begin() as conn:
        job_id = pgqueue.enqueue(conn, {"smtp": True})
    seen = []
    for _ in range(5):
        _make_ready(engine, job_id)
        with engine.begin() as conn:
            (job,) = pgqueue.claim(conn)
        with engine.begin() as conn:
            result = pgqueue.fail(conn, job.id, job.attempts, "SMTP 451: try again later")
        assert result is not None
        seen.append((result.status, result.attempts, result.retry_in))
    assert seen == [
        ("queued", 1, timedelta(seconds=20)),
        ("queued", 2, timedelta(seconds=40)),
        ("queued", 3, timedelta(seconds=80)),
        ("queued", 4, timedelta(seconds=160)),
        ("failed", 5, None),
    ]
    row = _row(engine, job_id)
    assert row["status"] == "failed"
    assert row["last_error"] == "SMTP 451: try again later"
    assert row["locked_until"] is None


def test_backoff_is_capped_at_one_hour(engine: Engine) -> None:
    with engine.begin() as conn:
        job_id = pgqueue.enqueue(conn, {}, max_attempts=100)
        conn.execute(text("UPDATE jobs SET attempts = 60 WHERE id = :id"), {"id": job_id})
    with engine.begin() as conn:
        (job,) = pgqueue.claim(conn)
        result = pgqueue.fail(conn, job.id, job.attempts, "again")
    assert result is not None
    assert (result.status, result.retry_in) == ("queued", timedelta(hours=1))
    with engine.begin() as conn:
        conn.execute(
            text("UPDATE jobs SET attempts = 2000000, run_at = now() WHERE id = :id"),
            {"id": job_id},
        )
    with engine.begin() as conn:
        (job,) = pgqueue.claim(conn)
        far = pgqueue.fail(conn, job.id, job.attempts, "huge attempt count does not overflow")
    assert far is not None
    assert far.status == "failed"


def test_custom_retry_base_and_cap(engine: Engine) -> None:
    with engine.begin() as conn:
        pgqueue.enqueue(conn, {})
    with engine.begin() as conn:
        (job,) = pgqueue.claim(conn)
        result = pgqueue.fail(
            conn, job.id, job.attempts, "x", base=timedelta(seconds=1), cap=timedelta(seconds=1.5)
        )
    assert result is not None
    assert result.retry_in == timedelta(seconds=1.5)


def test_non_retryable_failure_fails_at_once(engine: Engine) -> None:
    with engine.begin() as conn:
        job_id = pgqueue.enqueue(conn, {})
    with engine.begin() as conn:
        (job,) = pgqueue.claim(conn)
        result = pgqueue.fail(conn, job.id, job.attempts, "ValueError: bad input", retry=False)
    assert result is not None
    assert (result.status, result.attempts, result.retry_in) == ("failed", 1, None)
    assert _row(engine, job_id)["status"] == "failed"


def test_fail_is_guarded(engine: Engine) -> None:
    with engine.begin() as conn:
        pgqueue.enqueue(conn, {})
    with engine.begin() as conn:
        (job,) = pgqueue.claim(conn)
        assert pgqueue.fail(conn, job.id, job.attempts + 1, "not mine") is None
        assert pgqueue.complete(conn, job.id, job.attempts)
        assert pgqueue.fail(conn, job.id, job.attempts, "too late") is None


def test_reaper_requeues_expired_and_fails_spent_jobs(engine: Engine) -> None:
    """R12: requeue, or fail once attempts are spent; keep an earlier last_error."""
    with engine.begin() as conn:
        fresh = pgqueue.enqueue(conn, {"n": 1}, queue="r")
        spent = pgqueue.enqueue(conn, {"n": 2}, queue="r", max_attempts=1)
        erred = pgqueue.enqueue(conn, {"n": 3}, queue="r")
        alive = pgqueue.enqueue(conn, {"n": 4}, queue="r")
    with engine.begin() as conn:
        jobs = {j.id: j for j in pgqueue.claim(conn, queue="r")}
    with engine.begin() as conn:
        pgqueue.fail(conn, erred, jobs[erred].attempts, "SMTP 451")
    _make_ready(engine, erred)
    with engine.begin() as conn:
        (again,) = pgqueue.claim(conn, queue="r")
    assert again.id == erred
    for job_id in (fresh, spent, erred):
        _expire_lease(engine, job_id)
    with engine.begin() as conn:
        reaped = {r.id: r for r in pgqueue.reap_expired(conn)}
    assert set(reaped) == {fresh, spent, erred}
    assert (reaped[fresh].status, reaped[fresh].attempts) == ("queued", 1)
    assert (reaped[spent].status, reaped[spent].attempts) == ("failed", 1)
    assert (reaped[erred].status, reaped[erred].attempts) == ("queued", 2)
    assert _row(engine, fresh)["last_error"] == "lease expired"
    assert _row(engine, spent)["last_error"] == "lease expired"
    assert _row(engine, erred)["last_error"] == "SMTP 451"
    assert _row(engine, alive)["status"] == "running"
    with engine.begin() as conn:
        assert pgqueue.reap_expired(conn) == []


def test_slow_worker_cannot_complete_a_reclaimed_job(engine: Engine) -> None:
    """R13: the slow worker's complete with attempts = 1 is UPDATE 0; the new owner keeps it."""
    with engine.begin() as conn:
        job_id = pgqueue.enqueue(conn, {})
    with engine.begin() as conn:
        (slow,) = pgqueue.claim(conn, lease=timedelta(seconds=1))
    _expire_lease(engine, job_id)
    with engine.begin() as conn:
        pgqueue.reap_expired(conn)
    with engine.begin() as conn:
        (fast,) = pgqueue.claim(conn)
    assert (slow.attempts, fast.attempts) == (1, 2)
    with engine.begin() as conn:
        assert pgqueue.complete(conn, job_id, slow.attempts) is False
        assert pgqueue.extend_lease(conn, job_id, slow.attempts) is False
    row = _row(engine, job_id)
    assert (row["status"], row["attempts"]) == ("running", 2)
    with engine.begin() as conn:
        assert pgqueue.complete(conn, job_id, fast.attempts) is True


def test_extend_lease_pushes_the_lease_until_the_job_is_lost(engine: Engine) -> None:
    with engine.begin() as conn:
        job_id = pgqueue.enqueue(conn, {})
    with engine.begin() as conn:
        (job,) = pgqueue.claim(conn, lease=timedelta(seconds=10))
    with engine.begin() as conn:
        assert pgqueue.extend_lease(conn, job.id, job.attempts, timedelta(hours=2)) is True
        remaining = conn.execute(
            text("SELECT locked_until - now() FROM jobs WHERE id = :id"), {"id": job_id}
        ).scalar_one()
    assert remaining == timedelta(hours=2)
    _expire_lease(engine, job_id)
    with engine.begin() as conn:
        pgqueue.reap_expired(conn)
        assert pgqueue.extend_lease(conn, job.id, job.attempts) is False


def test_purge_deletes_old_done_jobs_in_batches(engine: Engine) -> None:
    with engine.begin() as conn:
        ids = pgqueue.enqueue_many(conn, list(range(25)))
        conn.execute(
            text(
                "UPDATE jobs SET status = 'done', created_at = now() - interval '8 days' "
                "WHERE id <= :last"
            ),
            {"last": ids[22]},
        )
        conn.execute(text("UPDATE jobs SET status = 'done' WHERE id = :id"), {"id": ids[23]})
    deleted = []
    while True:
        with engine.begin() as conn:
            n = pgqueue.purge_done(conn, batch_size=10)
        deleted.append(n)
        if n < 10:
            break
    assert deleted == [10, 10, 3]
    with engine.connect() as conn:
        left = conn.execute(
            text("SELECT status, count(*) FROM jobs GROUP BY status ORDER BY 1")
        ).all()
    assert [tuple(r) for r in left] == [("done", 1), ("queued", 1)]


def test_schedule_with_run_at_and_delay(engine: Engine) -> None:
    when = datetime.now(timezone.utc) + timedelta(minutes=10)
    with engine.begin() as conn:
        at = pgqueue.enqueue(conn, {}, run_at=when)
        delayed = pgqueue.enqueue(conn, {}, delay=timedelta(minutes=3))
        stored, delay = conn.execute(
            text(
                "SELECT (SELECT run_at FROM jobs WHERE id = :a), "
                "(SELECT run_at - created_at FROM jobs WHERE id = :d)"
            ),
            {"a": at, "d": delayed},
        ).one()
    assert stored == when
    assert delay == timedelta(minutes=3)


@pytest.mark.parametrize("call", ["complete_many", "fail_many"])
def test_batched_statements_set_their_own_lock_timeout_in_autocommit(
    engine: Engine, call: str
) -> None:
    """The completer's statements run in autocommit and bring their lock timeout with them: a row
    locked elsewhere makes them give up after ``lock_timeout_ms`` (a transient error the completer
    retries), and the setting does not outlive the statement."""
    import time

    from sqlalchemy.exc import OperationalError

    with engine.begin() as conn:
        pgqueue.enqueue(conn, {}, queue="locked")
        (job,) = pgqueue.claim(conn, queue="locked")
    held = [(job.id, job.attempts)]
    with engine.connect() as blocker, engine.connect() as conn:
        blocker.execute(text("SELECT 1 FROM jobs WHERE id = :i FOR UPDATE"), {"i": job.id})
        conn.execution_options(isolation_level="AUTOCOMMIT")
        started = time.monotonic()
        failure = [(job.id, job.attempts, "e", True)]

        def write() -> object:
            if call == "complete_many":
                return store.complete_many(conn, held, lock_timeout_ms=200)
            return store.fail_many(conn, failure, lock_timeout_ms=200)

        with pytest.raises(OperationalError, match="lock timeout"):
            write()
        waited = time.monotonic() - started
        assert conn.execute(text("SHOW lock_timeout")).scalar_one() == "0"
        blocker.rollback()
        assert waited < 5.0, waited  # it gave up instead of waiting for the blocker
        # Once the lock is gone the same call goes through, still in autocommit.
        written = write()
        assert written == {job.id} if call == "complete_many" else job.id in written  # type: ignore[operator]
    assert _row(engine, job.id)["status"] == ("done" if call == "complete_many" else "queued")


def _due_and_status(engine: Engine, job_id: int) -> tuple[str, datetime, datetime | None]:
    with engine.connect() as conn:
        row = conn.execute(
            text("SELECT status, run_at, finished_at FROM jobs WHERE id = :id"), {"id": job_id}
        ).one()
    return row.status, row.run_at, row.finished_at


@pytest.mark.parametrize("how", ["fail", "fail_many", "not_retryable"])
def test_a_final_failure_keeps_run_at_when_its_last_attempt_was_due(
    engine: Engine, how: str
) -> None:
    """No retry is coming, so no backoff moves ``run_at`` into the future (issue #20, item 5)."""
    due = datetime.now(timezone.utc) - timedelta(minutes=5)
    with engine.begin() as conn:
        pgqueue.enqueue(conn, {}, run_at=due, max_attempts=5 if how == "not_retryable" else 1)
        (job,) = pgqueue.claim(conn)
    with engine.begin() as conn:
        if how == "fail":
            result = pgqueue.fail(conn, job.id, job.attempts, "boom")
            assert result is not None
            assert result.retry_in is None
        elif how == "fail_many":
            failure = [(job.id, job.attempts, "boom", True)]
            assert store.fail_many(conn, failure)[job.id].status == "failed"
        else:
            pgqueue.fail(conn, job.id, job.attempts, "bad input", retry=False)
    status, run_at, finished_at = _due_and_status(engine, job.id)
    assert status == "failed"
    assert run_at == due
    assert finished_at is not None
    assert run_at < finished_at


def test_a_lease_expiring_on_the_last_attempt_keeps_run_at(engine: Engine) -> None:
    due = datetime.now(timezone.utc) - timedelta(minutes=5)
    with engine.begin() as conn:
        job_id = pgqueue.enqueue(conn, {}, run_at=due, max_attempts=1)
        pgqueue.claim(conn)
    _expire_lease(engine, job_id)
    with engine.begin() as conn:
        assert [r.status for r in pgqueue.reap_expired(conn)] == ["failed"]
    assert _due_and_status(engine, job_id)[:2] == ("failed", due)


def test_a_handler_failing_its_last_attempt_leaves_run_at_in_the_past(engine: Engine) -> None:
    """Through a real worker (its batched failer): the row says when the attempt was due."""
    due = datetime.now(timezone.utc) - timedelta(minutes=5)
    with engine.begin() as conn:
        job_id = pgqueue.enqueue(conn, {}, run_at=due, max_attempts=1)

    def handler(job: pgqueue.JobContext) -> None:
        raise RuntimeError("always")

    worker = pgqueue.Worker(
        engine, {"default": handler}, listen=False, install_signal_handlers=False
    )
    worker.run(until_empty=True)
    assert worker.stats.failed == 1
    assert _due_and_status(engine, job_id)[:2] == ("failed", due)
