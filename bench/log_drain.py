"""Per-job logs (#34): what handlers that log cost the drain.

``python -m bench.log_drain [--url SERVER_URL] [--jobs N] [--rounds R] [--variants A,B,...]``

Each drain gets a fresh database with ``--jobs`` queued jobs of one queue (one ``INSERT ...
SELECT``, then ``VACUUM ANALYZE``); one in-process ``Worker(engine, {queue: handler},
concurrency=4, listen=False)`` drains it, as a user runs it. The rate is the steady one, from the
first handler call to the last. The root logger is at INFO (what ``pgqueue worker`` sets up).
Variants, in turns, the order reversed every round (the default five first):

- ``off``: ``capture_logs=False``, a handler that logs nothing.
- ``noop``: ``capture_logs=True`` (the default), a handler that logs nothing: against ``off``,
  what the capture costs a drain that logs nothing.
- ``log10``: ``capture_logs=True``, a handler that logs 10 lines, 5 by ``job.log`` (a message
  and two fields) and 5 by ``logging.getLogger(...).info`` with two ``%`` arguments, captured:
  the issue's "handlers that log 10 lines each" (a job page shows both kinds).
- ``joblog10``: ``capture_logs=True``, 10 lines by ``job.log``: pgqueue's part alone.
- ``stdlib5``: ``capture_logs=False``, the 5 ``logging`` records of ``log10`` alone, which go
  nowhere: what the ``logging`` module itself costs (making each record), which no change in
  pgqueue removes.
- ``spin10``: ``capture_logs=True``, a handler that logs nothing and runs 10 us of Python (a
  loop on ``time.perf_counter``): what any 10 us of a handler's own Python costs the no-op
  drain, the yardstick of the lines' cost (10 ``job.log`` lines must cost less than that
  for ``joblog10`` to reach 0.8x of ``noop``; their encoding in one ``json`` call alone takes
  about 7 us on the project's machine).
- ``log10_stream`` / ``log10_stream_uncaptured``: ``log10`` with one ordinary handler on the
  root logger formatting each record to ``os.devnull`` (a user's stream handler, minus the
  terminal), captured or not.

Besides the rate, each drain reports the CPU it took per job: this process's (all its threads,
``time.process_time``) and the server's (the drain's backends, read from ``/proc`` when the
server runs on this machine, else ``null``), the WAL it wrote per job (the whole server's: a
shared server's other work counts too) and, for a drain that logs, the lines stored. Prints one
JSON line per drain, then each variant's median and its ratios to ``noop`` and ``off``. Not part
of ``.ci/run``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy.engine import URL

import pgqueue
from bench import _db
from bench._measure import Calls, cpu_seconds

log = logging.getLogger("bench.log_drain.handler")

Handler = Callable[[pgqueue.JobContext], None]


def _quiet(job: pgqueue.JobContext) -> None:
    return None


def _mixed(job: pgqueue.JobContext) -> None:
    """10 lines: 5 by ``job.log`` (a message, two fields), 5 records with two arguments."""
    i = job.payload["i"]
    for step in range(5):
        job.log("copied a batch", step=step, rows=i)
        log.info("job %s: step %d done", i, step)


def _job_log(job: pgqueue.JobContext) -> None:
    """10 lines by ``job.log``, a message and two fields each."""
    i = job.payload["i"]
    for step in range(10):
        job.log("copied a batch", step=step, rows=i)


def _records(job: pgqueue.JobContext) -> None:
    """The 5 ``logging`` records of :func:`_mixed` alone."""
    i = job.payload["i"]
    for step in range(5):
        log.info("job %s: step %d done", i, step)


def _spin10(job: pgqueue.JobContext) -> None:
    """10 us of Python, nothing logged."""
    end = time.perf_counter() + 10e-6
    while time.perf_counter() < end:
        pass


#: Variant -> (``capture_logs``, the handler, whether an ordinary handler writes records out).
VARIANTS: dict[str, tuple[bool, Handler, bool]] = {
    "off": (False, _quiet, False),
    "noop": (True, _quiet, False),
    "log10": (True, _mixed, False),
    "joblog10": (True, _job_log, False),
    "stdlib5": (False, _records, False),
    "spin10": (True, _spin10, False),
    "log10_stream": (True, _mixed, True),
    "log10_stream_uncaptured": (False, _mixed, True),
}
#: What runs unless ``--variants`` says otherwise.
DEFAULT = ("off", "noop", "log10", "joblog10", "stdlib5")


@contextmanager
def _logging(stream: bool) -> Iterator[None]:
    """INFO on the root logger (as ``pgqueue worker`` sets it); with ``stream``, one ordinary
    handler writing each record formatted to ``os.devnull`` (a user's stream handler, minus the
    terminal)."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.INFO)
    with open(os.devnull, "w", encoding="utf-8") as sink:
        handler = logging.StreamHandler(sink)
        handler.setFormatter(
            logging.Formatter("%(asctime)s %(levelname)s %(name)s [%(threadName)s] %(message)s")
        )
        if stream:
            root.addHandler(handler)
        try:
            yield
        finally:
            root.removeHandler(handler)
            root.setLevel(level)


