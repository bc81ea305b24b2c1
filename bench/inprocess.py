"""Typed tasks and many queues against the plain drain (#32 items 3 and 4), as a user runs them.

``python -m bench.inprocess [--url SERVER_URL] [--jobs N] [--rounds R] [--variants A,B,...]``

One in-process ``Worker(concurrency=4, listen=False)`` drains ``--jobs`` no-op jobs enqueued
beforehand (through the public producers, then ``VACUUM ANALYZE``) in a fresh database per drain;
the rate is the steady one, from the first handler call to the last (start-up and the last empty
claim are left out). Variants, in turns, the order reversed every round:

- ``handler``: one queue, a queue handler (the base of the ratios); it never reads its payload,
  which the worker then never decodes (docs/worker.md, "Payloads are decoded when a handler
  reads them").
- ``handler_reads``: the same handler reading its argument (``job.payload["i"]``), as a task
  receives its own: the like-for-like base of ``task``.
- ``task``: the same jobs as a typed task's (``Task.enqueue_many``), a worker of its registry.
- ``queues1000``: the jobs spread over 1,000 queues (20 each at the default size), one worker
  serving all of them with one handler each.

Also reports the worker's own CPU per job (``time.process_time`` over the drain: every thread
of this process, the benchmark's bookkeeping included). Prints one JSON line per drain, then each
variant's median and its ratio to ``handler``'s median, and the median of the per-round ratios.
Not part of ``.ci/run``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import Engine

import pgqueue
from bench import _db
from bench._measure import Calls

VARIANTS = ("handler", "handler_reads", "task", "queues1000")
#: The queues of ``queues1000``.
MANY = 1_000


def _setup(variant: str, engine: Engine, jobs: int, calls: Calls) -> Callable[[], pgqueue.Worker]:
    """Enqueue the variant's jobs; return how to make its worker."""

    def handler(job: pgqueue.JobContext) -> None:
        calls.record()

    def handler_reads(job: pgqueue.JobContext) -> None:
        job.payload["i"]  # the read is the point: it decodes the payload
        calls.record()

    if variant == "task":
        registry = pgqueue.Registry()

        @registry.task(queue=_db.QUEUE, name="bench.inprocess")
        def noop(i: int) -> None:
            calls.record()

        with engine.begin() as conn:
            for start in range(0, jobs, 1000):
                noop.enqueue_many(conn, [noop.s(i) for i in range(start, min(jobs, start + 1000))])
        return lambda: pgqueue.Worker(
            engine, registry, concurrency=4, listen=False, install_signal_handlers=False
        )
    queues = [f"q{n:04d}" for n in range(MANY)] if variant == "queues1000" else [_db.QUEUE]
    with engine.begin() as conn:
        for start in range(0, jobs, 1000):
            batch = range(start, min(jobs, start + 1000))
            by_queue: dict[str, list[dict[str, Any]]] = {}
            for i in batch:
                by_queue.setdefault(queues[i % len(queues)], []).append({"i": i})
            for queue, payloads in by_queue.items():
                pgqueue.enqueue_many(conn, payloads, queue=queue)
    handlers = {queue: handler_reads if variant == "handler_reads" else handler for queue in queues}
    return lambda: pgqueue.Worker(
        engine, handlers, concurrency=4, listen=False, install_signal_handlers=False
    )


def drain(server_url: Any, variant: str, jobs: int) -> dict[str, Any]:
    """One drain of ``variant`` in a fresh database: jobs run, steady rate, CPU per job."""
    calls = Calls()
    with _db.throwaway_database(server_url) as url:
        engine = _db.make_engine(url, pool_size=10)
        try:
            make_worker = _setup(variant, engine, jobs, calls)
            _db.analyze(url)
            worker = make_worker()
            cpu = time.process_time()
            worker.run(until_empty=True)
            cpu = time.process_time() - cpu
        finally:
            engine.dispose()
    if len(calls.times) != jobs:
        raise RuntimeError(f"{variant}: {len(calls.times)} of {jobs} jobs ran")
    return {
        "variant": variant,
        "done": len(calls.times),
        "jobs_per_s": round(calls.steady_rate()),
        "cpu_us_per_job": round(cpu / jobs * 1e6, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.inprocess", description=__doc__)
    parser.add_argument("--url", help="a server URL (default: the embedded PostgreSQL)")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    args = parser.parse_args(argv)
    names = args.variants.split(",")
    unknown = [n for n in names if n not in VARIANTS]
    if unknown or names[0] != "handler":
        parser.error(f"variants: 'handler' first, then any of {list(VARIANTS[1:])}")
    rates: dict[str, list[float]] = {name: [] for name in names}
    with _db.server(args.url) as (server_url, _):
        for round_ in range(args.rounds):
            for name in names if round_ % 2 == 0 else list(reversed(names)):
                figures = drain(server_url, name, args.jobs)
                rates[name].append(figures["jobs_per_s"])
                print(json.dumps({"round": round_, **figures}), flush=True)
    base = statistics.median(rates["handler"])
    for name in names:
        per_round = [r / b for r, b in zip(rates[name], rates["handler"], strict=True)]
        print(
            json.dumps(
                {
                    "variant": name,
                    "median_jobs_per_s": round(statistics.median(rates[name])),
                    "ratio_of_medians": round(statistics.median(rates[name]) / base, 3),
                    "median_ratio": round(statistics.median(per_round), 3),
                }
            ),
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
