"""What a database driver's exception means to pgqueue, decided in one place.

Four parts of pgqueue act on driver errors: the worker runs a step again after a transient one
(:func:`pgqueue._worker.transient.retrying`) and writes a batch again in halves after a data error
(:mod:`pgqueue._worker.culprits`), the repository turns the unique key's conflict into
:class:`~pgqueue.errors.UniqueKeyError`, and the command line prints one line naming the problem
and its fix. Each asks :func:`classify`, so an error means the same everywhere.

Exceptions arrive wrapped by SQLAlchemy (``DBAPIError``, with the driver's in ``orig``) or bare from
psycopg (the listener's and the CLI's own connections); both are read.
"""

from __future__ import annotations

import enum
import re

import psycopg
from sqlalchemy import exc as sa_exc

from pgqueue.errors import UniqueKeyError

#: The index that holds a unique key while its job is queued or running (revision 0006).
UNIQUE_KEY_INDEX = "jobs_unique_key_idx"


class DriverError(enum.Enum):
    """The kinds of database error pgqueue tells apart."""

    #: A table is missing: pgqueue's schema is not migrated (``pgqueue migrate``).
    NO_SCHEMA = "no schema"
    #: The role lacks a privilege (``pgqueue grants`` prints the ones it needs).
    DENIED = "permission denied"
    #: A second live job with a unique key: a retry or a hand-made update (enqueue never does it).
    UNIQUE_KEY = "unique key held"
    #: The server refused, lost or timed out: no connection, a deadlock, a lock or statement
    #: timeout. Worth running again.
    OPERATIONAL = "operational"
    #: The driver's own failure, or a connection SQLAlchemy found broken and dropped. Worth
    #: running again on a new connection.
    INTERFACE = "interface"
    #: A value the server or the driver refused: a data exception (SQLSTATE class 22), a
    #: constraint (class 23) other than the unique key's, text the driver cannot encode. Not worth
    #: running again as it is; in a batch, one row's doing (:mod:`pgqueue._worker.culprits`).
    DATA = "data"
    #: Any other database error: a bug or bad data, not worth running again.
    OTHER = "other"


#: The kinds a worker's step runs again after (:func:`is_transient`).
TRANSIENT = frozenset({DriverError.OPERATIONAL, DriverError.INTERFACE})


def classify(exc: BaseException) -> DriverError | None:
    """The kind of ``exc``, or ``None`` when it is not psycopg's (nor one SQLAlchemy found
    transient, nor the driver's failure to encode a parameter: a ``UnicodeEncodeError``)."""
    orig = driver_exception(exc)
    if isinstance(orig, psycopg.errors.UndefinedTable):
        return DriverError.NO_SCHEMA
    if isinstance(orig, psycopg.errors.InsufficientPrivilege):
        return DriverError.DENIED
    if isinstance(exc, sa_exc.IntegrityError) and _constraint(orig) == UNIQUE_KEY_INDEX:
        return DriverError.UNIQUE_KEY
    if isinstance(exc, sa_exc.OperationalError) or isinstance(orig, psycopg.OperationalError):
        return DriverError.OPERATIONAL
    if isinstance(exc, sa_exc.InterfaceError) or isinstance(orig, psycopg.InterfaceError):
        return DriverError.INTERFACE
    if isinstance(exc, sa_exc.DBAPIError) and exc.connection_invalidated:
        return DriverError.INTERFACE
    if isinstance(orig, (psycopg.DataError, psycopg.IntegrityError, UnicodeEncodeError)):
        return DriverError.DATA
    if isinstance(orig, psycopg.Error):
        return DriverError.OTHER
    return None


def driver_exception(exc: BaseException) -> BaseException:
    """The driver's own exception inside SQLAlchemy's wrapper (``exc`` itself if unwrapped)."""
    return exc.orig if isinstance(exc, sa_exc.DBAPIError) and exc.orig is not None else exc


def is_transient(exc: BaseException) -> bool:
    """A lost connection, a deadlock, a lock or statement timeout: worth running again."""
    return classify(exc) in TRANSIENT


def unique_key_error(exc: BaseException) -> UniqueKeyError:
    """The :class:`UniqueKeyError` of a :data:`DriverError.UNIQUE_KEY` error, naming the queue
    and the key from the server's detail line."""
    diag = getattr(driver_exception(exc), "diag", None)
    detail = getattr(diag, "message_detail", None) or ""
    found = _KEY_DETAIL.search(detail)
    queue, key = found.groups() if found else ("?", "?")
    return UniqueKeyError(
        queue, key, "another queued or running job holds it (retry them one at a time)"
    )


# A queue name holds no comma, so the first ", " ends it: one pass, where ``(.*), (.*)`` would
# backtrack over every ", " of the key (quadratic in its length).
_KEY_DETAIL = re.compile(r"\(queue, unique_key\)=\(([^,]*), (.*)\) already exists")


def _constraint(orig: BaseException) -> str | None:
    name = getattr(getattr(orig, "diag", None), "constraint_name", None)
    return name if isinstance(name, str) else None
