"""A worker process for the fault tests: ``python worker_app.py`` with settings in the environment.

PGQUEUE_APP_URL (database URL), PGQUEUE_APP_CONCURRENCY, PGQUEUE_APP_LEASE (seconds, or
``default`` for the worker's own lease and reap interval),
PGQUEUE_APP_POLL (seconds), PGQUEUE_APP_PREFETCH, PGQUEUE_APP_SHUTDOWN (seconds),
PGQUEUE_APP_UNTIL_EMPTY (1 to drain and exit), PGQUEUE_APP_ASYNC_CONCURRENCY,
PGQUEUE_APP_PERIODIC (``name=seconds``: a periodic definition enqueuing on ``ticks`` every that
many seconds).

Queues: ``effects`` inserts ``(job_id, attempts, pid)`` into ``effects``, then works
(``app_support.hold``: ``payload["sleep"]`` seconds, or until the file ``payload["until"]``
exists); ``aeffects`` does the same from an ``async def`` handler through an ``AsyncEngine`` and
``asyncio.sleep``; ``crash`` kills its worker every time; ``polite`` records and works like
``effects``, but gives its job back with ``raise pgqueue.Snooze(0)`` as soon as ``job.stopping``
is set.
"""

from __future__ import annotations

import os
import sys
from datetime import timedelta

from app_support import ahold, app_engine, hold, serve
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

import pgqueue

EFFECTS_DDL = "CREATE TABLE IF NOT EXISTS effects (job_id bigint, attempts int, pid int)"


def record(engine: object, job: pgqueue.JobContext) -> None:
    with engine.begin() as conn:  # type: ignore[attr-defined]
        conn.execute(
            text("INSERT INTO effects VALUES (:j, :a, :p)"),
            {"j": job.id, "a": job.attempts, "p": os.getpid()},
        )


def main() -> int:
    env = os.environ
    concurrency, engine = app_engine()

    def effects(job: pgqueue.JobContext) -> None:
        record(engine, job)  # first: a row means the handler started
        hold(job.payload)  # ignores job.stopping on purpose

    aengine = create_async_engine(env["PGQUEUE_APP_URL"], pool_size=10)

    async def aeffects(job: pgqueue.JobContext) -> None:
        async with aengine.begin() as conn:  # first: a row means the handler started
            await conn.execute(
                text("INSERT INTO effects VALUES (:j, :a, :p)"),
                {"j": job.id, "a": job.attempts, "p": os.getpid()},
            )
        await ahold(job.payload)

    def crash(job: pgqueue.JobContext) -> None:
        os._exit(3)

    def polite(job: pgqueue.JobContext) -> None:
        record(engine, job)  # first: a row means the handler started
        if hold(job.payload, job.stopping):
            raise pgqueue.Snooze(0)  # what the docs advise: give the job back

    periodic = []
    if env.get("PGQUEUE_APP_PERIODIC"):
        name, _, seconds = env["PGQUEUE_APP_PERIODIC"].partition("=")
        periodic.append(pgqueue.Periodic(name, timedelta(seconds=float(seconds)), "ticks"))

    timing: dict[str, float] = {}
    if env.get("PGQUEUE_APP_LEASE") != "default":
        timing["lease"] = float(env.get("PGQUEUE_APP_LEASE", "30"))
        timing["reap_interval"] = float(
            env.get("PGQUEUE_APP_REAP", env.get("PGQUEUE_APP_LEASE", "30"))
        )
    worker = pgqueue.Worker(
        engine,
        {
            "effects": effects,
            "aeffects": aeffects,
            "crash": crash,
            "ticks": effects,
            "polite": polite,
        },
        periodic=periodic,
        concurrency=concurrency,
        async_concurrency=int(env.get("PGQUEUE_APP_ASYNC_CONCURRENCY", "100")),
        poll_interval=float(env.get("PGQUEUE_APP_POLL", "1")),
        prefetch=int(env.get("PGQUEUE_APP_PREFETCH", "1")),
        shutdown_timeout=float(env.get("PGQUEUE_APP_SHUTDOWN", "30")),
        **timing,
    )
    return serve(worker, engine, until_empty=env.get("PGQUEUE_APP_UNTIL_EMPTY") == "1")


if __name__ == "__main__":
    sys.exit(main())
