"""The tests' databases (``tests/clones.py``): a database used again is in a fresh clone's state,
and one a test changed in a way a truncate does not undo is dropped, never handed out again."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql

from tests.clones import Clones


@pytest.fixture
def clones(pg_server: object, template_db: str) -> Iterator[Clones]:
    made = Clones(pg_server, "pgqueue_c", template_db)  # type: ignore[arg-type]
    if not made.recycle:
        made.close()
        pytest.skip("the server runs autovacuum: every test gets a new clone there")
    yield made
    made.close()


def _session(pg_server: object, name: str) -> psycopg.Connection[tuple[object, ...]]:
    return pg_server.connect(name)  # type: ignore[attr-defined, no-any-return]


def _exists(pg_server: object, name: str) -> bool:
    with pg_server.admin() as admin:  # type: ignore[attr-defined]
        found = admin.execute("SELECT count(*) FROM pg_database WHERE datname = %s", (name,))
        return found.fetchone() == (1,)


def _used_again(clones: Clones, change: str) -> tuple[bool, str]:
    """Give back a database after ``change``: whether it was used again, and the next database
    handed out (the caller gives it back)."""
    name = clones.take()
    with _session(clones._server, name) as conn:
        conn.execute(change)
    before = clones.reused
    clones.give_back(name)
    clones.settle()
    used_again = clones.reused > before
    return used_again, clones.take()


def test_rows_and_ids_are_cleared_and_the_database_used_again(clones: Clones) -> None:
    name = clones.take()
    server = clones._server
    with _session(server, name) as conn:
        conn.execute(
            "INSERT INTO jobs (queue, payload) SELECT 'q', '{}' FROM generate_series(1, 5)"
        )
        conn.execute("INSERT INTO jobs_queues (queue, paused) VALUES ('q', true)")
    left_open = _session(server, name)  # a session the test forgot: ended, and shut out
    try:
        _cleared_again(clones, name, left_open)
    finally:
        left_open.close()


def _cleared_again(
    clones: Clones, name: str, left_open: psycopg.Connection[tuple[object, ...]]
) -> None:
    server = clones._server
    clones.give_back(name)
    for _ in range(2 * clones.AHEAD + 1):  # the ready ones first, then the cleared one
        again = clones.take()
        with _session(server, again) as conn:
            counts = conn.execute(
                "SELECT (SELECT count(*) FROM jobs), (SELECT count(*) FROM jobs_queues), "
                "(SELECT version_num FROM alembic_version)"
            ).fetchone()
            assert counts is not None
            assert counts[:2] == (0, 0)
            assert counts[2]
            new_id = conn.execute(
                "INSERT INTO jobs (queue, payload) VALUES ('q', '{}') RETURNING id"
            ).fetchone()
            assert new_id == (1,)  # the sequence restarted, as in a fresh clone
            conn.execute("DELETE FROM jobs")
        clones.give_back(again)
    assert clones.reused >= 1
    assert not _exists(server, name)  # renamed: the forgotten session's URL reaches nothing
    assert _terminated(left_open)


def _terminated(conn: psycopg.Connection[tuple[object, ...]]) -> bool:
    try:
        conn.execute("SELECT 1")
    except psycopg.OperationalError:
        return True
    return False


@pytest.mark.parametrize(
    "change",
    [
        "CREATE TABLE extra (id int)",
        "CREATE INDEX jobs_extra_idx ON jobs (payload)",
        "ALTER TABLE jobs DISABLE TRIGGER USER",
        "ALTER TABLE jobs SET (autovacuum_enabled = false)",
        "CREATE SCHEMA other",
        "CREATE OR REPLACE FUNCTION extra_fn() RETURNS int LANGUAGE sql AS 'SELECT 1'",
        "INSERT INTO jobs (queue, payload) VALUES ('q', '{}'); ANALYZE jobs",
        "UPDATE alembic_version SET version_num = 'pgqueue_0001'",
        "ALTER TABLE jobs ALTER COLUMN priority SET DEFAULT 3",
        "REVOKE ALL ON jobs FROM PUBLIC; GRANT SELECT ON jobs TO PUBLIC",
        "DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET work_mem = ''8MB''', "
        "current_database()); END $$",
    ],
)
def test_a_change_a_truncate_cannot_undo_drops_the_database(clones: Clones, change: str) -> None:
    with_change, again = _used_again(clones, change)
    assert not with_change
    with _session(clones._server, again) as conn:
        found = conn.execute(
            sql.SQL(
                "SELECT to_regclass('extra'), to_regnamespace('other'), "
                "(SELECT version_num FROM alembic_version)"
            )
        ).fetchone()
    clones.give_back(again)
    assert found is not None
    assert found[:2] == (None, None)
    assert found[2] != "pgqueue_0001"


def test_a_harmless_test_leaves_a_database_used_again(clones: Clones) -> None:
    used_again, again = _used_again(clones, "SELECT 1")
    clones.give_back(again)
    assert used_again
