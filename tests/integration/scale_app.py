"""A target for ``pgqueue worker scale_app:handlers --processes N`` in the supervisor tests.

``effects`` inserts ``(job_id, attempts, pid)`` into ``effects`` (through an engine of its own on
``PGQUEUE_APP_URL``), then works (``app_support.hold``: ``payload["sleep"]`` seconds, default 0,
or until the file ``payload["until"]`` exists).
"""

from __future__ import annotations

import os
import threading

from app_support import hold
from sqlalchemy import Engine, create_engine, text

import pgqueue

_engine: Engine | None = None
_lock = threading.Lock()


def _effects_engine() -> Engine:
    global _engine
    with _lock:
        if _engine is None:
            _engine = create_engine(os.environ["PGQUEUE_APP_URL"], pool_size=4, max_overflow=4)
        return _engine


def effects(job: pgqueue.JobContext) -> None:
    with _effects_engine().begin() as conn:  # first: a row means the handler started
        conn.execute(
            text("INSERT INTO effects VALUES (:j, :a, :p)"),
            {"j": job.id, "a": job.attempts, "p": os.getpid()},
        )
    hold(job.payload)


handlers = {"effects": effects}
