"""``python -m bench [--url URL] [--jobs N] [--smoke] [--out DIR]``: one run of every benchmark."""

from __future__ import annotations

import argparse
import platform
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psycopg
import sqlalchemy
from sqlalchemy import Engine
from sqlalchemy.engine import URL

from bench import (
    _db,
    claim,
    drain,
    drain_worker,
    enqueue,
    latency,
    peers,
    report,
    scale,
    wait_latency,
)
from pgqueue._base.urls import mask_url


@dataclass(frozen=True)
class Sizes:
    """How much each section does; ``--smoke`` shrinks everything."""

    drain_jobs: int = 20_000
    concurrency: tuple[int, ...] = (1, 4, 8, 16)
    enqueue_single: int = 5_000
    enqueue_many: int = 100_000
    latency_samples: int = 200
    latency_rounds: int = 3
    #: ``wait_for``: samples per round (the rounds are ``latency_rounds``).
    wait_samples: int = 200
    done_rows: int = 1_000_000
    scale_claims: int = 200
    #: The claim with priorities: ready jobs at 0, future ones at 5-9, a ready backlog at 0-9.
    claim_ready: int = 1_000
    claim_future: int = 100_000
    claim_backlog: int = 100_000
    claim_samples: int = 200
    pgbench_repeats: int = 3
    #: One more drain with claims bigger than the free threads: (concurrency, batch_size, prefetch).
    tuned: tuple[int, int, int] = (8, 50, 50)
    #: The I/O-bound drain: jobs, handler threads, coroutines at once (``async_concurrency``).
    io_jobs: int = 4_000
    io_threads: int = 16
    io_coroutines: int = 200
    timeout: float = 900.0


SMOKE = Sizes(
    drain_jobs=200,
    concurrency=(1, 4),
    enqueue_single=200,
    enqueue_many=2_000,
    latency_samples=20,
    latency_rounds=1,
    wait_samples=20,
    done_rows=10_000,
    scale_claims=20,
    claim_ready=100,
    claim_future=2_000,
    claim_backlog=2_000,
    claim_samples=20,
    pgbench_repeats=1,
    io_jobs=100,
    timeout=120.0,
)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument(
        "--url",
        help="a PostgreSQL server URL; a throwaway database is created and dropped on it "
        "(default: start the embedded PostgreSQL)",
    )
    parser.add_argument("--jobs", type=int, help="jobs per drain run (default 20,000)")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes; no figure means much")
    parser.add_argument("--out", type=Path, default=Path("bench-results"), help="output folder")
    parser.add_argument(
        "--peer-python",
        help="an interpreter whose environment has pgqueuer and asyncpg: measure pgqueuer's "
        "bulk enqueue and drain beside pgqueue's (never installed into pgqueue's environment)",
    )
    parser.add_argument(
        "--peer",
        action="append",
        default=[],
        metavar="NAME=PYTHON",
        help="another peer (procrastinate or awa) and an interpreter whose environment has it; "
        "repeatable; its bulk enqueue and drain (its defaults) are reported beside pgqueue's",
    )
    return parser.parse_args(argv)


