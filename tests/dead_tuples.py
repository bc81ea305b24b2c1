"""Dead tuples in ``jobs`` that no vacuum has seen, for the doctor's and the dashboard's tests."""

from __future__ import annotations

import time

import psycopg
from sqlalchemy import Engine, text
from sqlalchemy.engine import URL

import pgqueue
from pgqueue._base.urls import to_libpq_url


def dead_tuples(engine: Engine) -> int:
    """``n_dead_tup`` of ``jobs`` as ``pg_stat_user_tables`` shows it now."""
    with engine.connect() as conn:
        found = conn.execute(
            text("SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = 'jobs'::regclass")
        ).scalar_one()
    return int(found or 0)


def pile_up(url: URL, engine: Engine, count: int) -> None:
    """``count`` enqueued and deleted jobs; autovacuum kept away from ``jobs`` (PG 18 runs it).

    The delete runs in its own session, closed at once: a backend flushes its table statistics
    when it exits, so the counts reach ``pg_stat_user_tables`` without waiting for a timer.
    """
    with engine.begin() as conn:
        conn.execute(text("ALTER TABLE jobs SET (autovacuum_enabled = false)"))
        pgqueue.enqueue_many(conn, [{}] * count)
    with psycopg.connect(to_libpq_url(url), autocommit=True) as deleter:
        deleter.execute("DELETE FROM jobs")
    deadline = time.monotonic() + 30
    while dead_tuples(engine) < count:
        assert time.monotonic() < deadline, "the dead tuples never reached pg_stat_user_tables"
        time.sleep(0.1)
