"""The welcome-email handler: sends (logs) each email once, however often its job runs.

Run it with ``python -m myservice.worker`` (``DATABASE_URL`` names the database).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

from sqlalchemy import Engine, create_engine
from sqlalchemy.dialects.postgresql import insert

import pgqueue
from myservice.app import WELCOME_QUEUE
from myservice.models import SentEmail

log = logging.getLogger("myservice.email")


def make_handlers(engine: Engine) -> dict[str, Callable[[pgqueue.JobContext], None]]:
    """The ``{queue: handler}`` mapping for ``pgqueue.Worker`` (or ``pgqueue.testing.drain``)."""

    def send_welcome_email(job: pgqueue.JobContext) -> None:
        with engine.begin() as conn:
            # The job id is the idempotency key: a rerun after a lost lease sends nothing twice.
            sent = conn.execute(
                insert(SentEmail)
                .values(job_id=job.id, email=job.payload["email"])
                .on_conflict_do_nothing(index_elements=[SentEmail.job_id])
                .returning(SentEmail.job_id)
            ).first()
            if sent is not None:
                log.info("welcome email to %s (job %s)", job.payload["email"], job.id)
            # Complete in the same transaction: the record and the completion commit together.
            pgqueue.complete(conn, job.id, job.attempts)

    return {WELCOME_QUEUE: send_welcome_email}


def main() -> None:
    """Run a worker for the service's queues until SIGTERM or Ctrl-C."""
    logging.basicConfig(level=logging.INFO)
    engine = create_engine(os.environ["DATABASE_URL"])
    pgqueue.Worker(engine, make_handlers(engine)).run()


if __name__ == "__main__":
    main()
