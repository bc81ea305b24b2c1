"""Who holds a job and which workers are connected: ``jobs.locked_by``/``locked_at`` set by the
claim, the worker's ``jobs_workers`` row written at start and deleted at stop (nothing between),
and :func:`pgqueue.admin.connected_workers` read from ``pg_stat_activity``."""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import URL
from worker_helpers import running, scalar, statements_sent, until

import pgqueue
from pgqueue import admin
from pgqueue._base.connections import worker_name
from pgqueue._base.urls import to_libpq_url
from pgqueue._worker.replay import Replay, claim_replayed
from pgqueue.errors import InvalidArgumentError, InvalidArgumentTypeError

NAME = worker_name()


def _rows(engine: Engine, sql: str, **params: Any) -> list[dict[str, Any]]:
    with engine.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(text(sql), params)]


def _workers(engine: Engine) -> list[dict[str, Any]]:
    with engine.connect() as conn:
        return admin.connected_workers(conn)


class Blocking:
    """A handler that holds its job until released."""

    def __init__(self) -> None:
        self.started = 0
        self.release = threading.Event()
        self._lock = threading.Lock()

    def __call__(self, job: pgqueue.JobContext) -> None:
        with self._lock:
            self.started += 1
        assert self.release.wait(30)


@contextmanager
def _released(handler: Blocking) -> Iterator[None]:
    try:
        yield
    finally:
        handler.release.set()


def test_a_running_worker_is_connected_with_its_queues_and_the_jobs_it_holds(
    engine: Engine,
) -> None:
    with engine.begin() as conn:
        ids = pgqueue.enqueue_many(conn, [{"n": 1}, {"n": 2}], queue="mail")
    handler = Blocking()
    worker = pgqueue.Worker(
        engine,
        {"mail": handler, "thumbs": handler},
        concurrency=2,
        prefetch=0,
        install_signal_handlers=False,
    )
    with running(worker), _released(handler):
        until(lambda: handler.started == 2, 20, "both jobs to start")
        held = _rows(engine, "SELECT locked_by, locked_at, run_at FROM jobs ORDER BY id")
        assert [r["locked_by"] for r in held] == [NAME, NAME]
        assert all(r["locked_at"] is not None and r["locked_at"] >= r["run_at"] for r in held)
        until(lambda: bool(_workers(engine)), 20, "the LISTEN connection")
        (seen,) = _workers(engine)
        assert seen["name"] == NAME
        assert (seen["host"], seen["pid"]) == (socket.gethostname(), os.getpid())
        assert seen["queues"] == ["mail", "thumbs"]
        assert seen["jobs_held"] == 2
        assert seen["connections"] >= 1
        (row,) = _rows(engine, "SELECT * FROM jobs_workers")
        assert seen["since"] == row["started_at"]
        handler.release.set()
        until(lambda: _workers(engine)[0]["jobs_held"] == 0, 20, "the jobs to finish")
    # A clean stop deletes the row; the worker's connections are gone with it.
    assert _rows(engine, "SELECT * FROM jobs_workers") == []
    until(lambda: _workers(engine) == [], 10, "the worker's sessions to end")
    # locked_by stays on a finished job: who ran it last.
    assert {r["locked_by"] for r in _rows(engine, "SELECT locked_by FROM jobs")} == {NAME}
    assert len(ids) == 2


def test_transaction_mode_records_the_worker_too(engine: Engine) -> None:
    seen: list[str] = []

    def handler(job: pgqueue.JobContext) -> None:
        assert job.connection is not None
        seen.append(
            job.connection.execute(
                text("SELECT locked_by FROM jobs WHERE id = :id"), {"id": job.id}
            ).scalar_one()
        )

    with engine.begin() as conn:
        pgqueue.enqueue(conn, {})
    worker = pgqueue.Worker(
        engine, {"default": handler}, mode="transaction", install_signal_handlers=False
    )
    assert worker.run(until_empty=True).done == 1
    assert seen == [NAME]


def test_the_row_is_written_once_at_start_and_deleted_once_at_stop(engine: Engine) -> None:
    """Scale-to-zero: an idle worker writes nothing to jobs_workers between the two."""
    worker = pgqueue.Worker(
        engine, {"q": lambda job: None}, poll_interval=0.1, install_signal_handlers=False
    )
    with statements_sent(engine, "jobs_workers") as seen, running(worker):
        until(lambda: len(seen) == 1, 10, "the row to be written")
        threading.Event().wait(1.0)  # ten polls
        assert len(seen) == 1
    kinds = [sql.split()[0] for sql, _ in seen]
    assert kinds == ["INSERT", "DELETE"]
    assert seen[0][1]["queues"] == ["q"]
    assert _rows(engine, "SELECT * FROM jobs_workers") == []


def test_a_row_left_by_a_killed_worker_of_the_same_name_is_replaced(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO jobs_workers (name, host, pid, queues, started_at) "
                "VALUES (:n, 'old', 1, '{old}', now() - interval '1 day')"
            ),
            {"n": NAME},
        )
    worker = pgqueue.Worker(engine, {"q": lambda job: None}, install_signal_handlers=False)
    with running(worker):
        until(
            lambda: _rows(engine, "SELECT queues FROM jobs_workers") == [{"queues": ["q"]}],
            10,
            "the row to be replaced",
        )
    assert _rows(engine, "SELECT * FROM jobs_workers") == []


