"""pgqueue.testing: assert_enqueued and drain, on a real server."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

import pgqueue
from pgqueue import InvalidArgumentError, JobContext
from pgqueue.testing import assert_enqueued, drain


def test_assert_enqueued_sees_the_callers_uncommitted_jobs(engine: Engine) -> None:
    with engine.connect() as conn:
        first = pgqueue.enqueue(conn, {"user_id": 7, "email": "ada@example.com"}, queue="mail")
        second = pgqueue.enqueue(conn, {"user_id": 8}, queue="mail")
        assert assert_enqueued(conn, "mail") == [first, second]
        assert assert_enqueued(conn, "mail", {"user_id": 7}) == [first]
        assert assert_enqueued(conn, "mail", {"user_id": 8}, count=1) == [second]
        assert assert_enqueued(conn, "other", count=0) == []
        conn.rollback()
        with pytest.raises(AssertionError):
            assert_enqueued(conn, "mail")


def test_assert_enqueued_explains_what_was_enqueued(engine: Engine) -> None:
    with Session(engine) as session:
        pgqueue.enqueue(session, {"user_id": 7}, queue="mail")
        pgqueue.enqueue(session, "x", queue="sms")
        with pytest.raises(AssertionError) as info:
            assert_enqueued(session, "mail", {"user_id": "7'; DROP TABLE jobs; --"})
        message = str(info.value)
        assert "expected at least one job on queue 'mail' with payload containing" in message
        assert "{'user_id': 7}" in message
        assert "other queues: 'sms': 1" in message
        with pytest.raises(AssertionError, match="expected 2 job"):
            assert_enqueued(session, "mail", count=2)


def test_assert_enqueued_filters_by_priority_and_unique_key(engine: Engine) -> None:
    with engine.connect() as conn:
        low = pgqueue.enqueue(conn, {"user_id": 7}, queue="sync")
        high = pgqueue.enqueue(conn, {"user_id": 7}, queue="sync", priority=8, unique_key="u:7")
        other = pgqueue.enqueue(conn, {"user_id": 8}, queue="sync", priority=8, unique_key="u:8")
        assert assert_enqueued(conn, "sync", priority=8) == [high, other]
        assert assert_enqueued(conn, "sync", priority=0, count=1) == [low]
        assert assert_enqueued(conn, "sync", {"user_id": 7}, priority=8) == [high]
        assert assert_enqueued(conn, "sync", unique_key="u:8") == [other]
        assert assert_enqueued(conn, "sync", {"user_id": 7}, unique_key="u:7", priority=8) == [high]
        assert assert_enqueued(conn, "sync", unique_key="u:9", count=0) == []
        assert assert_enqueued(conn, "sync", priority=9, count=0) == []
        # A finished holder of the key still counts: it was enqueued.
        (job,) = pgqueue.claim(conn, queue="sync", limit=1)
        assert job.id == high
        assert pgqueue.complete(conn, job.id, job.attempts)
        again = pgqueue.enqueue(conn, {}, queue="sync", unique_key="u:7")
        assert assert_enqueued(conn, "sync", unique_key="u:7", count=2) == [high, again]
        conn.rollback()


def test_assert_enqueued_failure_lists_priority_and_key(engine: Engine) -> None:
    with engine.connect() as conn:
        plain = pgqueue.enqueue(conn, {"user_id": 7}, queue="sync")
        keyed = pgqueue.enqueue(conn, {"user_id": 7}, queue="sync", priority=8, unique_key="u:7")
        with pytest.raises(AssertionError) as info:
            assert_enqueued(conn, "sync", {"user_id": 7}, priority=9)
        message = str(info.value)
        assert message.startswith(
            "expected at least one job on queue 'sync' with payload containing {'user_id': 7} "
            "and priority 9, found 0.\n"
        )
        assert f"  #{plain} queued priority 0 {{'user_id': 7}}" in message.splitlines()
        assert f"  #{keyed} queued priority 8 key 'u:7' {{'user_id': 7}}" in message.splitlines()
        with pytest.raises(AssertionError, match=r"with unique key 'u:8', found 0"):
            assert_enqueued(conn, "sync", unique_key="u:8")
        with pytest.raises(AssertionError, match=r"expected 2 job\(s\) .* with priority 8 and "):
            assert_enqueued(conn, "sync", priority=8, unique_key="u:7", count=2)
        conn.rollback()


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"priority": 10}, "priority"),
        ({"priority": -1}, "priority"),
        ({"priority": True}, "priority"),
        ({"priority": "5"}, "priority"),
        ({"unique_key": ""}, "unique_key"),
        ({"unique_key": 7}, "unique_key"),
        ({"unique_key": "k" * 1001}, "unique_key"),
    ],
)
def test_assert_enqueued_checks_priority_and_key_as_enqueue_does(
    engine: Engine, kwargs: dict[str, object], argument: str
) -> None:
    with engine.connect() as conn:
        with pytest.raises((InvalidArgumentError, pgqueue.InvalidArgumentTypeError)) as info:
            assert_enqueued(conn, "sync", **kwargs)  # type: ignore[arg-type]
        assert str(info.value).startswith(f"{argument}: ")
        with pytest.raises(type(info.value)) as from_enqueue:
            pgqueue.enqueue(conn, {}, queue="sync", **kwargs)  # type: ignore[arg-type]
        assert str(from_enqueue.value) == str(info.value)


def test_drain_with_an_engine_runs_ready_jobs_in_lease_mode(engine: Engine) -> None:
    seen: list[tuple[str, object]] = []

    def send(job: JobContext) -> None:
        seen.append((job.queue, job.payload))
        if job.payload == "boom":
            raise RuntimeError("SMTP 451")
        with engine.begin() as conn:
            pgqueue.enqueue(conn, {"after": job.id}, queue="audit")

    def audit(job: JobContext) -> None:
        seen.append((job.queue, job.payload))

    with engine.begin() as conn:
        ok, bad = pgqueue.enqueue_many(conn, ["hi", "boom"], queue="mail")
        pgqueue.enqueue(conn, "later", queue="mail", delay=timedelta(hours=1))
        pgqueue.enqueue(conn, "not drained", queue="sms")
    result = drain(engine, {"mail": send, "audit": audit})
    assert [(j.id, j.queue, j.status) for j in result.succeeded] == [
        (ok, "mail", "done"),
        (result.ran[1].id, "audit", "done"),
    ]
    assert [(j.id, j.status, str(j.error)) for j in result.failed] == [(bad, "queued", "SMTP 451")]
    assert ("sms", "not drained") not in seen
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT queue, status, last_error FROM jobs ORDER BY id")).all()
    assert [tuple(r) for r in rows] == [
        ("mail", "done", None),
        ("mail", "queued", "RuntimeError: SMTP 451"),
        ("mail", "queued", None),
        ("sms", "queued", None),
        ("audit", "done", None),
    ]


def test_drain_in_the_callers_transaction_rolls_back_a_failed_handler(engine: Engine) -> None:
    def handler(job: JobContext) -> None:
        assert job.connection is not None
        job.connection.execute(text("CREATE TABLE IF NOT EXISTS t (v text)"))
        job.connection.execute(text("INSERT INTO t VALUES (:v)"), {"v": job.payload})
        if job.payload == "bad":
            raise ValueError("no")

    with engine.connect() as conn:
        pgqueue.enqueue_many(conn, ["good", "bad"], queue="q")
        result = drain(conn, {"q": handler})
        assert [j.status for j in result.ran] == ["done", "queued"]
        assert conn.execute(text("SELECT v FROM t")).scalars().all() == ["good"]
        conn.rollback()
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM jobs")).scalar_one() == 0


def test_drain_checks_its_arguments_and_stops_at_max_jobs(engine: Engine) -> None:
    with pytest.raises(InvalidArgumentError, match="no handler for 'sms'"):
        drain(engine, {"mail": print}, queues=["sms"])
    with engine.begin() as conn:
        pgqueue.enqueue_many(conn, [1, 2, 3], queue="mail")
    assert len(drain(engine, {"mail": lambda job: None}, max_jobs=2).ran) == 2
    assert len(drain(engine, {"mail": lambda job: None}).ran) == 1


def test_drain_expires_a_job_past_its_deadline_as_a_worker_would(engine: Engine) -> None:
    """``expires_in`` is the claim's business: drain never runs an expired job, runs the fresh
    one beside it, and the expired one ends failed with its ``expired_at`` set."""
    with engine.begin() as conn:
        stale = pgqueue.enqueue(conn, {"n": 1}, queue="late", expires_in=1)
        conn.execute(
            text("UPDATE jobs SET run_at = now() - interval '1 minute' WHERE id = :id"),
            {"id": stale},
        )
        fresh = pgqueue.enqueue(conn, {"n": 2}, queue="late", expires_in=60)
    ran: list[int] = []
    result = drain(engine, {"late": lambda job: ran.append(job.id)})
    assert ran == [fresh]
    assert [job.id for job in result.succeeded] == [fresh]
    with engine.connect() as conn:
        status, expired = conn.execute(
            text("SELECT status, expired_at IS NOT NULL FROM jobs WHERE id = :id"), {"id": stale}
        ).one()
    assert (status, expired) == ("failed", True)
