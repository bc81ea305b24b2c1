"""A job waiting for its dependencies (``depends_on``) on the command line: ``list``, ``show`` and
``stats`` call it ``waiting`` and say what it waits for, ``list --status`` takes the states people
see, ``retry`` refuses it with a reason, and ``doctor`` and ``unblock`` deal with a dependency
deleted by hand. The stored status stays ``queued``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

from sqlalchemy import Engine, text

import pgqueue
from tests.cli.conftest import Result

Cli = Callable[..., Result]


def _row(db: Engine, job_id: int) -> dict[str, object]:
    with db.connect() as conn:
        found = conn.execute(
            text(
                "SELECT status, waiting_on, run_at, attempts, max_attempts FROM jobs WHERE id = :i"
            ),
            {"i": job_id},
        ).one()
    return dict(found._mapping)


def _line(out: str, job_id: int) -> str:
    """The table row of ``job_id`` in ``pgqueue list``'s output."""
    (line,) = [line for line in out.splitlines() if re.match(rf"^\s*{job_id}\s*\|", line)]
    return line


def test_list_show_and_stats_say_waiting_and_what_for(cli: Cli, db: Engine) -> None:
    with db.begin() as conn:
        first = pgqueue.enqueue(conn, {}, queue="steps")
        (running,) = pgqueue.claim(conn, queue="steps", limit=1)
        assert pgqueue.complete(conn, running.id, running.attempts)
        second = pgqueue.enqueue(conn, {}, queue="steps")
        child = pgqueue.enqueue(conn, {}, queue="steps", depends_on=[first, second])

    listed = {job["id"]: job for job in cli("list", "--json").json()}
    assert listed[child]["status"] == "waiting"
    assert listed[child]["waiting_for"] == [second]  # the unfinished one only
    assert listed[child]["run_at"] is None  # no fake time
    assert (listed[second]["status"], listed[second]["waiting_for"]) == ("queued", None)
    assert listed[first]["status"] == "done"

    table = cli("list")
    assert table.code == 0, table.err
    assert "9999" not in table.out
    line = _line(table.out, child)
    assert re.search(rf"\| waiting +\|.*\| after {second} +\|", line), line

    shown = cli("show", str(child))
    assert shown.code == 0, shown.err
    assert "9999" not in shown.out
    assert re.search(r"^status: +waiting$", shown.out, re.M), shown.out
    assert re.search(rf"^waiting_for: +{second}$", shown.out, re.M), shown.out
    assert re.search(r"^run_at: +-$", shown.out, re.M), shown.out
    assert re.search(rf"^waiting on: +{first} \(done\), {second} \(queued\)$", shown.out, re.M)
    as_json = cli("show", str(child), "--json").json()
    assert (as_json["status"], as_json["run_at"], as_json["waiting_for"]) == (
        "waiting",
        None,
        [second],
    )
    # What a job a dependency waits for is waited by shows the dependent's state too.
    by = cli("show", str(second), "--json").json()["waited_by"]
    assert by == [{"id": child, "status": "waiting"}]

    (steps,) = cli("stats", "--json").json()["queues"]
    assert (steps["ready"], steps["scheduled"], steps["waiting"], steps["done"]) == (1, 0, 1, 1)
    header = cli("stats").out.splitlines()[0]
    assert [c.strip() for c in header.split("|")] == [
        "queue",
        "ready",
        "scheduled",
        "running",
        "expired_leases",
        "done",
        "failed",
        "cancelled",
        "waiting",
        "expired",
        "sleeping",
        "awaiting_signal",
        "oldest_ready_age_s",
    ]

    # Shown, not stored: the row and the producer's JobResult still say queued.
    assert _row(db, child)["status"] == "queued"
    with db.connect() as conn:
        result = pgqueue.fetch_result(conn, child)
    assert result is not None
    assert result.status == "queued"