def _server_cpu(conn: Any, database: str) -> float | None:
    """Seconds of CPU the backends of ``database`` spent so far, from ``/proc`` (``None``: the
    server is not on this machine, or ``/proc`` is not readable)."""
    rows = conn.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
        (database,),
    ).fetchall()
    total = 0.0
    for (pid,) in rows:
        cpu = cpu_seconds(f"/proc/{pid}/stat")
        if cpu is None:
            return None
        total += cpu
    return total


def _wal(conn: Any) -> int:
    row = conn.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()
    return int(row[0])


def drain(url: URL, jobs: int, capture: bool, handler: Handler) -> dict[str, Any]:
    """One drain of ``jobs`` queued jobs by one in-process worker: its steady rate and costs."""
    calls = Calls()

    def timed(job: pgqueue.JobContext) -> None:
        calls.record()
        handler(job)

    engine = _db.make_engine(url, pool_size=10)
    worker = pgqueue.Worker(
        engine,
        {_db.QUEUE: timed},
        concurrency=4,
        listen=False,
        install_signal_handlers=False,
        capture_logs=capture,
    )
    database = str(url.database)
    try:
        with _db.admin_connect(url) as admin:
            wal_before = _wal(admin)
            cpu_before = time.process_time()
            stats = worker.run(until_empty=True)
            cpu = time.process_time() - cpu_before
            server_cpu = _server_cpu(admin, database)  # the pool's backends are still there
            wal = _wal(admin) - wal_before
    finally:
        engine.dispose()
    done = len(calls.times)
    return {
        "done": done,
        "failed": stats.failed,
        "jobs_per_s": calls.steady_rate(),
        "client_cpu_us": cpu / done * 1e6,
        "server_cpu_us": None if server_cpu is None else server_cpu / done * 1e6,
        "wal_bytes": wal / done,
    }


def _median(runs: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in runs if r[key] is not None]
    return statistics.median(values) if values else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.log_drain", description=__doc__)
    parser.add_argument("--url", help="a server URL (default: the embedded PostgreSQL)")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--variants", default=",".join(DEFAULT))
    args = parser.parse_args(argv)
    names = args.variants.split(",")
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        parser.error(f"unknown variants {unknown}: choose among {list(VARIANTS)}")
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    with _db.server(args.url) as (server_url, _):
        for round_ in range(args.rounds):
            for name in names if round_ % 2 == 0 else list(reversed(names)):
                capture, handler, stream = VARIANTS[name]
                with _db.throwaway_database(server_url) as url, _logging(stream):
                    _db.fill(url, args.jobs)
                    run = drain(url, args.jobs, capture, handler)
                    if handler is not _quiet:
                        with _db.admin_connect(url) as conn:
                            row = conn.execute(
                                "SELECT count(*), sum(json_array_length(lines)) FROM jobs_logs"
                            ).fetchone()
                        run["logged_jobs"], run["lines"] = row if row else (0, 0)
                runs[name].append(run)
                print(json.dumps({"round": round_, "variant": name, **_rounded(run)}), flush=True)
    medians = {name: statistics.median(r["jobs_per_s"] for r in runs[name]) for name in names}
    for name in names:
        out: dict[str, Any] = {
            "variant": name,
            "median_jobs_per_s": medians[name],
            "median_client_cpu_us": _median(runs[name], "client_cpu_us"),
            "median_server_cpu_us": _median(runs[name], "server_cpu_us"),
            "median_wal_bytes": _median(runs[name], "wal_bytes"),
        }
        for base in ("noop", "off"):
            if base in medians and base != name:
                out[f"ratio_to_{base}"] = medians[name] / medians[base]
        print(json.dumps(_rounded(out)), flush=True)
    return 0


def _rounded(values: dict[str, Any]) -> dict[str, Any]:
    return {k: round(v, 3) if isinstance(v, float) else v for k, v in values.items()}


if __name__ == "__main__":
    raise SystemExit(main())
