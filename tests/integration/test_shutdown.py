"""A worker's graceful shutdown, with real worker processes (``worker_app.py``) and a real
SIGTERM: the leases of running handlers are kept during the grace, and a handler that stops on
``job.stopping`` gives its job back with ``raise pgqueue.Snooze(0)``."""

from __future__ import annotations

import signal
import subprocess
import threading
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, text
from worker_helpers import scalar, until

import pgqueue


def test_leases_of_running_handlers_are_kept_during_the_shutdown_grace(
    effects: Engine, spawn: Callable[..., subprocess.Popen[str]], tmp_path: Path
) -> None:
    # Issue #20 item 1: the heartbeat used to stop at SIGTERM, the lease (3 s) ran out inside
    # the grace (10 s), the other worker's reaper requeued the job and ran attempt 2 while the
    # first handler still ran. Here the handler runs until the test releases it.
    release = tmp_path / "release"
    lease, reap = timedelta(seconds=3), timedelta(seconds=0.5)
    with effects.begin() as conn:
        job_id = pgqueue.enqueue(conn, {"until": str(release)}, queue="effects")
    first = spawn(concurrency=1, lease=lease.seconds, shutdown=10, poll=0.2)
    until(lambda: scalar(effects, "SELECT count(*) FROM effects") == 1, 20, "the handler")
    second = spawn(concurrency=1, lease=lease.seconds, reap=reap.total_seconds(), poll=0.2)
    until(lambda: scalar(effects, "SELECT count(*) FROM jobs_workers") == 2, 20, "both workers")
    signalled = scalar(effects, "SELECT now()")
    first.send_signal(signal.SIGTERM)
    # Past the end of the lease the job had at the signal, and two of the second worker's reaps
    # after it: the lease is still ahead, the job still the first worker's.
    until(
        lambda: scalar(effects, "SELECT now() > :t", t=signalled + lease + 2 * reap),
        20,
        "the lease of the signal's time to be over",
    )
    assert first.poll() is None  # still in its grace, waiting for its handler
    assert scalar(effects, "SELECT locked_until > now() FROM jobs WHERE id = :id", id=job_id)
    release.touch()
    assert first.wait(20) == 0
    second.send_signal(signal.SIGTERM)
    assert second.wait(20) == 0
    with effects.connect() as conn:
        runs = conn.execute(text("SELECT job_id, attempts, pid FROM effects")).all()
        row = conn.execute(
            text("SELECT status, attempts FROM jobs WHERE id = :id"), {"id": job_id}
        ).one()
    assert [(r.job_id, r.attempts, r.pid) for r in runs] == [(job_id, 1, first.pid)]
    assert (row.status, row.attempts) == ("done", 1)


def test_a_handler_still_running_at_the_deadline_is_left_to_its_lease(engine: Engine) -> None:
    """The grace extends the lease; the deadline ends the extensions (the job is reaped after)."""
    release = threading.Event()
    started = threading.Event()

    def stubborn(job: pgqueue.JobContext) -> None:
        started.set()
        release.wait(30)  # ignores job.stopping on purpose

    with engine.begin() as conn:
        job_id = pgqueue.enqueue(conn, {}, queue="stuck")
    lease = timedelta(seconds=1.5)  # a beat every 0.5 s
    worker = pgqueue.Worker(
        engine,
        {"stuck": stubborn},
        concurrency=1,
        lease=lease,
        shutdown_timeout=1.5,
        poll_interval=0.2,
        listen=False,
        install_signal_handlers=False,
    )
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        # The handler itself, not only the claim: a job claimed but not yet started when the
        # stop comes is given back at once (a busy machine can start the thread that late).
        assert started.wait(20), "the handler never started"
        stopped_at = scalar(engine, "SELECT now()")
        worker.stop()
        thread.join(20)
        assert not thread.is_alive()
        ended = _locked_until(engine, job_id)
        assert ended > stopped_at + lease  # extended during the grace
        # No beat after the deadline: the lease runs out (a beat every 0.5 s would have moved
        # it twice meanwhile).
        until(lambda: scalar(engine, "SELECT now() > :t", t=ended), 10, "the lease's end")
        assert _locked_until(engine, job_id) == ended
        until(lambda: _reap(engine) == [job_id], 10, "the lease to expire")
    finally:
        release.set()
    assert worker.stats.lost == 0
    assert (_status(engine, job_id), scalar(engine, "SELECT attempts FROM jobs")) == ("queued", 1)


def _locked_until(engine: Engine, job_id: int) -> Any:
    return scalar(engine, "SELECT locked_until FROM jobs WHERE id = :id", id=job_id)


def _status(engine: Engine, job_id: int) -> Any:
    return scalar(engine, "SELECT status FROM jobs WHERE id = :id", id=job_id)


def _reap(engine: Engine) -> list[int]:
    with engine.begin() as conn:
        return [r.id for r in pgqueue.reap_expired(conn)]


def test_a_handler_that_stops_on_job_stopping_gives_its_job_back_with_snooze(
    effects: Engine, spawn: Callable[..., subprocess.Popen[str]], tmp_path: Path
) -> None:
    # Issue #20 item 2: a handler returning early on job.stopping got its unfinished job marked
    # done. ``raise pgqueue.Snooze(0)`` gives it back without using up an attempt, so even with
    # max_attempts=1 a later worker runs it to the end. Its work lasts until the test releases it.
    release = tmp_path / "release"
    with effects.begin() as conn:
        job_id = pgqueue.enqueue(conn, {"until": str(release)}, queue="polite", max_attempts=1)
    first = spawn(concurrency=1, lease=3, shutdown=10, poll=0.2)
    until(lambda: scalar(effects, "SELECT count(*) FROM effects") == 1, 20, "the handler")
    first.send_signal(signal.SIGTERM)
    assert first.wait(20) == 0
    with effects.connect() as conn:
        given_back = conn.execute(
            text(
                "SELECT status, attempts, max_attempts, snoozes, run_at <= now() AS ready,"
                " locked_until, last_error, finished_at FROM jobs WHERE id = :id"
            ),
            {"id": job_id},
        ).one()
    assert tuple(given_back) == ("queued", 1, 2, 1, True, None, None, None)

    release.touch()  # the next run works to the end
    second = spawn(concurrency=1, lease=3, poll=0.2, until_empty=1)
    assert second.wait(20) == 0
    with effects.connect() as conn:
        runs = conn.execute(text("SELECT attempts, pid FROM effects ORDER BY attempts")).all()
        row = conn.execute(
            text("SELECT status, attempts, max_attempts, snoozes FROM jobs WHERE id = :id"),
            {"id": job_id},
        ).one()
    assert [tuple(r) for r in runs] == [(1, first.pid), (2, second.pid)]
    assert tuple(row) == ("done", 2, 2, 1)
