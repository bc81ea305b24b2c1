"""pgqueue in a schema of its own, beside a user's ``public.jobs`` table (issue #5)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import URL
from worker_helpers import heard, until

import pgqueue
import pgqueue.migrations
from pgqueue import InvalidArgumentError, admin
from pgqueue._base.urls import to_libpq_url
from pgqueue.storage import JOBS_STORAGE_PARAMETERS
from tests.cli.conftest import run_pgqueue
from tests.revisions import pgqueue_head

SCHEMA = "pgq"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def placed(empty_db_url: URL) -> Iterator[tuple[Engine, Engine]]:
    """(plain engine, engine mapped to SCHEMA) on a database whose public.jobs is the user's."""
    plain = create_engine(empty_db_url)
    with plain.begin() as conn:
        conn.execute(text("CREATE TABLE jobs (id int PRIMARY KEY, title text NOT NULL)"))
        conn.execute(text("INSERT INTO jobs VALUES (1, 'the user''s own row')"))
    pgqueue.migrations.upgrade(empty_db_url, schema=SCHEMA)
    mapped = pgqueue.use_schema(create_engine(empty_db_url), SCHEMA)
    yield plain, mapped
    mapped.dispose()
    plain.dispose()


def _users_table_untouched(plain: Engine) -> None:
    with plain.connect() as conn:
        rows = conn.execute(text("SELECT * FROM public.jobs")).all()
    assert [tuple(r) for r in rows] == [(1, "the user's own row")]


def test_objects_live_in_the_schema(placed: tuple[Engine, Engine]) -> None:
    plain, _ = placed
    with plain.connect() as conn:
        indexes = set(
            conn.execute(
                text(
                    "SELECT indexname FROM pg_indexes WHERE schemaname = :s AND tablename = 'jobs'"
                ),
                {"s": SCHEMA},
            ).scalars()
        )
        trigger = conn.execute(
            text("SELECT pg_get_triggerdef(oid) FROM pg_trigger WHERE tgname = 'jobs_notify'")
        ).scalar_one()
        function = conn.execute(
            text(
                "SELECT prosrc FROM pg_proc WHERE proname = 'jobs_notify' "
                "AND pronamespace = CAST(:s AS regnamespace)"
            ),
            {"s": SCHEMA},
        ).scalar_one()
        version = conn.execute(text(f"SELECT version_num FROM {SCHEMA}.alembic_version")).scalar()
        options = conn.execute(
            text("SELECT reloptions FROM pg_class WHERE oid = CAST(:t AS regclass)"),
            {"t": f"{SCHEMA}.jobs"},
        ).scalar_one()
        public_options = conn.execute(
            text("SELECT reloptions FROM pg_class WHERE oid = 'public.jobs'::regclass")
        ).scalar_one()
    assert indexes == {
        "jobs_pkey",
        "jobs_ready_idx",
        "jobs_lease_idx",
        "jobs_unique_key_idx",
        "jobs_failed_idx",  # pgqueue_0009
        "jobs_running_key_idx",  # pgqueue_0012
        "jobs_prune_idx",  # pgqueue_0016 (pgqueue_0017 dropped jobs_finished_at_idx for it)
        "jobs_ready_key_idx",  # pgqueue_0017
    }
    assert f"ON {SCHEMA}.jobs" in trigger
    assert f"EXECUTE FUNCTION {SCHEMA}.jobs_notify()" in trigger
    assert f"pg_notify('{SCHEMA}.jobs', queue) FROM (SELECT DISTINCT queue FROM inserted)" in (
        function
    )
    assert "FOR EACH STATEMENT" in trigger
    assert version == pgqueue_head()
    assert dict(o.split("=", 1) for o in options) == dict(JOBS_STORAGE_PARAMETERS)
    assert public_options is None
    _users_table_untouched(plain)


def test_lifecycle_through_the_mapped_engine(placed: tuple[Engine, Engine]) -> None:
    plain, mapped = placed
    with mapped.begin() as conn:
        ids = pgqueue.enqueue_many(conn, [{"n": 1}, {"n": 2}, {"n": 3}], queue="mail")
    with mapped.begin() as conn:
        claimed = pgqueue.claim(conn, queue="mail", limit=3)
    assert [j.id for j in claimed] == ids
    with mapped.begin() as conn:
        assert pgqueue.complete(conn, ids[0], 1)
        result = pgqueue.fail(conn, ids[1], 1, "boom")
        assert result is not None
        assert result.status == "queued"
        conn.execute(
            text(f"UPDATE {SCHEMA}.jobs SET locked_until = now() - interval '1 s' WHERE id = :i"),
            {"i": ids[2]},
        )
        assert [r.id for r in pgqueue.reap_expired(conn)] == [ids[2]]
    with plain.connect() as conn:
        statuses = dict(conn.execute(text(f"SELECT id, status FROM {SCHEMA}.jobs")).all())
    assert statuses == {ids[0]: "done", ids[1]: "queued", ids[2]: "queued"}
    _users_table_untouched(plain)


