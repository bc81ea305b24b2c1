""":class:`Rows`: a refused batch is written again in halves, and a retry resumes where it broke.

The statement here is a function of the test that refuses some rows the way the driver does
(the exceptions SQLAlchemy raises); what a real database refuses, and what the worker makes of a
refused job, is ``tests/integration/test_flush_refused.py``.
"""

from __future__ import annotations

from typing import Any, cast

import psycopg
import pytest
from sqlalchemy import Connection
from sqlalchemy import exc as sa_exc

from pgqueue._worker.culprits import Rows

NO_CONNECTION = cast(Connection, None)  # the statements of these tests never use it


def refused(row: int) -> sa_exc.DataError:
    return sa_exc.DataError("UPDATE jobs", {}, psycopg.errors.CheckViolation(f"row {row}"))


class Statement:
    """Writes rows unless one is ``bad``; fails once, transiently, at its ``lost_at``-th call."""

    def __init__(self, bad: set[int], lost_at: int | None = None) -> None:
        self.bad = bad
        self.lost_at = lost_at
        self.calls: list[list[int]] = []
        self.written: list[int] = []

    def __call__(self, conn: Any, rows: list[int]) -> set[int]:
        self.calls.append(list(rows))
        if len(self.calls) == self.lost_at:
            raise sa_exc.OperationalError("UPDATE jobs", {}, psycopg.OperationalError("gone"))
        for row in rows:
            if row in self.bad:
                raise refused(row)
        self.written += rows
        return set(rows)


def test_a_batch_the_database_takes_is_one_statement() -> None:
    rows: Rows[int, set[int]] = Rows(range(8))
    statement = Statement(bad=set())
    rows.write(NO_CONNECTION, statement)
    assert statement.calls == [list(range(8))]
    assert rows.written
    assert rows.refused == []
    assert rows.landed() == list(range(8))
    assert rows.answers == [set(range(8))]


def test_the_refused_rows_stand_alone_and_the_others_are_written_in_halves() -> None:
    rows: Rows[int, set[int]] = Rows(range(8))
    statement = Statement(bad={2, 5})
    rows.write(NO_CONNECTION, statement)
    assert sorted(statement.written) == [0, 1, 3, 4, 6, 7]
    assert [(row, str(error.orig)) for row, error in rows.refused] == [  # type: ignore[attr-defined]
        (2, "row 2"),
        (5, "row 5"),
    ]
    assert sorted(rows.landed()) == [0, 1, 3, 4, 6, 7]
    assert statement.calls == [
        [0, 1, 2, 3, 4, 5, 6, 7],
        [0, 1, 2, 3],
        [0, 1],
        [2, 3],
        [2],
        [3],
        [4, 5, 6, 7],
        [4, 5],
        [4],
        [5],
        [6, 7],
    ]


def test_a_transient_error_propagates_and_the_retry_writes_only_what_is_left() -> None:
    """Broken in the middle of the halving (the connection lost at the 4th statement): the
    retry writes the rows not written yet, never one twice."""
    rows: Rows[int, set[int]] = Rows(range(8))
    statement = Statement(bad={2}, lost_at=4)
    with pytest.raises(sa_exc.OperationalError):
        rows.write(NO_CONNECTION, statement)
    assert not rows.written
    assert statement.written == [0, 1]
    assert sorted(rows.pending()) == [2, 3, 4, 5, 6, 7]
    rows.write(NO_CONNECTION, statement)
    assert sorted(statement.written) == [0, 1, 3, 4, 5, 6, 7]
    assert len(statement.written) == len(set(statement.written))
    assert [row for row, _ in rows.refused] == [2]


@pytest.mark.parametrize(
    "error",
    [
        sa_exc.ProgrammingError("UPDATE jobs", {}, psycopg.errors.InsufficientPrivilege("no")),
        RuntimeError("a bug"),
    ],
)
def test_an_error_that_is_no_rows_doing_is_not_halved(error: Exception) -> None:
    """A privilege, a bug: every half would fail the same, and each job with it."""

    def statement(conn: Any, rows: list[int]) -> None:
        raise error

    rows: Rows[int, None] = Rows([1, 2, 3])
    with pytest.raises(type(error)):
        rows.write(NO_CONNECTION, statement)
    assert rows.pending() == [1, 2, 3]
    assert rows.refused == []
