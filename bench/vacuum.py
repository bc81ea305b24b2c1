"""Storage parameters under queue churn: ``python -m bench.vacuum --url URL [--jobs N]``.

Each variant gets a throwaway database migrated to pgqueue's head, then its ``jobs`` storage
parameters set (``defaults``: all reset, as before ``pgqueue_0004``; ``revision``: as the revision
leaves them; ``revision+ffNN``: the revision plus a ``fillfactor``). One producer thread keeps a
backlog of at most :data:`BACKLOG` jobs while :data:`WORKERS` threads claim 10, extend each lease
once (the heartbeat) and complete each job, until ``--jobs`` jobs are done. Reported: heap and
total size, ``n_dead_tup`` at the end (and its mean and peak, sampled every second), the share of
updates that were HOT, autovacuum runs, jobs/s. ``--history N`` first fills N done jobs, as a
table that keeps a week of finished jobs has.

Autovacuum must be on for the parameters to mean anything (the CI server turns it off): the
script says so and stops when ``SHOW autovacuum`` is off.
"""

from __future__ import annotations

import argparse
import threading
import time
from typing import Any

import psycopg
from sqlalchemy.engine import URL

import pgqueue
from bench import _db
from pgqueue.storage import JOBS_STORAGE_PARAMETERS, parameters_clause

WORKERS = 8
BACKLOG = 5_000
ENQUEUE_BATCH = 500
CLAIM = 10

#: Variant -> the revision's parameters overridden or extended (``None``: all reset).
VARIANTS: dict[str, dict[str, str] | None] = {
    "defaults": None,
    "revision": {},
    "revision+ff90": {"fillfactor": "90"},
    "revision+ff70": {"fillfactor": "70"},
    "revision+cost_delay2": {"autovacuum_vacuum_cost_delay": "2"},
}


def _prepare(url: URL, overrides: dict[str, str] | None) -> None:
    with _db.admin_connect(url) as conn:
        if overrides is None:
            names = ", ".join(JOBS_STORAGE_PARAMETERS)
            conn.execute(f"ALTER TABLE jobs RESET ({names})")
        else:
            clause = parameters_clause({**JOBS_STORAGE_PARAMETERS, **overrides})
            conn.execute(f"ALTER TABLE jobs SET ({clause})")


def _churn(url: URL, n: int, deadline: float) -> tuple[float, list[int]]:
    """Run ``n`` jobs through enqueue, claim, extend and complete: (seconds, n_dead_tup samples).

    ``n_dead_tup`` is sampled every second from ``pg_stat_user_tables``.
    """
    engine = _db.make_engine(url, pool_size=WORKERS + 2)
    done = 0
    enqueued = 0
    lock = threading.Lock()
    errors: list[BaseException] = []

    def producer() -> None:
        nonlocal enqueued
        try:
            while enqueued < n and time.monotonic() < deadline:
                with lock:
                    backlog = enqueued - done
                if backlog >= BACKLOG:
                    time.sleep(0.005)
                    continue
                size = min(ENQUEUE_BATCH, n - enqueued)
                with engine.begin() as conn:
                    pgqueue.enqueue_many(
                        conn, [{"i": enqueued + i} for i in range(size)], queue=_db.QUEUE
                    )
                with lock:
                    enqueued += size
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    def worker() -> None:
        nonlocal done
        try:
            while time.monotonic() < deadline:
                with lock:
                    if done >= n:
                        return
                with engine.begin() as conn:
                    jobs = pgqueue.claim(conn, queue=_db.QUEUE, limit=CLAIM)
                if not jobs:
                    time.sleep(0.002)
                    continue
                with engine.begin() as conn:
                    for job in jobs:
                        pgqueue.extend_lease(conn, job.id, job.attempts)
                with engine.begin() as conn:
                    ok = sum(pgqueue.complete(conn, job.id, job.attempts) for job in jobs)
                with lock:
                    done += ok
        except BaseException as exc:
            errors.append(exc)

    samples: list[int] = []

    def sampler() -> None:
        with _db.admin_connect(url) as conn:
            while not finished.wait(1.0):
                row = conn.execute(
                    "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = 'jobs'::regclass"
                ).fetchone()
                samples.append(int(row[0]) if row else 0)

    finished = threading.Event()
    watcher = threading.Thread(target=sampler)
    watcher.start()
    threads = [threading.Thread(target=producer)]
    threads += [threading.Thread(target=worker) for _ in range(WORKERS)]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.monotonic() - start
    finished.set()
    watcher.join()
    engine.dispose()  # closing the sessions flushes their table statistics
    if errors:
        raise errors[0]
    if done < n:
        raise TimeoutError(f"only {done} of {n} jobs done before the deadline")
    return seconds, samples


