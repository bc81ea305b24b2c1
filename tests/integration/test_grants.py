"""Least privilege for real: ``pgqueue grants`` output applied, then each role does its job."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from datetime import timedelta

import psycopg
import pytest
from sqlalchemy import Engine, create_engine, exc, text
from sqlalchemy.engine import URL

import pgqueue
from pgqueue._urls import to_libpq_url
from pgqueue.grants import grants_sql
from tests.cli.conftest import plain, run_pgqueue
from tests.integration.worker_helpers import until

JOBS = 200


@pytest.fixture
def roles(db_url: URL, engine: Engine) -> Iterator[dict[str, URL]]:
    """Three fresh LOGIN roles (unique names), granted by the owner; dropped at the end."""
    suffix = uuid.uuid4().hex[:8]
    names = {kind: f"pgq_{kind}_{suffix}" for kind in ("producer", "worker", "monitor")}
    with engine.begin() as conn:
        for name in names.values():
            conn.exec_driver_sql(f'CREATE ROLE "{name}" LOGIN')
        conn.exec_driver_sql(
            grants_sql(producer=names["producer"], worker=names["worker"], monitor=names["monitor"])
        )
    try:
        urls = {kind: db_url.set(username=name, password=None) for kind, name in names.items()}
        try:
            psycopg.connect(to_libpq_url(urls["producer"])).close()
        except psycopg.OperationalError:
            pytest.skip("this server does not let a new role log in without a password")
        yield urls
    finally:
        with engine.begin() as conn:
            for name in names.values():
                conn.exec_driver_sql(f'DROP OWNED BY "{name}"')
                conn.exec_driver_sql(f'DROP ROLE "{name}"')


def test_producer_worker_and_monitor_with_least_privilege(roles: dict[str, URL]) -> None:
    producer = create_engine(roles["producer"])
    worker_engine = create_engine(roles["worker"], pool_size=8)
    handled: list[int] = []
    lock = threading.Lock()

    def handler(job: pgqueue.JobContext) -> None:
        with lock:
            handled.append(job.id)

    worker = pgqueue.Worker(
        worker_engine,
        {"default": handler},
        concurrency=4,
        poll_interval=30.0,
        install_signal_handlers=False,
    )
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        with producer.begin() as conn:
            ids = pgqueue.enqueue_many(conn, [{"n": n} for n in range(JOBS)])
            pgqueue.enqueue(conn, {"one": 1}, queue="manual")
        until(lambda: len(handled) >= JOBS, 60, "the worker role drains the producer's jobs")
    finally:
        worker.stop()
        thread.join(30)
    assert sorted(handled) == sorted(ids)

    # Heartbeat and reaper as the worker role (queue "manual" has no running worker).
    with worker_engine.begin() as conn:
        (job,) = pgqueue.claim(conn, queue="manual", lease=timedelta(seconds=30))
    with worker_engine.begin() as conn:
        assert pgqueue.extend_lease(conn, job.id, job.attempts, timedelta(milliseconds=1))
    until(lambda: _reap(worker_engine) == [job.id], 10, "the worker role reaps the expired lease")

    # The producer can insert, and nothing else.
    for statement in (
        "UPDATE jobs SET status = 'done'",
        "DELETE FROM jobs",
        "SELECT payload FROM jobs",
    ):
        with producer.connect() as conn, pytest.raises(exc.ProgrammingError) as raised:
            conn.execute(text(statement))
        assert isinstance(raised.value.orig, psycopg.errors.InsufficientPrivilege), statement
    # Nor can the worker delete (purge is the owner's maintenance).
    with worker_engine.connect() as conn, pytest.raises(exc.ProgrammingError):
        conn.execute(text("DELETE FROM jobs"))
    producer.dispose()
    worker_engine.dispose()

    # doctor as the pg_monitor role: sees every session, healthy.
    result = run_pgqueue("doctor", "--json", "--url", plain(roles["monitor"]))
    assert result.code == 0, result.out + result.err
    checks = {f["check"] for f in result.json()["findings"]}
    assert "visibility" not in checks
    assert {"revision", "indexes", "trigger", "sessions", "vacuum"} <= checks


def _reap(engine: Engine) -> list[int]:
    with engine.begin() as conn:
        return [r.id for r in pgqueue.reap_expired(conn)]
