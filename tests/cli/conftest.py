"""Drive the ``pgqueue`` command as a subprocess, the way users and cron run it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine
from sqlalchemy.engine import URL


@dataclass
class Result:
    """What one run of ``pgqueue`` left behind."""

    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


def run_pgqueue(*args: str, env: dict[str, str] | None = None, cwd: str | None = None) -> Result:
    """``python -m pgqueue ARGS`` with ``PGQUEUE_DATABASE_URL`` unset unless ``env`` sets it."""
    full_env = {k: v for k, v in os.environ.items() if k != "PGQUEUE_DATABASE_URL"}
    full_env.update(env or {})
    proc = subprocess.run(
        [sys.executable, "-m", "pgqueue", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=full_env,
        cwd=cwd,
        check=False,
    )
    return Result(proc.returncode, proc.stdout, proc.stderr)


def plain(url: URL) -> str:
    """The URL as a user types it (password included)."""
    return url.render_as_string(hide_password=False)


@pytest.fixture
def cli(db_url: URL) -> Callable[..., Result]:
    """Run ``pgqueue ... --url <a fresh migrated database>``."""

    def run(*args: str, **kwargs: Any) -> Result:
        return run_pgqueue(*args, "--url", plain(db_url), **kwargs)

    return run


@pytest.fixture
def db(db_url: URL) -> Iterator[Engine]:
    """An engine on the same database, to set up and check state without a subprocess."""
    engine = create_engine(db_url)
    yield engine
    engine.dispose()
