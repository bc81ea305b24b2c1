"""A worker whose every handler thread is stuck past its job's timeout stops by itself (#31).

A real ``python -m pgqueue worker`` process: both threads block in handlers that ignore
``job.stopping``; once they have been stuck for longer than the lease the worker gives back
the jobs it holds and exits with code 3, so that a supervisor replaces it. A second worker then
runs what is left: nothing is lost.
"""

from __future__ import annotations

import time
from pathlib import Path

from sqlalchemy import Engine, text
from sqlalchemy.engine import URL

import pgqueue
from tests.cli.conftest import plain, run_pgqueue_process

APP = """
import os
import time

from sqlalchemy import create_engine

import pgqueue


def handler(job):
    if job.payload.get("hang"):
        time.sleep(60)  # ignores job.stopping: its thread stays stuck


worker = pgqueue.Worker(
    create_engine(os.environ["STUCK_APP_URL"]),
    {"work": handler},
    concurrency=2,
    lease=1.0,
    default_timeout=0.5,
    timeout_grace=0,
    shutdown_timeout=1.0,
    poll_interval=0.2,
)
"""


def test_a_worker_whose_threads_are_all_stuck_exits_3_and_loses_nothing(
    db_url: URL, db: Engine, tmp_path: Path
) -> None:
    (tmp_path / "stuck_app.py").write_text(APP)
    with db.begin() as conn:
        hung = pgqueue.enqueue_many(
            conn, [{"hang": True}] * 2, queue="work", priority=9, max_attempts=1
        )
        rest = pgqueue.enqueue_many(conn, [{}] * 3, queue="work")
    started = time.monotonic()
    result = run_pgqueue_process(
        "worker", "stuck_app:worker", env={"STUCK_APP_URL": plain(db_url)}, cwd=tmp_path
    )
    took = time.monotonic() - started
    assert result.code == 3, result.err
    assert "every handler thread is stuck" in result.err
    assert took < 60  # it did not wait for the stuck threads
    with db.connect() as conn:
        found = conn.execute(text("SELECT id, status, attempts FROM jobs")).all()
    rows = {r.id: r.status for r in found}
    attempts = {r.id: r.attempts for r in found}
    assert {rows[i] for i in hung} == {"failed"}
    assert {rows[i] for i in rest} == {"queued"}  # given back (or never claimed)
    assert {attempts[i] for i in rest} == {0}  # not charged

    ran: list[int] = []
    pgqueue.Worker(db, {"work": lambda job: ran.append(job.id)}, install_signal_handlers=False).run(
        until_empty=True
    )
    assert sorted(ran) == rest
