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
- ``backlog_unlimited`` and ``backlog_per_key4``: 100,000 ready jobs (``--backlog``), unlimited
  and ``per_key=4`` over 20 keys; the figure is the jobs started in ``--seconds`` (3) from the
  first handler call, divided by that time: a claim whose cost grew with the backlog shows here.
  ``backlog_per_key4`` is compared with ``backlog_unlimited``. A backlog that ran out within
  that time would understate the rate (the jobs over the whole window): the drain's line then
  says ``"ran_out": true`` and gives the steady rate instead; give a larger ``--backlog``.
- ``fleet``: ``concurrency=6``, 2 worker processes of concurrency 4 started once, jobs of
  100 ms (``--fleet-jobs``, 900): the rate over the steady part (the middle 80% of the handler
  calls) against the ideal 60 jobs/s, and the share of that time 6 ran at once.

Prints one JSON line per drain, then each variant's median and its ratio to its base
(``unlimited``'s, ``backlog_unlimited``'s, or 60 jobs/s for ``fleet``). Not part of ``.ci/run``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import threading
import time
from typing import Any

import pgqueue
from bench import _db
from bench._measure import Calls
from pgqueue._base.urls import to_sqlalchemy_url

#: Variant -> (the keys' count, or None for no key; the limits).
VARIANTS: dict[str, tuple[int | None, dict[str, Any]]] = {
    "unlimited": (None, {}),
    "concurrency100": (None, {"concurrency": 100}),
    "concurrency4": (None, {"concurrency": 4}),
    "per_key1": (100, {"per_key": 1}),
    "per_key4": (20, {"per_key": 4}),
    "backlog_unlimited": (None, {}),
    "backlog_per_key4": (20, {"per_key": 4}),
    "fleet": (None, {"concurrency": 6}),
}

#: The variants run when ``--variants`` is not given.
DEFAULT = ("unlimited", "concurrency100", "concurrency4", "per_key1", "per_key4")

#: Each variant's base (its ratio's denominator): a variant, or a rate in jobs/s.
BASES: dict[str, str | float] = {
    "backlog_per_key4": "backlog_unlimited",
    "backlog_unlimited": "backlog_unlimited",
    "fleet": 60.0,
}

#: The fleet: worker processes, their threads, the queue's limit and each job's seconds.
FLEET_PROCESSES = 2
FLEET_JOB_SECONDS = 0.1


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


def _drain(engine: Any, seconds: float | None = None) -> tuple[int, float, bool]:
    """Jobs run, their steady rate (first handler call to last), and whether the jobs ran out
    first; with ``seconds``, the calls within that time of the first, and their count over it
    (the worker is stopped), unless the jobs ran out within it: then all of them and their
    steady rate."""
    calls = Calls()

    def handler(job: pgqueue.JobContext) -> None:
        calls.record()

    worker = pgqueue.Worker(
        engine, {_db.QUEUE: handler}, concurrency=4, listen=False, install_signal_handlers=False
    )
    if seconds is None:
        worker.run(until_empty=True)
        return len(calls.times), calls.steady_rate(), False
    runner = threading.Thread(target=worker.run, kwargs={"until_empty": True})
    runner.start()
    while runner.is_alive():
        first = calls.first()
        if first is not None and time.perf_counter() >= first + seconds:
            break
        time.sleep(0.05)
    worker.stop()
    runner.join()
    done = calls.within(seconds)
    if done == len(calls.times) and calls.times[-1] < calls.times[0] + seconds * 0.99:
        return done, calls.steady_rate(), True  # the backlog ran out within the window
    return done, done / seconds, False


def _fleet_worker(url: str, spans: Any) -> None:
    """One process of the fleet: a worker of concurrency 4 until the queue is empty; sends
    each handler call's ``(start, end)`` (``time.time()``, one clock for all processes)."""
    engine = _db.make_engine(to_sqlalchemy_url(url), pool_size=10)
    mine: list[tuple[float, float]] = []
    lock = threading.Lock()

    def handler(job: pgqueue.JobContext) -> None:
        start = time.time()
        time.sleep(FLEET_JOB_SECONDS)
        with lock:
            mine.append((start, time.time()))

    pgqueue.Worker(
        engine, {_db.QUEUE: handler}, concurrency=4, listen=True, install_signal_handlers=False
    ).run(until_empty=True)
    spans.put(mine)


def _fleet(url: Any) -> tuple[int, float, float]:
    """Jobs run by the fleet, their rate over the steady part (the middle 80% of the calls),
    and the share of that time with 6 handlers running at once."""
    context = multiprocessing.get_context("spawn")
    spans = context.Queue()
    text = url.render_as_string(hide_password=False)
    procs = [
        context.Process(target=_fleet_worker, args=(text, spans)) for _ in range(FLEET_PROCESSES)
    ]
    for proc in procs:
        proc.start()
    calls = sorted(span for _ in procs for span in spans.get())
    for proc in procs:
        proc.join()
    starts = [start for start, _ in calls]
    lo, hi = starts[len(starts) // 10], starts[len(starts) * 9 // 10]
    rate = (len(starts) * 8 // 10) / (hi - lo)
    # Running at once over [lo, hi], by a sweep of the spans' starts and ends.
    events = sorted([(s, 1) for s, _ in calls] + [(e, -1) for _, e in calls])
    running, last, at_six = 0, lo, 0.0
    for t, step in events:
        if t > lo:
            clipped = min(t, hi)
            if running >= 6 and clipped > last:
                at_six += clipped - last
            last = max(last, clipped)
        running += step
    return len(calls), rate, at_six / (hi - lo)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.flow_drain", description=__doc__)
    parser.add_argument("--url", help="a server URL (default: the embedded PostgreSQL)")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--variants", default=",".join(v for v in VARIANTS if v in DEFAULT))
    parser.add_argument("--backlog", type=int, default=100_000)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--fleet-jobs", type=int, default=900)
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
                    backlog = name.startswith("backlog_")
                    jobs = (
                        args.backlog
                        if backlog
                        else args.fleet_jobs
                        if name == "fleet"
                        else args.jobs
                    )
                    _fill(engine, jobs, keys, limits)
                    _db.analyze(url)
                    extra: dict[str, Any] = {}
                    if name == "fleet":
                        done, rate, at_six = _fleet(url)
                        extra["share_at_6"] = round(at_six, 3)
                    else:
                        done, rate, ran_out = _drain(engine, args.seconds if backlog else None)
                        if ran_out:
                            extra["ran_out"] = True
                    engine.dispose()
                rates[name].append(rate)
                line = {"round": round_, "variant": name, "done": done, "jobs_per_s": round(rate)}
                print(json.dumps({**line, **extra}), flush=True)
    for name in names:
        median = statistics.median(rates[name])
        base = BASES.get(name, "unlimited")
        if isinstance(base, str):
            base = statistics.median(rates[base]) if base in rates else float("nan")
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
