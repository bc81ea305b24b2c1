"""Queue names and numbers on the command line: a blank queue name and a Unicode digit are one
line on stderr and exit 2, writing nothing; ``pause`` and ``limit`` of a queue nothing knows warn
and still act; ``limit Q --forget`` drops the queue's settings row."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from sqlalchemy import Engine, text

import pgqueue
from pgqueue import QueueSettings
from tests.cli.conftest import Result

Cli = Callable[..., Result]


def _count(db: Engine, table: str) -> int:
    with db.connect() as conn:
        return int(conn.execute(text(f"SELECT count(*) FROM {table}")).scalar_one())


def _one_line(result: Result, needle: str) -> None:
    assert result.code == 2, result
    lines = result.err.strip().splitlines()
    assert len(lines) == 1, result.err
    assert needle in lines[0], result.err


@pytest.mark.parametrize(
    "args",
    [
        ["enqueue", " ", "{}"],
        ["enqueue", "\u3000", "{}"],
        ["pause", " "],
        ["resume", "  "],
        ["limit", " ", "--concurrency", "2"],
        ["limit", " ", "--forget"],
    ],
    ids=["enqueue", "enqueue-ideographic", "pause", "resume", "limit", "forget"],
)
def test_a_blank_queue_name_is_one_line_and_writes_nothing(
    cli: Cli, db: Engine, args: list[str]
) -> None:
    _one_line(cli(*args), "queue: must not be blank")
    assert _count(db, "jobs") == 0
    assert _count(db, "jobs_queues") == 0


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["show", "\u0663"], "expected a job id (an integer"),
        (["cancel", "1", "\u0663"], "expected a job id (an integer"),
        (["retry", "\uff13"], "expected a job id (an integer"),
        (["enqueue", "q1", "{}", "--delay=\u0665s"], "invalid duration"),
        (["enqueue", "q1", "{}", "--max-attempts", "\u0665"], "expected a positive integer"),
        (["list", "--limit", "\u0665"], "expected a positive integer"),
        (["purge", "--older-than", "\u0667d"], "invalid duration"),
        (["limit", "q1", "--rate", "\u0661\u0660/1s"], "expected LIMIT/PERIOD"),
    ],
    ids=["show", "cancel", "retry", "delay", "max-attempts", "list-limit", "purge", "rate"],
)
def test_numbers_take_ascii_digits_only(cli: Cli, db: Engine, args: list[str], needle: str) -> None:
    """Refused by the argument's own check: argparse's usage, then one line naming it."""
    with db.begin() as conn:
        for _ in range(3):
            pgqueue.enqueue(conn, {}, queue="q1")
    done = cli(*args)
    assert done.code == 2, done
    assert "Traceback" not in done.err
    assert needle in done.err.strip().splitlines()[-1], done.err
    with db.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM jobs WHERE status = 'queued'")).scalar() == 3
    assert _count(db, "jobs_queues") == 0


@pytest.mark.parametrize(
    ("args", "verb"),
    [(["pause", "mial"], "paused"), (["limit", "mial", "--concurrency", "2"], "limited")],
)
def test_pause_or_limit_of_a_queue_nothing_knows_warns_and_still_acts(
    cli: Cli, db: Engine, args: list[str], verb: str
) -> None:
    done = cli(*args)
    assert done.code == 0, done.err
    assert done.err.splitlines() == [
        f"pgqueue: warning: queue 'mial' has no queued or running job and no settings: {verb} "
        "all the same (is the name right? `pgqueue queues` lists the queues)"
    ]
    assert done.out.strip()  # what it did, as always
    assert _count(db, "jobs_queues") == 1
    again = cli(*args)  # the queue has settings now: no warning
    assert "warning" not in again.err


def test_a_known_queue_is_paused_without_a_warning(cli: Cli, db: Engine) -> None:
    with db.begin() as conn:
        pgqueue.enqueue(conn, {}, queue="mail")
    done = cli("pause", "mail")
    assert (done.code, done.out.strip(), done.err) == (0, "paused queue 'mail'", "")


def test_limit_forget_drops_the_settings_row(cli: Cli, db: Engine) -> None:
    assert cli("pause", "mail").code == 0
    assert cli("limit", "mail", "--concurrency", "2").code == 0
    done = cli("limit", "mail", "--forget")
    assert (done.code, done.out.strip()) == (
        0,
        "forgot the settings of queue 'mail': unpaused, no limits",
    )
    assert _count(db, "jobs_queues") == 0
    with db.connect() as conn:
        assert pgqueue.queue_settings(conn, "mail") == [QueueSettings("mail")]
    again = cli("limit", "mail", "--forget")
    assert (again.code, again.out, again.err.strip()) == (
        0,
        "",
        "queue 'mail' has no settings: nothing to forget",
    )


@pytest.mark.parametrize(
    "extra", [["--concurrency", "2"], ["--clear"], ["--rate", "1/1s"], ["--per-key", "1"]]
)
def test_forget_goes_alone(cli: Cli, db: Engine, extra: list[str]) -> None:
    cli("pause", "mail")
    _one_line(cli("limit", "mail", "--forget", *extra), "--forget drops every setting")
    assert _count(db, "jobs_queues") == 1
