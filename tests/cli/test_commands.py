"""enqueue, list, show, stats, reap, purge, retry and cancel against a real database.

State is set up through the API and each command runs through its entry point, as users run it
(in process, isolated as a fresh process would be: ``tests/cli/inprocess.py``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime, timedelta, timezone

import psycopg
import pytest
from sqlalchemy import Engine, text
from sqlalchemy.engine import URL

import pgqueue
from pgqueue._base.urls import to_libpq_url
from pgqueue.cli.common import parse_duration
from tests.cli.conftest import Result
from tests.integration.worker_helpers import row_locked

Cli = Callable[..., Result]
UTC = timezone.utc


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
    assert later.json() == {"id": 2, "inserted": True}
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


def test_enqueue_with_priority_and_unique_key_list_and_show_them(cli: Cli, db: Engine) -> None:
    first = cli("enqueue", "sync", '{"user": 7}', "--priority", "7", "--unique-key", "user:7")
    assert (first.code, first.out.strip(), first.err) == (0, "1", "")
    # The key is held by job 1: nothing inserted, job 1's id printed, and stderr says so.
    held = cli("enqueue", "sync", '{"user": 7, "again": true}', "--unique-key", "user:7")
    assert (held.code, held.out.strip()) == (0, "1")
    assert "unique key 'user:7' is held by live job 1 of queue 'sync': no job inserted" in held.err
    held_json = cli("enqueue", "sync", "{}", "--unique-key", "user:7", "--json")
    assert (held_json.code, held_json.json()) == (0, {"id": 1, "inserted": False})
    # Another queue, or no key, inserts (a held key still used up an id of the sequence).
    other = cli("enqueue", "other", "{}", "--unique-key", "user:7", "--json").json()
    assert other["inserted"] is True
    assert other["id"] > 1
    keyless = cli("enqueue", "sync", "{}", "--json").json()
    assert keyless["inserted"] is True
    assert _statuses(db).keys() == {1, other["id"], keyless["id"]}

    # Once job 1 is done the key is free again.
    with db.begin() as conn:
        (job,) = pgqueue.claim(conn, queue="sync", limit=1)
        assert job.id == 1  # priority 7 before the keyless job's 0
        assert pgqueue.complete(conn, job.id, job.attempts)
    again = cli("enqueue", "sync", "{}", "--unique-key", "user:7", "--json").json()
    assert again["inserted"] is True
    assert again["id"] not in (1, keyless["id"])

    listed = cli("list", "--queue", "sync")
    assert listed.code == 0
    header, _, *rows = listed.out.splitlines()
    assert [c.strip() for c in header.split("|")][:5] == [
        "id",
        "queue",
        "status",
        "prio",
        "attempts",
    ]
    cells = [[c.strip() for c in r.split("|")] for r in rows if "|" in r]
    assert {int(c[0]): c[3] for c in cells} == {again["id"]: "0", keyless["id"]: "0", 1: "7"}
    as_json = {j["id"]: j for j in cli("list", "--json").json()}
    assert (as_json[1]["priority"], as_json[1]["unique_key"]) == (7, "user:7")
    assert (as_json[keyless["id"]]["priority"], as_json[keyless["id"]]["unique_key"]) == (0, None)

    shown = cli("show", "1")
    assert shown.code == 0
    fields = [line.split(":", 1) for line in shown.out.splitlines() if line[:1].isalpha()]
    lines = {name: value.strip() for name, value in fields}
    assert (lines["priority"], lines["unique_key"], lines["status"]) == ("7", "user:7", "done")
    assert "unique_key:    -\n" in cli("show", str(keyless["id"])).out
    shown_json = cli("show", "1", "--json").json()
    assert (shown_json["priority"], shown_json["unique_key"]) == (7, "user:7")


def send_welcome_email(job: pgqueue.JobContext) -> None:
    job.payload["email"]


def test_show_prints_the_error_history_and_the_last_traceback(cli: Cli, db: Engine) -> None:
    with db.begin() as conn:
        job_id = pgqueue.enqueue(conn, {"user_id": 7}, queue="emails", max_attempts=2)
        never = pgqueue.enqueue(conn, {}, queue="other")
    at_once = pgqueue.RetryPolicy(base=timedelta(0), cap=timedelta(0))
    worker = pgqueue.Worker(db, {"emails": send_welcome_email}, retry=at_once, listen=False)
    assert worker.run(until_empty=True).failed == 1

    shown = cli("show", str(job_id))
    assert shown.code == 0, shown.err
    out = shown.out
    assert "errors:        2 (oldest first)\n" in out
    history = [
        [c.strip() for c in line.split("|")]
        for line in out.split("errors:", 1)[1].splitlines()
        if "|" in line
    ]
    assert history[0] == ["attempt", "at", "error"]
    assert [(row[0], row[2]) for row in history[1:]] == [
        ("1", "KeyError: 'email'"),
        ("2", "KeyError: 'email'"),
    ]
    traceback = out.split("traceback of attempt 2:\n", 1)[1]
    assert traceback.startswith("Traceback (most recent call last):\n")
    assert "in send_welcome_email" in traceback
    assert traceback.rstrip().endswith("KeyError: 'email'")

    as_json = cli("show", str(job_id), "--json").json()
    assert [(e["attempt"], e["error"]) for e in as_json["errors"]] == [
        (1, "KeyError: 'email'"),
        (2, "KeyError: 'email'"),
    ]
    assert "in send_welcome_email" in as_json["errors"][-1]["traceback"]
    assert as_json["errors"][0]["at"].endswith("+00:00")  # an ISO time, as the other columns
    assert "errors:        -\n" in cli("show", str(never)).out
    assert cli("show", str(never), "--json").json()["errors"] == []


@pytest.mark.parametrize("priority", ["10", "-1", "high", "1.5", ""])
def test_enqueue_refuses_a_bad_priority_in_one_line(cli: Cli, db: Engine, priority: str) -> None:
    result = cli("enqueue", "sync", "{}", "--priority", priority)
    assert result.code == 2
    assert result.out == ""
    assert result.err.splitlines() == [
        f"pgqueue: error: --priority must be an integer from 0 to 9 (higher runs first), "
        f"got {priority!r}"
    ]
    assert _statuses(db) == {}


def test_enqueue_refuses_an_empty_or_huge_unique_key(cli: Cli, db: Engine) -> None:
    empty = cli("enqueue", "sync", "{}", "--unique-key", "")
    assert (empty.code, empty.err) == (2, "pgqueue: error: --unique-key must not be empty\n")
    huge = cli("enqueue", "sync", "{}", "--unique-key", "k" * 1001)
    assert huge.code == 2
    assert huge.err.startswith("pgqueue: error: --unique-key 1001 bytes, more than 1000")
    assert _statuses(db) == {}


def test_retry_explains_a_job_whose_unique_key_a_live_job_holds(cli: Cli, db: Engine) -> None:
    with db.begin() as conn:
        old = pgqueue.enqueue(conn, {}, queue="sync", unique_key="k", max_attempts=1)
        (job,) = pgqueue.claim(conn, queue="sync")
        pgqueue.fail(conn, job.id, job.attempts, "boom")
        holder = pgqueue.enqueue(conn, {}, queue="sync", unique_key="k")  # the key is free
        free = pgqueue.enqueue(conn, {}, queue="sync", unique_key="free", max_attempts=1)
        (job,) = pgqueue.claim(conn, queue="sync", limit=1)
        assert job.id == holder
        (job,) = pgqueue.claim(conn, queue="sync", limit=1)
        pgqueue.fail(conn, job.id, job.attempts, "boom")

    result = cli("retry", str(old), str(free))
    assert result.code == 1
    assert f"requeued 1 job(s) with 5 more attempt(s): {free}" in result.out
    assert result.err.splitlines() == [
        f"job {old} not retried: its unique key 'k' is held by live job {holder}"
    ]
    jobs = _statuses(db)
    assert jobs[old][0] == "failed"
    assert jobs[free][0] == "queued"

    # Once the holder is done, the key is free and the retry goes through.
    with db.begin() as conn:
        assert pgqueue.complete(conn, holder, 1)
    assert cli("retry", str(old)).code == 0
    assert _statuses(db)[old][0] == "queued"


def test_retry_of_two_failed_jobs_with_one_key_takes_the_newest(cli: Cli, db: Engine) -> None:
    with db.begin() as conn:
        ids = []
        for _ in range(2):
            ids.append(pgqueue.enqueue(conn, {}, queue="sync", unique_key="k", max_attempts=1))
            (job,) = pgqueue.claim(conn, queue="sync")
            pgqueue.fail(conn, job.id, job.attempts, "boom")
    both = cli("retry", *map(str, ids))
    assert both.code == 1
    assert f"requeued 1 job(s) with 5 more attempt(s): {ids[1]}" in both.out
    assert f"job {ids[0]} not retried: its unique key 'k' is held by live job {ids[1]}" in both.err
    assert _statuses(db)[ids[0]][0] == "failed"
    assert _statuses(db)[ids[1]][0] == "queued"
    again = cli("retry", str(ids[0]))
    assert again.code == 1
    assert f"job {ids[0]} not retried: its unique key 'k' is held by live job {ids[1]}" in again.err


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
    assert "job 1 not cancelled: it was already cancelled" in done.err  # its state, not "failed"


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


def test_retry_failed_leaves_cancelled_jobs_unless_included(cli: Cli, db: Engine) -> None:
    with db.begin() as conn:
        failed, cancelled = pgqueue.enqueue_many(conn, [{}, {}], max_attempts=1)
        (job,) = pgqueue.claim(conn, limit=1)
        pgqueue.fail(conn, job.id, job.attempts, "boom")
        assert pgqueue.cancel(conn, [cancelled]) == [cancelled]
    assert job.id == failed
    rest = cli("retry", "--failed")
    assert rest.code == 0
    assert f"requeued 1 job(s) with 5 more attempt(s): {failed}" in rest.out
    assert _statuses(db)[cancelled][0] == "failed"
    mixed = cli("retry", "--include-cancelled", str(cancelled))
    assert mixed.code == 2
    assert "--include-cancelled goes with --failed" in mixed.err
    every = cli("retry", "--failed", "--include-cancelled")
    assert every.code == 0
    assert f"requeued 1 job(s) with 5 more attempt(s): {cancelled}" in every.out
    assert _statuses(db)[cancelled][0] == "queued"


def test_retry_by_id_takes_a_cancelled_job_back(cli: Cli, db: Engine) -> None:
    with db.begin() as conn:
        job_id = pgqueue.enqueue(conn, {})
        assert pgqueue.cancel(conn, [job_id]) == [job_id]
    result = cli("retry", str(job_id))
    assert (result.code, result.err) == (0, "")
    assert _statuses(db)[job_id][0] == "queued"


def test_stats_count_cancelled_jobs_apart_from_failed_ones(cli: Cli, db: Engine) -> None:
    with db.begin() as conn:
        ids = pgqueue.enqueue_many(conn, [{}, {}, {}], queue="mail", max_attempts=1)
        (job,) = pgqueue.claim(conn, queue="mail", limit=1)
        pgqueue.fail(conn, job.id, job.attempts, "boom")
        assert pgqueue.cancel(conn, ids[1:]) == ids[1:]
    (mail,) = cli("stats", "--json").json()["queues"]
    assert (mail["failed"], mail["cancelled"], mail["ready"]) == (1, 2, 0)
    header, _, row = (line.split("|") for line in cli("stats").out.splitlines()[:3])
    assert [cell.strip() for cell in header[6:8]] == ["failed", "cancelled"]
    assert [cell.strip() for cell in row[6:8]] == ["1", "2"]


def test_cancel_names_the_ids_it_skipped(cli: Cli, db: Engine) -> None:
    """A row held for long (here until the command returned, however long its interpreter
    took to start, 60 s at most: as a transaction-mode worker holds its job) is skipped after
    the cancel's bounded wait, and named; the other ids are cancelled."""
    with db.begin() as conn:
        held, free = pgqueue.enqueue_many(conn, [{}, {}])
    with row_locked(db, held, 60.0) as released:
        result = cli("cancel", str(held), str(free))
        assert not released.is_set()
    assert result.code == 1
    assert f"cancelled 1 job(s): {free}" in result.out
    assert f"skipped, their rows held by another transaction: {held}" in result.out
    assert (
        f"job {held} not cancelled: skipped: another transaction held its row for over 500 ms"
        in result.err
    )
    assert _statuses(db)[held][0] == "queued"


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


