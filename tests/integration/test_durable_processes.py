"""Durable steps survive a worker killed with SIGKILL (#33): real processes, real ``kill -9``."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.engine import URL
from worker_helpers import scalar, spawned, until

import pgqueue

APP = Path(__file__).with_name("durable_app.py")


@pytest.fixture
def spawn_durable(db_url: URL) -> Iterator[Callable[..., subprocess.Popen[str]]]:
    yield from spawned(APP, db_url, graceful=False)


def test_a_worker_killed_after_step_two_leaves_each_step_done_once(
    engine: Engine, spawn_durable: Callable[..., subprocess.Popen[str]]
) -> None:
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE ledger (job_id bigint, step text, pid int)"))
        job_id = pgqueue.enqueue(conn, {"args": [42], "kwargs": {}}, queue="orders")
        conn.execute(
            text("UPDATE jobs SET task = 'durable_app.fulfil' WHERE id = :id"), {"id": job_id}
        )
    first = spawn_durable(lease=1, hold=1)
    # Step 2 returned once its value is stored (written before step() returns).
    until(
        lambda: scalar(engine, "SELECT steps ? 'ship' FROM jobs WHERE id = :id", id=job_id) is True,
        30,
        "step 2 stored",
    )
    first.send_signal(signal.SIGKILL)
    assert first.wait(10) == -signal.SIGKILL
    second = spawn_durable(lease=1, hold=0)
    until(
        lambda: scalar(engine, "SELECT status FROM jobs WHERE id = :id", id=job_id) == "done",
        30,
        "the second worker to finish the job",
    )
    with engine.connect() as conn:
        ledger = conn.execute(text("SELECT step, pid FROM ledger ORDER BY step")).all()
        found = pgqueue.fetch_result(conn, job_id)
    assert sorted(step for step, _ in ledger) == ["charge", "email-42", "ship"]
    pids = {step: pid for step, pid in ledger}
    assert pids["charge"] == pids["ship"] == first.pid
    assert pids["email-42"] == second.pid
    assert found is not None
    assert (found.status, found.value, found.attempts) == ("done", "email-42-done", 2)
    assert list(found.steps) == ["charge", "ship", "email"]