_STATS = """
SELECT pg_relation_size('jobs') AS heap, pg_total_relation_size('jobs') AS total,
       n_live_tup, n_dead_tup, n_tup_upd, n_tup_hot_upd, autovacuum_count, autoanalyze_count
FROM pg_stat_user_tables WHERE relid = 'jobs'::regclass
"""


def run_variant(
    server_url: URL, name: str, n: int, timeout: float, history: int = 0
) -> dict[str, Any]:
    """One variant on a fresh database; ``history`` done jobs are there before the run."""
    with _db.throwaway_database(server_url) as url:
        _prepare(url, VARIANTS[name])
        if history:
            _db.fill(url, history, status="done")
        seconds, samples = _churn(url, n, time.monotonic() + timeout)
        time.sleep(1.0)
        with _db.admin_connect(url) as conn:
            conn.row_factory = psycopg.rows.dict_row  # type: ignore[assignment]
            stats: dict[str, Any] = dict(conn.execute(_STATS).fetchone() or {})
    upd = stats["n_tup_upd"] or 0
    return {
        "variant": name,
        "jobs": n,
        "seconds": seconds,
        "jobs_per_s": n / seconds,
        "heap_mb": stats["heap"] / 2**20,
        "total_mb": stats["total"] / 2**20,
        "n_dead_tup": stats["n_dead_tup"],
        "peak_dead_tup": max(samples, default=0),
        "mean_dead_tup": sum(samples) / len(samples) if samples else 0.0,
        "hot_share": (stats["n_tup_hot_upd"] or 0) / upd if upd else 0.0,
        "n_tup_upd": upd,
        "autovacuums": stats["autovacuum_count"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--url", required=True, help="server URL (autovacuum on)")
    parser.add_argument("--jobs", type=int, default=200_000)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument(
        "--history", type=int, default=0, help="done jobs in the table before the run"
    )
    parser.add_argument("--repeat", type=int, default=1, help="runs of every variant")
    parser.add_argument("--timeout", type=float, default=900.0, help="per variant, seconds")
    args = parser.parse_args()
    with _db.server(args.url) as (server_url, _kind):
        with _db.admin_connect(server_url) as conn:
            row = conn.execute("SHOW autovacuum").fetchone()
        if row is None or row[0] != "on":
            raise SystemExit("autovacuum is off on this server: the parameters would do nothing")
        print(
            "| variant | history | jobs/s | heap MB | total MB | n_dead_tup at end "
            "| mean n_dead_tup | peak n_dead_tup | HOT share | autovacuums |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for _ in range(args.repeat):
            for name in args.variants.split(","):
                r = run_variant(server_url, name, args.jobs, args.timeout, args.history)
                print(
                    f"| {r['variant']} | {args.history:,} | {r['jobs_per_s']:,.0f} | "
                    f"{r['heap_mb']:.1f} | {r['total_mb']:.1f} | {r['n_dead_tup']:,} | "
                    f"{r['mean_dead_tup']:,.0f} | {r['peak_dead_tup']:,} | "
                    f"{r['hot_share']:.1%} | {r['autovacuums']} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
