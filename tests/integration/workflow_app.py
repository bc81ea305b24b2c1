"""A worker process for the workflow tests: ``python workflow_app.py`` with settings in the env.

PGQUEUE_APP_URL (database URL), PGQUEUE_APP_CONCURRENCY, PGQUEUE_APP_LEASE (seconds).

Queues: ``member`` records ``(job_id, pid, started, finished)`` in ``flow`` after sleeping
``payload["sleep"]`` seconds (0 by default); ``then`` records its own start, and how many of its
dependencies have a ``flow`` row that finished before it started (``seen``), both read in one
statement at the handler's start: what the fan-in could see of its members.
"""

from __future__ import annotations

import os
import sys
import time

from app_support import app_engine, serve
from sqlalchemy import text

import pgqueue

FLOW_DDL = (
    "CREATE TABLE IF NOT EXISTS flow (job_id bigint, kind text, pid int, "
    "started timestamptz, finished timestamptz, seen int)"
)


def main() -> int:
    env = os.environ
    concurrency, engine = app_engine()

    def member(job: pgqueue.JobContext) -> None:
        started = time.time()
        time.sleep(float((job.payload or {}).get("sleep", 0)))
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO flow VALUES (:j, 'member', :p, to_timestamp(:s), "
                    "clock_timestamp(), NULL)"
                ),
                {"j": job.id, "p": os.getpid(), "s": started},
            )

    def then(job: pgqueue.JobContext) -> None:
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO flow SELECT :j, 'then', :p, clock_timestamp(), NULL, "
                    "(SELECT count(*) FROM jobs_dependencies d JOIN flow f "
                    " ON f.job_id = d.depends_on AND f.kind = 'member' "
                    " WHERE d.job_id = :j AND f.finished < clock_timestamp())"
                ),
                {"j": job.id, "p": os.getpid()},
            )

    lease = float(env.get("PGQUEUE_APP_LEASE", "30"))
    worker = pgqueue.Worker(
        engine,
        {"member": member, "then": then},
        concurrency=concurrency,
        poll_interval=0.2,
        lease=lease,
        reap_interval=lease,
    )
    return serve(worker, engine)


if __name__ == "__main__":
    sys.exit(main())
