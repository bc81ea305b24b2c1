"""Enqueue-to-start latency with LISTEN/NOTIFY: a ``Worker`` in a thread, beside a minimal psycopg
loop that claims with the same statement when notified.

The floor is that bare loop with the claim in autocommit: one round trip, like the worker's own
claim. A second floor claims in a transaction (BEGIN, claim, COMMIT: three round trips with
psycopg), the floor this benchmark used until the worker's claim went to autocommit.

The producer runs in a process of its own, as a service enqueueing would: in the consumer's
process its post-commit Python (pool check-in) held the GIL while the worker's threads woke,
which a deployment never sees. Start times cross back over a pipe; ``perf_counter`` is the
system-wide monotonic clock on Linux, so the two processes' readings compare. The three consumers
run in interleaved rounds and their samples are pooled, because one round of 200 samples moves
by 10% from one minute to the next on a small machine.
"""

from __future__ import annotations

import multiprocessing
import random
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from multiprocessing.connection import Connection as Pipe
from typing import Any

import psycopg
from sqlalchemy import Engine, create_engine
from sqlalchemy.engine import URL

import pgqueue
from bench import _db, _sql
from pgqueue._base.urls import to_libpq_url

#: Longest wait for one sample's job to start before the run is abandoned.
SAMPLE_TIMEOUT = 5.0
#: Pause between samples (plus up to 3 ms of jitter): longer than the worker's completer waits
#: before a flush (2 ms) plus the flush, so each sample meets both sides idle.
IDLE_GAP = 0.006
WARMUP = 5


class _Starts:
    """Records the first start of each job and tells the producer, over the pipe."""

    def __init__(self, pipe: Pipe) -> None:
        self._pipe = pipe
        self._lock = threading.Lock()
        self._seen: set[int] = set()

    def record(self, index: int) -> None:
        now = time.perf_counter()
        with self._lock:
            if index in self._seen:
                return
            self._seen.add(index)
            self._pipe.send((index, now))


def _producer(url: str, samples: int, pipe: Pipe) -> None:
    """Enqueue one job per transaction, wait for its start; milliseconds from commit to start."""
    engine = create_engine(url)
    rng = random.Random(6)
    latencies = []
    try:
        for i in range(-WARMUP, samples):
            with engine.connect() as conn:
                tx = conn.begin()
                pgqueue.enqueue(conn, {"i": i}, queue=_db.QUEUE)
                tx.commit()
                committed = time.perf_counter()
            if not pipe.poll(SAMPLE_TIMEOUT):
                raise RuntimeError(f"job {i} did not start within {SAMPLE_TIMEOUT}s")
            index, started = pipe.recv()
            if index != i:
                raise RuntimeError(f"job {index} started while job {i} was expected")
            if i >= 0:
                latencies.append((started - committed) * 1000.0)
            time.sleep(IDLE_GAP + rng.random() * 0.003)
        pipe.send(latencies)
    except Exception as exc:
        pipe.send(f"producer failed: {exc!r}")
    finally:
        engine.dispose()


@contextmanager
def _pipe() -> Iterator[tuple[Pipe, Pipe]]:
    """Both ends: the consumer's (start times out, the latencies back) and the producer's."""
    here, there = multiprocessing.Pipe()
    try:
        yield here, there
    finally:
        here.close()
        there.close()


def _produce(
    url: URL, samples: int, starts_pipe: Pipe, producer_end: Pipe, in_process: bool = False
) -> list[float]:
    """The producer's latencies: in a process of its own, or (``in_process``) on a thread of
    the consumer's process, as an application enqueueing beside its own worker would."""
    if in_process:
        thread = threading.Thread(
            target=_producer,
            args=(url.render_as_string(hide_password=False), samples, producer_end),
            name="bench-producer",
            daemon=True,
        )
        thread.start()
        try:
            return _answer(starts_pipe, thread.is_alive, samples)
        finally:
            thread.join(10.0)
    process = multiprocessing.get_context("spawn").Process(
        target=_producer,
        args=(url.render_as_string(hide_password=False), samples, producer_end),
        name="bench-producer",
        daemon=True,
    )
    process.start()
    try:
        return _answer(starts_pipe, process.is_alive, samples)
    finally:
        process.join(10.0)
        if process.is_alive():
            process.kill()


def _answer(starts_pipe: Pipe, alive: Callable[[], bool], samples: int) -> list[float]:
    deadline = time.monotonic() + 60.0 + samples * (SAMPLE_TIMEOUT + IDLE_GAP)
    while not starts_pipe.poll(1.0):
        if not alive() or time.monotonic() > deadline:
            raise RuntimeError("the latency producer stopped without an answer")
    answer = starts_pipe.recv()
    if isinstance(answer, str):
        raise RuntimeError(answer)
    return list(answer)


