"""Where the benchmark runs: a throwaway database on a server URL or on the embedded PostgreSQL."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import sql
from sqlalchemy import Engine, create_engine
from sqlalchemy.engine import URL

import pgqueue.migrations
from pgqueue._base.embedded import embedded_server
from pgqueue._base.urls import to_libpq_url, to_sqlalchemy_url

#: The queue every benchmark job goes to.
QUEUE = "bench"


@contextmanager
def server(url: str | None) -> Iterator[tuple[URL, str]]:
    """Yield ``(server URL, kind)``: ``url`` as given, or a fresh embedded PostgreSQL."""
    if url is not None:
        yield to_sqlalchemy_url(url), "url"
        return
    with embedded_server() as embedded_url:
        yield to_sqlalchemy_url(embedded_url), "embedded"


@contextmanager
def throwaway_database(server_url: URL) -> Iterator[URL]:
    """Create a database, migrate it to pgqueue's head, yield its URL, drop it."""
    name = f"pgqueue_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(to_libpq_url(server_url), autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        db_url = server_url.set(database=name)
        pgqueue.migrations.upgrade(db_url)
        yield db_url
    finally:
        with psycopg.connect(to_libpq_url(server_url), autocommit=True) as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


def make_engine(url: URL, pool_size: int = 5) -> Engine:
    return create_engine(url, pool_size=pool_size, max_overflow=10)


def admin_connect(url: URL) -> psycopg.Connection[tuple[Any, ...]]:
    """An autocommit psycopg connection to the benchmark database (TRUNCATE, VACUUM, counts)."""
    return psycopg.connect(to_libpq_url(url), autocommit=True)


def reset(url: URL) -> None:
    """Empty the table and let the statistics know it."""
    with admin_connect(url) as conn:
        conn.execute("TRUNCATE jobs CASCADE")  # and jobs_dependencies (pgqueue_0013)
    analyze(url)


def analyze(url: URL) -> None:
    """``VACUUM ANALYZE jobs``: fresh statistics, and no dead rows or unset hint bits left over."""
    with admin_connect(url) as conn:
        conn.execute("VACUUM ANALYZE jobs")


def fill(url: URL, n: int, status: str = "queued", task: str | None = None) -> None:
    """``n`` jobs in one ``INSERT ... SELECT generate_series`` (trigger on), then VACUUM ANALYZE.

    ``queued`` jobs are due now; ``done`` ones are finished history (one attempt spent). With
    ``task``, jobs of that task as its producer writes them (``{"args": [i], "kwargs": {}}``).
    """
    with admin_connect(url) as conn:
        conn.execute(
            "INSERT INTO jobs (queue, payload, status, attempts, task) "
            "SELECT %(queue)s, CASE WHEN %(task)s::text IS NULL THEN jsonb_build_object('i', i) "
            "ELSE jsonb_build_object('args', jsonb_build_array(i), 'kwargs', '{}'::jsonb) END, "
            "%(status)s, %(attempts)s, %(task)s "
            "FROM generate_series(1, %(n)s) AS i",
            {
                "queue": QUEUE,
                "n": n,
                "status": status,
                "attempts": 0 if status == "queued" else 1,
                "task": task,
            },
        )
    analyze(url)


def count(url: URL, status: str) -> int:
    with admin_connect(url) as conn:
        row = conn.execute("SELECT count(*) FROM jobs WHERE status = %s", (status,)).fetchone()
    return int(row[0]) if row else 0
