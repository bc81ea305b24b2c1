"""examples/service: a user's app with its own Alembic env and pgqueue added as a branch.

The fast tests run the example in this process against ``/work/venv``'s pgqueue; the slow one
builds the wheel, installs it into a fresh virtual environment outside the repository and runs
the example's ``alembic`` there, as a user would.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import create_async_engine
from worker_helpers import scalar, until

import pgqueue
import pgqueue.testing
from tests.revisions import pgqueue_head, pgqueue_revisions

ROOT = Path(__file__).resolve().parents[2]
SERVICE = ROOT / "examples" / "service"
sys.path.insert(0, str(SERVICE))

from myservice import app, async_app, worker  # noqa: E402
from myservice.models import Base  # noqa: E402


def _url(url: URL) -> str:
    return url.render_as_string(hide_password=False)


@pytest.fixture
def service_engine(empty_db_url: URL, monkeypatch: pytest.MonkeyPatch) -> Iterator[Engine]:
    """A fresh database migrated with the example's own ``alembic upgrade heads``."""
    monkeypatch.setenv("DATABASE_URL", _url(empty_db_url))
    command.upgrade(Config(str(SERVICE / "alembic.ini")), "heads")
    eng = create_engine(empty_db_url)
    yield eng
    eng.dispose()


def _counts(engine: Engine) -> tuple[int, int]:
    with engine.connect() as conn:
        users = conn.execute(text("SELECT count(*) FROM users")).scalar_one()
        jobs = conn.execute(text("SELECT count(*) FROM jobs")).scalar_one()
    return users, jobs


def test_both_branches_applied_and_nothing_to_autogenerate(service_engine: Engine) -> None:
    with service_engine.connect() as conn:
        heads = set(conn.execute(text("SELECT version_num FROM alembic_version")).scalars())
        assert heads == {"app_0001", pgqueue_head()}
    command.check(Config(str(SERVICE / "alembic.ini")))


def test_autogenerate_needs_pgqueue_metadata_next_to_the_apps(service_engine: Engine) -> None:
    with service_engine.connect() as conn:
        ctx = MigrationContext.configure(conn)
        only_app = compare_metadata(ctx, Base.metadata)
        both = compare_metadata(ctx, [Base.metadata, pgqueue.metadata])  # type: ignore[arg-type]
    assert ("remove_table", "jobs") in [
        (d[0], d[1].name) for d in only_app if d[0] == "remove_table"
    ]
    assert both == []


def test_create_user_commits_or_rolls_back_with_its_job(service_engine: Engine) -> None:
    with service_engine.connect() as conn:
        app.create_user(conn, "rolled@example.com")
        pgqueue.testing.assert_enqueued(conn, app.WELCOME_QUEUE, {"email": "rolled@example.com"})
        conn.rollback()
    assert _counts(service_engine) == (0, 0)
    with service_engine.begin() as conn:
        app.create_user(conn, "ada@example.com")
    assert _counts(service_engine) == (1, 1)


