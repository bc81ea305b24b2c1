"""The claim of 10 with priorities: beside a future backlog at higher priorities, and beside a large
ready backlog, each against a small ready queue (the baseline)."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.engine import URL

import pgqueue
from bench import _db
from bench.latency import summary

LIMIT = 10
BATCH = 1_000
#: How far ahead the future backlog is scheduled.
FUTURE = timedelta(hours=1)


def _enqueue(
    url: URL, engine: Engine, n: int, priorities: range, delay: timedelta | None = None
) -> None:
    """``n`` jobs split evenly over ``priorities`` (``enqueue_many`` by 1,000), VACUUM ANALYZE."""
    per_level = n // len(priorities)
    with engine.begin() as conn:
        for priority in priorities:
            for start in range(0, per_level, BATCH):
                payloads = [{"i": i} for i in range(start, min(start + BATCH, per_level))]
                pgqueue.enqueue_many(
                    conn, payloads, queue=_db.QUEUE, priority=priority, delay=delay
                )
    _db.analyze(url)


def claim_ms(engine: Engine) -> tuple[float, list[pgqueue.ClaimedJob]]:
    """One claim of 10 in a transaction that is rolled back (the table stays as it is): the ms of
    the claim statement's round trip, and the jobs it claimed."""
    with engine.connect() as conn, conn.begin() as tx:
        conn.exec_driver_sql("SELECT 1")  # psycopg's BEGIN goes with it, outside the timing
        t0 = time.perf_counter()
        claimed = pgqueue.claim(conn, queue=_db.QUEUE, limit=LIMIT)
        elapsed = (time.perf_counter() - t0) * 1000.0
        tx.rollback()
    if len(claimed) != LIMIT:
        raise RuntimeError(f"claimed {len(claimed)} jobs, not {LIMIT}")
    return elapsed, claimed


def _claims(engine: Engine, samples: int) -> dict[str, Any]:
    """p50, p90 (and p99, max) of ``samples`` claims; the priorities they claimed."""
    times = []
    priorities: set[int] = set()
    for _ in range(samples):
        elapsed, claimed = claim_ms(engine)
        times.append(elapsed)
        priorities.update(job.priority for job in claimed)
    return {**summary(times), "claimed_priorities": sorted(priorities)}


def run(
    url: URL, engine: Engine, *, ready: int, future: int, backlog: int, samples: int
) -> dict[str, Any]:
    """Claims of 10 from: ``ready`` jobs at priority 0 (the baseline); the same plus ``future``
    jobs due in an hour at priorities 5-9; after emptying, ``backlog`` ready jobs at 0-9."""
    _db.reset(url)
    _enqueue(url, engine, ready, range(1))
    baseline = _claims(engine, samples)
    _enqueue(url, engine, future, range(5, 10), FUTURE)
    with_future = _claims(engine, samples)
    _db.reset(url)
    _enqueue(url, engine, backlog, range(10))
    with_backlog = _claims(engine, samples)
    _db.reset(url)
    return {
        "limit": LIMIT,
        "samples": samples,
        "ready": ready,
        "future": future,
        "backlog": backlog,
        "baseline": baseline,
        "future_backlog": with_future,
        "ready_backlog": with_backlog,
        "future_ratio": with_future["p50_ms"] / baseline["p50_ms"],
        "backlog_ratio": with_backlog["p50_ms"] / baseline["p50_ms"],
    }