def summary(latencies: list[float]) -> dict[str, Any]:
    """Median, p90, p99 and max of a list of milliseconds."""
    q = statistics.quantiles(latencies, n=100, method="inclusive")
    return {
        "samples": len(latencies),
        "p50_ms": statistics.median(latencies),
        "p90_ms": q[89],
        "p99_ms": q[98],
        "max_ms": max(latencies),
    }


def run(
    url: URL, engine: Engine, samples: int, rounds: int = 3, *, in_process: bool = False
) -> dict[str, Any]:
    """The worker and both floors, ``rounds`` interleaved rounds of ``samples`` each, pooled
    (``in_process``: the producer on a thread of this process, else a process of its own)."""
    pooled: dict[str, list[float]] = {"worker": [], "raw": [], "raw_tx": []}
    for _ in range(rounds):
        pooled["raw"] += raw_samples(url, engine, samples, in_process=in_process)
        pooled["worker"] += worker_samples(url, samples, in_process=in_process)
        pooled["raw_tx"] += raw_samples(
            url, engine, samples, in_transaction=True, in_process=in_process
        )
    return {name: summary(values) for name, values in pooled.items()}


def worker_samples(url: URL, samples: int, *, in_process: bool = False) -> list[float]:
    """The pgqueue figure: a LISTENing worker (concurrency 4) in a thread of this process."""
    _db.reset(url)
    with _pipe() as (here, there):
        starts = _Starts(here)

        def handler(job: pgqueue.JobContext) -> None:
            starts.record(job.payload["i"])

        worker_engine = _db.make_engine(url, pool_size=8)
        worker = pgqueue.Worker(
            worker_engine,
            {_db.QUEUE: handler},
            concurrency=4,
            listen=True,
            poll_interval=30.0,
            install_signal_handlers=False,
        )
        thread = threading.Thread(target=worker.run, name="bench-worker", daemon=True)
        thread.start()
        try:
            time.sleep(0.5)  # LISTEN is in place before the first sample
            return _produce(url, samples, here, there, in_process)
        finally:
            worker.stop()
            thread.join(30.0)
            worker_engine.dispose()


def raw_samples(
    url: URL,
    engine: Engine,
    samples: int,
    *,
    in_transaction: bool = False,
    in_process: bool = False,
) -> list[float]:
    """A floor: one LISTEN connection, one claiming connection, no framework in between."""
    _db.reset(url)
    claim = _sql.claim_sql(engine, 10)
    stop = threading.Event()
    ready = threading.Event()
    errors: list[BaseException] = []
    with _pipe() as (here, there):
        starts = _Starts(here)

        def loop() -> None:
            try:
                _listen_and_claim(url, claim, starts.record, stop, ready, in_transaction)
            except BaseException as exc:
                errors.append(exc)
                ready.set()

        thread = threading.Thread(target=loop, name="bench-raw-listener", daemon=True)
        thread.start()
        try:
            if not ready.wait(10.0) or errors:
                raise RuntimeError(f"raw listener did not start: {errors}")
            return _produce(url, samples, here, there, in_process)
        finally:
            stop.set()
            thread.join(10.0)


def _listen_and_claim(
    url: URL,
    claim: _sql.Captured,
    record: Callable[[int], None],
    stop: threading.Event,
    ready: threading.Event,
    in_transaction: bool,
) -> None:
    query = claim.sql.encode()
    with (
        psycopg.connect(to_libpq_url(url), autocommit=True) as listener,
        psycopg.connect(to_libpq_url(url), autocommit=not in_transaction) as worker,
    ):
        listener.execute("LISTEN jobs")
        ready.set()
        deadline = time.monotonic() + 600.0
        while not stop.is_set() and time.monotonic() < deadline:
            for _ in listener.notifies(timeout=0.2):
                rows = worker.execute(query, claim.params).fetchall()
                if in_transaction:
                    worker.commit()
                for row in rows:
                    record(row[2]["i"])


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.latency [--url URL] [--samples N] [--rounds R] [--producer KIND]``:
    the worker against the floors, the producer in a process of its own (``process``), on a
    thread of the consumer's process (``thread``), or both in turn (``both``, the default)."""
    import argparse
    import json

    parser = argparse.ArgumentParser(prog="python -m bench.latency", description=__doc__)
    parser.add_argument("--url", help="a server URL (default: the embedded PostgreSQL)")
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--producer", choices=("process", "thread", "both"), default="both")
    args = parser.parse_args(argv)
    kinds = ["process", "thread"] if args.producer == "both" else [args.producer]
    with _db.server(args.url) as (server_url, _), _db.throwaway_database(server_url) as url:
        engine = _db.make_engine(url)
        try:
            for kind in kinds:
                out = run(url, engine, args.samples, args.rounds, in_process=kind == "thread")
                floor = out["raw"]
                ratios = {
                    f"{q}_ratio": round(out["worker"][q] / floor[q], 3)
                    for q in ("p50_ms", "p90_ms", "p99_ms")
                }
                print(json.dumps({"producer": kind, **out, **ratios}), flush=True)
        finally:
            engine.dispose()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
