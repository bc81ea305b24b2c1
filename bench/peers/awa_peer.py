"""awa's bulk enqueue and no-op drain, run like ``pgqueuer_peer.py``.

Runs under the interpreter of a virtual environment that has ``awa-pg`` installed (awa's Python
API over its Rust core), never pgqueue's own environment. Usage:
``PY bench/peers/awa_peer.py DSN JOBS ENQUEUE_BATCH DRAIN_BATCH``; prints one JSON object.

Set-up (untimed): ``awa.migrate`` installs the ``awa`` schema, then
``AsyncClient.install_queue_storage`` activates the queue-storage engine, the one a fresh install
runs (its first worker would switch to it anyway) and the only one ``enqueue_many_copy`` writes to.

Measured:

* enqueue: ``JOBS // ENQUEUE_BATCH`` calls of ``AsyncClient.enqueue_many_copy`` (awa's bulk path
  for Python producers: one COPY, so one transaction, per call) with ``ENQUEUE_BATCH`` jobs each;
* drain: from ``AsyncClient.start`` to the return of ``AsyncClient.shutdown``, called once the
  no-op ``async`` handler has run for every job (awa has no drain-and-stop mode; ``shutdown``
  waits for the in-flight jobs to be completed). ``DRAIN_BATCH`` 0 keeps awa's default worker
  (queue ``default`` with ``max_workers=10``, claims of up to 512 jobs); otherwise it is the
  queue's ``max_workers`` (handlers run at once).

The script drops the ``awa`` schema at the end.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from dataclasses import dataclass
from importlib.metadata import version

import awa

QUEUE = "default"


@dataclass
class Noop:
    """The job's arguments; awa names the job kind after the class (``noop``)."""

    i: int


async def main(dsn: str, jobs: int, batch: int, drain_batch: int) -> dict[str, object]:
    await awa.migrate(dsn)
    client = awa.AsyncClient(dsn)
    try:
        await client.install_queue_storage()
        args = [Noop(i) for i in range(batch)]
        rounds = max(1, jobs // batch)
        started = time.perf_counter()
        for _ in range(rounds):
            await client.enqueue_many_copy(args, queue=QUEUE)
        enqueue_rate = rounds * batch / (time.perf_counter() - started)

        done = 0
        all_done = asyncio.Event()

        @client.task(Noop, queue=QUEUE)
        async def noop(job: awa.Job[Noop]) -> None:
            nonlocal done
            done += 1
            if done == rounds * batch:
                all_done.set()

        started = time.perf_counter()
        await client.start(None if drain_batch == 0 else [(QUEUE, drain_batch)])
        await all_done.wait()
        await client.shutdown()
        drain_rate = done / (time.perf_counter() - started)

        tx = await client.transaction()
        await tx.execute("DROP SCHEMA awa CASCADE")
        await tx.commit()
        return {
            "version": version("awa-pg"),
            "enqueue_jobs_per_s": enqueue_rate,
            "enqueued": rounds * batch,
            "drain_jobs_per_s": drain_rate,
            "drained": done,
            "drain_max_workers": drain_batch or "default (10)",
        }
    finally:
        await client.close()


if __name__ == "__main__":
    dsn, jobs, batch, drain_batch = sys.argv[1], *map(int, sys.argv[2:5])
    print(json.dumps(asyncio.run(main(dsn, jobs, batch, drain_batch))))
