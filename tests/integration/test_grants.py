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
from pgqueue._base.urls import to_libpq_url
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

    # The worker role also declares a periodic definition and fires its ticks.
    every = pgqueue.Periodic("grants-tick", timedelta(seconds=1), "ticks")
    worker = pgqueue.Worker(
        worker_engine,
        {"default": handler, "ticks": handler},
        concurrency=4,
        poll_interval=30.0,
        install_signal_handlers=False,
        periodic=[every],
    )
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        with producer.begin() as conn:
            ids = pgqueue.enqueue_many(conn, [{"n": n} for n in range(JOBS)])
            pgqueue.enqueue(conn, {"one": 1}, queue="manual")
        until(lambda: len(handled) >= JOBS + 2, 60, "the worker role drains jobs and ticks")
    finally:
        worker.stop()
        thread.join(30)
    assert set(ids) <= set(handled)
    with worker_engine.connect() as conn:
        ticks = conn.execute(text("SELECT count(*) FROM jobs WHERE queue = 'ticks'")).scalar_one()
    assert ticks == len(handled) - JOBS >= 2

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
    # The worker deletes what is past its retention (pgqueue_0016), as its pruner just did.
    with worker_engine.connect() as conn:
        pruned = conn.execute(
            text("SELECT pruned_by FROM jobs_retention WHERE queue = 'default'")
        ).scalar_one()
    assert pruned is not None
    producer.dispose()
    worker_engine.dispose()

    # doctor as the pg_monitor role: sees every session; healthy but for the reaped job of
    # queue "manual", ready again with no worker left to take it (the backlog check sees it).
    result = run_pgqueue("doctor", "--json", "--url", plain(roles["monitor"]))
    assert result.code == 1, result.out + result.err
    findings = result.json()["findings"]
    checks = {f["check"] for f in findings}
    assert "visibility" not in checks
    assert {"revision", "indexes", "trigger", "sessions", "vacuum", "backlog"} <= checks
    (warning,) = [f for f in findings if f["severity"] not in ("ok", "info")]
    assert warning["check"] == "backlog"
    assert "manual" in [d["queue"] for d in warning["details"]]


def _denied(engine: Engine, statement: str, params: dict[str, object] | None = None) -> bool:
    with engine.connect() as conn:
        try:
            conn.execute(text(statement), params or {})
        except exc.ProgrammingError as raised:
            return isinstance(raised.orig, psycopg.errors.InsufficientPrivilege)
        finally:
            conn.rollback()
    return False


def test_producer_enqueues_with_a_unique_key_and_still_cannot_read_payloads(
    roles: dict[str, URL], engine: Engine
) -> None:
    producer = create_engine(roles["producer"])
    try:
        with producer.begin() as conn:
            keyless = pgqueue.enqueue(conn, {"secret": "s3cr3t"}, queue="u", priority=3)
            first = pgqueue.enqueue(conn, {"n": 1}, queue="u", unique_key="k", priority=5)
            # Held by this transaction's own job: ON CONFLICT, then the holder lookup.
            assert pgqueue.enqueue(conn, {"n": 2}, queue="u", unique_key="k") == first
        with producer.begin() as conn:
            # Held by a committed job.
            assert pgqueue.enqueue(conn, {"n": 3}, queue="u", unique_key="k") == first
            batch = pgqueue.enqueue_many(
                conn, [{"a": 1}, {"b": 2}, {"c": 3}], queue="u", unique_keys=["k", None, "new"]
            )
        assert batch[0] == first
        assert len({keyless, first, batch[1], batch[2]}) == 4

        # The key frees when its job finishes; the producer's next enqueue inserts.
        with engine.begin() as conn:
            (job,) = pgqueue.claim(conn, queue="u", limit=1)
            assert job.id == first  # priority 5 first
            assert pgqueue.complete(conn, job.id, job.attempts)
        with producer.begin() as conn:
            second = pgqueue.enqueue(conn, {"n": 4}, queue="u", unique_key="k")
        assert second not in (first, keyless, *batch)

        # `pgqueue enqueue --unique-key` as the producer tells a held key from an insert.
        held = run_pgqueue(
            "enqueue", "u", "{}", "--unique-key", "k", "--json", "--url", plain(roles["producer"])
        )
        assert (held.code, held.json()) == (0, {"id": second, "inserted": False}), held.err
        fresh = run_pgqueue(
            "enqueue", "u", "{}", "--unique-key", "k2", "--json", "--url", plain(roles["producer"])
        )
        assert fresh.code == 0, fresh.err
        assert fresh.json()["inserted"] is True

        # It reads ids, queues, keys and statuses, and what a wait reads; nothing else.
        with producer.connect() as conn:
            rows = conn.execute(
                text("SELECT id, queue, unique_key, status FROM jobs WHERE id = :id"), {"id": first}
            ).all()
        assert [tuple(r) for r in rows] == [(first, "u", "k", "done")]
        for statement in (
            "SELECT payload FROM jobs",
            "SELECT * FROM jobs",
            "SELECT headers FROM jobs",
            "SELECT errors FROM jobs",
            'SELECT count(*) FROM jobs WHERE payload @> \'{"secret": "s3cr3t"}\'',
            "SELECT id FROM jobs ORDER BY priority",
            "UPDATE jobs SET priority = 9",
            "UPDATE jobs SET status = 'queued' WHERE unique_key = 'k'",
            "DELETE FROM jobs",
        ):
            assert _denied(producer, statement), statement
    finally:
        producer.dispose()


