"""``--processes 1`` against ``--processes 2``: the same drain through ``pgqueue worker --burst``.

``python -m bench.processes [--url SERVER_URL] [--jobs N] [--cpu-ms MS] [--rounds R]``

Two handlers (:data:`HANDLERS`): ``cpu`` spins pure Python for ``--cpu-ms`` milliseconds per job
(it holds the GIL: one process runs one at a time, whatever its thread count) and ``noop``
returns at once. Each round fills the queue, then runs ``pgqueue worker bench.processes:<handler>
--processes P --burst --concurrency 4`` for every (handler, P), interleaved so that other work on
the machine hits every variant alike, and times the command from start to exit (process start-up
and imports included). Prints one JSON line per run and a summary (median jobs/s per variant).
Not part of ``.ci/run``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

import pgqueue
from bench import _db

#: Milliseconds of pure-Python work per ``cpu`` job (``PGQUEUE_BENCH_CPU_MS`` in the children).
DEFAULT_CPU_MS = 5.0


def cpu(job: pgqueue.JobContext) -> None:
    """A CPU-bound job: pure-Python arithmetic for ``PGQUEUE_BENCH_CPU_MS`` ms of thread time."""
    budget = float(os.environ.get("PGQUEUE_BENCH_CPU_MS", DEFAULT_CPU_MS)) / 1000
    end = time.thread_time() + budget
    x = 0
    while time.thread_time() < end:
        for i in range(1000):
            x += i * i


def noop(job: pgqueue.JobContext) -> None:
    """Returns at once."""


cpu_handlers = {_db.QUEUE: cpu}
noop_handlers = {_db.QUEUE: noop}
HANDLERS = {"cpu": "bench.processes:cpu_handlers", "noop": "bench.processes:noop_handlers"}


def drain(url_text: str, target: str, processes: int, cpu_ms: float) -> float:
    """Seconds ``pgqueue worker TARGET --processes P --burst`` took to exit 0."""
    env = dict(os.environ, PGQUEUE_BENCH_CPU_MS=str(cpu_ms))
    cmd = [sys.executable, "-m", "pgqueue", "worker", target, "--url", url_text, "--burst"]
    cmd += ["--processes", str(processes), "--concurrency", "4", "--poll-interval", "0.5"]
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stderr=subprocess.DEVNULL, timeout=900)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.processes", description=__doc__)
    parser.add_argument("--url", help="a server URL (default: the embedded PostgreSQL)")
    parser.add_argument("--jobs", type=int, default=2_000, help="jobs per run (default 2000)")
    parser.add_argument("--noop-jobs", type=int, default=20_000, help="no-op jobs per run")
    parser.add_argument("--cpu-ms", type=float, default=DEFAULT_CPU_MS)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    results: dict[tuple[str, int], list[float]] = {}
    with _db.server(args.url) as (server_url, _), _db.throwaway_database(server_url) as url:
        url_text = url.render_as_string(hide_password=False)
        for round_ in range(args.rounds):
            for handler, target in HANDLERS.items():
                jobs = args.jobs if handler == "cpu" else args.noop_jobs
                # Alternate which variant goes first from round to round.
                order = (1, 2) if round_ % 2 == 0 else (2, 1)
                for processes in order:
                    _db.reset(url)
                    _db.fill(url, jobs)
                    seconds = drain(url_text, target, processes, args.cpu_ms)
                    assert _db.count(url, "done") == jobs, "not every job was done"
                    rate = jobs / seconds
                    results.setdefault((handler, processes), []).append(rate)
                    row: dict[str, Any] = {
                        "round": round_,
                        "handler": handler,
                        "processes": processes,
                        "jobs": jobs,
                        "seconds": round(seconds, 2),
                        "jobs_per_s": round(rate),
                    }
                    print(json.dumps(row), flush=True)
    for (handler, processes), rates in sorted(results.items()):
        print(
            f"{handler:5} --processes {processes}: median {statistics.median(rates):,.0f} jobs/s "
            f"(runs: {', '.join(f'{r:,.0f}' for r in rates)})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
