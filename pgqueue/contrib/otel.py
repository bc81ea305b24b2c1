"""OpenTelemetry tracing: a span per job execution, trace context from the producer to the handler.

Needs the ``otel`` extra (``pip install "pgqueue-sa[otel]"``, which installs ``opentelemetry-api``;
the application configures the SDK and exporter as usual).

Producer: carry the current trace context in the job's headers (never in its payload)::

    from pgqueue.contrib.otel import inject_headers

    with engine.begin() as conn:
        pgqueue.enqueue(conn, {"user_id": 42}, queue="emails", headers=inject_headers())

Worker: one ``process <queue>`` span (kind ``CONSUMER``) around each handler run, child of the
producer's span when the headers carry one, and current while the handler runs, so the handler's
own spans (HTTP calls, queries) nest under it::

    from pgqueue.contrib.otel import OpenTelemetryHooks

    pgqueue.Worker(engine, handlers, hooks=[OpenTelemetryHooks()]).run()

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from contextvars import Token
from typing import TYPE_CHECKING, Literal

from pgqueue.contrib import missing_extra

try:
    from opentelemetry import context as otel_context
    from opentelemetry import propagate, trace
    from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode
except ImportError as exc:  # pragma: no cover - exercised by a subprocess test
    raise missing_extra("pgqueue.contrib.otel", "otel") from exc

from pgqueue import __version__
from pgqueue.errors import InvalidArgumentError
from pgqueue.hooks import WorkerHooks
from pgqueue.jobs import Snooze

if TYPE_CHECKING:
    from pgqueue.jobs import JobContext

#: ``messaging.system`` of every span.
MESSAGING_SYSTEM = "pgqueue"


def inject_headers(
    headers: Mapping[str, str] | None = None, *, context: otel_context.Context | None = None
) -> dict[str, str]:
    """``headers`` plus the trace context (``traceparent``, ``tracestate``, baggage) to enqueue.

    Args:
        headers: Headers of your own to send along. Default none.
        context: The context to inject. Default: the current one. With no active span the
            propagators add nothing and ``headers`` come back unchanged (as a new dict).

    Returns:
        A new dict for ``enqueue(..., headers=...)``; the globally configured propagators
        (W3C trace context and baggage by default) decide its keys.

    .. versionadded:: 0.1.0
    """
    carrier = dict(headers or {})
    propagate.inject(carrier, context=context)
    return carrier


def extract_context(job: JobContext) -> otel_context.Context:
    """The trace context the producer put in ``job.headers`` (an empty one when there is none).

    .. versionadded:: 0.1.0
    """
    return propagate.extract(dict(job.headers or {}))


class OpenTelemetryHooks(WorkerHooks):
    """Worker hooks that trace each job execution.

    The span is named ``process <queue>`` (kind ``CONSUMER``) and carries
    ``messaging.system=pgqueue``, ``messaging.destination.name`` (the queue),
    ``messaging.message.id`` (the job id), ``messaging.operation.type=process`` and
    ``pgqueue.job.attempt``. It starts when the handler starts and ends when it returns; an
    exception is recorded on it (``error.type``, an exception event, status ``ERROR``), except
    :class:`pgqueue.Snooze`, which is no error: the span gets ``pgqueue.job.snoozed_seconds``.
    Whether the failed attempt is retried or failed for good is counted by the outcome hooks (see
    :mod:`pgqueue.contrib.prometheus`), since the worker writes it after the span ended.

    Args:
        tracer_provider: Where spans go. Default: the global provider.
        propagation: ``"parent"`` (default): the span is a child of the producer's span found in
            the job's headers, so one trace runs from the request to the job. ``"link"``: the
            span starts a trace of its own with a link to the producer's span (for producers
            whose traces should not grow with retries or long delays).

    .. versionadded:: 0.1.0
    """

    def __init__(
        self,
        *,
        tracer_provider: trace.TracerProvider | None = None,
        propagation: Literal["parent", "link"] = "parent",
    ) -> None:
        if propagation not in ("parent", "link"):
            raise InvalidArgumentError(
                "propagation", f"must be 'parent' or 'link', got {propagation!r}"
            )
        self.propagation = propagation
        self._tracer = trace.get_tracer("pgqueue", __version__, tracer_provider=tracer_provider)
        # on_started and on_handled run on the handler's thread, or inside an async handler's
        # task: the context token attached in one is detached in the other, in the same context.
        # Spans are kept by job id, since many coroutines share the event loop's thread.
        self._open: dict[int, tuple[Span, Token[otel_context.Context]]] = {}
        self._lock = threading.Lock()

    def on_started(self, job: JobContext, latency: float) -> None:
        parent = extract_context(job)
        links: list[Link] = []
        if self.propagation == "link":
            producer = trace.get_current_span(parent).get_span_context()
            links = [Link(producer)] if producer.is_valid else []
            parent = otel_context.Context()
        span = self._tracer.start_span(
            f"process {job.queue}",
            context=parent,
            kind=SpanKind.CONSUMER,
            links=links,
            attributes={
                "messaging.system": MESSAGING_SYSTEM,
                "messaging.destination.name": job.queue,
                "messaging.message.id": str(job.id),
                "messaging.operation.type": "process",
                "messaging.operation.name": "process",
                "pgqueue.job.attempt": job.attempts,
            },
        )
        token = otel_context.attach(trace.set_span_in_context(span))
        with self._lock:
            self._open[job.id] = (span, token)

    def on_handled(self, job: JobContext, duration: float, error: BaseException | None) -> None:
        with self._lock:
            current = self._open.pop(job.id, None)
        if current is None:
            return
        span, token = current
        try:
            if isinstance(error, Snooze):
                span.set_attribute("pgqueue.job.snoozed_seconds", error.delay.total_seconds())
            elif error is not None:
                span.set_attribute("error.type", type(error).__qualname__)
                span.record_exception(error)
                span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
        finally:
            otel_context.detach(token)
            span.end()


__all__ = ["MESSAGING_SYSTEM", "OpenTelemetryHooks", "extract_context", "inject_headers"]
