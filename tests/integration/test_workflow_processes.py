"""Fan-in under contention and under kill -9 (#24): real worker processes
(``tests/integration/workflow_app.py``) drain groups of members, each with a ``then`` job that
depends on all of them; the handlers' own table says who ran when."""

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

APP = Path(__file__).with_name("workflow_app.py")


@pytest.fixture
def flow(engine: Engine) -> Engine:
    with engine.begin() as conn:
        conn.execute(
            text(
                "CREATE TABLE flow (job_id bigint, kind text, pid int, started timestamptz, "
                "finished timestamptz, seen int)"
            )
        )
    return engine


@pytest.fixture
def spawn_flow(db_url: URL) -> Iterator[Callable[..., subprocess.Popen[str]]]:
    yield from spawned(APP, db_url, graceful=True)


def _groups(engine: Engine, groups: int, size: int, sleep: float = 0) -> dict[int, list[int]]:
    """``{then_id: member_ids}``: each group's members in one batch, its fan-in after them."""
    fan_ins: dict[int, list[int]] = {}
    with engine.begin() as conn:
        for _ in range(groups):
            members = pgqueue.enqueue_many(conn, [{"sleep": sleep}] * size, queue="member")
            fan_ins[pgqueue.enqueue(conn, {}, queue="then", depends_on=members)] = members
    return fan_ins


def _everything_done(engine: Engine, total: int) -> Callable[[], bool]:
    return lambda: scalar(engine, "SELECT count(*) FROM jobs WHERE status = 'done'") == total


def _late_fan_ins(engine: Engine) -> int:
    """Runs of a ``then`` that started before one of its members finished (or with one missing)."""
    return int(
        scalar(
            engine,
            "SELECT count(*) FROM flow t WHERE t.kind = 'then' AND EXISTS ("
            " SELECT 1 FROM jobs_dependencies d LEFT JOIN flow m"
            "  ON m.job_id = d.depends_on AND m.kind = 'member'"
            " WHERE d.job_id = t.job_id AND (m.finished IS NULL OR m.finished >= t.started))",
        )
    )


def _settled(engine: Engine) -> None:
    """Nothing stranded: no waiting job, no pending edge, no job that is not done."""
    assert scalar(engine, "SELECT count(*) FROM jobs WHERE waiting_on <> 0") == 0
    assert scalar(engine, "SELECT count(*) FROM jobs_dependencies WHERE pending") == 0
    assert scalar(engine, "SELECT count(*) FROM jobs WHERE status <> 'done'") == 0


@pytest.mark.slow
def test_two_hundred_fan_ins_under_four_processes_each_run_once_after_all_members(
    flow: Engine, spawn_flow: Callable[..., subprocess.Popen[str]]
) -> None:
    fan_ins = _groups(flow, 200, 10)
    for _ in range(4):
        spawn_flow(concurrency=4)
    until(_everything_done(flow, 200 * 11), 180, "every member and fan-in to finish")
    _settled(flow)
    with flow.connect() as conn:
        runs = dict(
            conn.execute(
                text("SELECT job_id, count(*) FROM flow WHERE kind = 'then' GROUP BY job_id")
            ).all()
        )
        seen = set(conn.execute(text("SELECT seen FROM flow WHERE kind = 'then'")).scalars())
        pids = scalar(flow, "SELECT count(DISTINCT pid) FROM flow")
    assert runs == dict.fromkeys(fan_ins, 1)  # every fan-in exactly once
    assert seen == {10}  # each saw all ten of its members finished
    assert _late_fan_ins(flow) == 0  # its start later than every member's finish
    assert scalar(flow, "SELECT count(*) FROM flow WHERE kind = 'member'") == 2000
    assert pids > 1  # the work really was shared


@pytest.mark.slow
def test_kill_9_mid_fan_in_releases_nothing_twice_and_strands_nothing(
    flow: Engine, spawn_flow: Callable[..., subprocess.Popen[str]]
) -> None:
    fan_ins = _groups(flow, 20, 50, sleep=0.02)
    victim = spawn_flow(concurrency=4, lease=2)
    spawn_flow(concurrency=4, lease=2)
    until(
        lambda: scalar(flow, "SELECT count(*) FROM flow WHERE kind = 'then'") >= 3,
        120,
        "some fan-ins to run",
    )
    victim.send_signal(signal.SIGKILL)
    victim.wait(10)
    with flow.connect() as conn:
        in_flight = set(
            conn.execute(text("SELECT id FROM jobs WHERE status = 'running'")).scalars()
        )
    assert scalar(flow, "SELECT count(*) FROM jobs WHERE status <> 'done'") > 0  # mid fan-in
    spawn_flow(concurrency=4, lease=2)
    until(_everything_done(flow, 20 * 51), 180, "the survivors to finish everything")
    _settled(flow)
    with flow.connect() as conn:
        twice = set(
            conn.execute(
                text("SELECT job_id FROM flow GROUP BY job_id HAVING count(*) > 1")
            ).scalars()
        )
        ran = set(conn.execute(text("SELECT job_id FROM flow WHERE kind = 'then'")).scalars())
    assert ran == set(fan_ins)  # none stranded
    assert twice <= in_flight  # only what the killed worker held ran again
    assert _late_fan_ins(flow) == 0  # no fan-in released early, so none released twice
    assert scalar(flow, "SELECT min(seen) FROM flow WHERE kind = 'then'") == 50
