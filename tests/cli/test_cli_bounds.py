"""The command line refuses what the database would refuse, or could not give back, before any
SQL: one line on stderr, exit code 2, never a traceback.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from sqlalchemy import Engine, text

from tests.cli.conftest import Result

Cli = Callable[..., Result]


def _count(db: Engine) -> int:
    with db.connect() as conn:
        return int(conn.execute(text("SELECT count(*) FROM jobs")).scalar_one())


def _one_clear_line(result: Result, *needles: str) -> None:
    assert result.code == 2, result
    assert "Traceback" not in result.err, result.err
    last = result.err.strip().splitlines()[-1]
    for needle in needles:
        assert needle in last, result.err


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["enqueue", "q1", "{}", "--delay", "9999999d"], "too long: at most 36525d"),
        (["enqueue", "q1", "{}", "--max-attempts", "99999999999"], "at most 2147483647"),
        (["enqueue", "q1", "[" * 30_000 + "]" * 30_000], "nested more than 100 levels"),
        (["enqueue", "q1", "[" * 500 + "]" * 500], "payload: nested more than 100 levels"),
        (["enqueue", "a\nb", "{}"], "queue: must not contain control characters"),
        (["enqueue", "tab\tq", "{}"], "queue: must not contain control characters"),
        (["show", "99999999999999999999"], "expected a job id"),
        (["cancel", "1", "99999999999999999999"], "expected a job id"),
        (["retry", "99999999999999999999"], "expected a job id"),
        (["retry", "--failed", "--attempts", "99999999999"], "at most 2147483647"),
        (["purge", "--older-than", "99999999d"], "too long: at most 36525d"),
        (["list", "--limit", "99999999999"], "at most 2147483647"),
    ],
    ids=[
        "delay",
        "max-attempts",
        "deep-json-cli",
        "deep-json-api",
        "newline-queue",
        "tab-queue",
        "show-id",
        "cancel-id",
        "retry-id",
        "retry-attempts",
        "purge-age",
        "list-limit",
    ],
)
def test_out_of_range_input_is_one_line_and_exit_2_and_writes_nothing(
    cli: Cli, db: Engine, args: list[str], needle: str
) -> None:
    _one_clear_line(cli(*args), needle)
    assert _count(db) == 0
