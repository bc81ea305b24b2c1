"""``pgqueue retention`` (#31 item 3): list, show and set how long finished jobs are kept."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import Engine, text

import pgqueue
from tests.cli.conftest import Result

Cli = Callable[..., Result]


def _cells(result: Result) -> list[list[str]]:
    lines = [line.split("|") for line in result.out.splitlines()[2:] if "|" in line]
    return [[cell.strip() for cell in line] for line in lines]


def _stored(db: Engine) -> int:
    with db.connect() as conn:
        return int(conn.execute(text("SELECT count(*) FROM jobs_retention")).scalar_one())


def test_no_option_lists_the_built_in_default(cli: Cli, db: Engine) -> None:
    listed = cli("retention")
    assert listed.code == 0, listed.err
    assert _cells(listed) == [["(default)", "7d", "30d", "done, failed"]]
    assert _stored(db) == 0


def test_set_then_list_and_show_one_queue(cli: Cli, db: Engine) -> None:
    got = cli("retention", "--done", "2d")
    assert (got.code, got.out.strip()) == (0, "(default): done 2d, failed 30d")
    got = cli("retention", "mail", "--failed", "never")
    assert (got.code, got.out.strip()) == (0, "mail: done 2d, failed never (done from the default)")
    got = cli("retention", "mail", "--done", "90m")
    assert got.out.strip() == "mail: done 90m, failed never"
    assert _cells(cli("retention")) == [
        ["(default)", "2d", "30d", "failed"],
        ["mail", "90m", "never", "-"],
    ]
    assert _cells(cli("retention", "api")) == [["api", "2d", "30d", "done, failed"]]
    assert cli("retention", "mail", "--json").json() == [
        {"queue": "mail", "done_s": 5400.0, "failed_s": None, "inherited": []}
    ]
    with db.connect() as conn:
        assert pgqueue.retention(conn)[1] == pgqueue.Retention("mail", timedelta(minutes=90), None)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--done", "0"), "done: must not be zero or negative"),
        (("--failed", "0s"), "failed: must not be zero or negative"),
        (("--done", "200000d"), "too long"),
        (("--done=-1d",), "invalid duration"),
        (("--done", "soon"), "invalid duration"),
        ((" ", "--done", "1d"), "queue: must not be blank"),
    ],
)
def test_bad_durations_and_names_are_refused_and_write_nothing(
    cli: Cli, db: Engine, args: tuple[str, ...], message: str
) -> None:
    got = cli("retention", *args)
    assert got.code == 2
    assert message in got.err
    assert _stored(db) == 0


def test_doctor_reports_finished_jobs_a_day_past_their_retention(cli: Cli, db: Engine) -> None:
    """Nobody prunes: a done job 8 days and a half old is more than a day past its 7 days; a
    failed one 30 days old is within its 30 days and a day; a queue kept for ever is never
    past."""
    with db.begin() as conn:
        pgqueue.set_retention(conn, "archive", done=None)
        for queue, status, age in (
            ("mail", "done", "8 days 12 hours"),
            ("mail", "done", "7 days 12 hours"),
            ("mail", "failed", "30 days"),
            ("archive", "done", "1000 days"),
        ):
            job_id = pgqueue.enqueue(conn, {}, queue=queue)
            conn.execute(
                text(
                    "UPDATE jobs SET status = :s, finished_at = now() - CAST(:age AS interval) "
                    "WHERE id = :id"
                ),
                {"s": status, "age": age, "id": job_id},
            )
    result = cli("doctor", "--json")
    found = [f for f in result.json()["findings"] if f["check"] == "retention"]
    assert len(found) == 1, found
    assert found[0]["severity"] == "warning"
    assert found[0]["message"].startswith("queue 'mail': 1 done job(s) more than a day past")
    assert "no worker prunes it" in found[0]["message"]
    assert [(d["queue"], d["kind"], d["jobs"]) for d in found[0]["details"]] == [
        ("mail", "done", 1)
    ]
    with db.begin() as conn:
        conn.execute(text("DELETE FROM jobs WHERE queue = 'mail' AND status = 'done'"))
    (ok,) = [f for f in cli("doctor", "--json").json()["findings"] if f["check"] == "retention"]
    assert ok["severity"] == "ok"


@pytest.mark.parametrize("flag", [None, "--prune", "--no-prune"])
def test_a_burst_worker_prunes_after_its_drain_unless_told_not_to(
    cli: Cli, db: Engine, tmp_path: Path, flag: str | None
) -> None:
    """``pgqueue worker --burst`` prunes its queues once after the drain; ``--no-prune`` not."""
    app = tmp_path / "retention_app.py"
    app.write_text("handlers = {'mail': lambda job: None}\n", encoding="utf-8")
    with db.begin() as conn:
        old = pgqueue.enqueue(conn, {}, queue="mail")
        conn.execute(
            text(
                "UPDATE jobs SET status = 'done', finished_at = now() - interval '8 days' "
                "WHERE id = :id"
            ),
            {"id": old},
        )
        fresh = pgqueue.enqueue(conn, {}, queue="mail")
    options = [] if flag is None else [flag]
    result = cli("worker", "retention_app:handlers", "--burst", *options, cwd=str(tmp_path))
    assert result.code == 0, result.err
    with db.connect() as conn:
        left = conn.execute(text("SELECT id, status FROM jobs ORDER BY id")).all()
    kept = [(old, "done")] if flag == "--no-prune" else []
    assert [tuple(r) for r in left] == [*kept, (fresh, "done")]
