"""The demo on a throwaway database of the test server, and ``pgqueue worker``."""

from __future__ import annotations

import gc
import textwrap
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from sqlalchemy import Engine, text

import pgqueue
import pgqueue.repository
from pgqueue._worker import store
from tests.cli.conftest import Result, plain, run_pgqueue

Cli = Callable[..., Result]


def test_demo_small(pg_server: object) -> None:
    server_url = plain(pg_server.url)  # type: ignore[attr-defined]
    result = run_pgqueue("demo", "--jobs", "800", "--url", server_url)
    assert result.code == 0, result.err
    out = result.out
    assert "1. Naive claim: 8 sessions x 100 claims over 800 jobs" in out
    assert "emails would have gone out twice" in out
    assert " done   |   800 |            1" in out
    assert "each exactly once" in out
    assert "are dead but not yet removable" in out
    assert "0 are dead but not yet removable" in out.split("COMMIT;")[1]
    assert "4. A real pgqueue.Worker" in out
    assert "16 failed for good" in out
    assert "Traceback" not in result.err
    with pg_server.admin() as admin:  # type: ignore[attr-defined]
        left = admin.execute(
            "SELECT count(*) FROM pg_database WHERE datname LIKE 'pgqueue_demo_%'"
        ).fetchone()
    assert left == (0,)


def _app(tmp_path: Path) -> str:
    (tmp_path / "cli_app.py").write_text(
        textwrap.dedent(
            """
            import pgqueue
            from sqlalchemy import create_engine

            registry = pgqueue.Registry()

            @registry.handler("emails")
            def send(job):
                if job.payload.get("fail"):
                    raise ValueError("bad address")

            @registry.handler("webhooks")
            async def call(job):
                import asyncio
                await asyncio.sleep(0)
                if job.payload.get("fail"):
                    raise ValueError("bad address")

            registry.periodic("hourly-digest", "0 * * * *", "emails", {"digest": True})

            handlers = {"emails": send, "reports": send}
            ready = pgqueue.Worker(create_engine("postgresql+psycopg://nobody@127.0.0.1:1/x"),
                                   handlers)
            not_handlers = 42
            """
        )
    )
    return str(tmp_path)


def test_worker_burst(cli: Cli, db: Engine, tmp_path: Path) -> None:
    with db.begin() as conn:
        pgqueue.enqueue_many(conn, [{}, {}, {"fail": True}], queue="emails", max_attempts=1)
        pgqueue.enqueue_many(conn, [{}, {"fail": True}], queue="webhooks", max_attempts=1)
        pgqueue.enqueue(conn, {}, queue="reports")
    cwd = _app(tmp_path)
    result = cli("worker", "cli_app:registry", "--burst", "--concurrency", "2", cwd=cwd)
    assert result.code == 0, result.err
    with db.connect() as conn:
        rows = dict(conn.execute(text("SELECT status, count(*) FROM jobs GROUP BY status")).all())
    # The async handler of webhooks runs unchanged; reports has no handler here.
    assert rows == {"done": 3, "failed": 2, "queued": 1}

    only = cli("worker", "cli_app:handlers", "--queues", "reports", "--burst", cwd=cwd)
    assert only.code == 0, only.err
    with db.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM jobs WHERE status = 'queued'")).scalar() == 0


def test_the_worker_process_freezes_what_start_up_made(
    cli: Cli, db: Engine, tmp_path: Path
) -> None:
    """``pgqueue worker`` runs in a process of its own: the objects of its start-up are frozen
    out of the garbage collector's full passes (``gc.freeze``) before the first job."""
    (tmp_path / "gc_app.py").write_text(
        textwrap.dedent(
            """
            import gc

            def record(job):
                job.log("collector", frozen=gc.get_freeze_count())

            handlers = {"gc": record}
            """
        )
    )
    with db.begin() as conn:
        job_id = pgqueue.enqueue(conn, {}, queue="gc")
    result = cli("worker", "gc_app:handlers", "--burst", cwd=str(tmp_path))
    assert result.code == 0, result.err
    with db.connect() as conn:
        lines = pgqueue.job_logs(conn, job_id)
    assert [line.message for line in lines] == ["collector"]
    assert lines[0].fields["frozen"] > 1_000  # the application, pgqueue, SQLAlchemy, psycopg
    assert gc.get_freeze_count() == 0  # thawed when the run ended (this test's process ran it)


