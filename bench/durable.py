"""Durable jobs (#33): what jobs awaiting signals cost the drain of the ready ones beside them.

``jobs`` no-op jobs are drained by a fresh worker process alone, then beside ``awaiting`` jobs of
the same queue given back awaiting a signal (``run_at`` in the far future, as the worker's own
give-back leaves them), alternated ``rounds`` times: the ratio of the medians (with / without).

``python -m bench.durable [--url URL] [--jobs N] [--awaiting N] [--rounds N]``: prints one JSON
object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from typing import Any

from sqlalchemy.engine import URL

from bench import _db, drain
from pgqueue.enqueue_options import WAITING_RUN_AT


def _awaiting(url: URL, n: int) -> None:
    """``n`` queued jobs awaiting the signal ``go``, as ``SUSPEND_MANY`` writes them."""
    with _db.admin_connect(url) as conn:
        conn.execute(
            "INSERT INTO jobs (queue, payload, status, attempts, max_attempts, snoozes, run_at,"
            " suspended_until, awaiting_signal) SELECT %(queue)s, '{}', 'queued', 1, 6, 1,"
            " %(far)s, %(far)s, 'go' FROM generate_series(1, %(n)s)",
            {"queue": _db.QUEUE, "n": n, "far": WAITING_RUN_AT},
        )


def round_pair(url: URL, jobs: int, awaiting: int, concurrency: int) -> tuple[float, float]:
    """One drain without, then one beside the awaiting jobs: (jobs/s, jobs/s)."""
    timeout = 900.0
    alone = drain.run_worker(url, jobs, concurrency, timeout)["jobs_per_s"]
    _db.reset(url)
    _awaiting(url, awaiting)
    _db.fill(url, jobs)  # and VACUUM ANALYZE, the awaiting jobs included
    beside = drain.run_worker(url, jobs, concurrency, timeout, prefilled=True)
    if beside["done"] != jobs:
        raise RuntimeError(f"the drain beside awaiting jobs did not finish: {beside}")
    return alone, beside["jobs_per_s"]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.durable")
    parser.add_argument("--url", help="a PostgreSQL server (default: an embedded one)")
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--awaiting", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args(argv)
    rates: dict[str, list[float]] = {"alone": [], "beside_awaiting": []}
    with _db.server(args.url) as (server_url, _), _db.throwaway_database(server_url) as url:
        for _ in range(args.rounds):
            alone, beside = round_pair(url, args.jobs, args.awaiting, args.concurrency)
            rates["alone"].append(alone)
            rates["beside_awaiting"].append(beside)
    out: dict[str, Any] = {
        "jobs": args.jobs,
        "awaiting": args.awaiting,
        "concurrency": args.concurrency,
        **{f"{k}_jobs_per_s": v for k, v in rates.items()},
        "ratio": statistics.median(rates["beside_awaiting"]) / statistics.median(rates["alone"]),
    }
    json.dump(out, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
