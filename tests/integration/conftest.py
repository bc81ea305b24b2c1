"""Fixtures of the integration tests: real worker processes (``worker_app.py``), a LISTEN
connection."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.engine import URL
from worker_helpers import spawned

APP = Path(__file__).with_name("worker_app.py")


@pytest.fixture
def effects(engine: Engine) -> Engine:
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE effects (job_id bigint, attempts int, pid int)"))
    return engine


@pytest.fixture
def listener(engine: Engine) -> Iterator[Any]:
    """A LISTEN connection on the default placement's channel (read it with ``heard``)."""
    raw = engine.raw_connection()
    dbapi = raw.driver_connection
    assert dbapi is not None
    dbapi.autocommit = True
    dbapi.execute("LISTEN jobs")
    yield dbapi
    dbapi.execute("UNLISTEN *")
    raw.close()


@pytest.fixture
def spawn(db_url: URL) -> Iterator[Callable[..., subprocess.Popen[str]]]:
    yield from spawned(APP, db_url, graceful=False)
