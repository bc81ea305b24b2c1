"""The Alembic revisions own the schema: model and catalog agree, and every step downgrades."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, create_engine, text
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import URL

import pgqueue
import pgqueue.migrations
from pgqueue._base.urls import to_libpq_url
from pgqueue.storage import JOBS_STORAGE_PARAMETERS
from tests.revisions import pgqueue_head

#: A channel of the tests' own, notified after what a test committed (see below).
SENTINEL = "pgqueue_tests_sentinel"


def committed_notifications(listener: psycopg.Connection[Any]) -> list[tuple[str, str]]:
    """``(channel, payload)`` of every notification committed before this call, sorted.

    No fixed listening window: the listener notifies a sentinel channel of its own, and PostgreSQL
    delivers notifications in commit order, so everything committed earlier has arrived once the
    sentinel does (an absent notification is proven absent, not merely late).
    """
    listener.execute('LISTEN "pgqueue_tests_sentinel"')
    listener.execute('NOTIFY "pgqueue_tests_sentinel"')
    got: list[tuple[str, str]] = []
    for note in listener.notifies(timeout=60.0):
        if note.channel == SENTINEL:
            return sorted(got)
        got.append((note.channel, note.payload))
    raise AssertionError(f"the sentinel notification did not arrive in 60 s (got {got})")


@pytest.fixture
def empty_engine(empty_db_url: URL) -> Iterator[Engine]:
    eng = create_engine(empty_db_url)
    yield eng
    eng.dispose()


def _tables(engine: Engine) -> set[str]:
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT tablename FROM pg_tables WHERE schemaname = 'public'"))
        return {r[0] for r in rows}


def test_revision_chain_is_a_labelled_branch() -> None:
    script = ScriptDirectory.from_config(pgqueue.migrations.alembic_config("postgresql://x/y"))
    revisions = list(script.walk_revisions())
    ids = [r.revision for r in reversed(revisions)]
    assert ids[:4] == ["pgqueue_0001", "pgqueue_0002", "pgqueue_0003", "pgqueue_0004"]
    assert ids == [f"pgqueue_{n:04d}" for n in range(1, len(ids) + 1)]
    root = script.get_revision("pgqueue_0001")
    assert root is not None
    assert root.down_revision is None
    assert root.branch_labels == {"pgqueue"}
    assert script.get_current_head() == ids[-1]


def test_model_matches_the_migrated_database(engine: Engine) -> None:
    with engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"compare_server_default": True})
        diff = compare_metadata(ctx, pgqueue.metadata)
    assert diff == []


def test_catalog_has_what_autogenerate_cannot_see(engine: Engine) -> None:
    with engine.connect() as conn:
        indexes = dict(
            conn.execute(
                text("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'jobs'")
            ).all()
        )
        trigger = conn.execute(
            text("SELECT pg_get_triggerdef(oid) FROM pg_trigger WHERE tgname = 'jobs_notify'")
        ).scalar_one()
        function = conn.execute(
            text("SELECT prosrc FROM pg_proc WHERE proname = 'jobs_notify'")
        ).scalar_one()
        check = conn.execute(
            text("SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = :n"),
            {"n": "jobs_status_check"},
        ).scalar_one()
        valid = conn.execute(
            text("SELECT bool_and(indisvalid) FROM pg_index WHERE indrelid = 'jobs'::regclass")
        ).scalar_one()
    # R2's index gained the priority in pgqueue_0006 (it was (queue, run_at)).
    assert indexes["jobs_ready_idx"] == (
        "CREATE INDEX jobs_ready_idx ON public.jobs USING btree (queue, priority, run_at) "
        "WHERE (status = 'queued'::text)"
    )
    assert indexes["jobs_unique_key_idx"] == (
        "CREATE UNIQUE INDEX jobs_unique_key_idx ON public.jobs USING btree (queue, unique_key) "
        "WHERE ((unique_key IS NOT NULL) AND (status = ANY (ARRAY['queued'::text, "
        "'running'::text])))"
    )
    assert indexes["jobs_lease_idx"] == (
        "CREATE INDEX jobs_lease_idx ON public.jobs USING btree (locked_until) "
        "WHERE (status = 'running'::text)"
    )
    assert indexes["jobs_pkey"].startswith("CREATE UNIQUE INDEX jobs_pkey ON public.jobs")
    assert valid is True
    assert trigger == (
        # Once per statement since pgqueue_0008 (it was FOR EACH ROW): one NOTIFY per queue.
        "CREATE TRIGGER jobs_notify AFTER INSERT ON public.jobs REFERENCING NEW TABLE AS inserted "
        "FOR EACH STATEMENT EXECUTE FUNCTION jobs_notify()"
    )
    assert "pg_notify('jobs', queue) FROM (SELECT DISTINCT queue FROM inserted)" in function
    with engine.connect() as conn:
        finished = conn.execute(
            text(
                "SELECT pg_get_triggerdef(oid) FROM pg_trigger "
                "WHERE tgname = 'jobs_notify_finished'"
            )
        ).scalar_one()
    assert finished == (
        "CREATE TRIGGER jobs_notify_finished AFTER UPDATE ON public.jobs REFERENCING NEW TABLE "
        "AS finished FOR EACH STATEMENT EXECUTE FUNCTION jobs_notify_finished()"
    )
    for status in ("queued", "running", "done", "failed"):
        assert f"'{status}'" in check


def test_columns_are_exactly_r1(engine: Engine) -> None:
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT column_name, data_type, is_nullable, column_default, is_identity, "
                "identity_generation FROM information_schema.columns "
                "WHERE table_name = 'jobs' ORDER BY ordinal_position"
            )
        ).all()
    assert [tuple(r) for r in rows] == [
        ("id", "bigint", "NO", None, "YES", "ALWAYS"),
        ("queue", "text", "NO", "'default'::text", "NO", None),
        ("payload", "jsonb", "NO", None, "NO", None),
        ("status", "text", "NO", "'queued'::text", "NO", None),
        ("run_at", "timestamp with time zone", "NO", "now()", "NO", None),
        ("attempts", "integer", "NO", "0", "NO", None),
        ("max_attempts", "integer", "NO", "5", "NO", None),
        ("locked_until", "timestamp with time zone", "YES", None, "NO", None),
        ("last_error", "text", "YES", None, "NO", None),
        ("created_at", "timestamp with time zone", "NO", "now()", "NO", None),
        ("headers", "jsonb", "YES", None, "NO", None),  # pgqueue_0005
        ("priority", "smallint", "NO", "0", "NO", None),  # pgqueue_0006
        ("unique_key", "text", "YES", None, "NO", None),  # pgqueue_0006
        ("finished_at", "timestamp with time zone", "YES", None, "NO", None),  # pgqueue_0009
        ("errors", "jsonb", "YES", None, "NO", None),  # pgqueue_0010
        ("snoozes", "integer", "NO", "0", "NO", None),  # pgqueue_0010
        ("cancelled_at", "timestamp with time zone", "YES", None, "NO", None),  # pgqueue_0010
        ("locked_by", "text", "YES", None, "NO", None),  # pgqueue_0010
        ("locked_at", "timestamp with time zone", "YES", None, "NO", None),  # pgqueue_0010
        ("task", "text", "YES", None, "NO", None),  # pgqueue_0011
        ("result", "jsonb", "YES", None, "NO", None),  # pgqueue_0011
        ("progress", "jsonb", "YES", None, "NO", None),  # pgqueue_0011
        ("concurrency_key", "text", "YES", None, "NO", None),  # pgqueue_0012
        ("waiting_on", "integer", "NO", "0", "NO", None),  # pgqueue_0013
        ("has_dependents", "boolean", "NO", "false", "NO", None),  # pgqueue_0013
        ("timeout", "interval", "YES", None, "NO", None),  # pgqueue_0015
        ("expires_in", "interval", "YES", None, "NO", None),  # pgqueue_0015
        ("expired_at", "timestamp with time zone", "YES", None, "NO", None),  # pgqueue_0015
    ]


def test_downgrade_to_base_and_upgrade_again(empty_db_url: URL, empty_engine: Engine) -> None:
    pgqueue.migrations.upgrade(empty_db_url)
    assert "jobs" in _tables(empty_engine)
    for step, expect_lease_idx in (("pgqueue_0002", False), ("pgqueue_0001", False)):
        pgqueue.migrations.downgrade(empty_db_url, step)
        with empty_engine.connect() as conn:
            has = conn.execute(
                text("SELECT count(*) FROM pg_indexes WHERE indexname = 'jobs_lease_idx'")
            ).scalar_one()
        assert bool(has) is expect_lease_idx
    with empty_engine.connect() as conn:
        assert (
            conn.execute(
                text("SELECT count(*) FROM pg_trigger WHERE tgname = 'jobs_notify'")
            ).scalar_one()
            == 0
        )
    pgqueue.migrations.downgrade(empty_db_url, "pgqueue@base")
    assert "jobs" not in _tables(empty_engine)
    with empty_engine.connect() as conn:
        assert (
            conn.execute(
                text("SELECT count(*) FROM pg_proc WHERE proname = 'jobs_notify'")
            ).scalar_one()
            == 0
        )
    pgqueue.migrations.upgrade(empty_db_url)
    with empty_engine.connect() as conn:
        version = conn.execute(text("SELECT version_num FROM alembic_version")).scalar_one()
    assert version == pgqueue_head()


def _reloptions(engine: Engine) -> dict[str, str]:
    with engine.connect() as conn:
        options = conn.execute(
            text("SELECT reloptions FROM pg_class WHERE oid = 'jobs'::regclass")
        ).scalar_one()
    return dict(option.split("=", 1) for option in options or [])


def test_storage_parameters_are_set_and_reset(empty_db_url: URL, empty_engine: Engine) -> None:
    pgqueue.migrations.upgrade(empty_db_url, "pgqueue_0004")
    assert _reloptions(empty_engine) == dict(JOBS_STORAGE_PARAMETERS)
    pgqueue.migrations.downgrade(empty_db_url, "pgqueue_0003")
    assert _reloptions(empty_engine) == {}
    pgqueue.migrations.upgrade(empty_db_url)
    assert _reloptions(empty_engine) == dict(JOBS_STORAGE_PARAMETERS)


def test_interrupted_concurrent_build_is_repaired(empty_db_url: URL, empty_engine: Engine) -> None:
    """An INVALID leftover of a failed CREATE INDEX CONCURRENTLY does not block the upgrade."""
    pgqueue.migrations.upgrade(empty_db_url, "pgqueue_0002")
    with empty_engine.connect() as conn:
        conn.execute(text("INSERT INTO jobs (payload, status) VALUES ('1', 'running')"))
        conn.execute(text("INSERT INTO jobs (payload, status) VALUES ('1', 'running')"))
        conn.commit()
    # A unique index over duplicate values fails its concurrent build and stays INVALID.
    raw = empty_engine.raw_connection()
    try:
        dbapi = raw.driver_connection
        assert dbapi is not None
        dbapi.autocommit = True
        with pytest.raises(Exception, match="could not create unique index"):
            dbapi.execute(
                "CREATE UNIQUE INDEX CONCURRENTLY jobs_lease_idx ON jobs (status) "
                "WHERE status = 'running'"
            )
    finally:
        raw.close()
    pgqueue.migrations.upgrade(empty_db_url)
    with empty_engine.connect() as conn:
        row = conn.execute(
            text(
                "SELECT i.indisvalid, pg_get_indexdef(i.indexrelid) FROM pg_index i "
                "JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relname = 'jobs_lease_idx'"
            )
        ).one()
    assert row[0] is True
    assert "(locked_until)" in row[1]


def test_offline_sql_builds_the_lease_index_concurrently(
    capsys: pytest.CaptureFixture[str],
) -> None:
    pgqueue.migrations.upgrade("postgresql://nobody@localhost/none", sql=True)
    out = capsys.readouterr().out
    assert "CREATE TABLE jobs" in out
    assert "CREATE INDEX jobs_ready_idx ON jobs (queue, run_at) WHERE status = 'queued'" in out
    assert "CREATE INDEX CONCURRENTLY jobs_lease_idx" in out
    assert "CREATE TRIGGER jobs_notify" in out


def test_headers_revision_round_trips_in_a_schema(empty_db_url: URL, empty_engine: Engine) -> None:
    """pgqueue_0005 honours the schema option both ways and keeps existing rows."""
    pgqueue.migrations.upgrade(empty_db_url, "pgqueue_0004", schema="queue")
    with empty_engine.begin() as conn:
        conn.execute(text("INSERT INTO queue.jobs (payload) VALUES ('1')"))
    pgqueue.migrations.upgrade(empty_db_url, "pgqueue_0005", schema="queue")

    def headers_type() -> object:
        with empty_engine.connect() as conn:
            return conn.execute(
                text(
                    "SELECT data_type FROM information_schema.columns WHERE table_schema = 'queue' "
                    "AND table_name = 'jobs' AND column_name = 'headers'"
                )
            ).scalar_one_or_none()

    assert headers_type() == "jsonb"
    with empty_engine.connect() as conn:
        assert conn.execute(text("SELECT headers FROM queue.jobs")).scalar_one() is None
    pgqueue.migrations.downgrade(empty_db_url, "pgqueue_0004", schema="queue")
    assert headers_type() is None


def test_priority_and_key_revision_round_trips_with_rows_in_a_schema(
    empty_db_url: URL, empty_engine: Engine
) -> None:
    """pgqueue_0006 upgrades a table that holds jobs (priority 0, no key) and downgrades back to
    the article's index, in a schema of its own."""
    pgqueue.migrations.upgrade(empty_db_url, "pgqueue_0005", schema="queue")
    with empty_engine.begin() as conn:
        conn.execute(text("INSERT INTO queue.jobs (payload) SELECT '1' FROM generate_series(1, 3)"))

    def ready_index() -> str | None:
        with empty_engine.connect() as conn:
            return conn.execute(
                text(
                    "SELECT indexdef FROM pg_indexes WHERE schemaname = 'queue' "
                    "AND indexname = 'jobs_ready_idx'"
                )
            ).scalar_one_or_none()

    def key_index() -> int:
        with empty_engine.connect() as conn:
            return int(
                conn.execute(
                    text("SELECT count(*) FROM pg_indexes WHERE indexname = 'jobs_unique_key_idx'")
                ).scalar_one()
            )

    pgqueue.migrations.upgrade(empty_db_url, "pgqueue_0006", schema="queue")
    with empty_engine.connect() as conn:
        rows = conn.execute(text("SELECT priority, unique_key FROM queue.jobs")).all()
        valid = conn.execute(
            text(
                "SELECT bool_and(indisvalid) FROM pg_index WHERE indrelid = 'queue.jobs'::regclass"
            )
        ).scalar_one()
    assert [tuple(r) for r in rows] == [(0, None)] * 3
    assert valid is True
    assert "(queue, priority, run_at)" in (ready_index() or "")
    assert key_index() == 1
    with pytest.raises(sa_exc.IntegrityError), empty_engine.begin() as conn:
        conn.execute(text("UPDATE queue.jobs SET priority = 10"))  # the 0-9 check
    pgqueue.migrations.downgrade(empty_db_url, "pgqueue_0005", schema="queue")
    assert "(queue, run_at)" in (ready_index() or "")
    assert key_index() == 0
    with empty_engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM queue.jobs")).scalar_one() == 3


