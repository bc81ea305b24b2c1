"""The Prometheus hooks: a worker's counters, histograms and queue gauges, read back by scraping."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from sqlalchemy import Engine, event, text

import pgqueue
import pgqueue.testing
from pgqueue import statements
from pgqueue._sql import durable_statements

prometheus_client = pytest.importorskip("prometheus_client")
from pgqueue.contrib.prometheus import PrometheusHooks  # noqa: E402


def _scrape(registry: Any) -> dict[str, float]:
    """``generate_latest()`` parsed back: ``{'name{labels}': value}``."""
    values: dict[str, float] = {}
    for line in prometheus_client.generate_latest(registry).decode().splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            values[key] = float(value)
    return values


def _handler(job: pgqueue.JobContext) -> None:
    if job.payload == "boom":
        raise ValueError("boom")
    time.sleep(0.05)


def test_worker_metrics_are_scraped(engine: Engine) -> None:
    with engine.begin() as conn:
        pgqueue.enqueue_many(conn, ["ok"] * 5, queue="mail")
        pgqueue.enqueue(conn, "boom", queue="mail", max_attempts=1)
        pgqueue.enqueue(conn, "boom", queue="mail", max_attempts=3)
        pgqueue.enqueue_many(conn, ["ok"] * 2, queue="sms")
    registry = prometheus_client.CollectorRegistry()
    hooks = PrometheusHooks(registry=registry, depth_interval=None)
    pgqueue.Worker(engine, {"mail": _handler, "sms": _handler}, hooks=[hooks], listen=False).run(
        until_empty=True
    )
    m = _scrape(registry)
    assert m['pgqueue_jobs_claimed_total{queue="mail"}'] == 7
    assert m['pgqueue_jobs_claimed_total{queue="sms"}'] == 2
    assert m['pgqueue_jobs_finished_total{outcome="succeeded",queue="mail"}'] == 5
    assert m['pgqueue_jobs_finished_total{outcome="failed",queue="mail"}'] == 1
    assert m['pgqueue_jobs_finished_total{outcome="retry",queue="mail"}'] == 1
    assert m['pgqueue_jobs_finished_total{outcome="succeeded",queue="sms"}'] == 2
    assert m['pgqueue_job_duration_seconds_count{queue="mail"}'] == 7
    assert m['pgqueue_job_duration_seconds_sum{queue="mail"}'] >= 5 * 0.05
    assert m['pgqueue_job_duration_seconds_bucket{le="0.01",queue="sms"}'] == 0
    assert m['pgqueue_job_start_latency_seconds_count{queue="sms"}'] == 2
    assert not any(k.startswith("pgqueue_queue_ready_jobs") for k in m)


def test_a_snoozed_job_is_counted_as_snoozed(engine: Engine) -> None:
    def handler(job: pgqueue.JobContext) -> None:
        raise pgqueue.Snooze(timedelta(hours=1))

    with engine.begin() as conn:
        pgqueue.enqueue(conn, {}, queue="mail")
    registry = prometheus_client.CollectorRegistry()
    hooks = PrometheusHooks(registry=registry, depth_interval=None)
    pgqueue.Worker(engine, {"mail": handler}, hooks=[hooks], listen=False).run(until_empty=True)
    m = _scrape(registry)
    assert m['pgqueue_jobs_finished_total{outcome="snoozed",queue="mail"}'] == 1
    assert not any('outcome="failed"' in k or 'outcome="retry"' in k for k in m)


def test_expired_and_cancelled_jobs_are_counted_apart(engine: Engine) -> None:
    """A job a claim fails as past its deadline (never run) and one cancelled while held."""
    started = threading.Event()

    def handler(job: pgqueue.JobContext) -> None:
        started.set()
        while not job.stopping.is_set():
            time.sleep(0.01)

    late = datetime.now(timezone.utc) - timedelta(seconds=5)
    with engine.begin() as conn:
        pgqueue.enqueue_many(conn, [{}] * 3, queue="mail", run_at=late, expires_in=1)
    registry = prometheus_client.CollectorRegistry()
    hooks = PrometheusHooks(registry=registry, depth_interval=None)
    worker = pgqueue.Worker(engine, {"mail": handler}, hooks=[hooks], listen=False)
    assert worker.run(until_empty=True).expired == 3
    with engine.begin() as conn:
        job_id = pgqueue.enqueue(conn, {}, queue="mail")
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        assert started.wait(20)
        with engine.begin() as conn:
            assert pgqueue.cancel(conn, [job_id]) == [job_id]
        deadline = time.monotonic() + 20
        while worker.stats.cancelled < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        worker.stop()
        thread.join(20)
    m = _scrape(registry)
    assert m['pgqueue_jobs_finished_total{outcome="expired",queue="mail"}'] == 3
    assert m['pgqueue_jobs_finished_total{outcome="cancelled",queue="mail"}'] == 1
    assert m['pgqueue_jobs_claimed_total{queue="mail"}'] == 1  # the expired ones were never held


def test_queue_gauges_from_the_depth_query(engine: Engine) -> None:
    with engine.begin() as conn:
        pgqueue.enqueue_many(conn, list(range(7)), queue="mail")
        conn.execute(text("UPDATE jobs SET run_at = now() - interval '90 seconds'"))
        pgqueue.enqueue_many(conn, list(range(3)), queue="mail", delay=timedelta(hours=1))
    registry = prometheus_client.CollectorRegistry()
    hooks = PrometheusHooks(registry=registry, depth_limit=5)
    worker = pgqueue.Worker(engine, {"mail": _handler, "sms": _handler}, hooks=[hooks])
    hooks.refresh_depth(worker)
    m = _scrape(registry)
    assert m['pgqueue_queue_ready_jobs{queue="mail"}'] == 5  # capped at depth_limit
    assert m['pgqueue_queue_ready_jobs{queue="sms"}'] == 0
    assert 89 < m['pgqueue_queue_oldest_ready_age_seconds{queue="mail"}'] < 600
    assert m['pgqueue_queue_oldest_ready_age_seconds{queue="sms"}'] == 0


def test_sleeping_and_awaiting_jobs_have_gauges_of_their_own(engine: Engine) -> None:
    def durable(job: pgqueue.JobContext) -> None:
        if job.payload == "sleep":
            job.sleep("nap", 3600)
        job.wait_for_signal("go", timeout=None if job.payload == "forever" else 3600)

    with engine.begin() as conn:
        pgqueue.enqueue_many(conn, ["sleep", "sleep", "wait", "forever"], queue="mail")
        pgqueue.enqueue(conn, "later", queue="mail", delay=timedelta(hours=2))
    pgqueue.testing.drain(engine, {"mail": durable}, queues=["mail"])
    registry = prometheus_client.CollectorRegistry()
    hooks = PrometheusHooks(registry=registry)
    worker = pgqueue.Worker(engine, {"mail": _handler, "sms": _handler}, hooks=[hooks])
    hooks.refresh_depth(worker)
    m = _scrape(registry)
    assert m['pgqueue_queue_suspended_jobs{queue="mail",state="sleeping"}'] == 2
    assert m['pgqueue_queue_suspended_jobs{queue="mail",state="awaiting signal"}'] == 2
    assert m['pgqueue_queue_suspended_jobs{queue="sms",state="sleeping"}'] == 0
    assert m['pgqueue_queue_ready_jobs{queue="mail"}'] == 0


def test_gauges_refresh_while_the_worker_runs(engine: Engine) -> None:
    with engine.begin() as conn:
        pgqueue.enqueue_many(conn, ["ok"] * 3, queue="mail")
    registry = prometheus_client.CollectorRegistry()
    hooks = PrometheusHooks(registry=registry, depth_interval=0.05)
    seen: list[float | None] = []

    def handler(job: pgqueue.JobContext) -> None:
        time.sleep(0.3)
        seen.append(registry.get_sample_value("pgqueue_queue_ready_jobs", {"queue": "mail"}))

    worker = pgqueue.Worker(engine, {"mail": handler}, hooks=[hooks], concurrency=1, prefetch=0)
    worker.run(until_empty=True)
    assert seen[0] is not None
    assert 0 <= seen[0] <= 2
    assert hooks._pollers == {}  # the thread stopped with the worker


def test_depth_query_walks_the_ready_index(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO jobs (queue, payload, status) "
                "SELECT 'q' || (i % 20), '{}', CASE WHEN i % 10 = 0 THEN 'queued' ELSE 'done' END "
                "FROM generate_series(1, 20000) i"
            )
        )
        conn.execute(text("ANALYZE jobs"))

    def explain(conn: Any, cursor: Any, sql: str, params: Any, context: Any, many: bool) -> Any:
        return "EXPLAIN " + sql, params

    event.listen(engine, "before_cursor_execute", explain, retval=True)
    try:
        with engine.connect() as conn:
            stmt = statements.queue_depth_statement(1000)
            plan = "\n".join(conn.execute(stmt, {"queue_names": ["q1", "q2"]}).scalars())
            waits = durable_statements.suspended_depth_statement(1000)
            waits_plan = "\n".join(conn.execute(waits, {"queue_names": ["q1"]}).scalars())
    finally:
        event.remove(engine, "before_cursor_execute", explain)
    assert "jobs_ready_idx" in plan, plan
    assert "Seq Scan on jobs" not in plan, plan
    assert "jobs_ready_idx" in waits_plan, waits_plan
    assert "Seq Scan on jobs" not in waits_plan, waits_plan
