"""Flow control at full speed (#32): one in-process ``Worker`` draining a queue under each limit.

``python -m bench.flow_drain [--url SERVER_URL] [--jobs N] [--rounds R] [--variants A,B,...]``

Each variant gets a fresh database, ``--jobs`` no-op jobs of one queue enqueued beforehand (then
``VACUUM ANALYZE``) and its limits set with :func:`pgqueue.set_queue_limits`; one ``Worker``
(concurrency 4, LISTEN off) drains it in this process, as a user runs it. The rate is the steady
one, from the first handler call to the last. Variants, in turns, the order reversed every round:

- ``unlimited``: no settings row.
- ``concurrency100``: ``concurrency=100`` (a limit that never binds four threads).
- ``concurrency4``: ``concurrency=4`` (a limit that binds).
- ``per_key1``: ``per_key=1`` over 100 keys (job ``i`` has key ``k<i mod 100>``).
- ``per_key4``: ``per_key=4`` over 20 keys.

Prints one JSON line per drain, then each variant's median and its ratio to ``unlimited``'s.
Not part of ``.ci/run``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from typing import Any

import pgqueue
from bench import _db

#: Variant -> (the keys' count, or None for no key; the limits).
VARIANTS: dict[str, tuple[int | None, dict[str, Any]]] = {
    "unlimited": (None, {}),
    "concurrency100": (None, {"concurrency": 100}),
    "concurrency4": (None, {"concurrency": 4}),
    "per_key1": (100, {"per_key": 1}),
    "per_key4": (20, {"per_key": 4}),
}


def _fill(engine: Any, jobs: int, keys: int | None, limits: dict[str, Any]) -> None:
    with engine.begin() as conn:
        for start in range(0, jobs, 1000):
            batch = range(start, min(jobs, start + 1000))
            keyed = None if keys is None else [f"k{i % keys}" for i in batch]
            pgqueue.enqueue_many(
                conn, [{"i": i} for i in batch], queue=_db.QUEUE, concurrency_keys=keyed
            )
        if limits:
            pgqueue.set_queue_limits(conn, _db.QUEUE, **limits)


def _drain(engine: Any) -> tuple[int, float]:
    """Jobs run, and their steady rate (first handler call to last)."""
    calls: list[float] = []
    lock = threading.Lock()

    def handler(job: pgqueue.JobContext) -> None:
        now = time.perf_counter()
        with lock:
            calls.append(now)

    worker = pgqueue.Worker(
        engine, {_db.QUEUE: handler}, concurrency=4, listen=False, install_signal_handlers=False
    )
    worker.run(until_empty=True)
    return len(calls), (len(calls) - 1) / (max(calls) - min(calls))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.flow_drain", description=__doc__)
    parser.add_argument("--url", help="a server URL (default: the embedded PostgreSQL)")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    args = parser.parse_args(argv)
    names = args.variants.split(",")
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        parser.error(f"unknown variants {unknown}: choose among {list(VARIANTS)}")
    rates: dict[str, list[float]] = {name: [] for name in names}
    with _db.server(args.url) as (server_url, _):
        for round_ in range(args.rounds):
            for name in names if round_ % 2 == 0 else list(reversed(names)):
                with _db.throwaway_database(server_url) as url:
                    engine = _db.make_engine(url, pool_size=10)
                    keys, limits = VARIANTS[name]
                    _fill(engine, args.jobs, keys, limits)
                    _db.analyze(url)
                    done, rate = _drain(engine)
                    engine.dispose()
                rates[name].append(rate)
                print(
                    json.dumps(
                        {"round": round_, "variant": name, "done": done, "jobs_per_s": round(rate)}
                    ),
                    flush=True,
                )
    base = statistics.median(rates[names[0]])
    for name in names:
        median = statistics.median(rates[name])
        print(
            json.dumps(
                {
                    "variant": name,
                    "median_jobs_per_s": round(median),
                    "ratio": round(median / base, 3),
                }
            ),
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
