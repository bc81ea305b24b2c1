"""Worker processes under real faults: many workers at once, kill -9, a job that kills its worker,
SIGTERM with queued and running jobs. Each worker is ``tests/integration/worker_app.py``."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, text
from worker_helpers import scalar, until

import pgqueue


def _enqueue(engine: Engine, payloads: list[Any], queue: str, **kw: Any) -> list[int]:
    with engine.begin() as conn:
        return pgqueue.enqueue_many(conn, payloads, queue=queue, **kw)


@pytest.mark.slow
def test_four_processes_drain_ten_thousand_jobs_exactly_once(
    effects: Engine, spawn: Callable[..., subprocess.Popen[str]]
) -> None:
    _enqueue(effects, [{}] * 10_000, "effects")
    procs = [spawn(concurrency=4, until_empty=1, poll=0.2) for _ in range(4)]
    for proc in procs:
        assert proc.wait(120) == 0
    assert scalar(effects, "SELECT count(*) FROM jobs WHERE status = 'done'") == 10_000
    assert scalar(effects, "SELECT count(*) FROM effects") == 10_000
    assert scalar(effects, "SELECT count(DISTINCT job_id) FROM effects") == 10_000
    assert scalar(effects, "SELECT max(attempts) FROM jobs") == 1
    assert scalar(effects, "SELECT count(DISTINCT pid) FROM effects") == 4


#: The same fault tests with sync handlers on threads and with ``async def`` handlers.
HANDLER_KINDS = pytest.mark.parametrize(
    ("queue", "slots"),
    [("effects", {"concurrency": 4}), ("aeffects", {"async_concurrency": 4})],
    ids=["threads", "asyncio"],
)


@pytest.mark.slow
@HANDLER_KINDS
def test_kill_9_only_in_flight_jobs_run_twice(
    effects: Engine,
    spawn: Callable[..., subprocess.Popen[str]],
    queue: str,
    slots: dict[str, int],
    tmp_path: Path,
) -> None:
    # Eight quick jobs, then jobs that work until the test releases them: the victim dies with
    # eight done and its four handlers busy.
    release = tmp_path / "release"
    ids = _enqueue(effects, [{}] * 8, queue)  # an earlier run_at: claimed first
    ids += _enqueue(effects, [{"until": str(release)}] * 52, queue)
    victim = spawn(**slots, lease=2, poll=0.2)
    until(
        lambda: (
            scalar(effects, "SELECT count(*) FROM effects") == 12
            and scalar(effects, "SELECT count(*) FROM jobs WHERE status = 'done'") == 8
        ),
        20,
        "eight jobs done and four handlers busy",
    )
    victim.send_signal(signal.SIGKILL)
    victim.wait(10)
    with effects.connect() as conn:
        in_flight = set(
            conn.execute(text("SELECT id FROM jobs WHERE status = 'running'")).scalars()
        )
    assert in_flight
    release.touch()
    spawn(**slots, lease=2, poll=0.2, reap=0.3)
    until(
        lambda: scalar(effects, "SELECT count(*) FROM jobs WHERE status = 'done'") == len(ids),
        60,
        "the survivor to finish everything",
    )
    with effects.connect() as conn:
        twice = set(
            conn.execute(
                text("SELECT job_id FROM effects GROUP BY job_id HAVING count(*) > 1")
            ).scalars()
        )
        started = set(conn.execute(text("SELECT job_id FROM effects")).scalars())
    assert started == set(ids)  # no job lost
    assert twice <= in_flight  # only the killed worker's jobs ran again


@pytest.mark.slow
def test_with_default_options_a_killed_workers_jobs_run_again_within_a_minute(
    effects: Engine, spawn: Callable[..., subprocess.Popen[str]], tmp_path: Path
) -> None:
    """No lease, reap or poll option: the worker's defaults alone bring the jobs of a worker
    killed with SIGKILL back to another running worker within 60 seconds."""
    release = tmp_path / "release"  # the jobs work until the survivor started them
    victim_ids = _enqueue(effects, [{"until": str(release)}] * 2, "effects")
    victim = spawn(concurrency=4, lease="default", prefetch=0)
    until(
        lambda: scalar(effects, "SELECT count(*) FROM effects WHERE pid = :p", p=victim.pid) == 2,
        20,
        "the victim to start both jobs",
    )
    survivor = spawn(concurrency=2, lease="default", prefetch=0)
    with effects.connect() as conn:
        held = set(
            conn.execute(
                text("SELECT job_id FROM effects WHERE pid = :p"), {"p": victim.pid}
            ).scalars()
        )
    killed = time.monotonic()
    victim.send_signal(signal.SIGKILL)
    victim.wait(10)
    until(
        lambda: (
            scalar(
                effects,
                "SELECT count(*) FROM effects WHERE pid = :p AND job_id = ANY(:ids)",
                p=survivor.pid,
                ids=list(held),
            )
            == len(held)
        ),
        75,
        "the survivor to start the killed worker's jobs",
    )
    restarted_after = time.monotonic() - killed
    assert restarted_after < 60, restarted_after
    release.touch()
    until(
        lambda: scalar(effects, "SELECT count(*) FROM jobs WHERE status = 'done'") == 2,
        30,
        "both jobs done",
    )
    assert set(victim_ids) >= held


@pytest.mark.slow
def test_job_that_kills_its_worker_ends_failed_via_the_reaper(
    engine: Engine, spawn: Callable[..., subprocess.Popen[str]]
) -> None:
    (job_id,) = _enqueue(engine, [{}], "crash", max_attempts=2)
    deadline = time.monotonic() + 60
    crashes = 0
    while scalar(engine, "SELECT status FROM jobs WHERE id = :id", id=job_id) != "failed":
        assert time.monotonic() < deadline, "the crashing job never failed"
        proc = spawn(concurrency=1, lease=1, poll=0.2, reap=0.3)
        try:
            if proc.wait(5) == 3:
                crashes += 1
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    assert crashes == 2
    row_error = scalar(engine, "SELECT last_error FROM jobs WHERE id = :id", id=job_id)
    assert row_error == "lease expired"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("queue", "slots"),
    [("effects", {"concurrency": 2}), ("aeffects", {"async_concurrency": 2})],
    ids=["threads", "asyncio"],
)
def test_sigterm_finishes_running_and_releases_claimed_jobs(
    effects: Engine,
    spawn: Callable[..., subprocess.Popen[str]],
    queue: str,
    slots: dict[str, int],
    tmp_path: Path,
) -> None:
    release = tmp_path / "release"  # the handlers work until the test releases them
    ids = _enqueue(effects, [{"until": str(release)}] * 10, queue)
    proc = spawn(**slots, prefetch=2, poll=0.2, shutdown=20)
    until(lambda: scalar(effects, "SELECT count(*) FROM effects") == 2, 20, "two handlers")
    claimed = "SELECT count(*) FROM jobs WHERE attempts = 1"
    assert scalar(effects, claimed) == 4  # two running, two prefetched
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    # The prefetched two given back (the stop is in force), the running two still running.
    until(lambda: scalar(effects, claimed) == 2, 10, "the unstarted jobs given back")
    assert proc.poll() is None  # it waits for its handlers
    release.touch()
    assert proc.wait(20) == 0
    assert time.monotonic() - t0 < 10
    with effects.connect() as conn:
        rows = {r.id: r for r in conn.execute(text("SELECT id, status, attempts FROM jobs"))}
        started = set(conn.execute(text("SELECT job_id FROM effects")).scalars())
    assert len(started) == 2
    for job_id in ids:
        expected = ("done", 1) if job_id in started else ("queued", 0)
        assert (rows[job_id].status, rows[job_id].attempts) == expected