def test_notify_uses_the_schema_channel(placed: tuple[Engine, Engine], empty_db_url: URL) -> None:
    _, mapped = placed
    assert pgqueue.channel_for(SCHEMA) == f"{SCHEMA}.jobs"
    with psycopg.connect(to_libpq_url(empty_db_url), autocommit=True) as listener:
        listener.execute(f'LISTEN "{SCHEMA}.jobs"')
        listener.execute("LISTEN jobs")
        with mapped.begin() as conn:
            pgqueue.enqueue(conn, {}, queue="mail")
        got = heard(listener, 10, expect=1)
    assert got == [(f"{SCHEMA}.jobs", "mail")]


def test_priorities_keys_and_cancel_follow_the_schema(
    placed: tuple[Engine, Engine], empty_db_url: URL
) -> None:
    plain, mapped = placed
    with mapped.begin() as conn:
        low = pgqueue.enqueue(conn, {}, queue="mail", unique_key="k")
        assert pgqueue.enqueue(conn, {}, queue="mail", unique_key="k") == low
        high = pgqueue.enqueue(conn, {}, queue="mail", priority=8)
    with mapped.begin() as conn:
        assert [j.id for j in pgqueue.claim(conn, queue="mail", limit=2)] == [high, low]
    with psycopg.connect(to_libpq_url(empty_db_url), autocommit=True) as listener:
        listener.execute(f'LISTEN "{SCHEMA}.jobs"')
        with mapped.begin() as conn:
            assert pgqueue.cancel(conn, [low]) == [low]
        got = heard(listener, 10, expect=1)
    assert got == [(f"{SCHEMA}.jobs", ",cancel")]  # the cancel hint on the schema's channel
    with mapped.begin() as conn:
        assert pgqueue.enqueue(conn, {}, queue="mail", unique_key="k") != low  # freed
    _users_table_untouched(plain)


def test_periodic_definitions_follow_the_schema(placed: tuple[Engine, Engine]) -> None:
    plain, mapped = placed
    with plain.begin() as conn:  # a user's own table of that name stays untouched too
        conn.execute(text("CREATE TABLE public.jobs_periodic (name text)"))
    every = pgqueue.Periodic("placed", timedelta(seconds=1), "ticks")
    handled: list[int] = []
    worker = pgqueue.Worker(
        mapped,
        {"ticks": lambda job: handled.append(job.id)},
        periodic=[every],
        poll_interval=0.5,
        install_signal_handlers=False,
    )
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        until(lambda: len(handled) >= 2, 10, "two ticks handled")
    finally:
        worker.stop()
        thread.join(30)
    assert len(handled) >= 2
    with mapped.connect() as conn:
        assert [r.name for r in pgqueue.periodic_states(conn)] == ["placed"]
    with plain.connect() as conn:
        in_schema = conn.execute(text(f"SELECT count(*) FROM {SCHEMA}.jobs_periodic")).scalar_one()
        users = conn.execute(text("SELECT count(*) FROM public.jobs_periodic")).scalar_one()
    assert (in_schema, users) == (1, 0)
    _users_table_untouched(plain)


def test_worker_listens_on_the_schema_channel(
    placed: tuple[Engine, Engine], empty_db_url: URL
) -> None:
    plain, mapped = placed
    started: dict[int, float] = {}
    worker = pgqueue.Worker(
        mapped, {"mail": lambda job: started.setdefault(job.id, time.monotonic())}, poll_interval=30
    )
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()

    def listening() -> bool:
        with psycopg.connect(to_libpq_url(empty_db_url), autocommit=True) as probe:
            row = probe.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE query = %s",
                (f'LISTEN "{SCHEMA}.jobs"',),
            ).fetchone()
        return bool(row and row[0])

    try:
        until(listening, 10, "the worker to listen on the schema's channel")
        time.sleep(0.2)  # past the first poll
        t0 = time.monotonic()
        with mapped.begin() as conn:
            job_id = pgqueue.enqueue(conn, {}, queue="mail")
        until(lambda: job_id in started, 5, "the notified job")
        assert started[job_id] - t0 < 3  # woken by the notification, not the 30 s poll
    finally:
        worker.stop()
        thread.join(30)
    assert not thread.is_alive()
    with plain.connect() as conn:
        status = conn.execute(
            text(f"SELECT status FROM {SCHEMA}.jobs WHERE id = :i"), {"i": job_id}
        ).scalar_one()
    assert status == "done"
    _users_table_untouched(plain)


