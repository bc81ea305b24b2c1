"""Pickup latency under a pinned xmin horizon (#32 item 6).

``python -m bench.horizon [--url SERVER_URL] [--rate R] [--before S] [--hold S] [--after S]``

A producer thread enqueues ``--rate`` jobs a second (a batch every 10 ms), each carrying the
``perf_counter()`` of its batch; one in-process ``Worker`` (concurrency 4, LISTEN on) runs them,
and each handler records how long its job waited (enqueue to handler start). Three phases:
``before`` (``--before`` seconds), ``during`` (another session holds a REPEATABLE READ
transaction that has taken its snapshot, for ``--hold`` seconds: vacuum can remove nothing that
died after it) and ``after`` (``--after`` seconds). Every second the ready index's size and the
table's dead tuples are sampled. Printed: one JSON line per phase (pickup p50/p99 in ms, the
ready index's largest size in kB, jobs run), and the seconds after the transaction ended until a
one-second window's p50 came back within 1.2x of ``before``'s.

Vacuum must be on for the ``after`` phase to mean anything (the CI server turns it off): the
script says so and stops when ``SHOW autovacuum`` is off. Not part of ``.ci/run``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from typing import Any

import psycopg

import pgqueue
from bench import _db
from pgqueue._base.urls import to_libpq_url

BATCH_EVERY = 0.01


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


class Samples:
    """Pickup waits by the second they were measured in (``perf_counter`` seconds)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.waits: list[tuple[float, float]] = []

    def add(self, at: float, wait: float) -> None:
        with self._lock:
            self.waits.append((at, wait))

    def between(self, start: float, end: float) -> list[float]:
        with self._lock:
            return [w for at, w in self.waits if start <= at < end]


def _produce(engine: Any, rate: int, stop: threading.Event) -> None:
    per_batch = max(1, round(rate * BATCH_EVERY))
    next_at = time.perf_counter()
    while not stop.is_set():
        with engine.begin() as conn:
            sent = time.perf_counter()
            pgqueue.enqueue_many(conn, [{"t": sent}] * per_batch, queue=_db.QUEUE)
        next_at += BATCH_EVERY
        time.sleep(max(0.0, next_at - time.perf_counter()))


def _sampler(url: Any, stop: threading.Event, sizes: list[tuple[float, int, int]]) -> None:
    with _db.admin_connect(url) as conn:
        while not stop.wait(1.0):
            row = conn.execute(
                "SELECT pg_relation_size('jobs_ready_idx'), "
                "(SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'jobs')"
            ).fetchone()
            assert row is not None
            sizes.append((time.perf_counter(), int(row[0]), int(row[1] or 0)))


def _phase(
    name: str, samples: Samples, sizes: list[tuple[float, int, int]], start: float, end: float
) -> dict[str, Any]:
    waits = samples.between(start, end)
    kb = [size // 1024 for at, size, _ in sizes if start <= at < end]
    dead = [d for at, _, d in sizes if start <= at < end]
    return {
        "phase": name,
        "jobs": len(waits),
        "p50_ms": round(_percentile(waits, 0.5) * 1000, 2),
        "p99_ms": round(_percentile(waits, 0.99) * 1000, 2),
        "ready_index_kb_max": max(kb, default=0),
        "dead_tuples_max": max(dead, default=0),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.horizon", description=__doc__)
    parser.add_argument("--url", help="a server URL (default: the embedded PostgreSQL)")
    parser.add_argument("--rate", type=int, default=2000, help="jobs per second (default 2000)")
    parser.add_argument("--before", type=float, default=30.0)
    parser.add_argument("--hold", type=float, default=120.0)
    parser.add_argument("--after", type=float, default=60.0)
    args = parser.parse_args(argv)
    with _db.server(args.url) as (server_url, _), _db.throwaway_database(server_url) as url:
        with _db.admin_connect(url) as conn:
            if conn.execute("SHOW autovacuum").fetchone() != ("on",):
                print("autovacuum is off on this server: the figures would mean nothing")
                return 2
        engine = _db.make_engine(url, pool_size=10)
        samples = Samples()

        def handler(job: pgqueue.JobContext) -> None:
            now = time.perf_counter()
            samples.add(now, now - float(job.payload["t"]))

        worker = pgqueue.Worker(
            engine, {_db.QUEUE: handler}, concurrency=4, install_signal_handlers=False
        )
        stop = threading.Event()
        sizes: list[tuple[float, int, int]] = []
        threads = [
            threading.Thread(target=worker.run, daemon=True),
            threading.Thread(target=_produce, args=(engine, args.rate, stop), daemon=True),
            threading.Thread(target=_sampler, args=(url, stop, sizes), daemon=True),
        ]
        for t in threads:
            t.start()
        t0 = time.perf_counter()
        time.sleep(args.before)
        t1 = time.perf_counter()
        with psycopg.connect(to_libpq_url(url)) as pin:
            pin.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            pin.execute("SELECT count(*) FROM jobs_queues")  # the snapshot is taken here
            time.sleep(args.hold)
            pin.rollback()
        t2 = time.perf_counter()
        time.sleep(args.after)
        t3 = time.perf_counter()
        stop.set()
        worker.stop()
        threads[0].join(30)
        phases = [
            _phase("before", samples, sizes, t0 + 5, t1),  # the first seconds warm up
            _phase("during", samples, sizes, t1, t2),
            _phase("after", samples, sizes, t2, t3),
        ]
        for phase in phases:
            print(json.dumps(phase), flush=True)
        base = phases[0]["p50_ms"] / 1000
        recovered = None
        second = t2
        while second < t3:
            window = samples.between(second, second + 1)
            if window and statistics.median(window) <= 1.2 * base:
                recovered = round(second - t2, 1)
                break
            second += 1
        print(json.dumps({"recovered_after_s": recovered}), flush=True)
        engine.dispose()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
