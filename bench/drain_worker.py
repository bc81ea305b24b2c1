"""One worker process draining the queue.

``python -m bench.drain_worker URL C [BATCH [PREFETCH]] [--handler KIND] [--async-concurrency N]``

``C`` is the worker's ``concurrency`` (handler threads; none start for an ``async-*`` handler).
``BATCH`` and ``PREFETCH`` are its ``batch_size`` and ``prefetch``, ``N`` its ``async_concurrency``;
``default`` or absent leaves the worker's default. ``KIND`` is the handler (default ``sync-noop``):
``sync-noop`` and ``async-noop`` return at once; ``sync-sleep`` (``time.sleep``) and ``async-sleep``
(``await asyncio.sleep``) wait :data:`SLEEP_S` per job, an I/O-bound job.

Prints one JSON line: the jobs done (and retried, failed, lost), the seconds
``run(until_empty=True)`` took, the process's resident memory (``VmRSS`` now, ``VmHWM`` its peak)
in kB and, for the ``*-sleep`` handlers, the most threads alive (``threading.active_count()``,
sampled at the start of every job).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import threading
import time
from typing import Any

from sqlalchemy import create_engine

import pgqueue
from pgqueue.jobs import Handler

#: Seconds each job of the ``*-sleep`` handlers waits.
SLEEP_S = 0.05


class ThreadPeak:
    """The most threads alive in the process, sampled by the handlers."""

    def __init__(self) -> None:
        self.value: int | None = None
        self._lock = threading.Lock()

    def sample(self) -> None:
        alive = threading.active_count()
        with self._lock:
            self.value = alive if self.value is None else max(self.value, alive)


PEAK = ThreadPeak()


def noop(job: pgqueue.JobContext) -> None:
    """The no-op handler."""


async def async_noop(job: pgqueue.JobContext) -> None:
    """The no-op coroutine."""


def sleep(job: pgqueue.JobContext) -> None:
    """An I/O-bound job on a handler thread."""
    PEAK.sample()
    time.sleep(SLEEP_S)


async def async_sleep(job: pgqueue.JobContext) -> None:
    """An I/O-bound job on the worker's event loop."""
    PEAK.sample()
    await asyncio.sleep(SLEEP_S)


#: A 1 KB JSON result (its JSON text is 1,024 bytes).
KB_RESULT = {"data": "x" * 1013}

REGISTRY = pgqueue.Registry()


@REGISTRY.task(queue="bench", name="bench.noop")
def task_noop(i: int) -> None:
    """The no-op task."""


@REGISTRY.task(queue="bench", name="bench.kb")
def task_kb(i: int) -> dict[str, str]:
    """A task returning 1 KB."""
    return KB_RESULT


#: The task each ``task-*`` kind runs: the name its jobs carry in ``jobs.task``.
TASKS = {"task-noop": "bench.noop", "task-1kb": "bench.kb"}

HANDLERS: dict[str, Handler] = {
    "sync-noop": noop,
    "async-noop": async_noop,
    "sync-sleep": sleep,
    "async-sleep": async_sleep,
}


def _status_kb(field: str) -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def _size(value: str) -> int | None:
    return None if value == "default" else int(value)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.drain_worker")
    parser.add_argument("url")
    parser.add_argument("concurrency", type=int)
    parser.add_argument("batch_size", nargs="?", type=_size, default=None)
    parser.add_argument("prefetch", nargs="?", type=_size, default=None)
    parser.add_argument("--handler", choices=[*HANDLERS, *TASKS], default="sync-noop")
    parser.add_argument("--async-concurrency", type=_size, default=None)
    return parser.parse_args(argv)


def _options(args: argparse.Namespace) -> dict[str, Any]:
    """The worker options given; the others keep the worker's defaults."""
    given = {
        "batch_size": args.batch_size,
        "prefetch": args.prefetch,
        "async_concurrency": args.async_concurrency,
    }
    return {name: value for name, value in given.items() if value is not None}


def main(argv: list[str]) -> int:
    args = parse(argv)
    engine = create_engine(args.url, pool_size=args.concurrency + 5, max_overflow=10)
    worker = pgqueue.Worker(
        engine,
        REGISTRY if args.handler in TASKS else {"bench": HANDLERS[args.handler]},
        concurrency=args.concurrency,
        **_options(args),
        listen=False,
        install_signal_handlers=False,
    )
    t0 = time.perf_counter()
    stats = worker.run(until_empty=True)
    seconds = time.perf_counter() - t0
    engine.dispose()
    out: dict[str, Any] = {
        "handler": args.handler,
        "done": stats.done,
        "batch_size": worker.batch_size,
        "prefetch": worker.prefetch,  # the threads'; async handlers prefetch min(N, batch_size)
        "async_concurrency": worker.async_concurrency,
        "claimed": stats.claimed,
        "retried": stats.retried,
        "failed": stats.failed,
        "lost": stats.lost,
        "seconds": seconds,
        "rss_kb": _status_kb("VmRSS"),
        "hwm_kb": _status_kb("VmHWM"),
        "peak_threads": PEAK.value,
    }
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
