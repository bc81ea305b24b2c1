"""A worker process for the durable steps' fault test: ``python durable_app.py`` with
PGQUEUE_APP_URL (database URL), PGQUEUE_APP_LEASE (seconds) and PGQUEUE_APP_HOLD (1: the task
blocks after its second step, until the test kills the process with SIGKILL).

Task ``durable_app.fulfil`` (queue ``orders``): three steps, each appending ``(job, step, pid)``
to ``ledger`` in a transaction of its own; it returns the last step's value.
"""

from __future__ import annotations

import os
import sys
import threading
from datetime import timedelta

from app_support import app_engine, serve
from sqlalchemy import text

import pgqueue

registry = pgqueue.Registry()
_, engine = app_engine()


def book(job_id: int, step: str) -> str:
    """A step's side effect, committed on its own: the ledger tells how often it ran."""
    with engine.begin() as conn:
        conn.execute(
            text("INSERT INTO ledger VALUES (:j, :s, :p)"),
            {"j": job_id, "s": step, "p": os.getpid()},
        )
    return f"{step}-done"


@registry.task(queue="orders", name="durable_app.fulfil")
def fulfil(order: int) -> str:
    job = pgqueue.current_job()
    job.step("charge", book, job.id, "charge")
    job.step("ship", book, job.id, "ship")
    if os.environ.get("PGQUEUE_APP_HOLD") == "1":
        threading.Event().wait(60)  # step 2 returned: the test kills the process here
    return job.step("email", book, job.id, f"email-{order}")


def main() -> int:
    lease = float(os.environ.get("PGQUEUE_APP_LEASE", "30"))
    worker = pgqueue.Worker(
        engine,
        registry,
        concurrency=1,
        poll_interval=0.2,
        lease=timedelta(seconds=lease),
        reap_interval=timedelta(seconds=lease),
    )
    return serve(worker, engine)


if __name__ == "__main__":
    sys.exit(main())
