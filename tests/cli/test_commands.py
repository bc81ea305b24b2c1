"""enqueue, list, show, stats, reap, purge, retry and cancel against a real database.

State is set up in process (fast) and each command runs as a subprocess (what users run).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest
from sqlalchemy import Engine, text

import pgqueue
from pgqueue.cli import parse_duration
from tests.cli.conftest import Result

Cli = Callable[..., Result]


def _statuses(db: Engine) -> dict[int, tuple[str, int, int, str | None]]:
    with db.connect() as conn:
        rows = conn.execute(
            text("SELECT id, status, attempts, max_attempts, last_error FROM jobs")
        ).all()
    return {r.id: (r.status, r.attempts, r.max_attempts, r.last_error) for r in rows}


def test_enqueue_list_show_stats(cli: Cli) -> None:
    first = cli("enqueue", "emails", '{"to": 42}')
    assert (first.code, first.out.strip()) == (0, "1")
    later = cli("enqueue", "emails", "[1, 2]", "--delay", "5m", "--max-attempts", "2", "--json")
    assert later.json() == {"id": 2}
    bad = cli("enqueue", "emails", "{not json")
    assert bad.code == 2
    assert "JSON" in bad.err

    listed = cli("list", "--json").json()
    assert [job["id"] for job in listed] == [2, 1]
    assert listed[0]["max_attempts"] == 2
    queued = cli("list", "--queue", "emails", "--status", "queued", "--limit", "1")
    assert queued.code == 0
    assert "emails" in queued.out

    shown = cli("show", "1", "--json").json()
    assert (shown["payload"], shown["status"]) == ({"to": 42}, "queued")
    assert cli("show", "999").code == 1

    stats = cli("stats", "--json").json()
    (emails,) = stats["queues"]
    assert (emails["ready"], emails["scheduled"], emails["running"]) == (1, 1, 0)
    assert emails["oldest_ready_age_s"] >= 0
    assert set(stats["table"]) >= {"n_dead_tup", "n_live_tup", "last_autovacuum", "last_vacuum"}


def test_cancel_queued_and_running_says_which_were_running(cli: Cli, db: Engine) -> None:
    # Running jobs are cancelled too since Worker v2 (their worker stops them): this test used to
    # assert that a running job was refused.
    with db.begin() as conn:
        pgqueue.enqueue_many(conn, [{}, {}, {}])
        running = pgqueue.claim(conn, limit=1)[0]
    result = cli("cancel", "1", "2", "77")
    assert result.code == 1
    assert "cancelled 2 job(s): 1, 2" in result.out
    assert "of which running (their workers stop them): 1" in result.out
    assert "job 77 not cancelled: no such job" in result.err
    jobs = _statuses(db)
    assert jobs[running.id] == ("failed", 1, 5, "cancelled")
    assert jobs[2] == ("failed", 0, 5, "cancelled")
    assert jobs[3][0] == "queued"
    done = cli("cancel", "1")
    assert done.code == 1
    assert "job 1 not cancelled: it has already failed" in done.err


def test_retry_raises_the_budget_never_resets_attempts(cli: Cli, db: Engine) -> None:
    with db.begin() as conn:
        pgqueue.enqueue_many(conn, [{}, {}, {}], queue="emails", max_attempts=1)
        for job in pgqueue.claim(conn, queue="emails", limit=3):
            pgqueue.fail(conn, job.id, job.attempts, "boom")
        pgqueue.enqueue(conn, {}, queue="other")
        running = pgqueue.claim(conn, queue="other")[0]

    one = cli("retry", "1", str(running.id), "--attempts", "3")
    assert one.code == 1
    assert "it is running" in one.err
    assert _statuses(db)[1] == ("queued", 1, 4, "boom")

    rest = cli("retry", "--failed", "--queue", "emails")
    assert rest.code == 0
    assert "requeued 2 job(s)" in rest.out
    assert {v[:3] for k, v in _statuses(db).items() if k != running.id} == {
        ("queued", 1, 4),
        ("queued", 1, 6),
    }
    assert cli("retry").code == 2


def test_reap_and_purge(cli: Cli, db: Engine) -> None:
    with db.begin() as conn:
        pgqueue.enqueue_many(conn, [{}] * 5)
        claimed = pgqueue.claim(conn, limit=5, lease=timedelta(seconds=30))
        for job in claimed[:4]:
            pgqueue.complete(conn, job.id, job.attempts)
        conn.execute(
            text("UPDATE jobs SET locked_until = now() - interval '1 minute' WHERE id = :id"),
            {"id": claimed[4].id},
        )
    reaped = cli("reap")
    assert reaped.code == 0
    assert "reaped 1 job(s) with an expired lease: 1 requeued" in reaped.out

    purged = cli("purge", "--older-than", "0", "--batch-size", "3")
    assert purged.code == 0
    assert "purged 4 done job(s)" in purged.out
    assert "purged 3 done job(s) so far" in purged.err
    assert list(_statuses(db)) == [claimed[4].id]


@pytest.mark.parametrize(
    ("spelling", "seconds"), [("90", 90), ("90s", 90), ("1.5m", 90), ("7d", 604_800)]
)
def test_durations(spelling: str, seconds: int) -> None:
    assert parse_duration(spelling) == timedelta(seconds=seconds)
