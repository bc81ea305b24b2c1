"""Start-up and run of the test worker apps (``flow_app.py``, ``worker_app.py``,
``workflow_app.py``), each run as a script, which puts this directory on ``sys.path``."""

from __future__ import annotations

import logging
import os
import sys

from sqlalchemy import Engine, create_engine

import pgqueue


def app_engine() -> tuple[int, Engine]:
    """Logging to stderr (level ``PGQUEUE_APP_LOG``, default WARNING), then the handler threads
    (``PGQUEUE_APP_CONCURRENCY``, default 4) and an engine on ``PGQUEUE_APP_URL`` with a
    connection for each of them and the worker's own."""
    logging.basicConfig(level=os.environ.get("PGQUEUE_APP_LOG", "WARNING"), stream=sys.stderr)
    concurrency = int(os.environ.get("PGQUEUE_APP_CONCURRENCY", "4"))
    engine = create_engine(os.environ["PGQUEUE_APP_URL"], pool_size=concurrency + 4, max_overflow=4)
    return concurrency, engine


def serve(worker: pgqueue.Worker, engine: Engine, *, until_empty: bool = False) -> int:
    """Say ``ready`` (the tests wait for that line), run the worker, dispose of the engine."""
    print("ready", flush=True)
    worker.run(until_empty=until_empty)
    engine.dispose()
    return 0
