"""enqueue, list, show, stats, reap, purge, retry and cancel against a real database."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import URL

import pgqueue
from tests.cli.conftest import Result

Cli = Callable[..., Result]


def _sql(db_url: URL, statement: str) -> None:
    engine = create_engine(db_url)
    try:
        with engine.begin() as conn:
            conn.execute(text(statement))
    finally:
        engine.dispose()


def test_enqueue_list_show_stats(cli: Cli) -> None:
    first = cli("enqueue", "emails", '{"to": 42}')
    assert (first.code, first.out.strip()) == (0, "1")
    later = cli("enqueue", "emails", "[1, 2]", "--delay", "5m", "--max-attempts", "2", "--json")
    assert later.json() == {"id": 2}
    assert cli("enqueue", "reports", '"monthly"').code == 0
    bad = cli("enqueue", "emails", "{not json")
    assert bad.code == 2
    assert "JSON" in bad.err

    listed = cli("list", "--json").json()
    assert [job["id"] for job in listed] == [3, 2, 1]
    assert listed[1]["max_attempts"] == 2
    assert [j["id"] for j in cli("list", "--queue", "emails", "--limit", "1", "--json").json()] == [
        2
    ]
    assert cli("list", "--status", "failed", "--json").json() == []
    human = cli("list")
    assert human.code == 0
    assert "emails" in human.out
    assert "reports" in human.out

    shown = cli("show", "1", "--json").json()
    assert shown["payload"] == {"to": 42}
    assert shown["status"] == "queued"
    assert "last_error" in cli("show", "1").out
    missing = cli("show", "999")
    assert missing.code == 1
    assert "no job with id 999" in missing.err

    stats = cli("stats", "--json").json()
    emails = next(q for q in stats["queues"] if q["queue"] == "emails")
    assert (emails["ready"], emails["scheduled"], emails["running"]) == (1, 1, 0)
    assert emails["oldest_ready_age_s"] >= 0
    assert set(stats["table"]) >= {"n_dead_tup", "n_live_tup", "last_autovacuum", "last_vacuum"}
    assert "n_dead_tup" in cli("stats").out


def test_cancel_queued_refuse_running(cli: Cli, db_url: URL) -> None:
    for _ in range(2):
        cli("enqueue", "default", "{}")
    engine = create_engine(db_url)
    with engine.begin() as conn:
        running = pgqueue.claim(conn, limit=1)[0]
    engine.dispose()
    result = cli("cancel", "1", "2", "77")
    assert result.code == 1
    assert "job 1 not cancelled: it is running" in result.err
    assert "job 77 not cancelled: no such job" in result.err
    jobs = {j["id"]: j for j in cli("list", "--json").json()}
    assert jobs[running.id]["status"] == "running"
    assert (jobs[2]["status"], jobs[2]["last_error"]) == ("failed", "cancelled")


def test_retry_raises_the_budget_never_resets_attempts(cli: Cli, db_url: URL) -> None:
    for _ in range(3):
        cli("enqueue", "emails", "{}", "--max-attempts", "1")
    engine = create_engine(db_url)
    with engine.begin() as conn:
        for job in pgqueue.claim(conn, queue="emails", limit=3):
            pgqueue.fail(conn, job.id, job.attempts, "boom")
    engine.dispose()
    assert {j["status"] for j in cli("list", "--json").json()} == {"failed"}

    one = cli("retry", "1", "--attempts", "3")
    assert one.code == 0, one.err
    job = cli("show", "1", "--json").json()
    assert (job["status"], job["attempts"], job["max_attempts"]) == ("queued", 1, 4)

    rest = cli("retry", "--failed", "--queue", "emails")
    assert rest.code == 0
    assert "requeued 2 job(s)" in rest.out
    assert {(j["attempts"], j["max_attempts"]) for j in cli("list", "--json").json()} == {
        (1, 4),
        (1, 6),
    }
    assert cli("retry").code == 2
    assert cli("retry", "1", "--failed").code == 2


def test_reap_and_purge(cli: Cli, db_url: URL) -> None:
    for _ in range(5):
        cli("enqueue", "default", "{}")
    engine = create_engine(db_url)
    with engine.begin() as conn:
        claimed = pgqueue.claim(conn, limit=5, lease=timedelta(seconds=30))
        for job in claimed[:4]:
            pgqueue.complete(conn, job.id, job.attempts)
    engine.dispose()
    _sql(db_url, "UPDATE jobs SET locked_until = now() - interval '1 minute' WHERE id = 5")
    reaped = cli("reap")
    assert reaped.code == 0
    assert "reaped 1 job(s)" in reaped.out

    kept = cli("purge")
    assert "purged 0 done job(s) created more than 7d ago" in kept.out
    purged = cli("purge", "--older-than", "0", "--batch-size", "3")
    assert purged.code == 0
    assert "purged 4 done job(s)" in purged.out
    assert "purged 3 done job(s) so far" in purged.err
    assert [j["id"] for j in cli("list", "--json").json()] == [5]


@pytest.mark.parametrize("spelling", ["90", "90s", "1.5m"])
def test_durations(spelling: str) -> None:
    from pgqueue.cli import parse_duration

    assert parse_duration(spelling) == timedelta(seconds=90)
    assert parse_duration("7d") == timedelta(days=7)
