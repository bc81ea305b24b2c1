"""Start-up and run of the test worker apps (``flow_app.py``, ``worker_app.py``,
``workflow_app.py``), each run as a script, which puts this directory on ``sys.path``, and the
work their handlers do (``scale_app.py``, imported by ``pgqueue worker`` from this directory,
too)."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

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


#: The longest a handler waits for its release file.
RELEASE_WAIT = 60.0


def hold(payload: Any, stop: threading.Event | None = None) -> bool:
    """A handler's work: ``payload["sleep"]`` seconds (default 0), or, when ``payload["until"]``
    names a file, until the test creates it (at most :data:`RELEASE_WAIT` seconds), so the test
    says when the job ends. With ``stop`` (``job.stopping``), it ends early once that is set:
    then it returns True."""
    payload = payload if isinstance(payload, dict) else {}
    release = Path(payload["until"]) if "until" in payload else None
    end = time.monotonic() + (RELEASE_WAIT if release else float(payload.get("sleep", 0)))
    if release is None and stop is None:
        time.sleep(max(0.0, end - time.monotonic()))
        return False
    while (left := end - time.monotonic()) > 0 and not (release and release.exists()):
        if stop is not None and stop.wait(min(left, 0.05)):
            return True
        if stop is None:
            time.sleep(min(left, 0.05))
    return False


async def ahold(payload: Any) -> None:
    """:func:`hold` for an ``async def`` handler, on its event loop."""
    payload = payload if isinstance(payload, dict) else {}
    if "until" not in payload:
        await asyncio.sleep(float(payload.get("sleep", 0)))
        return
    release, end = Path(payload["until"]), time.monotonic() + RELEASE_WAIT
    while not release.exists() and time.monotonic() < end:
        await asyncio.sleep(0.05)