def test_periodic_revision_round_trips_in_a_schema_beside_jobs_with_rows(
    empty_db_url: URL, empty_engine: Engine
) -> None:
    """pgqueue_0007 adds ``jobs_periodic`` in the chosen schema without touching ``jobs``, and
    its downgrade removes the table and nothing else."""
    pgqueue.migrations.upgrade(empty_db_url, "pgqueue_0006", schema="queue")
    with empty_engine.begin() as conn:
        conn.execute(text("INSERT INTO queue.jobs (payload) SELECT '1' FROM generate_series(1, 3)"))

    def columns() -> list[tuple[str, str, str]]:
        with empty_engine.connect() as conn:
            rows = conn.execute(
                text(
                    "SELECT column_name, data_type, is_nullable FROM information_schema.columns "
                    "WHERE table_schema = 'queue' AND table_name = 'jobs_periodic' "
                    "ORDER BY ordinal_position"
                )
            ).all()
        return [tuple(r) for r in rows]  # type: ignore[misc]

    pgqueue.migrations.upgrade(empty_db_url, "pgqueue_0007", schema="queue")
    assert columns() == [
        ("name", "text", "NO"),
        ("schedule", "text", "NO"),
        ("timezone", "text", "NO"),
        ("queue", "text", "NO"),
        ("ticks_from", "timestamp with time zone", "NO"),
        ("last_tick", "timestamp with time zone", "YES"),
        ("declared_at", "timestamp with time zone", "NO"),
    ]
    with empty_engine.connect() as conn:
        pkey = conn.execute(
            text("SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = :n"),
            {"n": "jobs_periodic_pkey"},
        ).scalar_one()
        public = conn.execute(text("SELECT to_regclass('public.jobs_periodic')")).scalar_one()
    assert pkey == "PRIMARY KEY (name)"
    assert public is None
    pgqueue.migrations.downgrade(empty_db_url, "pgqueue_0006", schema="queue")
    assert columns() == []
    with empty_engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM queue.jobs")).scalar_one() == 3


