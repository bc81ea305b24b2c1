"""``pgqueue worker --processes N`` under real faults: real processes, signals, kill -9, probes.

Each run is ``python -m pgqueue worker scale_app:handlers --processes N`` (see scale_app.py); the
supervisor's log goes to a file, and every process it started is killed at teardown.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.engine import URL
from worker_helpers import scalar, until

import pgqueue
from pgqueue import admin
from tests.cli.conftest import run_pgqueue

HERE = Path(__file__).parent


@dataclass
class Supervised:
    proc: subprocess.Popen[bytes]
    log: Path

    def text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    def child_pids(self) -> list[int]:
        return [int(p) for p in re.findall(r"worker \d+: started pid (\d+)", self.text())]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def probe(port: int, path: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, json.loads(exc.read())
    except urllib.error.URLError as exc:  # not listening yet
        return 0, {"error": str(exc.reason)}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped by its parent) is not running.
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        return stat.read().split(") ", 1)[1][0] != "Z"


@pytest.fixture
def effects(engine: Engine) -> Engine:
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE effects (job_id bigint, attempts int, pid int)"))
    return engine


@pytest.fixture
def supervise(db_url: URL, tmp_path: Path) -> Iterator[Callable[..., Supervised]]:
    runs: list[Supervised] = []
    url = db_url.render_as_string(hide_password=False)

    def start(*args: str, target: str = "scale_app:handlers", cwd: Path = HERE) -> Supervised:
        log = tmp_path / f"supervisor-{len(runs)}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "pgqueue", "worker", target, "--url", url, *args],
                cwd=cwd,
                env=dict(os.environ, PGQUEUE_APP_URL=url),
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        run = Supervised(proc, log)
        runs.append(run)
        return run

    yield start
    for run in runs:
        if run.proc.poll() is None:
            run.proc.kill()
        run.proc.wait(10)
        for pid in run.child_pids():  # children run in sessions of their own
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def _enqueue(engine: Engine, payloads: list[Any], queue: str = "effects") -> list[int]:
    with engine.begin() as conn:
        return pgqueue.enqueue_many(conn, payloads, queue=queue)


def test_two_processes_drain_five_thousand_jobs_exactly_once(
    effects: Engine, supervise: Callable[..., Supervised]
) -> None:
    _enqueue(effects, [{}] * 5_000)
    run = supervise("--processes", "2", "--burst", "--poll-interval", "0.2")
    assert run.proc.wait(180) == 0, run.text()
    assert scalar(effects, "SELECT count(*) FROM jobs WHERE status = 'done'") == 5_000
    assert scalar(effects, "SELECT count(*) FROM effects") == 5_000
    assert scalar(effects, "SELECT count(DISTINCT job_id) FROM effects") == 5_000
    assert scalar(effects, "SELECT max(attempts) FROM jobs") == 1
    pids = set(scalar(effects, "SELECT array_agg(DISTINCT pid) FROM effects"))
    assert len(pids) == 2
    assert pids == set(run.child_pids())  # the handlers ran in the children, not the supervisor
    assert run.proc.pid not in pids
    log = run.text()
    assert re.search(r"\[worker-1 pid \d+\]", log)
    assert re.search(r"\[worker-2 pid \d+\]", log)
    assert log.count("drained and exited") == 2


def test_sigterm_stops_every_child_cleanly_and_charges_no_unstarted_job(
    effects: Engine, supervise: Callable[..., Supervised], tmp_path: Path
) -> None:
    release = tmp_path / "release"  # the handlers work until the test releases them
    ids = _enqueue(effects, [{"until": str(release)}] * 20)
    run = supervise("--processes", "2", "--concurrency", "2", "--poll-interval", "0.2")
    until(lambda: scalar(effects, "SELECT count(*) FROM effects") == 4, 30, "four handlers")
    # Two running and two prefetched per process.
    claimed = "SELECT count(*) FROM jobs WHERE attempts = 1"
    until(lambda: scalar(effects, claimed) == 8, 10, "both processes to prefetch")
    run.proc.send_signal(signal.SIGTERM)
    # Both children stopped claiming and gave their prefetched jobs back; their handlers run.
    until(lambda: scalar(effects, claimed) == 4, 30, "the unstarted jobs given back")
    release.touch()
    assert run.proc.wait(60) == 0, run.text()
    with effects.connect() as conn:
        rows = {r.id: r for r in conn.execute(text("SELECT id, status, attempts FROM jobs"))}
        started = set(conn.execute(text("SELECT job_id FROM effects")).scalars())
    assert len(started) == 4
    for job_id in ids:
        expected = ("done", 1) if job_id in started else ("queued", 0)
        assert (rows[job_id].status, rows[job_id].attempts) == expected
    assert "every worker process stopped cleanly" in run.text()
    assert not any(_alive(pid) for pid in run.child_pids())


def test_a_killed_child_is_restarted_and_every_job_completes(
    effects: Engine, supervise: Callable[..., Supervised]
) -> None:
    ids = _enqueue(effects, [{"sleep": 0.2}] * 60)
    port = free_port()
    run = supervise(
        "--processes", "2", "--concurrency", "2", "--lease", "2s", "--poll-interval", "0.2",
        "--health-port", str(port),
    )  # fmt: skip
    until(lambda: probe(port, "/readyz")[0] == 200, 30, "both children ready")
    assert probe(port, "/livez") == (
        200,
        {"status": "ok", "checks": {"worker-1": "ok", "worker-2": "ok"}},
    )
    until(lambda: scalar(effects, "SELECT count(DISTINCT pid) FROM effects") == 2, 30, "work")
    victim = scalar(effects, "SELECT pid FROM effects ORDER BY job_id DESC LIMIT 1")
    os.kill(victim, signal.SIGKILL)
    seen: list[dict[str, Any]] = []

    def restarting() -> bool:
        code, body = probe(port, "/livez")
        seen.append(body)
        return code == 503 and "restarting" in body["checks"].values()

    until(restarting, 10, "the aggregated probe to report the restart")
    until(
        lambda: scalar(effects, "SELECT count(*) FROM jobs WHERE status = 'done'") == len(ids),
        90,
        "every job done after the restart",
    )
    assert set(scalar(effects, "SELECT array_agg(DISTINCT job_id) FROM effects")) == set(ids)
    assert re.search(rf"worker \d \(pid {victim}\) killed by SIGKILL .* restarting in", run.text())
    assert len(run.child_pids()) == 3
    until(lambda: probe(port, "/readyz")[0] == 200, 30, "the restarted child ready")
    run.proc.send_signal(signal.SIGTERM)
    assert run.proc.wait(60) == 0, run.text()


def test_doctor_counts_each_worker_process_connections(
    db_url: URL, effects: Engine, supervise: Callable[..., Supervised]
) -> None:
    port = free_port()
    run = supervise("--processes", "2", "--health-port", str(port))
    until(lambda: probe(port, "/readyz")[0] == 200, 30, "both children ready")
    result = run_pgqueue(
        "doctor",
        "--json",
        env={"PGQUEUE_DATABASE_URL": db_url.render_as_string(hide_password=False)},
    )
    findings = {f["check"]: f for f in result.json()["findings"]}
    here = [r for r in findings["connections"]["details"] if r["database"] == db_url.database]
    host = socket.gethostname()
    assert sorted(r["application_name"] for r in here) == sorted(
        f"pgqueue-worker:{host}:{pid}" for pid in run.child_pids()
    )
    # Each idle worker process: claimer/heartbeat on the pool, its LISTEN connection.
    assert all(r["connections"] >= 2 for r in here), here
    assert "2 process(es)" in findings["connections"]["message"]
    run.proc.send_signal(signal.SIGTERM)
    assert run.proc.wait(60) == 0, run.text()


def test_children_stop_when_the_supervisor_is_killed(
    effects: Engine, supervise: Callable[..., Supervised]
) -> None:
    port = free_port()
    run = supervise("--processes", "2", "--health-port", str(port))
    until(lambda: probe(port, "/readyz")[0] == 200, 30, "both children ready")
    children = run.child_pids()
    run.proc.send_signal(signal.SIGKILL)
    run.proc.wait(10)
    until(lambda: not any(_alive(pid) for pid in children), 30, "orphaned children to stop")
    assert "the supervisor went away: stopping" in run.text()


def test_a_target_that_cannot_be_imported_stops_the_supervisor_at_once(
    supervise: Callable[..., Supervised],
) -> None:
    run = supervise("--processes", "2", target="no_such_module_here:handlers")
    t0 = time.monotonic()
    assert run.proc.wait(60) == 2, run.text()
    assert time.monotonic() - t0 < 30
    last = run.text().strip().splitlines()[-1]
    assert last.startswith("pgqueue: error: worker "), last
    assert "failed at start-up: cannot import 'no_such_module_here'" in last
    assert "Traceback" not in run.text()


def test_a_child_that_dies_before_it_started_stops_after_three_tries(
    supervise: Callable[..., Supervised], tmp_path: Path, db_url: URL
) -> None:
    # An exception at import is a start-up error (exit 2 at once, tests/cli); a process that
    # dies with no exception to report (here os._exit) is retried, twice.
    (tmp_path / "crashing_app.py").write_text("import os\nos._exit(3)\n")
    run = supervise("--processes", "1", target="crashing_app:handlers", cwd=tmp_path)
    assert run.proc.wait(20) == 3  # one process: no supervisor
    assert "supervisor" not in run.text()
    run = supervise("--processes", "2", target="crashing_app:handlers", cwd=tmp_path)
    assert run.proc.wait(60) == 1, run.text()
    text_ = run.text()
    assert "failed at start-up (exit code 3 before it started" in text_
    assert text_.strip().splitlines()[-1].startswith("pgqueue: error: worker ")
    assert not db_url.password or db_url.password not in text_


def test_each_child_is_a_worker_of_its_own_name_row_and_jobs(
    effects: Engine, supervise: Callable[..., Supervised], tmp_path: Path
) -> None:
    # Two running and up to two prefetched per child: both children get some. The handlers work
    # until the test releases them.
    release = tmp_path / "release"
    _enqueue(effects, [{"until": str(release)}] * 8)
    port = free_port()
    run = supervise(
        "--processes", "2", "--concurrency", "2", "--poll-interval", "0.2",
        "--health-port", str(port),
    )  # fmt: skip
    until(lambda: probe(port, "/readyz")[0] == 200, 30, "both children ready")
    until(lambda: scalar(effects, "SELECT count(*) FROM effects") == 4, 30, "four handlers")
    host = socket.gethostname()
    names = {f"pgqueue-worker:{host}:{pid}" for pid in run.child_pids()}
    with effects.connect() as conn:
        workers = admin.connected_workers(conn)
        rows = {r.name: r for r in conn.execute(text("SELECT * FROM jobs_workers"))}
        holders = dict(conn.execute(text("SELECT job_id, pid FROM effects")).all())
        locked_by = dict(conn.execute(text("SELECT id, locked_by FROM jobs")).all())
        running = dict(
            conn.execute(
                text("SELECT locked_by, count(*) FROM jobs WHERE status = 'running' GROUP BY 1")
            ).all()
        )
    assert {w["name"] for w in workers} == names == set(rows)
    assert [w["queues"] for w in workers] == [["effects"], ["effects"]]
    assert {w["name"]: w["jobs_held"] for w in workers} == running
    assert all(w["jobs_held"] >= 2 for w in workers), workers
    assert {(r.host, r.pid) for r in rows.values()} == {(host, p) for p in run.child_pids()}
    # Each job is held by the child whose handler runs it.
    assert {j: f"pgqueue-worker:{host}:{p}" for j, p in holders.items()} == {
        j: locked_by[j] for j in holders
    }
    run.proc.send_signal(signal.SIGTERM)
    release.touch()
    assert run.proc.wait(90) == 0, run.text()
    assert scalar(effects, "SELECT count(*) FROM jobs_workers") == 0
