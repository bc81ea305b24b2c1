"""Flow control held by worker processes (#23): pause, concurrency, per-key fairness, rate, kill -9.

Each worker is ``tests/integration/flow_app.py``: its handler records, for every job it starts,
how many handlers were live and how many jobs of the queue ``running`` in the table right then.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.engine import URL
from worker_helpers import scalar, spawned, until

import pgqueue

APP = Path(__file__).with_name("flow_app.py")


@pytest.fixture
def flow(engine: Engine) -> Engine:
    with engine.begin() as conn:
        for ddl in (
            "CREATE TABLE flow_live (job_id bigint, attempts int, PRIMARY KEY (job_id, attempts))",
            "CREATE TABLE flow_log (job_id bigint, attempts int, pid int, queue text, key text,"
            " at timestamptz, live int, running int, key_running int)",
        ):
            conn.execute(text(ddl))
    return engine


@pytest.fixture
def spawn(db_url: URL) -> Iterator[Callable[..., subprocess.Popen[str]]]:
    yield from spawned(APP, db_url, graceful=True)


def _enqueue(engine: Engine, payloads: list[Any], queue: str, key: str | None = None) -> list[int]:
    with engine.begin() as conn:
        keys = None if key is None else [key] * len(payloads)
        return pgqueue.enqueue_many(conn, payloads, queue=queue, concurrency_keys=keys)


def _done(engine: Engine, queue: str) -> int:
    return int(
        scalar(engine, "SELECT count(*) FROM jobs WHERE queue = :q AND status = 'done'", q=queue)
    )


def _limits(engine: Engine, queue: str, **limits: Any) -> None:
    with engine.begin() as conn:
        pgqueue.set_queue_limits(conn, queue, **limits)


def _stop(*procs: subprocess.Popen[str]) -> None:
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    for proc in procs:
        assert proc.wait(30) == 0


def test_concurrency_holds_across_three_processes(
    flow: Engine, spawn: Callable[..., subprocess.Popen[str]]
) -> None:
    _limits(flow, "flow", concurrency=4)
    # Two threads each: no one process can fill the limit, the others must take part. All three
    # are up before the jobs come (a process that starts late on a busy machine would find the
    # first one done with all of them).
    procs = [spawn(concurrency=2, poll=0.5) for _ in range(3)]
    ids = _enqueue(flow, [{"sleep": 0.2}] * 60, "flow")
    peak_in_table = 0
    while _done(flow, "flow") < len(ids):  # sampled from outside, as often as it can
        running = scalar(
            flow, "SELECT count(*) FROM jobs WHERE queue = 'flow' AND status = 'running'"
        )
        peak_in_table = max(peak_in_table, running)
        time.sleep(0.01)
    _stop(*procs)
    assert peak_in_table <= 4
    assert scalar(flow, "SELECT max(running) FROM flow_log") <= 4  # every handler's snapshot
    assert scalar(flow, "SELECT max(live) FROM flow_log") <= 4  # handlers live at once
    assert scalar(flow, "SELECT max(live) FROM flow_log") >= 2  # side by side
    _assert_each_ran_once(flow, len(ids))
    assert scalar(flow, "SELECT count(DISTINCT pid) FROM flow_log") >= 2


def _peak_running_until_done(flow: Engine, procs: list[subprocess.Popen[str]], jobs: int) -> int:
    """The most ``running`` rows of queue ``flow`` seen from outside until ``jobs`` are done,
    sampled every 5 ms; the workers ``procs`` are stopped then."""
    peak = 0
    while _done(flow, "flow") < jobs:
        running = scalar(
            flow, "SELECT count(*) FROM jobs WHERE queue = 'flow' AND status = 'running'"
        )
        peak = max(peak, running)
        time.sleep(0.005)
    _stop(*procs)
    return peak


def _assert_each_ran_once(flow: Engine, jobs: int) -> None:
    """Every one of the ``jobs`` of queue ``flow`` ran once, in one attempt."""
    assert scalar(flow, "SELECT count(*) FROM flow_log") == jobs
    assert scalar(flow, "SELECT count(DISTINCT job_id) FROM flow_log") == jobs
    assert scalar(flow, "SELECT max(attempts) FROM jobs WHERE queue = 'flow'") == 1


def test_claims_riding_on_completions_hold_a_binding_limit_across_two_processes(
    flow: Engine, spawn: Callable[..., subprocess.Popen[str]]
) -> None:
    """Two workers of 4 threads on ``concurrency=6``, short jobs: each worker's completions
    claim for the slots they free in the same transaction (#32), while the other claims too.
    Sampled from outside and by every handler, never more than 6 run."""
    _limits(flow, "flow", concurrency=6)
    procs = [spawn(concurrency=4, poll=60) for _ in range(2)]
    ids = _enqueue(flow, [{"sleep": 0.01}] * 400, "flow")
    peak_in_table = _peak_running_until_done(flow, procs, len(ids))
    assert peak_in_table <= 6
    assert scalar(flow, "SELECT max(running) FROM flow_log") <= 6
    assert scalar(flow, "SELECT max(live) FROM flow_log") <= 6
    _assert_each_ran_once(flow, len(ids))
    assert scalar(flow, "SELECT count(DISTINCT pid) FROM flow_log") == 2


def test_deep_prefetch_and_claims_riding_at_the_bound_hold_a_limit_across_two_processes(
    flow: Engine, spawn: Callable[..., subprocess.Popen[str]]
) -> None:
    """Two workers of 4 threads on ``concurrency=20``, short jobs: far from the limit a claim
    prefetches all but one worker's slots of the room (16 of 20 for the first), and a queue
    parked short at that bound is claimed by the completer's flush (#32); the two workers'
    claims meet at the queue's lock. Sampled from outside and by every handler, never more than
    20 run, each job runs once, and both workers take part."""
    _limits(flow, "flow", concurrency=20)
    procs = [spawn(concurrency=4, poll=60) for _ in range(2)]
    ids = _enqueue(flow, [{"sleep": 0.002}] * 600, "flow")
    peak_in_table = _peak_running_until_done(flow, procs, len(ids))
    assert peak_in_table <= 20
    assert scalar(flow, "SELECT max(running) FROM flow_log") <= 20
    assert scalar(flow, "SELECT max(live) FROM flow_log") <= 8  # the two workers' threads
    _assert_each_ran_once(flow, len(ids))
    assert scalar(flow, "SELECT count(DISTINCT pid) FROM flow_log") == 2


def test_a_key_with_a_backlog_does_not_hold_up_the_others(
    flow: Engine, spawn: Callable[..., subprocess.Popen[str]]
) -> None:
    _limits(flow, "flow", per_key=2)
    a = _enqueue(flow, [{"sleep": 0.05}] * 2000, "flow", key="A")
    b = _enqueue(flow, [{"sleep": 0.05}] * 20, "flow", key="B")
    procs = [spawn(concurrency=8, poll=0.5) for _ in range(2)]
    until(
        lambda: scalar(flow, "SELECT count(*) FROM flow_log WHERE key = 'B'") == len(b),
        120,
        "every job of key B to start",
    )
    a_queued = scalar(
        flow, "SELECT count(*) FROM jobs WHERE id = ANY(:ids) AND status = 'queued'", ids=a
    )
    _stop(*procs)
    assert a_queued >= 1000  # B went through while A's backlog waited its turn
    # No handler's snapshot of the table saw more than 2 jobs of its key running.
    assert scalar(flow, "SELECT max(key_running) FROM flow_log") == 2
    assert scalar(flow, "SELECT max(running) FROM flow_log") <= 4


def test_pause_and_resume(
    flow: Engine, spawn: Callable[..., subprocess.Popen[str]], tmp_path: Path
) -> None:
    release = tmp_path / "release"
    with flow.begin() as conn:
        assert pgqueue.pause(conn, "flow")
    paused = _enqueue(flow, [{}] * 20, "flow")
    others = _enqueue(flow, [{}] * 20, "other")
    worker = spawn(concurrency=4, poll=0.5)  # started while the queue is paused
    until(lambda: _done(flow, "other") == len(others), 30, "the other queue to drain")
    time.sleep(1.2)  # an absence: a settings read (every 1 s) and two polls pass, none claims it
    assert scalar(flow, "SELECT count(*) FROM flow_log WHERE queue = 'flow'") == 0
    assert scalar(
        flow, "SELECT count(*) FROM jobs WHERE id = ANY(:ids) AND status = 'queued'", ids=paused
    ) == len(paused)
    with flow.begin() as conn:
        assert pgqueue.resume(conn, "flow")
    until(lambda: _done(flow, "flow") == len(paused), 30, "the resumed queue to drain")
    # Paused while running: jobs already running finish, no new one starts. They work until the
    # test releases them.
    running = _enqueue(flow, [{"until": str(release)}] * 2, "flow")
    until(
        lambda: (
            scalar(flow, "SELECT count(*) FROM flow_log WHERE job_id = ANY(:ids)", ids=running) == 2
        ),
        30,
        "two long jobs to start",
    )
    with flow.begin() as conn:
        pgqueue.pause(conn, "flow")
    time.sleep(1.2)  # "within about a second of the commit"
    later = _enqueue(flow, [{}] * 10, "flow")
    more = _enqueue(flow, [{}] * 10, "other")
    until(lambda: _done(flow, "other") == len(others) + len(more), 30, "the others to drain")
    release.touch()
    until(
        lambda: (
            scalar(
                flow,
                "SELECT count(*) FROM jobs WHERE id = ANY(:ids) AND status = 'done'",
                ids=running,
            )
            == 2
        ),
        30,
        "the running jobs to finish normally",
    )
    time.sleep(1.0)  # an absence: the freed slots and two polls claim nothing of `flow`
    assert scalar(
        flow, "SELECT count(*) FROM jobs WHERE id = ANY(:ids) AND status = 'queued'", ids=later
    ) == len(later)
    _stop(worker)


@pytest.mark.slow
def test_rate_over_twenty_seconds(
    flow: Engine, spawn: Callable[..., subprocess.Popen[str]]
) -> None:
    limit = 10
    _limits(flow, "flow", rate=pgqueue.Rate(limit, timedelta(seconds=1)))
    _enqueue(flow, [{}] * 400, "flow")
    procs = [spawn(concurrency=4, poll=0.5) for _ in range(3)]
    until(
        lambda: scalar(
            flow,
            "SELECT coalesce(max(locked_at) - min(locked_at) >= interval '20 s', false) FROM jobs"
            " WHERE queue = 'flow' AND locked_at IS NOT NULL",
        ),
        60,
        "twenty seconds of starts",
    )
    _stop(*procs)
    first = scalar(flow, "SELECT min(locked_at) FROM jobs WHERE queue = 'flow'")
    started = scalar(
        flow,
        "SELECT count(*) FROM jobs WHERE queue = 'flow' AND locked_at < :t + interval '20 s'",
        t=first,
    )
    # Fixed windows of one second: at most `limit` starts in each, so at most 2 * limit in any
    # second that straddles a window's edge.
    busiest = scalar(
        flow,
        "SELECT max((SELECT count(*) FROM jobs o WHERE o.queue = 'flow'"
        " AND o.locked_at >= j.locked_at AND o.locked_at < j.locked_at + interval '1 s'))"
        " FROM jobs j WHERE j.queue = 'flow'"
        " AND j.locked_at IS NOT NULL",
    )
    assert busiest <= 2 * limit
    assert 180 <= started <= 220  # 10 per second over 20 s, within 10%
    assert scalar(flow, "SELECT count(DISTINCT pid) FROM flow_log") >= 2


def test_a_killed_worker_holds_its_slots_until_reaped(
    flow: Engine, spawn: Callable[..., subprocess.Popen[str]]
) -> None:
    _limits(flow, "flow", concurrency=2)
    ids = _enqueue(flow, [{"sleep": 0.3}] * 10, "flow")
    victim = spawn(concurrency=2, lease=2, reap=0.3, poll=0.2)
    until(lambda: scalar(flow, "SELECT count(*) FROM flow_log") >= 2, 30, "the limit to fill")
    victim.send_signal(signal.SIGKILL)
    victim.wait(10)
    with flow.connect() as conn:
        held = conn.execute(
            text("SELECT id, locked_until FROM jobs WHERE status = 'running'")
        ).all()
    assert len(held) == 2  # at the limit when it died
    lease_end = min(row.locked_until for row in held)
    survivor = spawn(concurrency=4, lease=2, reap=0.3, poll=0.2)
    until(lambda: _done(flow, "flow") == len(ids), 60, "the survivor to finish everything")
    _stop(survivor)
    with flow.connect() as conn:
        starts = conn.execute(
            text("SELECT job_id, at, pid FROM flow_log WHERE pid <> :p ORDER BY at"),
            {"p": victim.pid},
        ).all()
    # While the killed worker's two jobs counted, nothing else could start; they count until
    # their lease ran out and the reaper requeued them, no longer.
    assert starts[0].at >= lease_end
    assert {row.job_id for row in starts} | {row.id for row in held} >= set(ids)  # nothing lost
    assert scalar(flow, "SELECT max(running) FROM flow_log") <= 2