def test_statement_trigger_revision_round_trips_in_a_schema(
    empty_db_url: URL, empty_engine: Engine
) -> None:
    """pgqueue_0008 replaces the row trigger with a statement trigger and back, on the schema's
    channel; listeners get the same notifications either way."""

    def trigger() -> str:
        with empty_engine.connect() as conn:
            return str(
                conn.execute(
                    text(
                        "SELECT pg_get_triggerdef(oid) FROM pg_trigger WHERE tgname = 'jobs_notify'"
                    )
                ).scalar_one()
            )

    def notified() -> list[tuple[str, str]]:
        with psycopg.connect(to_libpq_url(empty_db_url), autocommit=True) as listener:
            listener.execute('LISTEN "queue.jobs"')
            with empty_engine.begin() as conn:
                conn.execute(
                    text("INSERT INTO queue.jobs (queue, payload) VALUES ('a', '1'), ('b', '1')")
                )
            return committed_notifications(listener)

    pgqueue.migrations.upgrade(empty_db_url, "pgqueue_0007", schema="queue")
    assert "FOR EACH ROW" in trigger()
    before = notified()
    pgqueue.migrations.upgrade(empty_db_url, "pgqueue_0008", schema="queue")
    assert "FOR EACH STATEMENT" in trigger()
    assert notified() == before == [("queue.jobs", "a"), ("queue.jobs", "b")]
    pgqueue.migrations.downgrade(empty_db_url, "pgqueue_0007", schema="queue")
    assert "FOR EACH ROW" in trigger()
    assert notified() == before


