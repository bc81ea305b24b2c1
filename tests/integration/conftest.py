"""Fixtures of the worker tests that run real worker processes (``worker_app.py``)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.engine import URL

APP = Path(__file__).with_name("worker_app.py")


@pytest.fixture
def effects(engine: Engine) -> Engine:
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE effects (job_id bigint, attempts int, pid int)"))
    return engine


@pytest.fixture
def spawn(db_url: URL) -> Iterator[Callable[..., subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []

    def start(**settings: object) -> subprocess.Popen[str]:
        env = dict(os.environ, PGQUEUE_APP_URL=db_url.render_as_string(hide_password=False))
        env.update({f"PGQUEUE_APP_{k.upper()}": str(v) for k, v in settings.items()})
        proc = subprocess.Popen(
            [sys.executable, str(APP)], env=env, stdout=subprocess.PIPE, text=True
        )
        procs.append(proc)
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()
