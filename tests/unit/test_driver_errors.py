"""Driver errors are classified once (:mod:`pgqueue._sql.driver_errors`), for the worker's retries,
the repository's :class:`UniqueKeyError` and the command line's one-line messages.

The unique key's conflict needs the server's diagnostics, which only a real error carries: see
``tests/integration/test_priority_unique.py``.
"""

from __future__ import annotations

import psycopg
import pytest
from sqlalchemy import exc as sa_exc

from pgqueue._sql.driver_errors import DriverError, classify, is_transient
from pgqueue.cli.common import translate_error


def wrapped(orig: Exception, kind: type[sa_exc.DBAPIError] = sa_exc.DBAPIError) -> Exception:
    """``orig`` as SQLAlchemy raises it."""
    return kind("SELECT 1", {}, orig)


def invalidated(orig: Exception) -> Exception:
    return sa_exc.DBAPIError("SELECT 1", {}, orig, connection_invalidated=True)


CASES = [
    (wrapped(psycopg.errors.UndefinedTable("x"), sa_exc.ProgrammingError), DriverError.NO_SCHEMA),
    (psycopg.errors.UndefinedTable("x"), DriverError.NO_SCHEMA),
    (
        wrapped(psycopg.errors.InsufficientPrivilege("x"), sa_exc.ProgrammingError),
        DriverError.DENIED,
    ),
    (wrapped(psycopg.OperationalError("x"), sa_exc.OperationalError), DriverError.OPERATIONAL),
    (
        wrapped(psycopg.errors.LockNotAvailable("x"), sa_exc.OperationalError),
        DriverError.OPERATIONAL,
    ),
    (
        wrapped(psycopg.errors.DeadlockDetected("x"), sa_exc.OperationalError),
        DriverError.OPERATIONAL,
    ),
    (psycopg.OperationalError("connection refused"), DriverError.OPERATIONAL),
    (wrapped(psycopg.InterfaceError("x"), sa_exc.InterfaceError), DriverError.INTERFACE),
    (invalidated(psycopg.DatabaseError("x")), DriverError.INTERFACE),
    # One row's value refused (a constraint other than the unique key's, a data exception, text
    # the driver cannot encode): a batch of the worker's is written again in halves.
    (wrapped(psycopg.errors.UniqueViolation("x"), sa_exc.IntegrityError), DriverError.DATA),
    (wrapped(psycopg.errors.CheckViolation("x"), sa_exc.IntegrityError), DriverError.DATA),
    (wrapped(psycopg.errors.DivisionByZero("x"), sa_exc.DataError), DriverError.DATA),
    (wrapped(psycopg.DataError("NUL (0x00) bytes"), sa_exc.DataError), DriverError.DATA),
    (UnicodeEncodeError("utf-8", "\udce9", 0, 1, "surrogates not allowed"), DriverError.DATA),
    (psycopg.errors.SyntaxError("x"), DriverError.OTHER),
    (ValueError("not the database's"), None),
    (wrapped(ValueError("not psycopg's")), None),
]


@pytest.mark.parametrize(("exc", "kind"), CASES, ids=[repr(c[0])[:60] for c in CASES])
def test_each_error_has_one_kind(exc: Exception, kind: DriverError | None) -> None:
    assert classify(exc) is kind


@pytest.mark.parametrize(("exc", "kind"), CASES, ids=[repr(c[0])[:60] for c in CASES])
def test_the_worker_retries_what_the_server_refused_lost_or_timed_out(
    exc: Exception, kind: DriverError | None
) -> None:
    """A lost or refused connection, a deadlock, a lock timeout, a dropped connection: a step of
    the worker runs again; a bug, bad data or a missing table does not."""
    assert is_transient(exc) is (kind in (DriverError.OPERATIONAL, DriverError.INTERFACE))


@pytest.mark.parametrize(("exc", "kind"), CASES, ids=[repr(c[0])[:60] for c in CASES])
def test_the_command_line_names_the_problem_by_its_kind(
    exc: Exception, kind: DriverError | None
) -> None:
    message = translate_error(exc, "postgresql://u:secret@h/db")
    if kind is None:
        assert message is None  # not the database's: the traceback is the report
        return
    assert message is not None
    assert "secret" not in message
    assert "(postgresql://u:***@h/db)" in message
    start = {
        DriverError.NO_SCHEMA: "the database (postgresql://u:***@h/db) has no pgqueue schema",
        DriverError.DENIED: "permission denied",
        DriverError.OPERATIONAL: "cannot connect to the database",
    }.get(kind, "database error")
    assert message.startswith(start), message