def test_finished_at_revision_round_trips_in_a_schema_with_rows(
    empty_db_url: URL, empty_engine: Engine
) -> None:
    """pgqueue_0009 adds ``finished_at`` and its two partial indexes without a backfill; its
    downgrade removes exactly those and keeps the rows."""
    pgqueue.migrations.upgrade(empty_db_url, "pgqueue_0008", schema="queue")
    with empty_engine.begin() as conn:
        conn.execute(
            text("INSERT INTO queue.jobs (payload, status) VALUES ('1', 'done'), ('2', 'failed')")
        )

    def catalog() -> tuple[list[str], dict[str, str]]:
        with empty_engine.connect() as conn:
            columns = conn.execute(
                text(
                    "SELECT column_name FROM information_schema.columns "
                    "WHERE table_schema = 'queue' AND table_name = 'jobs' "
                    "AND column_name = 'finished_at'"
                )
            ).scalars()
            indexes = conn.execute(
                text(
                    "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'queue' "
                    "AND indexname IN ('jobs_finished_at_idx', 'jobs_failed_idx')"
                )
            ).all()
            return list(columns), {name: definition for name, definition in indexes}

    pgqueue.migrations.upgrade(empty_db_url, "pgqueue_0009", schema="queue")
    columns, indexes = catalog()
    assert columns == ["finished_at"]
    assert indexes == {
        "jobs_finished_at_idx": "CREATE INDEX jobs_finished_at_idx ON queue.jobs "
        "USING btree (finished_at) WHERE (finished_at IS NOT NULL)",
        "jobs_failed_idx": "CREATE INDEX jobs_failed_idx ON queue.jobs USING btree (id) "
        "WHERE (status = 'failed'::text)",
    }
    with empty_engine.connect() as conn:
        unset = conn.execute(
            text("SELECT count(*) FROM queue.jobs WHERE finished_at IS NULL")
        ).scalar_one()
    assert unset == 2  # no backfill: rewriting a live table's history is not a migration's job
    pgqueue.migrations.downgrade(empty_db_url, "pgqueue_0008", schema="queue")
    assert catalog() == ([], {})
    with empty_engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM queue.jobs")).scalar_one() == 2


