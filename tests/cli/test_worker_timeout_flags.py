"""``pgqueue worker --default-timeout D --timeout-grace D``: the Worker's ``default_timeout`` and
``timeout_grace`` (issue #31) from the command line."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from sqlalchemy import Engine, text

import pgqueue
from tests.cli.conftest import Result

Cli = Callable[..., Result]

APP = """
import asyncio


async def hang(job):
    await asyncio.sleep(30)


handlers = {"slow": hang}
"""


def test_a_job_without_its_own_timeout_gets_the_workers(
    cli: Cli, db: Engine, tmp_path: Path
) -> None:
    (tmp_path / "timeout_app.py").write_text(APP, encoding="utf-8")
    with db.begin() as conn:
        job_id = pgqueue.enqueue(conn, {}, queue="slow", max_attempts=1)
    result = cli(
        "worker",
        "timeout_app:handlers",
        "--burst",
        "--default-timeout",
        "0.5",
        "--timeout-grace",
        "0",
        cwd=str(tmp_path),
    )
    assert result.code == 0, result.err
    with db.connect() as conn:
        row = conn.execute(
            text("SELECT status, last_error FROM jobs WHERE id = :id"), {"id": job_id}
        ).one()
    assert row.status == "failed"
    assert row.last_error.startswith("HandlerTimeoutError: timed out after 0.5 s"), row


def test_a_zero_default_timeout_is_refused_naming_it(cli: Cli, db: Engine, tmp_path: Path) -> None:
    (tmp_path / "timeout_app.py").write_text(APP, encoding="utf-8")
    with db.begin() as conn:
        pgqueue.enqueue(conn, {}, queue="slow")
    result = cli(
        "worker", "timeout_app:handlers", "--burst", "--default-timeout", "0", cwd=str(tmp_path)
    )
    assert result.code == 2, (result.out, result.err)
    assert "default_timeout" in result.err
    with db.connect() as conn:  # nothing ran, nothing was written
        assert conn.execute(text("SELECT status, attempts FROM jobs")).one() == ("queued", 0)
