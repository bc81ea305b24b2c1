"""Where the plain drain's CPU goes, by component (#32 item 7).

``python -m bench.cpu_profile [--url SERVER_URL] [--jobs N] [--rounds R] [--concurrency C]``

One in-process ``Worker(concurrency=C, listen=False)`` drains ``--jobs`` no-op jobs (enqueued
beforehand, then ``VACUUM ANALYZE``), as :mod:`bench.inprocess` does. Around the drain it reads
the CPU time (user + system, from ``/proc``) of every thread of this process, by the thread's
name (the claim loop runs on the thread that called ``run()``; the completer, the handler threads,
the heartbeat, the watchdog and the pruner have their own), and of every PostgreSQL backend of
the benchmark's database (all carry the worker's name: the claim connection is told from the
others by its last statement, a claim). Prints the CPU
per job of each component, median over the rounds, and its share of the total.

The server must run on this machine (its backends' ``/proc`` entries are read). Linux only.
Not part of ``.ci/run``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
import time
from collections import defaultdict
from typing import Any

import psycopg

import pgqueue
from bench import _db
from bench._measure import cpu_seconds
from pgqueue._base.urls import to_libpq_url


class ThreadCpu:
    """CPU seconds of this process's threads, by component, sampled every ``interval`` seconds
    (the worker's threads end with ``run()``: their last reading is kept, so at most one
    interval of each thread's CPU, spent shutting down, goes unseen)."""

    def __init__(self, interval: float = 0.02) -> None:
        self._interval = interval
        self._last: dict[int, tuple[str, float]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-sampler", daemon=True)

    def __enter__(self) -> ThreadCpu:
        self._sample()
        self._first = {tid: cpu for tid, (_, cpu) in self._last.items()}
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self._sample()

    def _sample(self) -> None:
        names = {t.native_id: t.name for t in threading.enumerate()}
        for tid in os.listdir("/proc/self/task"):
            cpu = cpu_seconds(f"/proc/self/task/{tid}/stat")
            if cpu is not None:
                known = self._last.get(int(tid))
                name = names.get(int(tid)) or (known[0] if known else "other")
                self._last[int(tid)] = (name, cpu)

    def by_component(self) -> dict[str, float]:
        out: dict[str, float] = defaultdict(float)
        for tid, (name, cpu) in self._last.items():
            if name == "cpu-sampler":
                continue
            if name.startswith("pgqueue-handler-"):
                name = "handler threads"
            elif name == "MainThread":
                name = "claim loop (run())"
            out[name] += cpu - self._first.get(tid, 0.0)
        return dict(out)


def _backends(admin: psycopg.Connection[Any]) -> dict[int, str]:
    """The benchmark database's backends (pid -> its last statement's first words)."""
    rows = admin.execute(
        "SELECT pid, query FROM pg_stat_activity "
        "WHERE datname = current_database() AND pid <> pg_backend_pid()"
    ).fetchall()
    return {int(pid): _role(query or "") for pid, query in rows}


def _role(query: str) -> str:
    """The claim loop's connection runs claims only (its last query claimed); the others run
    completions, heartbeats and the settings' reads."""
    if "FOR UPDATE SKIP LOCKED" in query.upper():
        return "server: the claim connection"
    return "server: completer and the rest"


def _drain(server_url: Any, jobs: int, concurrency: int) -> dict[str, float]:
    with _db.throwaway_database(server_url) as url:
        engine = _db.make_engine(url, pool_size=10)
        try:
            with engine.begin() as conn:
                for start in range(0, jobs, 1000):
                    count = min(jobs, start + 1000) - start
                    pgqueue.enqueue_many(conn, [{"i": i} for i in range(count)], queue=_db.QUEUE)
            _db.analyze(url)
            worker = pgqueue.Worker(
                engine,
                {_db.QUEUE: lambda job: None},
                concurrency=concurrency,
                listen=False,
                install_signal_handlers=False,
                prune=False,
            )
            with psycopg.connect(to_libpq_url(url), autocommit=True) as admin:
                before_server = {
                    pid: cpu_seconds(f"/proc/{pid}/stat") or 0.0 for pid in _backends(admin)
                }
                started = time.perf_counter()
                with ThreadCpu() as threads:
                    worker.run(until_empty=True)
                wall = time.perf_counter() - started
                roles = _backends(admin)
                out = threads.by_component()
                for pid, role in roles.items():
                    cpu = cpu_seconds(f"/proc/{pid}/stat")
                    if cpu is not None:
                        out[role] = out.get(role, 0.0) + cpu - before_server.get(pid, 0.0)
        finally:
            engine.dispose()
    per_job = {name: seconds / jobs * 1e6 for name, seconds in out.items() if seconds > 0}
    per_job["wall per job"] = wall / jobs * 1e6
    return per_job


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cpu_profile", description=__doc__)
    parser.add_argument("--url", help="a server URL on this machine (default: embedded)")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args(argv)
    rounds: list[dict[str, float]] = []
    with _db.server(args.url) as (server_url, _):
        for round_ in range(args.rounds):
            figures = _drain(server_url, args.jobs, args.concurrency)
            rounds.append(figures)
            print(json.dumps({"round": round_, **{k: round(v, 1) for k, v in figures.items()}}))
    names = sorted({n for r in rounds for n in r if n != "wall per job"})
    medians = {n: statistics.median(r.get(n, 0.0) for r in rounds) for n in names}
    total = sum(medians.values())
    print(f"{'component':<36} {'us CPU/job':>10} {'share':>7}")
    for name, us in sorted(medians.items(), key=lambda kv: -kv[1]):
        print(f"{name:<36} {us:>10.1f} {us / total:>7.1%}")
    wall = statistics.median(r["wall per job"] for r in rounds)
    print(f"{'total CPU':<36} {total:>10.1f}")
    print(f"{'wall per job':<36} {wall:>10.1f}  ({1e6 / wall:,.0f} jobs/s, 2 cores)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
