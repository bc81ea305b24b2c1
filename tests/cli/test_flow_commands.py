"""``pgqueue queues``, ``pause``, ``resume``, ``limit`` and ``enqueue --concurrency-key`` (#23)
against a real database, each command run through its entry point as operators run it."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest
from sqlalchemy import Engine, text

import pgqueue
from pgqueue import QueueSettings, Rate
from tests.cli.conftest import Result

Cli = Callable[..., Result]


def _settings(db: Engine) -> list[QueueSettings]:
    with db.connect() as conn:
        return pgqueue.queue_settings(conn)


def test_pause_and_resume_say_what_changed(cli: Cli, db: Engine) -> None:
    paused = cli("pause", "mail")
    assert (paused.code, paused.out.strip()) == (0, "paused queue 'mail'")
    again = cli("pause", "mail")
    assert (again.code, again.out, again.err.strip()) == (0, "", "queue 'mail' was already paused")
    assert _settings(db) == [QueueSettings("mail", paused=True)]
    resumed = cli("resume", "mail")
    assert (resumed.code, resumed.out.strip()) == (0, "resumed queue 'mail'")
    assert cli("resume", "mail").err.strip() == "queue 'mail' was not paused"
    assert _settings(db) == [QueueSettings("mail")]


def test_limit_sets_the_flags_given_and_keeps_the_others(cli: Cli, db: Engine) -> None:
    done = cli("limit", "api", "--concurrency", "4", "--rate", "10/1s")
    assert (done.code, done.out.strip()) == (0, "queue 'api': concurrency 4, rate 10/1s")
    done = cli("limit", "api", "--per-key", "2")
    assert done.out.strip() == "queue 'api': concurrency 4, per_key 2, rate 10/1s"
    rate = Rate(10, timedelta(seconds=1))
    assert _settings(db) == [QueueSettings("api", concurrency=4, per_key=2, rate=rate)]
    done = cli("limit", "api", "--clear", "--rate", "100/5m")
    assert done.out.strip() == "queue 'api': rate 100/5m"
    assert _settings(db) == [QueueSettings("api", rate=Rate(100, timedelta(minutes=5)))]
    assert cli("limit", "api", "--clear").out.strip() == "queue 'api': -"
    assert _settings(db) == [QueueSettings("api")]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["limit", "api"], "name at least one of --concurrency, --per-key, --rate, or --clear"),
        (["limit", "api", "--concurrency", "0"], "--concurrency: expected a positive integer"),
        (["limit", "api", "--per-key", "x"], "--per-key: expected a positive integer"),
        (["limit", "api", "--rate", "10"], "--rate: expected LIMIT/PERIOD"),
        (["limit", "api", "--rate", "0/1s"], "--rate: rate.limit: must be at least 1"),
        (["limit", "api", "--rate", "10/0s"], "--rate: rate.period: must not be zero"),
        (["limit", "api", "--rate", "10/soon"], "--rate: invalid duration 'soon'"),
        (["limit", "a,b", "--concurrency", "1"], "queue: must not contain a comma"),
        (["pause", ""], "queue: must not be empty"),
        (["resume", "a,b"], "queue: must not contain a comma"),
        (["enqueue", "q", "{}", "--concurrency-key", ""], "--concurrency-key must not be empty"),
    ],
)
def test_bad_arguments_are_one_line_and_write_nothing(
    cli: Cli, db: Engine, args: list[str], message: str
) -> None:
    bad = cli(*args)
    assert bad.code == 2
    assert message in bad.err, bad.err
    assert "Traceback" not in bad.err
    assert _settings(db) == []
    with db.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM jobs")).scalar_one() == 0


def test_queues_lists_live_queues_and_settings(cli: Cli, db: Engine) -> None:
    assert cli("queues").out.splitlines()[-1] == "(no queue with live jobs or settings)"
    with db.begin() as conn:
        pgqueue.enqueue_many(conn, [1, 2, 3], queue="mail")
        pgqueue.enqueue(conn, 4, queue="mail", delay=timedelta(hours=1))  # not ready
        pgqueue.enqueue(conn, 5, queue="reports")
        pgqueue.claim(conn, queue="reports")
        pgqueue.enqueue(conn, 6, queue="old")
        (job,) = pgqueue.claim(conn, queue="old")
        pgqueue.complete(conn, job.id, job.attempts)  # only history: not listed
    cli("pause", "mail")
    cli("limit", "api", "--concurrency", "4", "--per-key", "2", "--rate", "10/1s")
    cli("retention", "reports", "--done", "1h", "--failed", "never")
    listed = cli("queues")
    assert listed.code == 0
    lines = [line.split("|") for line in listed.out.splitlines()[2:] if "|" in line]
    assert [[cell.strip() for cell in line] for line in lines] == [
        ["api", "-", "concurrency 4, per_key 2, rate 10/1s", "done 7d, failed 30d", "0", "0"],
        ["mail", "paused", "-", "done 7d, failed 30d", "3", "0"],
        ["reports", "-", "-", "done 1h, failed never", "0", "1"],
    ]
    as_json = cli("queues", "--json").json()
    assert as_json[0] == {
        "queue": "api",
        "paused": False,
        "concurrency": 4,
        "per_key": 2,
        "rate": {"limit": 10, "period_s": 1.0},
        "retention": {"done_s": 604800.0, "failed_s": 2592000.0, "inherited": ["done", "failed"]},
        "ready": 0,
        "running": 0,
        "sleeping": 0,
        "awaiting_signal": 0,
    }
    assert as_json[2]["retention"] == {"done_s": 3600.0, "failed_s": None, "inherited": []}
    assert [q["queue"] for q in as_json] == ["api", "mail", "reports"]


def test_enqueue_takes_a_concurrency_key(cli: Cli, db: Engine) -> None:
    assert cli("enqueue", "q", "{}", "--concurrency-key", "tenant-42").code == 0
    with db.connect() as conn:
        assert conn.execute(text("SELECT concurrency_key FROM jobs")).scalar_one() == "tenant-42"