def _section(name: str, started: float) -> None:
    print(f"[{time.perf_counter() - started:7.1f}s] {name}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> dict[str, Any]:
    sizes = SMOKE if args.smoke else Sizes()
    if args.jobs is not None:
        sizes = Sizes(**{**asdict(sizes), "drain_jobs": args.jobs})
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    results: dict[str, Any] = {"sizes": asdict(sizes), "smoke": bool(args.smoke)}
    with _db.server(args.url) as server_url, _db.throwaway_database(server_url[0]) as url:
        engine = _db.make_engine(url)
        try:
            with _db.admin_connect(url) as conn:
                row = conn.execute("SHOW server_version").fetchone()
            results["environment"] = {
                "server": mask_url(server_url[0]),
                "server_kind": server_url[1],
                "postgresql": row[0] if row else "?",
                "python": platform.python_version(),
                "sqlalchemy": sqlalchemy.__version__,
                "psycopg": psycopg.__version__,
                "cpus": _cpus(),
            }
            _section("enqueue", started)
            results["enqueue"] = enqueue.run(
                url, engine, single=sizes.enqueue_single, many=sizes.enqueue_many
            )
            results["drain"] = _drain(url, engine, sizes, out, started)
            if args.peer_python:
                _section("peers: pgqueuer (its defaults, and batch_size 50)", started)
                results["peers"] = {
                    "pgqueuer": peers.run_pgqueuer(
                        server_url[0], args.peer_python, sizes.drain_jobs, timeout=sizes.timeout
                    ),
                    "pgqueuer_batch_50": peers.run_pgqueuer(
                        server_url[0],
                        args.peer_python,
                        sizes.drain_jobs,
                        drain_batch=50,
                        timeout=sizes.timeout,
                    ),
                }
            for spec in args.peer:
                name, _, python = spec.partition("=")
                _section(f"peers: {name} (its defaults)", started)
                results.setdefault("peers", {})[name] = peers.run_peer(
                    name, server_url[0], python, sizes.drain_jobs, timeout=sizes.timeout
                )
            biggest = max(results["drain"]["worker"], key=lambda w: w["concurrency"])
            results["rss"] = {
                "concurrency": biggest["concurrency"],
                "rss_kb": biggest["rss_kb"],
                "hwm_kb": biggest["hwm_kb"],
            }
            _section(
                f"io: {sizes.io_jobs} jobs of {drain_worker.SLEEP_S * 1000:.0f} ms, "
                f"threads {sizes.io_threads} vs coroutines {sizes.io_coroutines}",
                started,
            )
            results["io"] = drain.run_io(
                url, sizes.io_jobs, sizes.io_threads, sizes.io_coroutines, sizes.timeout
            )
            _section("latency", started)
            results["latency"] = latency.run(
                url, engine, sizes.latency_samples, rounds=sizes.latency_rounds
            )
            _section("wait_for latency", started)
            results["wait_for"] = wait_latency.run(
                url, sizes.wait_samples, rounds=sizes.latency_rounds
            )
            _section("scale", started)
            results["scale"] = scale.run(
                url, engine, done_rows=sizes.done_rows, claims=sizes.scale_claims
            )
            _section("claim", started)
            results["claim"] = claim.run(
                url,
                engine,
                ready=sizes.claim_ready,
                future=sizes.claim_future,
                backlog=sizes.claim_backlog,
                samples=sizes.claim_samples,
            )
        finally:
            engine.dispose()
    results["seconds"] = time.perf_counter() - started
    return results


def _drain(url: URL, engine: Engine, sizes: Sizes, out: Path, started: float) -> dict[str, Any]:
    """pgbench's limit, the no-op drain at every concurrency, the tuned one, the async one."""
    n = sizes.drain_jobs
    _section("drain: pgbench", started)
    pgbench = drain.run_pgbench(url, engine, n, out, sizes.pgbench_repeats, sizes.timeout)
    workers = []
    for c in sizes.concurrency:
        _section(f"drain: worker concurrency {c}", started)
        workers.append(drain.run_worker(url, n, c, sizes.timeout))
    c, batch, prefetch = sizes.tuned
    _section(f"drain: worker concurrency {c}, batch_size {batch}, prefetch {prefetch}", started)
    tuned = drain.run_worker(url, n, c, sizes.timeout, batch, prefetch)
    _section("drain: worker, async handler, default async_concurrency", started)
    coroutines = drain.run_worker(url, n, 1, sizes.timeout, handler="async-noop")
    return {
        "jobs": n,
        "pgbench": pgbench,
        "worker": workers,
        "worker_tuned": tuned,
        "worker_async": coroutines,
    }


def _cpus() -> int:
    import os

    return os.cpu_count() or 0


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    results = run(args)
    print(report.table(results))
    for path in report.write(results, args.out):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
