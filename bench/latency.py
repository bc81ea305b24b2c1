"""Enqueue-to-start latency with LISTEN/NOTIFY: a ``Worker`` in a thread, beside a minimal psycopg
loop that claims with the same statement when notified."""

from __future__ import annotations

import random
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
from sqlalchemy import Engine
from sqlalchemy.engine import URL

import pgqueue
from bench import _db, _sql
from pgqueue._urls import to_libpq_url

#: Longest wait for one sample's job to start before the run is abandoned.
SAMPLE_TIMEOUT = 5.0


class _Starts:
    """Start times by job index, with a way to wait for one."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.times: dict[int, float] = {}

    def record(self, index: int) -> None:
        now = time.perf_counter()
        with self._cond:
            self.times.setdefault(index, now)
            self._cond.notify_all()

    def wait(self, index: int, timeout: float) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: index in self.times, timeout)


def _produce(engine: Engine, starts: _Starts, samples: int, warmup: int) -> list[float]:
    """Enqueue one job per transaction, wait for its start; milliseconds from commit to start."""
    rng = random.Random(6)
    latencies = []
    for i in range(-warmup, samples):
        with engine.connect() as conn:
            tx = conn.begin()
            pgqueue.enqueue(conn, {"i": i}, queue=_db.QUEUE)
            tx.commit()
            committed = time.perf_counter()
        if not starts.wait(i, SAMPLE_TIMEOUT):
            raise RuntimeError(f"job {i} did not start within {SAMPLE_TIMEOUT}s")
        if i >= 0:
            latencies.append((starts.times[i] - committed) * 1000.0)
        time.sleep(0.002 + rng.random() * 0.003)  # let both sides go idle between samples
    return latencies


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


def run_worker(url: URL, samples: int, warmup: int = 5) -> dict[str, Any]:
    """The pgqueue figure: a LISTENing worker (concurrency 4) in a thread of this process."""
    _db.reset(url)
    starts = _Starts()

    def handler(job: pgqueue.JobContext) -> None:
        starts.record(job.payload["i"])

    worker_engine = _db.make_engine(url, pool_size=8)
    producer = _db.make_engine(url)
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
        return summary(_produce(producer, starts, samples, warmup))
    finally:
        worker.stop()
        thread.join(30.0)
        worker_engine.dispose()
        producer.dispose()


def run_raw(url: URL, engine: Engine, samples: int, warmup: int = 5) -> dict[str, Any]:
    """The floor: one LISTEN connection, one claiming connection, no framework in between."""
    _db.reset(url)
    claim = _sql.claim_sql(engine, 10)
    starts = _Starts()
    stop = threading.Event()
    ready = threading.Event()
    errors: list[BaseException] = []

    def loop() -> None:
        try:
            _listen_and_claim(url, claim, starts.record, stop, ready)
        except BaseException as exc:
            errors.append(exc)
            ready.set()

    thread = threading.Thread(target=loop, name="bench-raw-listener", daemon=True)
    thread.start()
    producer = _db.make_engine(url)
    try:
        if not ready.wait(10.0) or errors:
            raise RuntimeError(f"raw listener did not start: {errors}")
        return summary(_produce(producer, starts, samples, warmup))
    finally:
        stop.set()
        thread.join(10.0)
        producer.dispose()


def _listen_and_claim(
    url: URL,
    claim: _sql.Captured,
    record: Callable[[int], None],
    stop: threading.Event,
    ready: threading.Event,
) -> None:
    query = claim.sql.encode()
    with (
        psycopg.connect(to_libpq_url(url), autocommit=True) as listener,
        psycopg.connect(to_libpq_url(url)) as worker,
    ):
        listener.execute("LISTEN jobs")
        ready.set()
        deadline = time.monotonic() + 600.0
        while not stop.is_set() and time.monotonic() < deadline:
            for _ in listener.notifies(timeout=0.2):
                rows = worker.execute(query, claim.params).fetchall()
                worker.commit()
                for row in rows:
                    record(row[2]["i"])