def test_worker_sends_each_email_once(
    service_engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    with service_engine.begin() as conn:
        app.create_user(conn, "ada@example.com")
    handlers = worker.make_handlers(service_engine)
    with caplog.at_level(logging.INFO, logger="myservice.email"):
        result = pgqueue.testing.drain(service_engine, handlers)
        (job,) = result.succeeded
        # A rerun of the same job (a lost lease, a crash before the commit) sends nothing.
        handlers[app.WELCOME_QUEUE](pgqueue.JobContext(job.id, job.queue, job.payload, 1))
    assert [r.getMessage() for r in caplog.records] == [
        f"welcome email to ada@example.com (job {job.id})"
    ]
    with service_engine.connect() as conn:
        sent = conn.execute(text("SELECT job_id, email FROM sent_emails")).all()
        status = conn.execute(text("SELECT status FROM jobs")).scalar_one()
    assert [tuple(r) for r in sent] == [(job.id, "ada@example.com")]
    assert status == "done"


def test_the_real_worker_runs_the_example_handlers(service_engine: Engine) -> None:
    with service_engine.begin() as conn:
        for email in ("ada@example.com", "grace@example.com"):
            app.create_user(conn, email)
    handlers = worker.make_handlers(service_engine)
    pgqueue.Worker(service_engine, handlers, listen=False, install_signal_handlers=False).run(
        until_empty=True
    )
    with service_engine.connect() as conn:
        sent = conn.execute(text("SELECT email FROM sent_emails ORDER BY email")).scalars()
        statuses = conn.execute(text("SELECT DISTINCT status FROM jobs")).scalars()
        assert (list(sent), list(statuses)) == (["ada@example.com", "grace@example.com"], ["done"])


def test_async_service_commits_or_rolls_back_with_its_job(
    service_engine: Engine, empty_db_url: URL
) -> None:
    async def scenario() -> None:
        engine = create_async_engine(empty_db_url)
        try:
            async with engine.connect() as conn:
                await async_app.create_user(conn, "rolled@example.com")
                await conn.rollback()
            async with engine.begin() as conn:
                await async_app.create_user(conn, "ada@example.com")
        finally:
            await engine.dispose()

    asyncio.run(scenario())
    assert _counts(service_engine) == (1, 1)
    result = pgqueue.testing.drain(service_engine, worker.make_handlers(service_engine))
    assert [j.payload["email"] for j in result.succeeded] == ["ada@example.com"]


CHECK_SCRIPT = textwrap.dedent(
    """
    import os, sys
    import pgqueue
    from sqlalchemy import create_engine, text
    from myservice.app import create_user

    print(pgqueue.__file__)
    COUNTS = "SELECT (SELECT count(*) FROM users), (SELECT count(*) FROM jobs)"
    engine = create_engine(os.environ["DATABASE_URL"])
    with engine.connect() as conn:
        create_user(conn, "rolled@example.com")
        conn.rollback()
    with engine.connect() as conn:
        counts = list(conn.execute(text(COUNTS)).one())
    assert counts == [0, 0], counts
    with engine.begin() as conn:
        create_user(conn, "ada@example.com")
    with engine.connect() as conn:
        counts = list(conn.execute(text(COUNTS)).one())
    assert counts == [1, 1], counts
    engine.dispose()
    """
)


CATALOG = """
SELECT array(SELECT tablename::text FROM pg_tables WHERE schemaname = 'public' ORDER BY 1),
       (SELECT count(*) FROM pg_proc WHERE proname = 'jobs_notify'),
       (SELECT count(*) FROM pg_trigger WHERE NOT tgisinternal),
       array(SELECT email FROM users),
       array(SELECT version_num::text FROM alembic_version)
"""


@pytest.mark.slow
def test_wheel_in_a_fresh_venv_runs_the_example(
    empty_db_url: URL, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """20-45 s: build the wheel, install it with its dependencies, migrate, check, downgrade."""
    tmp = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp), str(ROOT)],
        check=True,
    )
    (wheel,) = tmp.glob("pgqueue_sa-*.whl")  # the distribution pgqueue-sa, the package pgqueue
    names = zipfile.ZipFile(wheel).namelist()
    revisions = sorted(n for n in names if n.startswith("pgqueue/migrations/versions/pgqueue_"))
    assert [n.rsplit("/", 1)[1][:12] for n in revisions] == pgqueue_revisions()
    # The dashboard's templates and static files ship inside the package (no CDN).
    for name in ("templates/base.html", "templates/_live.html", "static/pgqueue.js"):
        assert f"pgqueue/web/{name}" in names

    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    bindir = venv / "bin"
    subprocess.run([bindir / "pip", "install", "-q", str(wheel)], check=True)
    version = subprocess.run(
        [bindir / "pgqueue", "--version"], check=True, capture_output=True, text=True
    )
    assert version.stdout.strip() == f"pgqueue {pgqueue.__version__}"

    project = tmp / "service"
    shutil.copytree(SERVICE, project, ignore=shutil.ignore_patterns("__pycache__"))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["DATABASE_URL"] = _url(empty_db_url)

    def run(*args: str | Path) -> str:
        done = subprocess.run(
            args, cwd=project, env=env, check=True, capture_output=True, text=True
        )
        return done.stdout

    run(bindir / "alembic", "upgrade", "heads")
    assert set(run(bindir / "alembic", "current").split()) >= {"app_0001", pgqueue_head()}
    run(bindir / "alembic", "check")
    out = run(bindir / "python", "-c", f"import sys; sys.path.insert(0, '.')\n{CHECK_SCRIPT}")
    assert out.strip().startswith(str(venv)), out

    run(bindir / "alembic", "downgrade", "pgqueue@base")
    engine = create_engine(empty_db_url)
    try:
        with engine.connect() as conn:
            catalog = conn.execute(text(CATALOG)).one()
    finally:
        engine.dispose()
    assert tuple(catalog) == (
        ["alembic_version", "sent_emails", "users"],
        0,  # the jobs_notify() function
        0,  # triggers
        ["ada@example.com"],
        ["app_0001"],
    )


def test_the_fastapi_service_mounts_the_dashboard_and_runs_a_worker_in_its_lifespan(
    service_engine: Engine,
) -> None:
    """examples/service/myservice/web.py: sign up over HTTP, the lifespan's worker sends the
    email, the dashboard under /queue shows it done; leaving the lifespan stops the worker."""
    import re
    import threading

    from myservice import web
    from starlette.testclient import TestClient

    service = web.create_app(service_engine, dashboard_auth="ops:pw")
    with TestClient(service) as client:
        assert any(t.name == "myservice-worker" for t in threading.enumerate())
        signup = client.post("/users", params={"email": "ada@example.com"})
        assert signup.status_code == 200
        until(
            lambda: scalar(service_engine, "SELECT status FROM jobs") == "done",
            30,
            "the lifespan's worker to send the email",
        )
        assert client.get("/queue/").status_code == 401
        page = client.get("/queue/", auth=("ops", "pw"))
        assert page.status_code == 200
        done = re.search(
            r'<tr data-queue="welcome_email">.*?data-count="done">(\d+)<', page.text, re.S
        )
        assert done is not None
        assert done.group(1) == "1"
        assert 'href="/queue/queues/welcome_email"' in page.text  # its queue's page
    assert not any(t.name == "myservice-worker" for t in threading.enumerate())
