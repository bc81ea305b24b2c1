"""``wait_for`` latency: from the commit of a job's completion to ``wait_for`` returning (#22).

A completer process (this one) claims a job, tells a waiter process its id, gives the waiter a
moment to start waiting, then completes the job with ``pgqueue.complete`` and notes the commit's
``perf_counter``; the waiter notes when ``pgqueue.wait_for`` returned and sends it back.
``perf_counter`` is the system-wide monotonic clock on Linux, so the two processes' readings
compare. The wait's ``poll_interval`` is longer than a sample may take: every sample is a
notification's wake-up (a missed one would fail the run, not hide in the figure).

The floor is a bare psycopg connection that LISTENs on the same channel and returns when the
``jobs_notify_finished`` trigger's notification names the job: what is left to ``wait_for`` is
its read of the row and its Python. The two run in interleaved rounds, their samples pooled.
"""

from __future__ import annotations

import multiprocessing
import random
import time
from multiprocessing.connection import Connection as Pipe
from typing import Any

import psycopg
from sqlalchemy import create_engine
from sqlalchemy.engine import URL

import pgqueue
from bench import _db
from bench.latency import summary
from pgqueue._base.urls import to_libpq_url
from pgqueue.schema import DEFAULT_FINISHED_CHANNEL

#: Longest a sample may take (also the wait's timeout) before the run is abandoned.
SAMPLE_TIMEOUT = 5.0
#: From handing the waiter the id to completing: it has read the row and sleeps by then.
HEAD_START = 0.02
WARMUP = 5


def _waiter(url: str, kind: str, pipe: Pipe) -> None:
    """Wait for each id the pipe brings; send back when the wait returned."""
    engine = create_engine(url)
    listener = None
    if kind == "raw":
        listener = psycopg.connect(to_libpq_url(url), autocommit=True)
        listener.execute(f'LISTEN "{DEFAULT_FINISHED_CHANNEL}"')
    pipe.send("ready")
    try:
        while True:
            job_id = pipe.recv()
            if job_id is None:
                return
            if listener is None:
                got = pgqueue.wait_for(
                    engine, job_id, timeout=SAMPLE_TIMEOUT, poll_interval=SAMPLE_TIMEOUT * 2
                )
                assert got.status == "done"
            else:
                _raw_wait(listener, job_id)
            pipe.send(time.perf_counter())
    except Exception as exc:
        pipe.send(f"waiter failed: {exc!r}")
    finally:
        if listener is not None:
            listener.close()
        engine.dispose()


def _raw_wait(listener: psycopg.Connection[Any], job_id: int) -> None:
    wanted = str(job_id)
    deadline = time.monotonic() + SAMPLE_TIMEOUT
    while time.monotonic() < deadline:
        for note in listener.notifies(timeout=SAMPLE_TIMEOUT, stop_after=1):
            if wanted in note.payload.split(","):
                return
    raise RuntimeError(f"no notification named job {job_id}")


def samples_of(url: URL, kind: str, samples: int) -> list[float]:
    """Milliseconds from completion commit to the waiter's return, ``samples`` of them."""
    _db.reset(url)
    here, there = multiprocessing.Pipe()
    process = multiprocessing.get_context("spawn").Process(
        target=_waiter,
        args=(url.render_as_string(hide_password=False), kind, there),
        name=f"bench-waiter-{kind}",
        daemon=True,
    )
    process.start()
    engine = _db.make_engine(url)
    rng = random.Random(22)
    latencies: list[float] = []
    try:
        if not here.poll(60.0) or here.recv() != "ready":
            raise RuntimeError("the waiter did not start")
        for i in range(-WARMUP, samples):
            with engine.begin() as conn:
                job_id = pgqueue.enqueue(conn, {"i": i}, queue=_db.QUEUE)
            with engine.begin() as conn:
                (job,) = pgqueue.claim(conn, queue=_db.QUEUE, limit=1)
            here.send(job_id)
            time.sleep(HEAD_START + rng.random() * 0.003)
            with engine.connect() as conn:
                tx = conn.begin()
                pgqueue.complete(conn, job.id, job.attempts)
                tx.commit()
                committed = time.perf_counter()
            if not here.poll(SAMPLE_TIMEOUT + 1.0):
                raise RuntimeError(f"the wait for job {job_id} did not return")
            returned = here.recv()
            if isinstance(returned, str):
                raise RuntimeError(returned)
            if i >= 0:
                latencies.append((returned - committed) * 1000.0)
        here.send(None)
        return latencies
    finally:
        engine.dispose()
        process.join(10.0)
        if process.is_alive():
            process.kill()
        here.close()
        there.close()


def run(url: URL, samples: int, rounds: int = 3) -> dict[str, Any]:
    """``wait_for`` and the bare LISTEN floor, ``rounds`` interleaved rounds, pooled."""
    pooled: dict[str, list[float]] = {"wait_for": [], "raw": []}
    for _ in range(rounds):
        pooled["raw"] += samples_of(url, "raw", samples)
        pooled["wait_for"] += samples_of(url, "wait_for", samples)
    return {name: summary(values) for name, values in pooled.items()}


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.wait_latency [--url URL] [--samples N] [--rounds R]``."""
    import argparse
    import json

    parser = argparse.ArgumentParser(prog="python -m bench.wait_latency", description=__doc__)
    parser.add_argument("--url", help="a server URL (default: the embedded PostgreSQL)")
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    with _db.server(args.url) as (server_url, _), _db.throwaway_database(server_url) as url:
        out = run(url, args.samples, args.rounds)
    ratio = out["wait_for"]["p50_ms"] / out["raw"]["p50_ms"]
    print(json.dumps({**out, "p50_ratio": round(ratio, 3)}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