def test_cli_with_schema(placed: tuple[Engine, Engine], empty_db_url: URL) -> None:
    plain, _ = placed
    url = empty_db_url.render_as_string(hide_password=False)
    base = ["--url", url, "--schema", SCHEMA]
    out = run_pgqueue(*base, "enqueue", "cli", '{"x": 1}', "--json")
    assert out.code == 0, out.err
    stats = run_pgqueue(*base, "stats", "--json")
    assert stats.code == 0, stats.err
    assert "cli" in json.dumps(stats.json())
    doctor = run_pgqueue(*base, "doctor", "--json")
    assert doctor.code in (0, 1), doctor.out + doctor.err
    assert "no jobs table" not in doctor.out
    bad = run_pgqueue(*base[:-1], "bad-name!", "stats")
    assert bad.code == 2
    assert "schema" in bad.err
    _users_table_untouched(plain)


def test_alembic_x_argument_places_the_schema(empty_db_url: URL) -> None:
    env = {**os.environ, "PGQUEUE_DATABASE_URL": empty_db_url.render_as_string(hide_password=False)}
    env.pop("PGQUEUE_SCHEMA", None)
    run = subprocess.run(
        [sys.executable, "-m", "alembic", "-x", "pgqueue_schema=other", "upgrade", "head"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    with psycopg.connect(to_libpq_url(empty_db_url)) as conn:
        where = conn.execute("SELECT to_regclass('other.jobs') IS NOT NULL").fetchone()
        public = conn.execute("SELECT to_regclass('public.jobs') IS NOT NULL").fetchone()
    assert where == (True,)
    assert public == (False,)


def test_downgrade_removes_only_pgqueue_objects(
    placed: tuple[Engine, Engine], empty_db_url: URL
) -> None:
    plain, _ = placed
    pgqueue.migrations.downgrade(empty_db_url, schema=SCHEMA)
    with plain.connect() as conn:
        left = (
            conn.execute(
                text(
                    "SELECT relname FROM pg_class "
                    "WHERE relnamespace = CAST(:s AS regnamespace) AND relkind = 'r'"
                ),
                {"s": SCHEMA},
            )
            .scalars()
            .all()
        )
        functions = conn.execute(
            text("SELECT count(*) FROM pg_proc WHERE proname = 'jobs_notify'")
        ).scalar_one()
    assert functions == 0
    assert left == ["alembic_version"]  # only pgqueue's own version table stays in its schema
    _users_table_untouched(plain)


def test_bad_schema_names_are_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="plain identifier"):
        pgqueue.channel_for('evil"; DROP TABLE jobs; --')
    with pytest.raises(InvalidArgumentError, match="longer"):
        pgqueue.channel_for("s" * 59)


def test_async_twins_follow_the_schema(placed: tuple[Engine, Engine], empty_db_url: URL) -> None:
    import asyncio

    from sqlalchemy.ext.asyncio import create_async_engine

    import pgqueue.aio

    plain, _ = placed

    async def scenario() -> list[int]:
        engine = pgqueue.use_schema(create_async_engine(empty_db_url), SCHEMA)
        try:
            async with engine.begin() as conn:
                await pgqueue.aio.enqueue(conn, {"a": 1}, queue="async")
            async with engine.begin() as conn:
                jobs = await pgqueue.aio.claim(conn, queue="async")
                assert await pgqueue.aio.complete(conn, jobs[0].id, jobs[0].attempts)
            return [j.id for j in jobs]
        finally:
            await engine.dispose()

    ids = asyncio.run(scenario())
    with plain.connect() as conn:
        status = conn.execute(
            text(f"SELECT status FROM {SCHEMA}.jobs WHERE id = :i"), {"i": ids[0]}
        ).scalar_one()
    assert status == "done"
    _users_table_untouched(plain)


def test_the_workers_row_and_view_follow_the_schema(placed: tuple[Engine, Engine]) -> None:
    plain, mapped = placed
    release = threading.Event()
    worker = pgqueue.Worker(
        mapped, {"mail": lambda job: release.wait(30)}, install_signal_handlers=False
    )
    with mapped.begin() as conn:
        job_id = pgqueue.enqueue(conn, {}, queue="mail")
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    seen: list[dict[str, Any]] = []

    def holding() -> bool:
        with mapped.connect() as conn:
            seen[:] = admin.connected_workers(conn)
        return bool(seen) and seen[0]["jobs_held"] == 1

    try:
        until(holding, 20, "the worker's row to show its job")
        assert seen[0]["queues"] == ["mail"]
        with plain.connect() as conn:
            row = conn.execute(text(f"SELECT name, queues FROM {SCHEMA}.jobs_workers")).one()
            held = conn.execute(
                text(f"SELECT locked_by FROM {SCHEMA}.jobs WHERE id = :i"), {"i": job_id}
            ).scalar_one()
        assert (row.name, row.queues) == (seen[0]["name"], ["mail"])
        assert held == seen[0]["name"]
    finally:
        release.set()
        worker.stop()
        thread.join(30)
    with plain.connect() as conn:
        assert conn.execute(text(f"SELECT count(*) FROM {SCHEMA}.jobs_workers")).scalar_one() == 0
    _users_table_untouched(plain)
