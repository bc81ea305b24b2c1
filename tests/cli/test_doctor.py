"""``pgqueue doctor`` sees each condition created for real, and exits 0, 1 or 2."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from sqlalchemy import Engine, text
from sqlalchemy.engine import URL

import pgqueue
from pgqueue._urls import to_libpq_url
from pgqueue.storage import alter_table_sql
from tests.cli.conftest import Result, plain, run_pgqueue
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
        (visibility,) = _by_check(result.json())["visibility"]
        assert visibility["severity"] == "info"
        assert "pg_monitor" in visibility["fix"]
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