def test_attempt_history_revision_round_trips_in_a_schema_with_rows(
    empty_db_url: URL, empty_engine: Engine
) -> None:
    """pgqueue_0010 adds five columns (no rewrite: existing rows read the defaults) and
    ``jobs_workers``; its downgrade removes exactly those and keeps the rows."""
    added = ["errors", "snoozes", "cancelled_at", "locked_by", "locked_at"]
    pgqueue.migrations.upgrade(empty_db_url, "pgqueue_0009", schema="queue")
    with empty_engine.begin() as conn:
        conn.execute(text("INSERT INTO queue.jobs (payload) VALUES ('1'), ('2')"))

    def catalog() -> tuple[list[str], object]:
        with empty_engine.connect() as conn:
            columns = conn.execute(
                text(
                    "SELECT column_name FROM information_schema.columns "
                    "WHERE table_schema = 'queue' AND table_name = 'jobs' "
                    "AND column_name = ANY(:names) ORDER BY ordinal_position"
                ),
                {"names": added},
            ).scalars()
            workers = conn.execute(text("SELECT to_regclass('queue.jobs_workers')")).scalar_one()
            return list(columns), workers

    pgqueue.migrations.upgrade(empty_db_url, "pgqueue_0010", schema="queue")
    assert catalog() == (added, "queue.jobs_workers")
    with empty_engine.begin() as conn:
        snoozes = conn.execute(text("SELECT snoozes FROM queue.jobs ORDER BY id")).scalars()
        assert list(snoozes) == [0, 0]
        conn.execute(
            text(
                "INSERT INTO queue.jobs_workers (name, host, pid, queues) "
                "VALUES ('w', 'h', 1, '{a}')"
            )
        )
        public = conn.execute(text("SELECT to_regclass('public.jobs_workers')")).scalar_one()
    assert public is None
    pgqueue.migrations.downgrade(empty_db_url, "pgqueue_0009", schema="queue")
    assert catalog() == ([], None)
    with empty_engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM queue.jobs")).scalar_one() == 2


def test_tasks_revision_round_trips_in_a_schema_with_rows(
    empty_db_url: URL, empty_engine: Engine
) -> None:
    """pgqueue_0011 adds ``task``, ``result`` and ``progress`` (nullable: existing rows read NULL,
    no rewrite) and the ``jobs_notify_finished`` trigger on the schema's finished channel (the
    ids an UPDATE left done or failed); its downgrade removes exactly those and keeps the rows."""
    added = ["task", "result", "progress"]
    pgqueue.migrations.upgrade(empty_db_url, "pgqueue_0010", schema="queue")
    with empty_engine.begin() as conn:
        conn.execute(text("INSERT INTO queue.jobs (payload) VALUES ('1'), ('2')"))

    def columns() -> list[str]:
        with empty_engine.connect() as conn:
            found = conn.execute(
                text(
                    "SELECT column_name FROM information_schema.columns "
                    "WHERE table_schema = 'queue' AND table_name = 'jobs' "
                    "AND column_name = ANY(:names) ORDER BY ordinal_position"
                ),
                {"names": added},
            ).scalars()
            return list(found)

    def finished_notified() -> list[tuple[str, str]]:
        """What one UPDATE that finishes the first job (and requeues the other) sends."""
        with psycopg.connect(to_libpq_url(empty_db_url), autocommit=True) as listener:
            listener.execute('LISTEN "queue.done"')
            with empty_engine.begin() as conn:
                conn.execute(
                    text(
                        "UPDATE queue.jobs SET status = CASE WHEN id = :first THEN 'done' "
                        "ELSE 'queued' END"
                    ),
                    {"first": first},
                )
            return committed_notifications(listener)

    with empty_engine.connect() as conn:
        first = conn.execute(text("SELECT min(id) FROM queue.jobs")).scalar_one()
    pgqueue.migrations.upgrade(empty_db_url, "pgqueue_0011", schema="queue")
    assert columns() == added
    with empty_engine.begin() as conn:
        rows = conn.execute(text("SELECT task, result, progress FROM queue.jobs ORDER BY id")).all()
        assert [tuple(r) for r in rows] == [(None, None, None), (None, None, None)]
        conn.execute(
            text(
                "UPDATE queue.jobs SET task = 'app.send', result = '{\"ok\": 1}', "
                "progress = '0.5' WHERE id = (SELECT min(id) FROM queue.jobs)"
            )
        )
    assert finished_notified() == [("queue.done", str(first))]
    pgqueue.migrations.downgrade(empty_db_url, "pgqueue_0010", schema="queue")
    assert columns() == []
    assert finished_notified() == []
    with empty_engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM queue.jobs")).scalar_one() == 2
        assert not conn.execute(
            text("SELECT count(*) FROM pg_proc WHERE proname = 'jobs_notify_finished'")
        ).scalar_one()


