"""procrastinate's bulk enqueue and no-op drain, run like ``pgqueuer_peer.py``.

Runs under the interpreter of a virtual environment that has ``procrastinate`` installed (it
brings psycopg 3), never pgqueue's own environment. Usage:
``PY bench/peers/procrastinate_peer.py DSN JOBS ENQUEUE_BATCH DRAIN_BATCH``; prints one JSON object.

Measured, through procrastinate's ``PsycopgConnector`` (its default pool):

* enqueue: ``JOBS // ENQUEUE_BATCH`` calls of ``Task.batch_defer_async`` with ``ENQUEUE_BATCH``
  jobs each (one ``procrastinate_defer_jobs`` query, so one transaction, per call);
* drain: ``App.run_worker_async(wait=False)``, which returns once the queue is empty and its
  running jobs are done, with a no-op ``async`` task. procrastinate's worker fetches one job
  per query; ``DRAIN_BATCH`` 0 keeps its default ``concurrency=1``, otherwise it is the
  worker's ``concurrency`` (jobs run at once).

procrastinate's schema goes into a schema of its own (``SCHEMA``, first on every connection's
``search_path``) so that the script can drop it whole at the end.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from importlib.metadata import version

from procrastinate import App, PsycopgConnector
from procrastinate.app import WorkerOptions
from procrastinate.types import JSONDict

SCHEMA = "procrastinate_peer"


async def main(dsn: str, jobs: int, batch: int, drain_batch: int) -> dict[str, object]:
    connector = PsycopgConnector(conninfo=dsn, kwargs={"options": f"-c search_path={SCHEMA}"})
    app = App(connector=connector)
    done = 0

    @app.task(name="noop")
    async def noop(i: int) -> None:
        nonlocal done
        done += 1

    async with app.open_async():
        await connector.execute_query_async(f"CREATE SCHEMA {SCHEMA}")
        try:
            await app.schema_manager.apply_schema_async()
            kwargs: list[JSONDict] = [{"i": i} for i in range(batch)]
            rounds = max(1, jobs // batch)
            started = time.perf_counter()
            for _ in range(rounds):
                await noop.batch_defer_async(*kwargs)
            enqueue_rate = rounds * batch / (time.perf_counter() - started)

            options: WorkerOptions = {"wait": False, "install_signal_handlers": False}
            if drain_batch:
                options["concurrency"] = drain_batch
            started = time.perf_counter()
            await app.run_worker_async(**options)
            drain_rate = done / (time.perf_counter() - started)
        finally:
            await connector.execute_query_async(f"DROP SCHEMA {SCHEMA} CASCADE")
    return {
        "version": version("procrastinate"),
        "enqueue_jobs_per_s": enqueue_rate,
        "enqueued": rounds * batch,
        "drain_jobs_per_s": drain_rate,
        "drained": done,
        "drain_concurrency": drain_batch or "default (1)",
    }


if __name__ == "__main__":
    dsn, jobs, batch, drain_batch = sys.argv[1], *map(int, sys.argv[2:5])
    print(json.dumps(asyncio.run(main(dsn, jobs, batch, drain_batch))))
