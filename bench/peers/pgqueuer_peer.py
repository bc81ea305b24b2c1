"""pgqueuer's bulk enqueue and no-op drain, for ``python -m bench --peer-python PY``.

Runs under the interpreter of a virtual environment that has ``pgqueuer`` and ``asyncpg``
installed (never pgqueue's own environment: pgqueue does not depend on it). Usage:
``PY bench/peers/pgqueuer_peer.py DSN JOBS ENQUEUE_BATCH DRAIN_BATCH``; prints one JSON object
(``DRAIN_BATCH`` 0: pgqueuer's defaults, ``batch_size=10`` and no cap on concurrent tasks). The
database must be empty of pgqueuer's objects: the script installs its schema and drops it.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

import asyncpg
from pgqueuer import PgQueuer
from pgqueuer.db import AsyncpgDriver
from pgqueuer.models import Job
from pgqueuer.queries import Queries
from pgqueuer.types import QueueExecutionMode


async def main(dsn: str, jobs: int, batch: int, drain_batch: int) -> dict[str, object]:
    conn = await asyncpg.connect(dsn)
    driver = AsyncpgDriver(conn)
    queries = Queries(driver)
    await queries.install()
    try:
        payloads = [json.dumps({"i": i}).encode() for i in range(batch)]
        rounds = max(1, jobs // batch)
        started = time.perf_counter()
        for _ in range(rounds):
            await queries.enqueue(["noop"] * batch, payloads, [0] * batch)
        enqueue_rate = rounds * batch / (time.perf_counter() - started)

        pgq = PgQueuer(driver)
        done = 0

        @pgq.entrypoint("noop")
        async def noop(job: Job) -> None:
            nonlocal done
            done += 1

        started = time.perf_counter()
        options = (
            {}
            if drain_batch == 0
            else {"batch_size": drain_batch, "max_concurrent_tasks": 2 * drain_batch}
        )
        await pgq.qm.run(mode=QueueExecutionMode.drain, **options)
        drain_rate = done / (time.perf_counter() - started)
        return {
            "version": __import__("pgqueuer").__version__,
            "enqueue_jobs_per_s": enqueue_rate,
            "enqueued": rounds * batch,
            "drain_jobs_per_s": drain_rate,
            "drained": done,
            "drain_batch_size": drain_batch or "default (10)",
        }
    finally:
        await queries.uninstall()
        await conn.close()


if __name__ == "__main__":
    dsn, jobs, batch, drain_batch = sys.argv[1], *map(int, sys.argv[2:5])
    print(json.dumps(asyncio.run(main(dsn, jobs, batch, drain_batch))))