def test_show_tells_how_often_a_job_was_snoozed(cli: Cli, db: Engine) -> None:
    with db.begin() as conn:
        job_id = pgqueue.enqueue(conn, {}, queue="q")
    for _ in range(2):
        with db.begin() as conn:
            conn.execute(text("UPDATE jobs SET run_at = now() WHERE id = :id"), {"id": job_id})
            (job,) = pgqueue.claim(conn, queue="q")
            assert pgqueue.repository.snooze(conn, job.id, job.attempts, 60)
    shown = cli("show", str(job_id))
    assert shown.code == 0
    assert "\nsnoozes:       2\n" in shown.out
    assert "\nmax_attempts:  7\n" in shown.out  # each snooze gave its attempt back
    assert cli("show", str(job_id), "--json").json()["snoozes"] == 2


def test_list_and_show_print_times_in_utc_and_say_so(cli: Cli, db: Engine) -> None:
    with db.begin() as conn:
        job_id = pgqueue.enqueue(conn, {}, queue="tz")
        conn.execute(
            text("UPDATE jobs SET run_at = '2026-01-15 08:30:00+00' WHERE id = :id"),
            {"id": job_id},
        )
    # A local time zone far from UTC: the output must not follow it.
    away = {"TZ": "America/New_York"}
    listed = cli("list", "--queue", "tz", env=away)
    assert listed.code == 0, listed.err
    assert "| 2026-01-15 08:30:00 UTC |" in listed.out
    shown = cli("show", str(job_id), env=away)
    assert "run_at:        2026-01-15 08:30:00 UTC" in shown.out
    (as_json,) = cli("list", "--json", env=away).json()
    assert datetime.fromisoformat(as_json["run_at"]) == datetime(2026, 1, 15, 8, 30, tzinfo=UTC)