@pytest.mark.parametrize("flag", [None, "--log-tracebacks", "--no-log-tracebacks"])
def test_worker_logs_a_failed_attempts_traceback_unless_told_not_to(
    cli: Cli, db: Engine, tmp_path: Path, flag: str | None
) -> None:
    """The worker process's stderr: the failure's line at WARNING, with its traceback by
    default; ``--no-log-tracebacks`` keeps the line and drops the traceback (still stored)."""
    with db.begin() as conn:
        job_id = pgqueue.enqueue(conn, {"fail": True}, queue="emails", max_attempts=2)
    options = [] if flag is None else [flag]
    result = cli(
        "worker", "cli_app:registry", "--queues", "emails", "--burst", *options, cwd=_app(tmp_path)
    )
    assert result.code == 0, result.err
    (line,) = [ln for ln in result.err.splitlines() if f"job {job_id} " in ln]
    assert " WARNING " in line
    assert line.endswith("ValueError: bad address")
    logged = "Traceback (most recent call last):" in result.err
    assert logged is (flag != "--no-log-tracebacks")
    assert ("in send\n" in result.err) is logged
    with db.connect() as conn:
        stored = conn.execute(text("SELECT errors->0->>'traceback' FROM jobs")).scalar_one()
    assert "in send\n" in stored


def test_worker_finds_a_registrys_periodic_definitions(
    cli: Cli, db: Engine, tmp_path: Path
) -> None:
    """``pgqueue worker app:registry`` fires the registry's definitions: here, with --burst, the
    tick missed since the last one enqueued (state as if workers had stopped two hours ago)."""
    cwd = _app(tmp_path)
    digest = pgqueue.Periodic("hourly-digest", "0 * * * *", "emails", {"digest": True})
    top = datetime.now(timezone.utc).replace(minute=0, second=0, microsecond=0)
    with db.begin() as conn:
        store.declare_periodic(conn, [digest], top - timedelta(hours=3))
        store.fire_periodic(conn, digest, None, [top - timedelta(hours=2)])
        conn.execute(text("DELETE FROM jobs"))
    result = cli("worker", "cli_app:registry", "--burst", cwd=cwd)
    assert result.code == 0, result.err
    with db.connect() as conn:
        rows = conn.execute(text("SELECT status, payload, headers FROM jobs")).all()
    assert [(r.status, r.payload) for r in rows] == [("done", {"digest": True})]
    assert rows[0].headers["periodic"] == "hourly-digest"
    assert datetime.fromisoformat(rows[0].headers["scheduled_for"]) == top


def test_worker_target_errors(tmp_path: Path) -> None:
    cwd = _app(tmp_path)
    ready = run_pgqueue("worker", "cli_app:ready", "--concurrency", "3", cwd=cwd)
    assert ready.code == 2
    assert "is a ready Worker: --concurrency would be ignored" in ready.err
    for target, message in [
        ("cli_app:missing", "has no attribute"),
        ("no_such_module:x", "cannot import"),
        ("cli_app:not_handlers", "expected a pgqueue.Worker"),
        ("cli_app:handlers", "no handler for queue(s) nope"),
    ]:
        result = run_pgqueue(
            "worker", target, "--queues", "nope", "--url", "postgresql://x@127.0.0.1:1/x", cwd=cwd
        )
        assert result.code == 2, target
        assert message in result.err
        assert "Traceback" not in result.err


def test_worker_runs_a_registrys_tasks_and_queues_keeps_those_of_its_queues(
    cli: Cli, db: Engine, tmp_path: Path
) -> None:
    """``pgqueue worker app:registry`` runs the registry's tasks by name (#22), claiming their
    queues; ``--queues`` keeps the handlers and tasks of the queues named."""
    (tmp_path / "task_app.py").write_text(
        textwrap.dedent(
            """
            import pgqueue

            registry = pgqueue.Registry()

            @registry.task(queue="reports", name="reports.build")
            def build(month):
                return {"month": month}

            @registry.task(queue="other", name="other.noop")
            def noop():
                return "other"
            """
        )
    )
    ids = {}
    with db.begin() as conn:
        for name, queue, args in [
            ("reports.build", "reports", ["2026-11"]),
            ("other.noop", "other", []),
        ]:
            ids[name] = pgqueue.enqueue(conn, {"args": args, "kwargs": {}}, queue=queue)
            conn.execute(
                text("UPDATE jobs SET task = :t WHERE id = :i"), {"t": name, "i": ids[name]}
            )
    only = cli("worker", "task_app:registry", "--queues", "reports", "--burst", cwd=str(tmp_path))
    assert only.code == 0, only.err

    def result(name: str) -> tuple[str, object]:
        with db.connect() as conn:
            row = conn.execute(
                text("SELECT status, result FROM jobs WHERE id = :i"), {"i": ids[name]}
            ).one()
        return row.status, row.result

    assert result("reports.build") == ("done", {"month": "2026-11"})
    assert result("other.noop") == ("queued", None)  # not a queue of this run
    every = cli("worker", "task_app:registry", "--burst", cwd=str(tmp_path))
    assert every.code == 0, every.err
    assert result("other.noop") == ("done", "other")
    missing = cli("worker", "task_app:registry", "--queues", "nope", "--burst", cwd=str(tmp_path))
    assert missing.code == 2
    assert "no handler for queue(s) nope" in missing.err
    assert "it has: reports, other" in missing.err
