"""Payloads the worker's replayed claims fetch as their JSON text, decoded when handlers read them
(pgqueue._sql.deferred_json): the same values as before, the same ``loads`` as the connection's,
and the text kept until then."""

from __future__ import annotations

import json
import logging
import threading
from datetime import timedelta
from decimal import Decimal
from functools import partial
from typing import Any

import psycopg
import pytest
from psycopg.types.json import set_json_loads
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL
from test_replay import PAYLOADS
from worker_helpers import replayed_claims, running, until

import pgqueue
from pgqueue._base.urls import to_libpq_url
from pgqueue._sql.deferred_json import defer_jsonb
from pgqueue._worker.replay import Replay, claim_replayed
from pgqueue.jobs import _TEXT, JobContext
from pgqueue.results import ClaimedJob

LEASE = timedelta(seconds=30)


def _fill(engine: Engine, queue: str, payloads: list[Any]) -> None:
    with engine.begin() as conn:
        for i, payload in enumerate(payloads):
            headers = {"trace": f"t{i}"} if i % 2 else None
            pgqueue.enqueue(conn, payload, queue=queue, headers=headers)


def _claim_all(replay: Replay, queue: str) -> list[ClaimedJob]:
    claimed: list[ClaimedJob] = []
    while batch := claim_replayed(replay, queue=queue, limit=3, lease=LEASE):
        claimed += batch
    return claimed


def test_replayed_claims_keep_the_text_and_the_jobs_read_the_values_enqueued(
    engine: Engine,
) -> None:
    _fill(engine, "deferred", PAYLOADS)
    replay = Replay(engine, defer_json=True)
    try:
        claimed = _claim_all(replay, "deferred")
    finally:
        replay.release()
    assert replay.replayed >= 2  # the first claim ran through SQLAlchemy, the others replayed
    # The first claim decoded (SQLAlchemy's run); every replayed one kept the text.
    texts = [c for c in claimed if type(c.payload) is bytes]
    assert len(texts) == len(PAYLOADS) - 3
    jobs = [JobContext.of(c) for c in claimed]
    by_id = {job.id: job for job in jobs}
    with engine.connect() as conn:
        rows = conn.exec_driver_sql("SELECT id, payload, headers FROM jobs").all()
    assert len(rows) == len(PAYLOADS)
    for row in rows:
        job = by_id[row.id]
        assert job.payload == row.payload
        assert job.headers == row.headers


def test_a_cursor_given_another_loads_decodes_as_it_did(
    db_url: URL, caplog: pytest.LogCaptureFixture
) -> None:
    """``set_json_loads`` on the connection (here: floats as ``Decimal``): no deferral, and the
    worker's jobs see the values that ``loads`` makes, on the replayed claims as on the first."""
    decimal_loads = partial(json.loads, parse_float=Decimal)
    with psycopg.connect(to_libpq_url(db_url)) as conn:
        plain = conn.cursor()
        assert defer_jsonb(plain)
        assert plain.execute("SELECT '{\"a\": 1.5}'::jsonb").fetchone() == (b'{"a": 1.5}',)
        set_json_loads(decimal_loads, conn)
        custom = conn.cursor()
        assert not defer_jsonb(custom)
        assert custom.execute("SELECT '{\"a\": 1.5}'::jsonb").fetchone() == ({"a": Decimal("1.5")},)

    engine = create_engine(db_url, pool_size=8)

    @event.listens_for(engine, "connect")
    def _decimal_json(dbapi_connection: Any, _record: Any) -> None:
        set_json_loads(decimal_loads, dbapi_connection)

    try:
        _fill(engine, "decimals", [{"n": i, "x": 0.5} for i in range(40)])
        seen: list[Any] = []
        lock = threading.Lock()

        def handler(job: pgqueue.JobContext) -> None:
            with lock:
                seen.append(job.payload["x"])

        quiet: dict[str, Any] = {"listen": False, "install_signal_handlers": False}
        # Claims of 3: the first runs through SQLAlchemy, the next ones are replayed.
        with caplog.at_level(logging.DEBUG, logger="pgqueue.worker"):
            pgqueue.Worker(engine, {"decimals": handler}, concurrency=2, batch_size=3, **quiet).run(
                until_empty=True
            )
        assert replayed_claims(caplog.records) > 0, "no claim was replayed"
        assert len(seen) == 40
        assert all(type(x) is Decimal and x == Decimal("0.5") for x in seen)
    finally:
        engine.dispose()


def test_a_worker_holds_claimed_payloads_as_text_until_its_handlers_and_tasks_read_them(
    engine: Engine,
) -> None:
    registry = pgqueue.Registry()
    results: dict[int, Any] = {}
    lock = threading.Lock()

    @registry.task(queue="deferred-tasks")
    def echo(value: Any, *, tag: str) -> None:
        with lock:
            results[len(results)] = (value, tag)

    handled: list[Any] = []
    held_as_text: list[bool] = []

    class Spy(pgqueue.WorkerHooks):
        def claimed(self, job: pgqueue.JobContext) -> None:
            held_as_text.append(getattr(job, _TEXT, None) is not None)

    @registry.handler("deferred-handlers")
    def handler(job: pgqueue.JobContext) -> None:
        payload = job.payload
        assert job.payload is payload  # kept for the handler's later reads
        with lock:
            handled.append(payload)

    many = [{"i": i, "nested": {"list": [i, str(i)]}} for i in range(60)]
    _fill(engine, "deferred-handlers", many)
    with engine.begin() as conn:
        echo.enqueue_many(conn, [echo.s(p, tag=f"t{n}") for n, p in enumerate(PAYLOADS * 5)])
    worker = pgqueue.Worker(
        engine,
        registry,
        concurrency=2,
        batch_size=4,
        hooks=[Spy()],
        listen=False,
        install_signal_handlers=False,
    )
    with running(worker):
        until(
            lambda: len(handled) == len(many) and len(results) == len(PAYLOADS) * 5, 30, "all run"
        )
    assert sorted(handled, key=lambda p: p["i"]) == many
    canonical = partial(json.dumps, sort_keys=True)  # jsonb keeps its own key order
    assert sorted(map(canonical, (v for v, _ in results.values()))) == sorted(
        map(canonical, PAYLOADS * 5)
    )
    # Every claim after each queue's first was replayed, and its jobs held their text.
    assert held_as_text.count(True) >= len(held_as_text) - 2 * 4


def test_async_handlers_and_tasks_read_the_values_enqueued(engine: Engine) -> None:
    """The event loop's lane reads the same deferred payloads: an ``async def`` handler through
    ``job.payload``, an ``async def`` task through its arguments."""
    registry = pgqueue.Registry()
    got: list[Any] = []

    @registry.task(queue="deferred-async-tasks")
    async def echo(value: Any) -> None:
        got.append(("task", value))

    @registry.handler("deferred-async")
    async def handler(job: pgqueue.JobContext) -> None:
        got.append(("handler", job.payload))

    _fill(engine, "deferred-async", PAYLOADS * 3)
    with engine.begin() as conn:
        echo.enqueue_many(conn, [echo.s(p) for p in PAYLOADS * 3])
    quiet: dict[str, Any] = {"listen": False, "install_signal_handlers": False}
    pgqueue.Worker(engine, registry, async_concurrency=4, batch_size=4, **quiet).run(
        until_empty=True
    )
    canonical = partial(json.dumps, sort_keys=True)
    for kind in ("handler", "task"):
        values = sorted(canonical(v) for k, v in got if k == kind)
        assert values == sorted(map(canonical, PAYLOADS * 3)), kind
