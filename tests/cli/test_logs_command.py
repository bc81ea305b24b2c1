"""``pgqueue logs ID [--follow]`` and ``pgqueue show ID --logs`` (#34)."""

from __future__ import annotations

import argparse
import json
import logging
import threading
import time
from collections.abc import Callable
from datetime import timedelta

import pytest
from sqlalchemy import Engine
from sqlalchemy.engine import URL

import pgqueue
from pgqueue.cli.logs import cmd_logs
from tests.cli.conftest import Result, plain

Cli = Callable[..., Result]
log = logging.getLogger("tests.logs_command")


def _run_one(db: Engine, handler: Callable[[pgqueue.JobContext], None]) -> int:
    with db.begin() as conn:
        job_id = pgqueue.enqueue(conn, {}, queue="q")
    assert pgqueue.Worker(db, {"q": handler}).run(until_empty=True).done == 1
    return job_id


def test_logs_prints_the_lines_and_show_adds_them(cli: Cli, db: Engine) -> None:
    log.setLevel(logging.INFO)

    def handler(job: pgqueue.JobContext) -> None:
        job.log("sent <b>mail</b>", to="a@example.com", url="postgresql://u:pw@h/d")
        log.warning("slow\nsecond line")

    job_id = _run_one(db, handler)
    got = cli("logs", str(job_id))
    assert got.code == 0, got.err
    out = got.out.splitlines()
    assert "#1  info      sent <b>mail</b>" in out[0]
    assert '"url": "postgresql://u:***@h/d"' in out[0]
    assert "warning   [tests.logs_command]  slow" in out[1]
    assert out[2] == "    second line"
    assert "pw@" not in got.out
    lines = [json.loads(x) for x in cli("logs", str(job_id), "--json").out.splitlines()]
    assert [(x["level"], x["logger"], x["attempt"]) for x in lines] == [
        ("info", None, 1),
        ("warning", "tests.logs_command", 1),
    ]
    assert cli("logs", str(job_id), "--attempt", "2").out == ""
    shown = cli("show", str(job_id), "--logs")
    assert "logs:          2" in shown.out
    assert "sent <b>mail</b>" in shown.out
    assert "logs:" not in cli("show", str(job_id)).out
    as_json = cli("show", str(job_id), "--logs", "--json").json()
    assert [x["message"] for x in as_json["logs"]] == ["sent <b>mail</b>", "slow\nsecond line"]
    missing = cli("logs", "999999")
    assert (missing.code, "no job with id 999999" in missing.err) == (1, True)


def test_follow_prints_new_lines_once_and_ends_with_the_job(
    db: Engine, db_url: URL, capsys: pytest.CaptureFixture[str]
) -> None:
    """The command's function on a thread of its own (the in-process runner owns the signals
    and wants no thread left behind), a real worker on another."""
    go_on = threading.Event()

    def handler(job: pgqueue.JobContext) -> None:
        job.log("first")
        go_on.wait(30)
        job.log("second")

    with db.begin() as conn:
        job_id = pgqueue.enqueue(conn, {}, queue="q")
    worker = pgqueue.Worker(
        db,
        {"q": handler},
        lease=timedelta(seconds=1.5),
        poll_interval=0.05,
        listen=False,
        install_signal_handlers=False,
    )
    running = threading.Thread(target=worker.run, daemon=True)
    args = argparse.Namespace(
        id=job_id,
        attempt=None,
        follow=True,
        interval=timedelta(milliseconds=50),
        json=False,
        url=plain(db_url),
        schema=None,
    )
    codes: list[int] = []
    follower = threading.Thread(target=lambda: codes.append(cmd_logs(args)), daemon=True)
    try:
        running.start()
        follower.start()
        # The heartbeat writes "first" while the job runs; then the job goes on and ends.
        until(lambda: bool(_lines(db, job_id)), 20, "the heartbeat's write of the running job")
        go_on.set()
        follower.join(30)
        assert not follower.is_alive(), "--follow did not end with the job"
    finally:
        go_on.set()
        worker.stop()
        running.join(30)
    assert codes == [0]
    messages = [line.split("  ")[-1] for line in capsys.readouterr().out.splitlines()]
    assert messages == ["first", "second"]


def _lines(db: Engine, job_id: int) -> list[pgqueue.LogLine]:
    with db.connect() as conn:
        return pgqueue.job_logs(conn, job_id)


def until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)
