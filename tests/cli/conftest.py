"""Drive the ``pgqueue`` command the way users and cron run it.

Each call runs in this process through :func:`pgqueue.cli.main`, isolated as a fresh process
would be (:mod:`tests.cli.inprocess`); :func:`run_pgqueue_process` runs a real ``python -m
pgqueue`` for what only a process shows (the interpreter's start, signals, child processes).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine
from sqlalchemy.engine import URL

from tests.cli.inprocess import Result, run_main, run_process

__all__ = ["Result", "plain", "run_pgqueue", "run_pgqueue_process"]


#: ``pgqueue ARGS`` in this process, ``PGQUEUE_DATABASE_URL`` unset unless ``env=`` sets it.
run_pgqueue = run_main
#: ``python -m pgqueue ARGS`` as a real process, the same way.
run_pgqueue_process = run_process


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