def test_workers_lists_the_connected_workers_and_the_jobs_they_hold(
    cli: Cli, db: Engine, db_url: URL
) -> None:
    assert cli("workers").out.strip().endswith("(no worker connected)")
    name = "pgqueue-worker:box:77"
    with psycopg.connect(to_libpq_url(db_url), application_name=name, autocommit=True):
        with db.begin() as conn:
            pgqueue.enqueue_many(conn, [{}] * 3, queue="mail")
            pgqueue.claim(conn, queue="mail", limit=2, locked_by=name)
            conn.execute(
                text(
                    "INSERT INTO jobs_workers (name, host, pid, queues) "
                    "VALUES (:n, 'box', 77, '{mail,thumbs}')"
                ),
                {"n": name},
            )
        listed = cli("workers", "--json")
        shown = cli("workers")
    (worker,) = listed.json()
    assert {k: worker[k] for k in ("name", "host", "pid", "queues", "jobs_held")} == {
        "name": name,
        "host": "box",
        "pid": 77,
        "queues": ["mail", "thumbs"],
        "jobs_held": 2,
    }
    assert shown.code == 0
    assert name in shown.out
    assert "mail,thumbs" in shown.out


def test_list_by_task_and_show_prints_task_result_and_progress(cli: Cli, db: Engine) -> None:
    """#22: ``list --task`` keeps one task's jobs; ``show`` prints the task, its result and its
    progress as JSON, ``-`` while there is none."""
    sent = int(cli("enqueue", "emails", '{"args": [42], "kwargs": {}}').out)
    other = int(cli("enqueue", "emails", "{}").out)
    with db.begin() as conn:
        conn.execute(
            text(
                "UPDATE jobs SET task = 'app.send_email', status = 'done', finished_at = now(), "
                "result = '{\"sent\": true}', progress = '[3, 3]' WHERE id = :id"
            ),
            {"id": sent},
        )
    listed = cli("list", "--task", "app.send_email", "--json").json()
    assert [(j["id"], j["task"]) for j in listed] == [(sent, "app.send_email")]
    table_ = cli("list", "--task", "app.send_email").out
    assert "app.send_email" in table_
    assert cli("list", "--task", "app.nothing", "--json").json() == []
    assert {j["id"] for j in cli("list", "--json").json()} == {sent, other}

    shown = cli("show", str(sent)).out
    assert "task:          app.send_email" in shown
    assert 'result:        {\n                 "sent": true\n               }' in shown
    assert "progress:      [\n" in shown
    as_json = cli("show", str(sent), "--json").json()
    assert (as_json["task"], as_json["result"], as_json["progress"]) == (
        "app.send_email",
        {"sent": True},
        [3, 3],
    )
    plain_ = cli("show", str(other)).out
    assert "result:        -\n" in plain_
    assert "task:          -\n" in plain_


def test_show_prints_what_a_job_waits_for_and_stats_counts_waiting_jobs(
    engine: Engine, cli: Callable[..., Result]
) -> None:
    with engine.begin() as conn:
        parent = pgqueue.enqueue(conn, {}, queue="steps")
        child = pgqueue.enqueue(conn, {}, queue="steps", depends_on=[parent])
    shown = cli("show", str(child))
    assert shown.code == 0, shown.err
    assert re.search(rf"^waiting on: +{parent} \(queued\)$", shown.out, re.M), shown.out
    assert re.search(r"^waited by: +-$", shown.out, re.M), shown.out
    assert re.search(rf"^waited by: +{child} \(waiting\)$", cli("show", str(parent)).out, re.M)
    as_json = cli("show", str(child), "--json").json()
    assert as_json["waits_for"] == [{"id": parent, "status": "queued"}]
    assert as_json["waited_by"] == []
    (steps,) = cli("stats", "--json").json()["queues"]
    assert (steps["ready"], steps["scheduled"], steps["waiting"]) == (1, 0, 1)
    assert "waiting" in cli("stats").out