@pytest.mark.parametrize("fault", ["missing table", "no privilege"])
def test_a_worker_that_cannot_write_its_row_warns_once_and_works(
    engine: Engine, db_url: URL, caplog: pytest.LogCaptureFixture, fault: str
) -> None:
    with engine.begin() as conn:
        pgqueue.enqueue_many(conn, [{}] * 3, queue="q")
    if fault == "missing table":
        with engine.begin() as conn:
            conn.execute(text("DROP TABLE jobs_workers"))
        target = engine
    else:
        role = f"pgq_nopriv_{os.getpid()}"
        with engine.begin() as conn:
            conn.execute(text(f"DROP ROLE IF EXISTS {role}"))
            conn.execute(text(f"CREATE ROLE {role} LOGIN"))
            conn.execute(text(f"GRANT SELECT, INSERT, UPDATE ON jobs TO {role}"))
            # What a worker reads since #23 (its queues' flow settings); jobs_workers stays denied.
            conn.execute(text(f"GRANT SELECT, UPDATE ON jobs_queues TO {role}"))
        target = create_engine(db_url.set(username=role, password=None))
    caplog.set_level(logging.WARNING, logger="pgqueue.worker")
    try:
        stats = pgqueue.Worker(target, {"q": lambda job: None}, install_signal_handlers=False).run(
            until_empty=True
        )
    finally:
        if target is not engine:
            target.dispose()
            with engine.begin() as conn:
                conn.execute(text(f"REVOKE ALL ON jobs FROM {role}"))
                conn.execute(text(f"REVOKE ALL ON jobs_queues FROM {role}"))
                conn.execute(text(f"DROP ROLE {role}"))
    assert stats.done == 3
    warnings = [r.getMessage() for r in caplog.records if "jobs_workers" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert "row was not written" in warnings[0]
    assert "the worker runs on" in warnings[0]


def test_a_claim_outside_a_worker_records_the_connection_name(engine: Engine, db_url: URL) -> None:
    with engine.begin() as conn:
        pgqueue.enqueue_many(conn, [{}] * 3)
    named = create_engine(db_url, connect_args={"application_name": "billing-cron"})
    try:
        with named.begin() as conn:
            (by_name,) = pgqueue.claim(conn, limit=1)
        with named.begin() as conn:
            (explicit,) = pgqueue.claim(conn, limit=1, locked_by="my-loop")
    finally:
        named.dispose()
    with engine.begin() as conn:
        conn.execute(text("SET application_name = ''"))
        (anonymous,) = pgqueue.claim(conn, limit=1)
    got = {
        r["id"]: r["locked_by"] for r in _rows(engine, "SELECT id, locked_by FROM jobs ORDER BY id")
    }
    assert got == {by_name.id: "billing-cron", explicit.id: "my-loop", anonymous.id: None}


@pytest.mark.parametrize(
    ("bad", "error"),
    [("", InvalidArgumentError), ("x" * 64, InvalidArgumentError), (5, InvalidArgumentTypeError)],
)
def test_a_bad_locked_by_claims_nothing(engine: Engine, bad: Any, error: type[Exception]) -> None:
    with engine.begin() as conn:
        pgqueue.enqueue(conn, {})
    with engine.begin() as conn, pytest.raises(error, match="locked_by"):
        pgqueue.claim(conn, locked_by=bad)
    assert scalar(engine, "SELECT status FROM jobs") == "queued"


def test_the_replayed_claim_records_the_name_and_stays_one_statement(engine: Engine) -> None:
    with engine.begin() as conn:
        pgqueue.enqueue_many(conn, [{}] * 4)
    replay = Replay(engine)
    lease = timedelta(seconds=30)
    for _ in range(4):
        claim_replayed(replay, queue="default", limit=1, lease=lease, locked_by="w:1")
    replay.release()
    assert replay.replayed == 3  # compiled once, replayed after: the name is one parameter
    assert _rows(engine, "SELECT DISTINCT locked_by FROM jobs") == [{"locked_by": "w:1"}]


def test_a_connected_worker_without_a_row_still_shows(engine: Engine, db_url: URL) -> None:
    """Started before the revision, or unable to write its row: queues unknown, host and pid from
    its name, since its oldest connection."""
    name = "pgqueue-worker:otherhost:4242"
    with psycopg.connect(to_libpq_url(db_url), application_name=name, autocommit=True) as other:
        with engine.begin() as conn:
            pgqueue.enqueue(conn, {})
            pgqueue.claim(conn, locked_by=name)
            pgqueue.enqueue(conn, {}, queue="other")
            pgqueue.claim(conn, queue="other", locked_by="pgqueue-worker:gone:1")
        (seen,) = _workers(engine)
        (backend_start,) = other.execute(
            "SELECT backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()"
        ).fetchone() or (None,)
    assert seen == {
        "name": name,
        "host": "otherhost",
        "pid": 4242,
        "queues": None,
        "since": backend_start,
        "connections": 1,
        "jobs_held": 1,
        "stuck": 0,  # no row: none known stuck
    }
    # The closed session leaves pg_stat_activity a moment after the client hangs up.
    until(lambda: _workers(engine) == [], 10, "the closed session to leave pg_stat_activity")