def test_list_status_takes_waiting_and_cancelled(cli: Cli, db: Engine) -> None:
    with db.begin() as conn:
        parent = pgqueue.enqueue(conn, {})
        child = pgqueue.enqueue(conn, {}, depends_on=[parent])
        later = pgqueue.enqueue(conn, {}, delay=timedelta(hours=1))
        cancelled = pgqueue.enqueue(conn, {})
        assert pgqueue.cancel(conn, [cancelled]) == [cancelled]
        broken = pgqueue.enqueue(conn, {}, max_attempts=1, priority=9)
        (claimed,) = pgqueue.claim(conn, limit=1)
        assert claimed.id == broken
        pgqueue.fail(conn, claimed.id, claimed.attempts, "boom")

    def ids(status: str) -> list[int]:
        found = cli("list", "--status", status, "--json")
        assert found.code == 0, found.err
        return [job["id"] for job in found.json()]

    assert ids("waiting") == [child]
    assert ids("cancelled") == [cancelled]
    assert ids("failed") == [broken]  # a cancelled job is not counted as failed
    assert ids("queued") == [later, parent]  # ready or due later; never the waiting one
    assert ids("running") == []
    assert ids("done") == []
    assert [job["status"] for job in cli("list", "--json").json()] == [
        "failed",
        "cancelled",
        "queued",
        "waiting",
        "queued",
    ]
    bad = cli("list", "--status", "ready")
    assert bad.code == 2
    assert "waiting" in bad.err  # the choices are named


def test_retry_of_a_waiting_job_says_it_waits_and_changes_nothing(cli: Cli, db: Engine) -> None:
    with db.begin() as conn:
        parent = pgqueue.enqueue(conn, {})
        child = pgqueue.enqueue(conn, {}, depends_on=[parent])
    before = _row(db, child)
    result = cli("retry", str(child))
    assert result.code != 0, result.out
    assert f"job {child}" in result.err
    assert f"waits for job {parent}" in result.err
    assert "pgqueue cancel" in result.err
    assert _row(db, child) == before


def test_doctor_reports_a_dependent_whose_dependency_was_deleted_and_unblock_frees_it(
    cli: Cli, db: Engine
) -> None:
    with db.begin() as conn:
        gone = pgqueue.enqueue(conn, {}, queue="steps")
        kept = pgqueue.enqueue(conn, {}, queue="steps")
        orphan = pgqueue.enqueue(conn, {}, queue="steps", depends_on=[gone])
        half = pgqueue.enqueue(conn, {}, queue="steps", depends_on=[gone, kept])
        fine = pgqueue.enqueue(conn, {}, queue="steps", depends_on=[kept])

    def dependencies(report: Result) -> list[dict[str, Any]]:
        return [f for f in report.json()["findings"] if f["check"] == "dependencies"]

    (before,) = dependencies(cli("doctor", "--json"))
    assert before["severity"] == "ok", before
    with db.begin() as conn:  # by hand: the edges go with the row (ON DELETE CASCADE)
        conn.execute(text("DELETE FROM jobs WHERE id = :i"), {"i": gone})

    report = cli("doctor", "--json")
    assert report.code == 1, report.out
    (finding,) = dependencies(report)
    assert finding["severity"] == "warning"
    assert f"{orphan}, {half}" in finding["message"]
    assert "no longer exists" in finding["message"]
    assert f"pgqueue unblock {orphan} {half}" in finding["fix"]
    assert f"pgqueue cancel {orphan} {half}" in finding["fix"]
    assert [d["id"] for d in finding["details"]] == [orphan, half]
    assert [(d["waiting_on"], d["found"]) for d in finding["details"]] == [(1, 0), (2, 1)]
    text_report = cli("doctor").out
    assert "[WARNING] dependencies:" in text_report

    unblocked = cli("unblock", str(orphan), str(half), str(fine), "999")
    assert unblocked.code == 1, unblocked.err  # 999 and `fine` were left alone, each said why
    assert f"unblocked 2 job(s): {orphan}, {half}" in unblocked.out
    assert f"of which ready now: {orphan}" in unblocked.out
    assert f"job {fine} not unblocked: its dependencies all exist" in unblocked.err
    assert "job 999 not unblocked: no such job" in unblocked.err
    now = datetime.now(timezone.utc)
    assert _row(db, orphan)["waiting_on"] == 0
    assert _row(db, orphan)["run_at"] <= now  # type: ignore[operator]
    assert _row(db, half)["waiting_on"] == 1  # still waits for `kept`, which exists
    assert _row(db, fine)["waiting_on"] == 1
    (after,) = dependencies(cli("doctor", "--json"))
    assert after["severity"] == "ok", after
    assert [j["id"] for j in cli("list", "--status", "waiting", "--json").json()] == [fine, half]