def test_flow_control_revision_round_trips_in_a_schema_with_rows(
    empty_db_url: URL, empty_engine: Engine
) -> None:
    """pgqueue_0012 adds ``jobs_queues`` (its checks refuse limits below 1, a half-set rate and a
    non-positive period), ``jobs.concurrency_key`` (existing rows read NULL) and the partial index
    of running keyed jobs; its downgrade removes exactly those and keeps the rows."""
    pgqueue.migrations.upgrade(empty_db_url, "pgqueue_0011", schema="queue")
    with empty_engine.begin() as conn:
        conn.execute(text("INSERT INTO queue.jobs (payload) VALUES ('1'), ('2')"))

    def catalog() -> tuple[list[str], object, str | None]:
        with empty_engine.connect() as conn:
            columns = conn.execute(
                text(
                    "SELECT column_name FROM information_schema.columns "
                    "WHERE table_schema = 'queue' AND table_name = 'jobs' "
                    "AND column_name = 'concurrency_key'"
                )
            ).scalars()
            queues = conn.execute(text("SELECT to_regclass('queue.jobs_queues')")).scalar_one()
            index = conn.execute(
                text(
                    "SELECT indexdef FROM pg_indexes WHERE schemaname = 'queue' "
                    "AND indexname = 'jobs_running_key_idx'"
                )
            ).scalar_one_or_none()
            return list(columns), queues, index

    pgqueue.migrations.upgrade(empty_db_url, "pgqueue_0012", schema="queue")
    assert catalog() == (
        ["concurrency_key"],
        "queue.jobs_queues",
        "CREATE INDEX jobs_running_key_idx ON queue.jobs USING btree (queue, concurrency_key) "
        "WHERE ((status = 'running'::text) AND (concurrency_key IS NOT NULL))",
    )
    with empty_engine.begin() as conn:
        keys = conn.execute(text("SELECT concurrency_key FROM queue.jobs ORDER BY id")).scalars()
        assert list(keys) == [None, None]
        conn.execute(text("INSERT INTO queue.jobs_queues (queue) VALUES ('a')"))
        conn.execute(
            text(
                "INSERT INTO queue.jobs_queues (queue, paused, concurrency, per_key, rate_limit, "
                "rate_period) VALUES ('b', true, 4, 2, 10, interval '1 second')"
            )
        )
        rows = conn.execute(
            text(
                "SELECT queue, paused, concurrency, per_key, rate_limit, rate_period, "
                "window_start, window_count FROM queue.jobs_queues ORDER BY queue"
            )
        ).all()
        public = conn.execute(text("SELECT to_regclass('public.jobs_queues')")).scalar_one()
    assert [tuple(r) for r in rows] == [
        ("a", False, None, None, None, None, None, 0),
        ("b", True, 4, 2, 10, timedelta(seconds=1), None, 0),
    ]
    assert public is None
    for bad in (
        "concurrency = 0",
        "per_key = 0",
        "rate_limit = 0",
        "rate_limit = NULL",
        "rate_period = interval '0'",
        "rate_period = interval '-1 second'",
    ):
        with pytest.raises(sa_exc.IntegrityError), empty_engine.begin() as conn:
            conn.execute(text(f"UPDATE queue.jobs_queues SET {bad} WHERE queue = 'b'"))
    pgqueue.migrations.downgrade(empty_db_url, "pgqueue_0011", schema="queue")
    assert catalog() == ([], None, None)
    with empty_engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM queue.jobs")).scalar_one() == 2
    pgqueue.migrations.upgrade(empty_db_url, "pgqueue_0012", schema="queue")
    assert catalog()[1] == "queue.jobs_queues"