@pytest.mark.parametrize("column", ["queue", "unique_key", "status"])
def test_each_column_of_the_producers_select_is_needed(
    roles: dict[str, URL], engine: Engine, column: str
) -> None:
    """Without SELECT on any one of them a unique enqueue is refused; a keyless one still works."""
    producer_role = roles["producer"].username
    with engine.begin() as conn:
        conn.exec_driver_sql(f'REVOKE SELECT ({column}) ON jobs FROM "{producer_role}"')
    producer = create_engine(roles["producer"])
    try:
        with producer.begin() as conn:
            assert pgqueue.enqueue(conn, {}, queue="u") > 0
        with producer.connect() as conn, pytest.raises(exc.ProgrammingError) as raised:
            pgqueue.enqueue(conn, {}, queue="u", unique_key="k")
        assert isinstance(raised.value.orig, psycopg.errors.InsufficientPrivilege)
    finally:
        producer.dispose()


def _reap(engine: Engine) -> list[int]:
    with engine.begin() as conn:
        return [r.id for r in pgqueue.reap_expired(conn)]


def test_flow_control_privileges_of_each_role(roles: dict[str, URL], engine: Engine) -> None:
    """The worker reads a queue's settings and can update its row (the claim moves the rate
    window); the monitor reads them; the producer enqueues with a concurrency key and reads no
    settings; changing settings of a queue without a row is the owner's (or an operator's)."""
    with engine.begin() as conn:
        pgqueue.set_queue_limits(conn, "api", concurrency=2, rate=pgqueue.Rate(5, timedelta(1)))
    producer = create_engine(roles["producer"])
    worker = create_engine(roles["worker"])
    monitor = create_engine(roles["monitor"])
    try:
        with producer.begin() as conn:
            pgqueue.enqueue(conn, {}, queue="api", concurrency_key="tenant-1")
            pgqueue.enqueue_many(conn, [1, 2], queue="api", concurrency_keys=["t1", None])
        assert _denied(producer, "SELECT * FROM jobs_queues")
        assert _denied(producer, "SELECT concurrency_key FROM jobs")
        for reader in (worker, monitor):
            with reader.connect() as conn:
                (settings,) = pgqueue.queue_settings(conn)
            assert (settings.queue, settings.concurrency) == ("api", 2)
        with worker.begin() as conn:
            conn.execute(
                text(
                    "UPDATE jobs_queues SET window_start = now(), window_count = window_count + 1 "
                    "WHERE queue = 'api'"
                )
            )
            assert pgqueue.resume(conn, "api") is False  # an UPDATE of the existing row
        assert _denied(monitor, "UPDATE jobs_queues SET window_count = 0")
        assert _denied(worker, "INSERT INTO jobs_queues (queue) VALUES ('new')")
        with worker.connect() as conn, pytest.raises(exc.ProgrammingError):
            pgqueue.pause(conn, "new")
        with engine.begin() as conn:  # the owner
            assert pgqueue.pause(conn, "new") is True
        with engine.connect() as conn:
            keys = conn.execute(text("SELECT concurrency_key FROM jobs ORDER BY id")).scalars()
            assert list(keys) == ["tenant-1", "t1", None]
    finally:
        for each in (producer, worker, monitor):
            each.dispose()


def test_a_producer_role_waits_for_the_result_a_worker_role_wrote(
    roles: dict[str, URL], engine: Engine
) -> None:
    """``fetch_result`` and ``wait_for`` (its LISTEN too) need nothing beyond the producer's
    grants; the worker role completes the job with its own."""
    producer = create_engine(roles["producer"])
    worker = create_engine(roles["worker"])
    try:
        with producer.begin() as conn:
            job_id = pgqueue.enqueue(conn, {"n": 1}, queue="w")
        with worker.begin() as conn:
            (job,) = pgqueue.claim(conn, queue="w")

        def complete() -> None:
            with worker.begin() as conn:
                conn.execute(text("UPDATE jobs SET result = '[2]' WHERE id = :id"), {"id": job_id})
                assert pgqueue.complete(conn, job.id, job.attempts)

        with producer.connect() as conn:
            waiting = pgqueue.fetch_result(conn, job_id)
        assert waiting is not None
        assert waiting.status == "running"
        thread = threading.Thread(target=complete)
        thread.start()
        got = pgqueue.wait_for(producer, job_id, timeout=60, poll_interval=0.2)
        thread.join()
        assert (got.status, got.value, got.error) == ("done", [2], None)
    finally:
        producer.dispose()
        worker.dispose()
