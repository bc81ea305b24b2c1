"""A worker process for the flow control tests: ``python flow_app.py``, settings in the environment.

PGQUEUE_APP_URL (database URL), PGQUEUE_APP_CONCURRENCY (handler threads, default 4),
PGQUEUE_APP_LEASE and PGQUEUE_APP_REAP (seconds, default 30 and 15), PGQUEUE_APP_POLL (seconds,
default 1), PGQUEUE_APP_PREFETCH (default: the worker's adaptive one).

Queues ``flow`` and ``other``, one handler: it marks itself live (a committed row in
``flow_live``), then records in ``flow_log`` its job, attempt, pid, key, the database clock, how
many handlers were live and how many jobs of its queue (and of its key) were ``running`` in the
table at that moment,
works (``app_support.hold``: ``payload["sleep"]`` seconds, default 0, or until the file
``payload["until"]`` exists), and unmarks itself. A handler counts the live
rows after its own row committed, so of handlers that run at once the last to count sees them
all: the peak of ``flow_log.live`` is the peak of handlers running together.
"""

from __future__ import annotations

import os
import sys

from app_support import app_engine, hold, serve
from sqlalchemy import text

import pgqueue


def main() -> int:
    env = os.environ
    concurrency, engine = app_engine()

    def handler(job: pgqueue.JobContext) -> None:
        with engine.begin() as conn:
            conn.execute(
                text("INSERT INTO flow_live VALUES (:j, :a)"), {"j": job.id, "a": job.attempts}
            )
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO flow_log SELECT :j, :a, :p, :q, j.concurrency_key,"
                    " clock_timestamp(), (SELECT count(*) FROM flow_live),"
                    " (SELECT count(*) FROM jobs r WHERE r.queue = :q AND r.status = 'running'),"
                    " (SELECT count(*) FROM jobs r WHERE r.queue = :q AND r.status = 'running'"
                    "  AND r.concurrency_key = j.concurrency_key)"
                    " FROM jobs j WHERE j.id = :j"
                ),
                {"j": job.id, "a": job.attempts, "p": os.getpid(), "q": job.queue},
            )
        hold(job.payload)
        with engine.begin() as conn:
            conn.execute(
                text("DELETE FROM flow_live WHERE job_id = :j AND attempts = :a"),
                {"j": job.id, "a": job.attempts},
            )

    prefetch = env.get("PGQUEUE_APP_PREFETCH")
    worker = pgqueue.Worker(
        engine,
        {"flow": handler, "other": handler},
        concurrency=concurrency,
        poll_interval=float(env.get("PGQUEUE_APP_POLL", "1")),
        prefetch=None if prefetch is None else int(prefetch),
        lease=float(env.get("PGQUEUE_APP_LEASE", "30")),
        reap_interval=float(env.get("PGQUEUE_APP_REAP", "15")),
    )
    return serve(worker, engine)


if __name__ == "__main__":
    sys.exit(main())
