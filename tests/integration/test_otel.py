"""OpenTelemetry: trace context from the producer's transaction to the handler, a span per job."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import Engine

import pgqueue

pytest.importorskip("opentelemetry.trace")
sdk_trace = pytest.importorskip("opentelemetry.sdk.trace")
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)
from opentelemetry.trace import SpanKind, StatusCode  # noqa: E402

from pgqueue.contrib.otel import OpenTelemetryHooks, inject_headers  # noqa: E402


@pytest.fixture
def traced() -> tuple[Any, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = sdk_trace.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def _handler_with(provider: Any) -> Any:
    def handler(job: pgqueue.JobContext) -> None:
        with provider.get_tracer("app").start_as_current_span("send email"):
            if job.payload == "boom":
                raise ValueError("smtp down")

    return handler


def test_trace_runs_from_the_request_to_the_handler(
    engine: Engine, traced: tuple[Any, InMemorySpanExporter]
) -> None:
    provider, exporter = traced
    with provider.get_tracer("app").start_as_current_span("POST /users") as request:
        headers = inject_headers({"tenant": "acme"})
        with engine.begin() as conn:
            ok = pgqueue.enqueue(conn, {"user": 1}, queue="emails", headers=headers)
            bad = pgqueue.enqueue(conn, "boom", queue="emails", headers=headers, max_attempts=1)
    assert headers["tenant"] == "acme"
    assert headers["traceparent"].split("-")[1] == format(
        request.get_span_context().trace_id, "032x"
    )
    with engine.begin() as conn:
        untraced = pgqueue.enqueue(conn, "plain", queue="emails")
    hooks = OpenTelemetryHooks(tracer_provider=provider)
    worker = pgqueue.Worker(engine, {"emails": _handler_with(provider)}, hooks=[hooks])
    stats = worker.run(until_empty=True)
    assert (stats.done, stats.failed) == (2, 1)

    spans = exporter.get_finished_spans()
    jobs = {
        int(s.attributes["messaging.message.id"]): s for s in spans if s.name == "process emails"
    }
    assert set(jobs) == {ok, bad, untraced}
    request_ctx = request.get_span_context()
    for job_id in (ok, bad):
        span = jobs[job_id]
        assert span.kind == SpanKind.CONSUMER
        assert span.parent is not None
        assert span.parent.span_id == request_ctx.span_id
        assert span.context.trace_id == request_ctx.trace_id
        assert dict(span.attributes) == {
            "messaging.system": "pgqueue",
            "messaging.destination.name": "emails",
            "messaging.message.id": str(job_id),
            "messaging.operation.type": "process",
            "messaging.operation.name": "process",
            "pgqueue.job.attempt": 1,
        } | ({"error.type": "ValueError"} if job_id == bad else {})
    assert jobs[untraced].parent is None
    assert jobs[untraced].context.trace_id != request_ctx.trace_id
    failed = jobs[bad]
    assert failed.status.status_code == StatusCode.ERROR
    assert "smtp down" in (failed.status.description or "")
    assert [e.name for e in failed.events] == ["exception"]
    assert jobs[ok].status.status_code == StatusCode.UNSET
    # The handler's own spans nest under the job's span.
    children = [s for s in spans if s.name == "send email"]
    assert len(children) == 3
    assert {c.parent.span_id for c in children if c.parent} == {
        s.context.span_id for s in jobs.values()
    }


def test_a_snooze_is_no_error_on_the_span(
    engine: Engine, traced: tuple[Any, InMemorySpanExporter]
) -> None:
    provider, exporter = traced

    def handler(job: pgqueue.JobContext) -> None:
        raise pgqueue.Snooze(90)

    with engine.begin() as conn:
        pgqueue.enqueue(conn, {}, queue="emails")
    hooks = OpenTelemetryHooks(tracer_provider=provider)
    stats = pgqueue.Worker(engine, {"emails": handler}, hooks=[hooks], listen=False).run(
        until_empty=True
    )
    assert stats.snoozed == 1
    (span,) = exporter.get_finished_spans()
    assert span.status.status_code == StatusCode.UNSET
    assert span.events == ()
    assert span.attributes["pgqueue.job.snoozed_seconds"] == 90.0
    assert "error.type" not in span.attributes


def test_link_instead_of_parent(engine: Engine, traced: tuple[Any, InMemorySpanExporter]) -> None:
    provider, exporter = traced
    tracer = provider.get_tracer("app")
    with tracer.start_as_current_span("cron") as producer, engine.begin() as conn:
        pgqueue.enqueue(conn, 1, queue="q", headers=inject_headers())
    hooks = OpenTelemetryHooks(tracer_provider=provider, propagation="link")
    pgqueue.Worker(engine, {"q": lambda job: None}, hooks=[hooks], mode="transaction").run(
        until_empty=True
    )
    (span,) = [s for s in exporter.get_finished_spans() if s.name == "process q"]
    assert span.parent is None
    assert [link.context.span_id for link in span.links] == [producer.get_span_context().span_id]


def test_inject_headers_without_a_span_adds_nothing() -> None:
    assert inject_headers() == {}
    assert inject_headers({"a": "b"}) == {"a": "b"}
    with pytest.raises(pgqueue.InvalidArgumentError):
        OpenTelemetryHooks(propagation="child")  # type: ignore[arg-type]


def test_a_span_covers_each_coroutine_while_many_interleave(
    engine: Engine, traced: tuple[Any, InMemorySpanExporter]
) -> None:
    import asyncio

    provider, exporter = traced
    with engine.begin() as conn:
        ids = pgqueue.enqueue_many(conn, [{"n": n} for n in range(20)], queue="hooks")

    async def handler(job: pgqueue.JobContext) -> None:
        await asyncio.sleep(0.05)  # every coroutine is suspended here at once
        with provider.get_tracer("app").start_as_current_span("call api"):
            await asyncio.sleep(0)

    hooks = OpenTelemetryHooks(tracer_provider=provider)
    worker = pgqueue.Worker(engine, {"hooks": handler}, hooks=[hooks], listen=False)
    assert worker.run(until_empty=True).done == 20

    spans = exporter.get_finished_spans()
    jobs = {s.attributes["messaging.message.id"]: s for s in spans if s.kind == SpanKind.CONSUMER}
    assert set(jobs) == {str(i) for i in ids}
    inner = [s for s in spans if s.name == "call api"]
    assert len(inner) == 20
    # Each inner span is the child of its own job's span, not of another coroutine's.
    parents = {s.parent.span_id for s in inner if s.parent is not None}
    assert parents == {s.context.span_id for s in jobs.values()}
