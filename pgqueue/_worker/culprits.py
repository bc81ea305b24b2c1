"""A batched write that one row's value breaks: written again in halves until the culprits stand
alone, so the rest lands.

The worker writes outcomes and leases in batches, one statement for many jobs, and the database
refuses such a statement whole when it refuses one row's value (:data:`DriverError.DATA`: a data
exception, a constraint, text the driver cannot encode). pgqueue checks what it writes before any
SQL (:mod:`pgqueue._base.storable`), so this is the path of what no check foresaw: a constraint or
a trigger of your own on the table, a value a check missed. :class:`Rows` then writes each half of
the refused rows again, and each half of a half that is refused, down to single rows: one bad row
among ``n`` costs about ``2 * log2(n)`` statements more (one among 500, 18), the good rows are
written, and each culprit comes back with the error that explains it; what becomes of its job is
the caller's business. A batch the database takes, the usual case, costs nothing more.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from sqlalchemy import Connection

from pgqueue._sql.driver_errors import DriverError, classify

R = TypeVar("R")
T = TypeVar("T")


class Rows(Generic[R, T]):
    """The rows of one batched statement, what its writes answered, and the rows it refused.

    Resumable: an error that is not a data error (a lost connection, a lock timeout) propagates
    with the rows not yet written still to do, so the caller's retry writes only those: a row
    written twice would find its guard no longer matching, and its job reported as someone
    else's.

    Attributes:
        rows: Every row, in the order given.
        answers: What each statement that went through returned.
        refused: ``(row, error)`` of each row the database refused alone.
    """

    def __init__(self, rows: Sequence[R]) -> None:
        self.rows = list(rows)
        self.answers: list[T] = []
        self.refused: list[tuple[R, BaseException]] = []
        # Rows still to write, the next ones last: a refused part is replaced by its halves.
        self._todo: list[list[R]] = [self.rows] if self.rows else []

    @property
    def written(self) -> bool:
        """Every row was written, or refused alone."""
        return not self._todo

    def pending(self) -> list[R]:
        """The rows not written yet (nor refused)."""
        return [row for part in reversed(self._todo) for row in part]

    def landed(self) -> list[R]:
        """The rows a statement went through with (written, whatever its guard matched)."""
        left = {id(row) for row in self.pending()} | {id(row) for row, _ in self.refused}
        return [row for row in self.rows if id(row) not in left]

    def write(
        self,
        conn: Connection,
        statement: Callable[[Connection, list[R]], T],
        *,
        savepoint: bool = False,
    ) -> None:
        """``statement(conn, rows)`` for the rows left, the halves of a part a data error refused
        written again. ``savepoint``: the connection is in a transaction, which a refused
        statement would abort; each try then runs in a savepoint of its own (in autocommit
        every statement is its own transaction, and a refused one leaves nothing behind).
        """
        todo = self._todo
        while todo:
            part = todo[-1]
            try:
                if savepoint:
                    with conn.begin_nested():
                        answer = statement(conn, part)
                else:
                    answer = statement(conn, part)
            except Exception as exc:
                if classify(exc) is not DriverError.DATA:
                    raise
                todo.pop()
                if len(part) == 1:
                    self.refused.append((part[0], exc))
                else:
                    half = len(part) // 2
                    todo += [part[half:], part[:half]]
                continue
            todo.pop()
            self.answers.append(answer)