def test_dependencies_revision_round_trips_in_a_schema_with_rows(
    empty_db_url: URL, empty_engine: Engine
) -> None:
    """pgqueue_0013 adds ``waiting_on`` and ``has_dependents`` (constant defaults: existing rows
    read 0 and false), ``jobs_dependencies`` and the ``jobs_release`` trigger, whose function
    names the schema's tables: a dependency's completion releases its dependent there. Its
    downgrade removes exactly those and keeps the rows."""
    pgqueue.migrations.upgrade(empty_db_url, "pgqueue_0011", schema="queue")
    with empty_engine.begin() as conn:
        conn.execute(text("INSERT INTO queue.jobs (payload) VALUES ('1'), ('2')"))
    pgqueue.migrations.upgrade(empty_db_url, "pgqueue_0013", schema="queue")
    with empty_engine.begin() as conn:
        rows = conn.execute(
            text("SELECT waiting_on, has_dependents FROM queue.jobs ORDER BY id")
        ).all()
        assert [tuple(r) for r in rows] == [(0, False), (0, False)]
        parent, child = conn.execute(text("SELECT id FROM queue.jobs ORDER BY id")).scalars()
        for statement in (
            "UPDATE queue.jobs SET has_dependents = true WHERE id = :p",
            "UPDATE queue.jobs SET waiting_on = 1, run_at = '9999-01-01' WHERE id = :c",
            "INSERT INTO queue.jobs_dependencies (job_id, depends_on, pending) "
            "VALUES (:c, :p, true)",
        ):
            conn.execute(text(statement), {"p": parent, "c": child})
    with empty_engine.begin() as conn:
        conn.execute(text("UPDATE queue.jobs SET status = 'done' WHERE id = :p"), {"p": parent})
    with empty_engine.connect() as conn:
        released = conn.execute(
            text("SELECT waiting_on, run_at <= now() FROM queue.jobs WHERE id = :c"), {"c": child}
        ).one()
        assert tuple(released) == (0, True)
    pgqueue.migrations.downgrade(empty_db_url, "pgqueue_0011", schema="queue")
    with empty_engine.connect() as conn:
        left = conn.execute(
            text(
                "SELECT count(*) FROM information_schema.columns WHERE table_schema = 'queue' "
                "AND column_name IN ('waiting_on', 'has_dependents')"
            )
        ).scalar_one()
        assert left == 0
        assert conn.execute(text("SELECT to_regclass('queue.jobs_dependencies')")).scalar() is None
        assert conn.execute(text("SELECT count(*) FROM queue.jobs")).scalar_one() == 2


def test_dependency_rule_revision_round_trips_in_a_schema(
    empty_db_url: URL, empty_engine: Engine
) -> None:
    """pgqueue_0014 writes the dependency-failure text once, ``jobs_dependency_error``: the
    trigger (a dependency failing after the enqueue) and ``ATTACH`` (one already failed or
    cancelled at the enqueue) give the same ``last_error``, in a schema too. Its downgrade puts
    pgqueue_0013's trigger function back exactly and drops the new one."""
    pgqueue.migrations.upgrade(empty_db_url, "pgqueue_0013", schema="queue")

    def release_source() -> str:
        with empty_engine.connect() as conn:
            source: str = conn.execute(
                text(
                    "SELECT prosrc FROM pg_proc WHERE proname = 'jobs_release' "
                    "AND pronamespace = 'queue'::regnamespace"
                )
            ).scalar_one()
        return source

    def rule_functions() -> int:
        with empty_engine.connect() as conn:
            count: int = conn.execute(
                text("SELECT count(*) FROM pg_proc WHERE proname = 'jobs_dependency_error'")
            ).scalar_one()
        return count

    source_0013 = release_source()
    assert "jobs_dependency_error" not in source_0013
    pgqueue.migrations.upgrade(empty_db_url, "pgqueue_0014", schema="queue")
    assert rule_functions() == 1
    assert "queue.jobs_dependency_error(u.cause, p.cancelled_at IS NOT NULL)" in release_source()

    # Today's enqueue writes the columns of later revisions (pgqueue_0015's time bounds): the
    # rule is checked on the head, and the downgrade below passes back through pgqueue_0014.
    pgqueue.migrations.upgrade(empty_db_url, schema="queue")
    engine = pgqueue.use_schema(empty_engine, "queue")
    with engine.begin() as conn:
        failed, cancelled = pgqueue.enqueue(conn, 1, queue="q"), pgqueue.enqueue(conn, 2, queue="q")
        waiting = pgqueue.enqueue(conn, 3, queue="q", depends_on=[failed])
        doomed_later = pgqueue.enqueue(conn, 4, queue="q", depends_on=[cancelled])
        pgqueue.cancel(conn, [cancelled])
        conn.execute(text("UPDATE queue.jobs SET status = 'failed' WHERE id = :i"), {"i": failed})
        # ATTACH's path: dependencies already failed or cancelled when the job is enqueued.
        at_once = pgqueue.enqueue(conn, 5, queue="q", depends_on=[failed])
        at_once_cancelled = pgqueue.enqueue(conn, 6, queue="q", depends_on=[cancelled])
    with engine.connect() as conn:
        errors = dict(
            conn.execute(
                text("SELECT id, last_error FROM queue.jobs WHERE id = ANY(:ids)"),
                {"ids": [waiting, doomed_later, at_once, at_once_cancelled]},
            ).all()
        )
    assert errors == {
        waiting: f"dependency {failed} failed",
        at_once: f"dependency {failed} failed",
        doomed_later: f"dependency {cancelled} was cancelled",
        at_once_cancelled: f"dependency {cancelled} was cancelled",
    }

    pgqueue.migrations.downgrade(empty_db_url, "pgqueue_0013", schema="queue")
    assert release_source() == source_0013
    assert rule_functions() == 0


