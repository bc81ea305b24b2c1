"""``pgqueue enqueue --timeout/--expires-in``, and what ``list``, ``show``, ``stats`` and
``retry`` say of expired and timed-out jobs (#31, items 1, 2, 4, 5)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy import Engine, text

import pgqueue
from tests.cli.conftest import Result


def _expired_job(db: Engine, queue: str = "codes") -> int:
    """A job due 5 s ago with a 1 s deadline, failed as expired by a claim."""
    with db.begin() as conn:
        job_id = pgqueue.enqueue(
            conn,
            {},
            queue=queue,
            run_at=datetime.now(timezone.utc) - timedelta(seconds=5),
            expires_in=1,
        )
        assert pgqueue.claim(conn, queue=queue) == []  # failed, not leased
    return job_id


def test_enqueue_stores_the_timeout_and_the_deadline(
    cli: Callable[..., Result], db: Engine
) -> None:
    result = cli("enqueue", "q", "{}", "--timeout", "30s", "--expires-in", "10m")
    assert result.code == 0, result.err
    with db.connect() as conn:
        row = conn.execute(text("SELECT timeout, expires_in FROM jobs")).one()
    assert (row.timeout, row.expires_in) == (timedelta(seconds=30), timedelta(minutes=10))
    shown = cli("show", result.out.strip())
    assert "timeout:       0:00:30" in shown.out
    assert "expires_in:    0:10:00" in shown.out
    assert "deadline:" in shown.out


@pytest.mark.parametrize(("flag", "value"), [("--timeout", "0"), ("--expires-in", "0s")])
def test_enqueue_refuses_a_zero_bound_in_one_line(
    cli: Callable[..., Result], db: Engine, flag: str, value: str
) -> None:
    result = cli("enqueue", "q", "{}", flag, value)
    assert result.code == 2
    assert result.err.startswith(f"pgqueue: error: {flag} must not be zero or negative"), result.err
    with db.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM jobs")).scalar_one() == 0


def test_expired_jobs_are_listed_shown_and_counted_apart(
    cli: Callable[..., Result], db: Engine
) -> None:
    job_id = _expired_job(db)
    listed = cli("list", "--status", "expired", "--json")
    assert [j["id"] for j in listed.json()] == [job_id]
    assert cli("list", "--status", "failed", "--json").json() == []
    shown = cli("show", str(job_id))
    assert "status:        expired" in shown.out
    assert "last_error:    expired: not started within 1 s of its run_at" in shown.out
    stats = cli("stats", "--json").json()
    (codes,) = stats["queues"]
    assert (codes["expired"], codes["failed"], codes["cancelled"]) == (1, 0, 0)
    table = cli("stats").out
    assert "expired" in table.splitlines()[0]


def test_retry_failed_leaves_expired_jobs_unless_included(
    cli: Callable[..., Result], db: Engine
) -> None:
    job_id = _expired_job(db)
    assert cli("retry", "--failed").out.startswith("requeued 0 job(s)")
    assert cli("retry", "--failed", "--include-expired").out.startswith("requeued 1 job(s)")
    with db.connect() as conn:
        status = conn.execute(
            text("SELECT status FROM jobs WHERE id = :id"), {"id": job_id}
        ).scalar_one()
    assert status == "queued"
