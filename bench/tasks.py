"""Tasks against queue handlers (#22): the no-op drain of tasks, and of a task returning 1 KB.

``python -m bench.tasks [--url URL] [--jobs N] [--rounds R]``

Each round drains ``N`` jobs with one fresh worker process per kind and concurrency (4 and 8):
the no-op queue handler (``sync-noop``), the no-op task (``task-noop``: the job names
``bench.noop``, the worker decodes its arguments and calls it, ``None`` stored as NULL) and a
task returning a 1 KB result (``task-1kb``: 1,024 bytes of JSON written into ``jobs.result`` by
the batched completion). The kinds alternate inside each round, so a busy machine slows all of
them alike; the figures are the medians over the rounds of each task drain's ratio to the
handler drain of the same round and concurrency (targets: >= 0.9x and >= 0.85x).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from typing import Any

from bench import _db
from bench.drain import run_worker

KINDS = ("sync-noop", "task-noop", "task-1kb")
CONCURRENCY = (4, 8)
TARGETS = {"task-noop": 0.9, "task-1kb": 0.85}


def run(url: Any, jobs: int, rounds: int, timeout: float = 600.0) -> dict[str, Any]:
    """Every round's jobs/s by ``(kind, concurrency)``, and each task kind's median ratio."""
    per_round: list[dict[str, float]] = []
    for _ in range(rounds):
        figures: dict[str, float] = {}
        for concurrency in CONCURRENCY:
            for kind in KINDS:
                result = run_worker(url, jobs, concurrency, timeout, handler=kind)
                if result["done"] != jobs:
                    raise RuntimeError(f"{kind} c={concurrency}: {result}")
                figures[f"{kind} c={concurrency}"] = result["jobs_per_s"]
        per_round.append(figures)
        print(json.dumps(figures), file=sys.stderr, flush=True)
    ratios: dict[str, float] = {}
    for concurrency in CONCURRENCY:
        base = f"sync-noop c={concurrency}"
        for kind in TARGETS:
            key = f"{kind} c={concurrency}"
            ratios[key] = statistics.median(r[key] / r[base] for r in per_round)
    medians = {k: statistics.median(r[k] for r in per_round) for k in per_round[0]}
    return {"jobs": jobs, "rounds": per_round, "median_jobs_per_s": medians, "ratios": ratios}


def cpu_per_job(n: int = 20_000) -> dict[str, float]:
    """Microseconds of CPU (``time.process_time``) the worker's own Python spends per job on the
    path tasks change, without a database: the handler or task call through the executor
    (dispatch, argument decoding, ``current_job``, the result's encoding) and the completer's
    parameters for a flush of 500 (``None`` results: the plain ``COMPLETE_MANY``'s; 1 KB ones:
    the JSON array text). Less noisy than the drains on a loaded machine.
    """
    import time

    from bench.drain_worker import REGISTRY, noop
    from pgqueue._sql import calls
    from pgqueue._worker.dispatch import Dispatch
    from pgqueue._worker.executors import call_sync
    from pgqueue._worker.window import Held, Lane
    from pgqueue.jobs import JobContext

    dispatch = Dispatch({"bench": noop}, REGISTRY.tasks)
    jobs = {
        "sync-noop": JobContext(1, "bench", {"i": 1}, 1),
        "task-noop": JobContext(1, "bench", {"args": [1], "kwargs": {}}, 1, task="bench.noop"),
        "task-1kb": JobContext(1, "bench", {"args": [1], "kwargs": {}}, 1, task="bench.kb"),
    }
    out: dict[str, float] = {}
    for kind, job in jobs.items():
        held = [Held(job, Lane.THREADS, 0.0) for _ in range(n)]
        t0 = time.process_time()
        for h in held:
            call_sync(dispatch.target(h.job), h, None)
        out[f"{kind} call"] = (time.process_time() - t0) / n * 1e6
        batch = [(i, 1, held[0].result, None) for i in range(500)]
        rounds = max(1, n // 500)
        t0 = time.process_time()
        for _ in range(rounds):
            if held[0].result is None:
                calls.complete_many([(i, 1) for i in range(500)], 1000)
            else:
                calls.complete_many_with_results(batch, 1000)
        out[f"{kind} flush params"] = (time.process_time() - t0) / (rounds * 500) * 1e6
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.tasks", description=__doc__)
    parser.add_argument("--url", help="a PostgreSQL server URL (default: the embedded one)")
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs per drain (20,000)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (5)")
    parser.add_argument(
        "--cpu", action="store_true", help="only the CPU per job of the worker's Python path"
    )
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.cpu:
        for key, us in cpu_per_job().items():
            print(f"{key:>24}: {us:6.2f} us CPU per job")
        return 0
    with _db.server(args.url) as (server_url, _), _db.throwaway_database(server_url) as url:
        out = run(url, args.jobs, args.rounds)
    for key, median in out["median_jobs_per_s"].items():
        print(f"{key:>16}: {median:8.0f} jobs/s (median)")
    for key, ratio in out["ratios"].items():
        kind = key.split()[0]
        verdict = "ok" if ratio >= TARGETS[kind] else "BELOW TARGET"
        print(f"{key:>16}: {ratio:.2f}x the handler drain (target >= {TARGETS[kind]}x) {verdict}")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
