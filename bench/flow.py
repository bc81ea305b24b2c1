"""What flow control (#23) costs: the no-op drain of a queue with and without limits.

``python -m bench.flow [--url SERVER_URL] [--jobs N] [--rounds R] [--before DIR]``

Each round drains the same no-op jobs in every variant, interleaved (the order turns each round),
so other work on the machine hits every variant alike, and prints one JSON line per run:

- ``before`` / ``after``: one ``bench.drain_worker`` process (concurrency 4, the drain the other
  figures of docs/benchmarks.md use) on a queue without limits, with the code in ``--before``
  (a checkout without this change; skipped when not given) and with this one.
- ``unlimited-2p``, ``concurrency100-2p``, ``per_key1-2p``: ``pgqueue worker --processes 2
  --burst --concurrency 4`` on a queue without limits, with ``concurrency=100``, and with
  ``per_key=1`` over 100 keys (job ``i`` has key ``k<i mod 100>``).

Then ``idle``: the CPU seconds a worker process spends in 10 s while its queue is at its limit
(``concurrency=1``, held by another worker's 30-second job, 1,000 jobs ready). Not part of
``.ci/run``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from sqlalchemy.engine import URL

from bench import _db

ROOT = Path(__file__).resolve().parent.parent
KEYS = 100


def _limits(url: URL, sql: str | None) -> None:
    with _db.admin_connect(url) as conn:
        conn.execute("DELETE FROM jobs_queues")
        if sql is not None:
            conn.execute(sql, {"queue": _db.QUEUE})


def _keys(url: URL) -> None:
    with _db.admin_connect(url) as conn:
        conn.execute(
            "UPDATE jobs SET concurrency_key = 'k' || ((payload->>'i')::int %% %(keys)s)",
            {"keys": KEYS},
        )
    _db.analyze(url)


def _single(url: URL, cwd: Path) -> float:
    """Seconds of one ``bench.drain_worker`` run (its own timing of the drain)."""
    cmd = [sys.executable, "-m", "bench.drain_worker", url.render_as_string(hide_password=False)]
    cmd += ["4", "default", "default"]
    env = dict(os.environ, PYTHONPATH=str(cwd))
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=env, check=True)
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return float(result["seconds"])


def _processes(url: URL) -> float:
    cmd = [sys.executable, "-m", "pgqueue", "worker", "bench.processes:noop_handlers"]
    cmd += ["--url", url.render_as_string(hide_password=False), "--burst"]
    cmd += ["--processes", "2", "--concurrency", "4", "--poll-interval", "0.5"]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stderr=subprocess.DEVNULL, timeout=900, cwd=ROOT)
    return time.perf_counter() - t0


_CONCURRENCY = "INSERT INTO jobs_queues (queue, concurrency) VALUES (%(queue)s, 100)"
_PER_KEY = "INSERT INTO jobs_queues (queue, per_key) VALUES (%(queue)s, 1)"


def _idle_cpu(url: URL) -> dict[str, Any]:
    """CPU seconds of a worker waiting 10 s on a queue at its concurrency limit."""
    _db.reset(url)
    _db.fill(url, 1000)
    _limits(url, "INSERT INTO jobs_queues (queue, concurrency) VALUES (%(queue)s, 1)")
    with _db.admin_connect(url) as conn:  # another worker's job holds the one slot
        conn.execute(
            "UPDATE jobs SET status = 'running', attempts = 1, locked_until = now() + "
            "interval '1 hour' WHERE id = (SELECT min(id) FROM jobs)"
        )
    cmd = [sys.executable, "-m", "pgqueue", "worker", "bench.processes:noop_handlers"]
    cmd += ["--url", url.render_as_string(hide_password=False), "--concurrency", "4"]
    proc = subprocess.Popen(cmd, stderr=subprocess.DEVNULL, cwd=ROOT)
    try:
        time.sleep(3.0)  # start-up and imports
        before = _cpu_seconds(proc.pid)
        time.sleep(10.0)
        spent = _cpu_seconds(proc.pid) - before
    finally:
        proc.terminate()
        proc.wait(30)
    ran = _db.count(url, "done")
    return {"variant": "idle", "cpu_seconds_in_10s": round(spent, 3), "jobs_done": ran}


def _cpu_seconds(pid: int) -> float:
    """User + system CPU of ``pid`` and its children that ran (``/proc``, Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = sum(int(v) for v in fields[11:15])  # utime, stime, cutime, cstime
    return ticks / os.sysconf("SC_CLK_TCK")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.flow", description=__doc__)
    parser.add_argument("--url", help="a server URL (default: the embedded PostgreSQL)")
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs per run (default 20000)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--before", type=Path, help="a checkout of the code before this change")
    args = parser.parse_args(argv)
    variants: list[str] = ["after", "unlimited-2p", "concurrency100-2p", "per_key1-2p"]
    if args.before is not None:
        variants.insert(0, "before")
    rates: dict[str, list[float]] = {}
    with _db.server(args.url) as (server_url, _), _db.throwaway_database(server_url) as url:
        for round_ in range(args.rounds):
            order = variants if round_ % 2 == 0 else variants[::-1]
            for variant in order:
                _db.reset(url)
                _db.fill(url, args.jobs)
                _limits(
                    url, {"concurrency100-2p": _CONCURRENCY, "per_key1-2p": _PER_KEY}.get(variant)
                )
                if variant == "per_key1-2p":
                    _keys(url)
                if variant in ("before", "after"):
                    seconds = _single(url, args.before if variant == "before" else ROOT)
                else:
                    seconds = _processes(url)
                assert _db.count(url, "done") == args.jobs, f"{variant}: not every job was done"
                rate = args.jobs / seconds
                rates.setdefault(variant, []).append(rate)
                row = {"round": round_, "variant": variant, "jobs": args.jobs}
                row |= {"seconds": round(seconds, 2), "jobs_per_s": round(rate)}
                print(json.dumps(row), flush=True)
        print(json.dumps(_idle_cpu(url)), flush=True)
    median = {v: statistics.median(r) for v, r in rates.items()}
    for variant, value in median.items():
        runs = ", ".join(f"{r:,.0f}" for r in rates[variant])
        print(f"{variant:18} median {value:,.0f} jobs/s (runs: {runs})")
    if "before" in median:
        print(f"after / before: {median['after'] / median['before']:.2f}x")
    base = median["unlimited-2p"]
    print(f"concurrency=100 / unlimited (2 processes): {median['concurrency100-2p'] / base:.2f}x")
    print(f"per_key=1 x 100 keys / unlimited (2 processes): {median['per_key1-2p'] / base:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