def test_time_bounds_revision_is_catalog_only_and_round_trips_in_a_schema_with_rows(
    empty_db_url: URL, empty_engine: Engine
) -> None:
    """pgqueue_0015 adds ``timeout``, ``expires_in`` and ``expired_at`` (NULL, no default) on
    ``jobs`` and ``stuck`` (constant default 0) on ``jobs_workers``: neither table is rewritten
    (same relfilenode), existing rows read NULL and 0. Its downgrade removes exactly those and
    keeps the rows."""
    pgqueue.migrations.upgrade(empty_db_url, "pgqueue_0014", schema="queue")
    with empty_engine.begin() as conn:
        conn.execute(text("INSERT INTO queue.jobs (payload) VALUES ('1'), ('2')"))
        conn.execute(
            text(
                "INSERT INTO queue.jobs_workers (name, host, pid, queues) "
                "VALUES ('w', 'h', 1, '{q}')"
            )
        )

    def files() -> tuple[int, int]:
        with empty_engine.connect() as conn:
            return tuple(  # type: ignore[return-value]
                conn.execute(
                    text(
                        "SELECT pg_relation_filenode('queue.jobs'), "
                        "pg_relation_filenode('queue.jobs_workers')"
                    )
                ).one()
            )

    before = files()
    pgqueue.migrations.upgrade(empty_db_url, "pgqueue_0015", schema="queue")
    assert files() == before  # catalog-only: no rewrite
    with empty_engine.connect() as conn:
        rows = conn.execute(
            text("SELECT timeout, expires_in, expired_at FROM queue.jobs ORDER BY id")
        ).all()
        stuck = conn.execute(text("SELECT stuck FROM queue.jobs_workers")).scalar_one()
    assert [tuple(r) for r in rows] == [(None, None, None), (None, None, None)]
    assert stuck == 0
    pgqueue.migrations.downgrade(empty_db_url, "pgqueue_0014", schema="queue")
    with empty_engine.connect() as conn:
        left = conn.execute(
            text(
                "SELECT count(*) FROM information_schema.columns WHERE table_schema = 'queue' "
                "AND column_name IN ('timeout', 'expires_in', 'expired_at', 'stuck')"
            )
        ).scalar_one()
        assert left == 0
        assert conn.execute(text("SELECT count(*) FROM queue.jobs")).scalar_one() == 2


def test_indexes_revision_swaps_the_chart_index_for_the_keyed_ready_one_and_back(
    empty_db_url: URL, empty_engine: Engine
) -> None:
    """pgqueue_0017 drops ``jobs_finished_at_idx`` (``jobs_prune_idx`` serves the chart) and
    builds ``jobs_ready_key_idx`` (the per_key claim's), keeping the rows and the retention's
    index; its downgrade undoes both, the dropped index built again, valid."""
    pgqueue.migrations.upgrade(empty_db_url, "pgqueue_0016", schema="queue")
    with empty_engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO queue.jobs (payload, status, finished_at) "
                "VALUES ('1', 'done', now()), ('2', 'queued', NULL)"
            )
        )

    def finished_indexes() -> dict[str, bool]:
        with empty_engine.connect() as conn:
            rows = conn.execute(
                text(
                    "SELECT c.relname, i.indisvalid FROM pg_index i "
                    "JOIN pg_class c ON c.oid = i.indexrelid "
                    "WHERE i.indrelid = 'queue.jobs'::regclass "
                    "AND c.relname IN ('jobs_finished_at_idx', 'jobs_prune_idx', "
                    "'jobs_ready_key_idx')"
                )
            ).all()
        return {name: valid for name, valid in rows}

    assert finished_indexes() == {"jobs_finished_at_idx": True, "jobs_prune_idx": True}
    pgqueue.migrations.upgrade(empty_db_url, "pgqueue_0017", schema="queue")
    assert finished_indexes() == {"jobs_prune_idx": True, "jobs_ready_key_idx": True}
    pgqueue.migrations.downgrade(empty_db_url, "pgqueue_0016", schema="queue")
    assert finished_indexes() == {"jobs_finished_at_idx": True, "jobs_prune_idx": True}
    with empty_engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM queue.jobs")).scalar_one() == 2
