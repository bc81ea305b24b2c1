"""pgqueue's statements on Django's own database connection, in Django's transaction.

A job enqueued by a view must commit or roll back with the view's writes, so it is written on the
very psycopg connection Django holds for the alias, never on a second one. pgqueue runs its
statements on a SQLAlchemy ``Connection``; :func:`borrowed` lends Django's DBAPI connection to
one, for the length of a ``with`` block, without SQLAlchemy ever committing, rolling back or
closing it (Django owns all three):

- one engine per alias, whose dialect is initialised once on a *new* connection Django opens with
  the alias's settings (the dialect's first connect ends with a rollback, which must never reach a
  connection inside a user's ``atomic`` block);
- after that the engine's creator hands out Django's connection behind :class:`_Lent`, whose
  ``commit``, ``rollback`` and ``close`` do nothing; ``NullPool`` keeps nothing, and
  ``reset_on_return=None`` issues no rollback when the block ends.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from django.db import connections
from sqlalchemy import Connection, Engine, create_engine
from sqlalchemy.engine import URL
from sqlalchemy.pool import NullPool

#: The DBAPI connection being lent in this context (``None``: the engine opens a new one).
_LENDING: ContextVar[Any] = ContextVar("pgqueue_django_lending", default=None)
_ENGINES: dict[str, Engine] = {}
_LOCK = threading.Lock()


class _Lent:
    """Django's psycopg connection as SQLAlchemy sees it: every attribute is the connection's,
    but committing, rolling back and closing it (what SQLAlchemy's connection does when the block
    ends) and the dialect's per-connect notice handler (one more each time it is lent) are left
    out: Django does those."""

    __slots__ = ("_conn",)

    def __init__(self, conn: Any) -> None:
        object.__setattr__(self, "_conn", conn)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._conn, name, value)

    def close(self) -> None:
        """Django closes its connection itself."""

    def commit(self) -> None:
        """Django commits (the end of its ``atomic`` block)."""

    def rollback(self) -> None:
        """Django rolls back; SQLAlchemy's end of the block must not."""

    def add_notice_handler(self, handler: Any) -> None:
        """Not added: Django's connection is lent many times."""


def _engine(alias: str) -> Engine:
    with _LOCK:
        engine = _ENGINES.get(alias)
        if engine is not None:
            return engine

        def creator() -> Any:
            lent = _LENDING.get()
            if lent is not None:
                return _Lent(lent)
            wrapper = connections[alias]  # this thread's (Django's connections are per thread)
            return wrapper.get_new_connection(wrapper.get_connection_params())

        engine = create_engine(
            "postgresql+psycopg://",
            creator=creator,
            poolclass=NullPool,
            pool_reset_on_return=None,
        )
        with engine.connect():  # initialises the dialect on a connection of its own
            pass
        _ENGINES[alias] = engine
        return engine


@contextmanager
def borrowed(alias: str) -> Iterator[Connection]:
    """A SQLAlchemy ``Connection`` on Django's connection of ``alias``, in its transaction.

    The caller opens the transaction (``transaction.atomic(using=alias)``): nothing here begins
    or ends one.
    """
    wrapper = connections[alias]
    wrapper.ensure_connection()
    engine = _engine(alias)
    token = _LENDING.set(wrapper.connection)
    try:
        with engine.connect() as conn:
            yield conn
    finally:
        _LENDING.reset(token)


def database_url(alias: str) -> URL:
    """The SQLAlchemy URL of ``DATABASES[alias]``: what the worker, ``pgqueue_migrate`` and
    ``pgqueue_web`` connect with (their own connections, not Django's). String ``OPTIONS``
    (``sslmode``, ...) become the URL's query."""
    from django.conf import settings

    db = settings.DATABASES[alias]
    options = {k: str(v) for k, v in (db.get("OPTIONS") or {}).items() if isinstance(v, (str, int))}
    options = {k: v for k, v in options.items() if k not in _DJANGO_ONLY_OPTIONS}
    port = db.get("PORT")
    return URL.create(
        "postgresql+psycopg",
        username=db.get("USER") or None,
        password=db.get("PASSWORD") or None,
        host=db.get("HOST") or None,
        port=int(port) if port else None,
        database=db.get("NAME") or None,
        query=options,
    )


#: Keys of a Django PostgreSQL ``OPTIONS`` that are Django's, not libpq's.
_DJANGO_ONLY_OPTIONS = frozenset(
    {"isolation_level", "server_side_binding", "pool", "assume_role", "cursor_factory"}
)
