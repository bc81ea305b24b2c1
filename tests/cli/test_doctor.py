"""``pgqueue doctor`` sees each condition created for real, and exits 0, 1 or 2."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import Engine, text
from sqlalchemy.engine import URL

import pgqueue
from pgqueue._base.urls import to_libpq_url
from pgqueue.storage import alter_table_sql
from tests.cli.conftest import Result, plain, run_pgqueue
from tests.dead_tuples import pile_up
from tests.revisions import pgqueue_head

Cli = Callable[..., Result]


def _by_check(report: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {}
    for finding in report["findings"]:
        found.setdefault(finding["check"], []).append(finding)
    return found


def test_healthy_database(cli: Cli) -> None:
    result = cli("doctor")
    assert result.code == 0, result.out
    assert "healthy" in result.out
    report = cli("doctor", "--json").json()
    assert report["status"] == "healthy"
    assert {f["severity"] for f in report["findings"]} <= {"ok", "info"}


def test_open_transaction_in_another_connection(cli: Cli, db_url: URL, db: Engine) -> None:
    with db.begin() as conn:
        pgqueue.enqueue(conn, {})
    holder = psycopg.connect(to_libpq_url(db_url), application_name="stuck-worker")
    try:
        holder.execute("SELECT id FROM jobs FOR UPDATE")  # opens a transaction, then sits idle
        pid = holder.info.backend_pid
        time.sleep(1.2)
        result = cli("doctor", "--json", "--idle-threshold", "1s")
    finally:
        holder.close()
    assert result.code == 1, result.out
    report = result.json()
    assert report["status"] == "warning"
    (sessions,) = _by_check(report)["sessions"]
    assert sessions["severity"] == "warning"
    assert "idle in transaction" in sessions["message"]
    assert f"pid {pid}" in sessions["message"]
    assert sessions["details"][0]["application_name"] == "stuck-worker"
    assert _by_check(report)["snapshot"][0]["details"][0]["pid"] == pid


def test_queue_findings_and_exit_codes(cli: Cli, db: Engine) -> None:
    with db.begin() as conn:
        pgqueue.enqueue_many(conn, [{}, {}])
        first, second = pgqueue.claim(conn, limit=2)
        pgqueue.fail(conn, first.id, first.attempts, "boom", retry=False)
        conn.execute(
            text("UPDATE jobs SET locked_until = now() - interval '1 minute' WHERE id = :id"),
            {"id": second.id},
        )
    report = cli("doctor", "--json")
    assert report.code == 1
    checks = _by_check(report.json())
    assert checks["leases"][0]["severity"] == "warning"
    assert "pgqueue reap" in checks["leases"][0]["fix"]
    assert checks["failed"][0]["severity"] == "warning"
    assert "cancelled" not in checks

    with db.begin() as conn:
        conn.execute(text("DROP INDEX jobs_ready_idx"))
        conn.execute(text("DROP TRIGGER jobs_notify ON jobs"))
        conn.execute(text("UPDATE alembic_version SET version_num = 'pgqueue_0002'"))
    broken = cli("doctor")
    assert broken.code == 2
    assert "[ERROR  ] indexes: index jobs_ready_idx is missing" in broken.out
    assert "trigger jobs_notify is missing" in broken.out
    assert f"behind the package's head {pgqueue_head()}" in broken.out
    assert "errors found" in broken.out


def test_counts_cancelled_jobs_apart_from_failed_ones(cli: Cli, db: Engine) -> None:
    """A cancel is on purpose: an info finding, not a failed job to chase (issue #20, item 3)."""
    with db.begin() as conn:
        ids = pgqueue.enqueue_many(conn, [{}, {}, {}])
        (first,) = pgqueue.claim(conn, limit=1)
        pgqueue.fail(conn, first.id, first.attempts, "boom", retry=False)
        assert pgqueue.cancel(conn, ids[1:]) == ids[1:]
    checks = _by_check(cli("doctor", "--json").json())
    assert checks["failed"][0]["message"] == "1 failed job(s)"
    (cancelled,) = checks["cancelled"]
    assert cancelled["severity"] == "info"
    assert cancelled["message"].startswith("2 cancelled job(s)")
    assert "--include-cancelled" in cancelled["fix"]


def test_a_schema_before_cancelled_at_still_gets_its_job_counts(cli: Cli, db: Engine) -> None:
    """The doctor is what a database behind the package's head is checked with."""
    with db.begin() as conn:
        pgqueue.enqueue(conn, {}, max_attempts=1)
        (job,) = pgqueue.claim(conn)
        pgqueue.fail(conn, job.id, job.attempts, "boom")
        conn.execute(text("ALTER TABLE jobs DROP COLUMN cancelled_at"))
        conn.execute(text("UPDATE alembic_version SET version_num = 'pgqueue_0009'"))
    report = cli("doctor", "--json")
    assert report.code == 1, report.err
    checks = _by_check(report.json())
    assert checks["failed"][0]["message"] == "1 failed job(s)"
    assert "behind the package's head" in checks["revision"][0]["message"]


def test_says_what_it_cannot_see_without_pg_monitor(db_url: URL, db: Engine) -> None:
    role = f"pgq_doctor_{uuid.uuid4().hex[:8]}"
    with db.begin() as conn:
        conn.execute(text(f'CREATE ROLE "{role}" LOGIN'))
        conn.execute(text(f'GRANT SELECT ON jobs, alembic_version TO "{role}"'))
    try:
        limited = db_url.set(username=role, password=None)
        try:
            psycopg.connect(to_libpq_url(limited)).close()
        except psycopg.OperationalError:
            pytest.skip("this server does not let a new role log in without a password")
        result = run_pgqueue("doctor", "--json", "--url", plain(limited))
        assert result.code == 0, result.err
        checks = _by_check(result.json())
        (visibility,) = checks["visibility"]
        assert visibility["severity"] == "info"
        assert "pg_monitor" in visibility["fix"]
        for check in ("periodic", "dependencies"):  # tables this role may not read: said so
            (finding,) = checks[check]
            assert finding["severity"] == "info"
            assert f"cannot read jobs_{check}:" in finding["message"]
            assert f"SELECT on jobs_{check}" in finding["fix"]
    finally:
        with db.begin() as conn:
            conn.execute(text(f'DROP OWNED BY "{role}"'))
            conn.execute(text(f'DROP ROLE "{role}"'))


def test_storage_parameters_changed_back(cli: Cli, db: Engine) -> None:
    assert _by_check(cli("doctor", "--json").json())["storage"][0]["severity"] == "ok"
    with db.begin() as conn:
        conn.execute(
            text(
                "ALTER TABLE jobs RESET (autovacuum_vacuum_scale_factor); "
                "ALTER TABLE jobs SET (autovacuum_vacuum_threshold = 50)"
            )
        )
    result = cli("doctor", "--json")
    assert result.code == 1, result.out
    (storage,) = _by_check(result.json())["storage"]
    assert storage["severity"] == "warning"
    assert "autovacuum_vacuum_scale_factor = server default (pgqueue: 0.01)" in storage["message"]
    assert "autovacuum_vacuum_threshold = 50 (pgqueue: 1000)" in storage["message"]
    assert storage["fix"] == alter_table_sql()
    with db.begin() as conn:
        conn.execute(text(storage["fix"]))
    assert cli("doctor").code == 0


# -- vacuum: the states it warns about, for real -----------------------------------------------

DEAD = 3_000


def test_never_vacuumed_table_with_dead_tuples_is_a_warning(
    cli: Cli, db_url: URL, db: Engine
) -> None:
    pile_up(db_url, db, DEAD)
    result = cli("doctor", "--json")
    assert result.code == 1, result.out + result.err
    (vacuum,) = _by_check(result.json())["vacuum"]
    assert vacuum["severity"] == "warning"
    assert f"{DEAD} dead tuples (100%)" in vacuum["message"]
    assert "last autovacuum never, last vacuum never" in vacuum["message"]
    assert "autovacuum is off" in vacuum["message"]  # the server's (PG 15 here) or the table's
    assert "VACUUM jobs;" in vacuum["fix"]
    assert "never vacuumed" in vacuum["fix"]
    text_run = cli("doctor")
    assert text_run.code == 1
    assert "[WARNING] vacuum: jobs: 0 live, 3000 dead tuples" in text_run.out


def test_dead_tuples_a_recent_vacuum_left_behind_point_at_the_snapshot(
    cli: Cli, db_url: URL, db: Engine
) -> None:
    with db.begin() as conn:
        conn.execute(text("ALTER TABLE jobs SET (autovacuum_enabled = false)"))
    holder = psycopg.connect(to_libpq_url(db_url), application_name="old-snapshot")
    try:
        holder.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        holder.execute("SELECT 1")  # takes the snapshot: every row deleted after it stays
        pile_up(db_url, db, DEAD)
        with psycopg.connect(to_libpq_url(db_url), autocommit=True) as vacuum:
            vacuum.execute("VACUUM jobs")
        result = cli("doctor", "--json")
    finally:
        holder.close()
    assert result.code == 1, result.out + result.err
    checks = _by_check(result.json())
    (vacuum,) = checks["vacuum"]
    assert vacuum["severity"] == "warning"
    assert "last vacuum never" not in vacuum["message"]
    assert vacuum["details"][0]["last_vacuum"] is not None
    assert vacuum["details"][0]["n_dead_tup"] >= DEAD  # the vacuum could remove none of them
    assert "old snapshot" in vacuum["fix"]
    assert checks["snapshot"][0]["details"][0]["application_name"] == "old-snapshot"


def test_vacuum_that_removed_the_dead_tuples_is_healthy_again(
    cli: Cli, db_url: URL, db: Engine
) -> None:
    pile_up(db_url, db, DEAD)
    with psycopg.connect(to_libpq_url(db_url), autocommit=True) as vacuum:
        vacuum.execute("VACUUM jobs")
    result = cli("doctor", "--json")
    (vacuum,) = _by_check(result.json())["vacuum"]
    assert vacuum["severity"] == "ok", vacuum
    assert "last vacuum never" not in vacuum["message"]


def test_done_jobs_past_the_purge_horizon(cli: Cli, db: Engine) -> None:
    with db.begin() as conn:
        pgqueue.enqueue(conn, {})
        (job,) = pgqueue.claim(conn, limit=1)
        pgqueue.complete(conn, job.id, job.attempts)
        conn.execute(text("UPDATE jobs SET created_at = now() - interval '8 days'"))
    result = cli("doctor", "--json")
    assert result.code == 1, result.out
    (purge,) = _by_check(result.json())["purge"]
    assert purge["message"] == "1 done job(s) older than 7 days"
    assert "pgqueue purge --older-than 7d" in purge["fix"]


# -- backlog: ready jobs nobody takes ------------------------------------------------------------


def _ready_jobs(db: Engine, count: int, *, queue: str, waited: str | None = None) -> None:
    """``count`` ready jobs of ``queue``; ``waited`` (an interval) sets their run_at back."""
    with db.begin() as conn:
        ids = pgqueue.enqueue_many(conn, [{}] * count, queue=queue)
        if waited is not None:
            conn.execute(
                text("UPDATE jobs SET run_at = now() - CAST(:w AS interval) WHERE id = ANY(:ids)"),
                {"w": waited, "ids": ids},
            )


def _workers_here(db: Engine) -> int:
    with db.connect() as conn:
        return int(
            conn.execute(
                text(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                    "AND starts_with(application_name, 'pgqueue-worker:')"
                )
            ).scalar_one()
        )


@contextmanager
def _worker_of(queue: str, db_url: URL, db: Engine, tmp_path: Path) -> Iterator[int]:
    """A real ``pgqueue worker`` process serving ``queue`` alone, connected; yields its pid."""
    (tmp_path / "backlog_app.py").write_text(f"handlers = {{{queue!r}: lambda job: None}}\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "pgqueue", "worker", "backlog_app:handlers", "--url", plain(db_url)],
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if k != "PGQUEUE_DATABASE_URL"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while _workers_here(db) == 0:
            assert proc.poll() is None, f"the worker exited with {proc.returncode}"
            assert time.monotonic() < deadline, "the worker never connected"
            time.sleep(0.1)
        yield proc.pid
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0


def test_ready_jobs_with_no_worker_connected_are_a_warning(cli: Cli, db: Engine) -> None:
    _ready_jobs(db, 1_000, queue="reports", waited="2 hours")
    result = cli("doctor", "--json")
    assert result.code == 1, result.out + result.err
    (backlog,) = _by_check(result.json())["backlog"]
    assert backlog["severity"] == "warning"
    assert "no pgqueue worker is connected to this database" in backlog["message"]
    assert re.search(r"oldest ready job per queue: reports 72\d\d s", backlog["message"])
    assert backlog["details"][0]["oldest_ready_s"] >= 7200
    assert "pgqueue worker" in backlog["fix"]
    assert [d["queue"] for d in backlog["details"]] == ["reports"]
    assert cli("doctor").out.count("[WARNING] backlog: ready jobs wait in 1 queue(s)") == 1


def test_fresh_ready_jobs_with_a_worker_connected_are_healthy(
    cli: Cli, db_url: URL, db: Engine, tmp_path: Path
) -> None:
    assert _by_check(cli("doctor", "--json").json())["backlog"][0]["message"] == (
        "no ready job waiting"
    )
    _ready_jobs(db, 1_000, queue="reports")  # the worker serves another queue: they stay ready
    with _worker_of("other", db_url, db, tmp_path):
        fresh = cli("doctor", "--json")
        _ready_jobs(db, 10, queue="late", waited="2 hours")
        stalled = cli("doctor", "--json", "--backlog-age", "1h")
    assert fresh.code == 0, fresh.out + fresh.err
    (backlog,) = _by_check(fresh.json())["backlog"]
    assert backlog["severity"] == "ok"
    assert "1 worker process(es) connected" in backlog["message"]
    # A worker is connected, but the late queue's jobs waited longer than --backlog-age.
    assert stalled.code == 1, stalled.out
    (late,) = _by_check(stalled.json())["backlog"]
    assert late["severity"] == "warning"
    assert re.search(r"waited longer than 3600 s in 1 queue\(s\): late 72\d\d s;", late["message"])
    assert [d["queue"] for d in late["details"]] == ["late"]


def test_future_jobs_are_no_backlog(cli: Cli, db: Engine) -> None:
    with db.begin() as conn:
        pgqueue.enqueue(conn, {}, queue="later", delay=timedelta(hours=1))
    result = cli("doctor", "--json")
    assert result.code == 0, result.out
    assert _by_check(result.json())["backlog"][0]["message"] == "no ready job waiting"
