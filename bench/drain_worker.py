"""One worker process draining the queue: ``python -m bench.drain_worker URL C [BATCH [PREFETCH]]``.

``BATCH`` and ``PREFETCH`` are the worker's ``batch_size`` and ``prefetch``; ``default`` or absent
leaves the worker's default.

Prints one JSON line: the jobs done, the seconds ``run(until_empty=True)`` took, and the process's
resident memory (``VmRSS`` now, ``VmHWM`` its peak) in kB.
"""

from __future__ import annotations

import json
import sys
import time

from sqlalchemy import create_engine

import pgqueue


def _status_kb(field: str) -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def noop(job: pgqueue.JobContext) -> None:
    """The no-op handler."""


def main(argv: list[str]) -> int:
    url, concurrency = argv[0], int(argv[1])
    sizes = dict(zip(("batch_size", "prefetch"), argv[2:4], strict=False))
    options = {name: int(value) for name, value in sizes.items() if value != "default"}
    engine = create_engine(url, pool_size=concurrency + 5, max_overflow=10)
    worker = pgqueue.Worker(
        engine,
        {"bench": noop},
        concurrency=concurrency,
        **options,
        listen=False,
        install_signal_handlers=False,
    )
    t0 = time.perf_counter()
    stats = worker.run(until_empty=True)
    seconds = time.perf_counter() - t0
    engine.dispose()
    out = {
        "done": stats.done,
        "batch_size": worker.batch_size,
        "prefetch": worker.prefetch,
        "claimed": stats.claimed,
        "seconds": seconds,
        "rss_kb": _status_kb("VmRSS"),
        "hwm_kb": _status_kb("VmHWM"),
    }
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
