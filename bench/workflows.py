"""Workflows (#24): a fan-out of many members with one fan-in against as many independent jobs,
and what the dependency machinery costs jobs that have none (the no-op drain with and without
pgqueue_0013, interleaved) and the claim (100,000 waiting jobs beside a small ready queue).

``python -m bench.workflows [--url URL] [--members N]``: prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any

from sqlalchemy import Engine, text
from sqlalchemy.engine import URL

import pgqueue
import pgqueue.migrations
from bench import _db, claim, drain

#: ``enqueue_many`` batch of the fan-out's members.
BATCH = 1_000


def _enqueue_fan_out(engine: Engine, members: int) -> tuple[float, list[int], int]:
    """The members in batches, then one job depending on all of them, in one transaction:
    (seconds, member ids, fan-in id)."""
    t0 = time.perf_counter()
    with engine.begin() as conn:
        ids: list[int] = []
        for start in range(0, members, BATCH):
            ids += pgqueue.enqueue_many(
                conn, [{"i": i} for i in range(start, min(start + BATCH, members))], queue=_db.QUEUE
            )
        fan_in = pgqueue.enqueue(conn, {"fan_in": True}, queue=_db.QUEUE, depends_on=ids)
    return time.perf_counter() - t0, ids, fan_in


def _enqueue_independent(engine: Engine, jobs: int) -> float:
    t0 = time.perf_counter()
    with engine.begin() as conn:
        for start in range(0, jobs, BATCH):
            pgqueue.enqueue_many(
                conn, [{"i": i} for i in range(start, min(start + BATCH, jobs))], queue=_db.QUEUE
            )
    return time.perf_counter() - t0


def fan_out(
    url: URL, engine: Engine, members: int, concurrency: int, timeout: float
) -> dict[str, Any]:
    """One round: independent jobs (enqueue, drain), then the fan-out and its fan-in."""
    _db.reset(url)
    independent_enqueue = _enqueue_independent(engine, members + 1)
    _db.analyze(url)
    independent = drain.run_worker(url, members + 1, concurrency, timeout, prefilled=True)
    _db.reset(url)
    enqueue_s, _, fan_in = _enqueue_fan_out(engine, members)
    _db.analyze(url)
    flow = drain.run_worker(url, members + 1, concurrency, timeout, prefilled=True)
    with engine.connect() as conn:
        delay = conn.execute(
            text(
                "SELECT extract(epoch FROM f.locked_at - (SELECT max(finished_at) FROM jobs "
                "WHERE id <> f.id)), f.status FROM jobs f WHERE f.id = :id"
            ),
            {"id": fan_in},
        ).one()
    if flow["done"] != members + 1 or delay[1] != "done":
        raise RuntimeError(f"the fan-out did not finish: {flow}, fan-in {delay[1]}")
    return {
        "independent_enqueue_s": independent_enqueue,
        "fan_out_enqueue_s": enqueue_s,
        "independent_jobs_per_s": independent["jobs_per_s"],
        "fan_out_jobs_per_s": flow["jobs_per_s"],
        "drain_ratio": flow["jobs_per_s"] / independent["jobs_per_s"],
        "fan_in_delay_ms": float(delay[0]) * 1000.0,
    }


def drain_cost(
    before: URL, after: URL, jobs: int, concurrency: int, rounds: int, timeout: float
) -> dict[str, Any]:
    """The no-op drain on a database at pgqueue_0012 (``before``: no trigger, no columns; not
    pgqueue_0011, whose schema lacks the ``jobs_queues`` every claim now reads) and one at
    pgqueue_0013, alternated ``rounds`` times; the ratio of the medians (after / before)."""
    rates: dict[str, list[float]] = {"before": [], "after": []}
    for _ in range(rounds):
        for name, url in (("before", before), ("after", after)):
            rates[name].append(drain.run_worker(url, jobs, concurrency, timeout)["jobs_per_s"])
    return {
        "concurrency": concurrency,
        "jobs": jobs,
        **{f"{k}_jobs_per_s": v for k, v in rates.items()},
        "ratio": statistics.median(rates["after"]) / statistics.median(rates["before"]),
    }


def claim_cost(url: URL, engine: Engine, ready: int, waiting: int, samples: int) -> dict[str, Any]:
    """Claims of 10 from ``ready`` jobs, then the same beside ``waiting`` jobs waiting for a job
    that never finishes (at priorities 5-9, as the future backlog of :mod:`bench.claim`)."""
    _db.reset(url)
    with engine.begin() as conn:
        for start in range(0, ready, BATCH):
            pgqueue.enqueue_many(conn, [{}] * min(BATCH, ready - start), queue=_db.QUEUE)
    _db.analyze(url)
    baseline = claim._claims(engine, samples)
    with engine.begin() as conn:
        blocker = pgqueue.enqueue(conn, {}, queue="elsewhere")
        per_level = waiting // 5
        for priority in range(5, 10):
            for start in range(0, per_level, BATCH):
                pgqueue.enqueue_many(
                    conn,
                    [{}] * min(BATCH, per_level - start),
                    queue=_db.QUEUE,
                    priority=priority,
                    depends_on=[blocker],
                )
    _db.analyze(url)
    with_waiting = claim._claims(engine, samples)
    # The same count of future-scheduled jobs instead, as bench.claim's future backlog.
    _db.reset(url)
    with engine.begin() as conn:
        for start in range(0, ready, BATCH):
            pgqueue.enqueue_many(conn, [{}] * min(BATCH, ready - start), queue=_db.QUEUE)
    claim._enqueue(url, engine, waiting, range(5, 10), claim.FUTURE)
    with_future = claim._claims(engine, samples)
    _db.reset(url)
    return {
        "ready": ready,
        "waiting": waiting,
        "baseline_p50_ms": baseline["p50_ms"],
        "waiting_p50_ms": with_waiting["p50_ms"],
        "future_p50_ms": with_future["p50_ms"],
        "ratio": with_waiting["p50_ms"] / baseline["p50_ms"],
        "future_ratio": with_future["p50_ms"] / baseline["p50_ms"],
        "waiting_vs_future": with_waiting["p50_ms"] / with_future["p50_ms"],
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.workflows")
    parser.add_argument("--url", help="a PostgreSQL server (default: an embedded one)")
    parser.add_argument("--members", type=int, default=10_000)
    parser.add_argument("--drain-jobs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", choices=["fan-out", "drain", "claim"], action="append")
    args = parser.parse_args(argv)
    only = set(args.only or ["fan-out", "drain", "claim"])
    timeout = 900.0
    out: dict[str, Any] = {}
    with _db.server(args.url) as (server_url, _), _db.throwaway_database(server_url) as url:
        engine = _db.make_engine(url)
        try:
            if "claim" in only:
                out["claim"] = claim_cost(url, engine, 1_000, 100_000, 200)
            if "fan-out" in only:
                out["fan_out"] = [
                    fan_out(url, engine, args.members, 4, timeout) for _ in range(args.rounds)
                ]
            if "drain" in only:
                with _db.throwaway_database(server_url) as before:
                    pgqueue.migrations.downgrade(before, "pgqueue_0012")
                    out["drain"] = [
                        drain_cost(before, url, args.drain_jobs, c, args.rounds, timeout)
                        for c in (4, 8)
                    ]
        finally:
            engine.dispose()
    json.dump(out, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
