"""Prometheus metrics of a worker: job counters, handler and start-latency histograms, queue gauges.

Needs the ``prometheus`` extra (``pip install "pgqueue-sa[prometheus]"``, which installs
``prometheus-client``). Attach one :class:`PrometheusHooks` to the worker and expose the registry
the usual way::

    import prometheus_client

    from pgqueue.contrib.prometheus import PrometheusHooks

    prometheus_client.start_http_server(9108)
    pgqueue.Worker(engine, handlers, hooks=[PrometheusHooks()]).run()

Metrics (prefix ``namespace``, default ``pgqueue``):

- ``pgqueue_jobs_claimed_total{queue}``
- ``pgqueue_jobs_finished_total{queue,outcome}``, ``outcome`` one of ``succeeded``, ``retry``,
  ``failed``, ``lost``, ``snoozed``, ``cancelled`` (while this worker held the job) and
  ``expired`` (failed by a claim past its ``expires_in``, never run)
- ``pgqueue_job_duration_seconds{queue}``: histogram of handler run time
- ``pgqueue_job_start_latency_seconds{queue}``: histogram of claim-to-start time (how long claimed
  jobs wait for a free handler thread)
- ``pgqueue_lease_extensions_total{queue}`` and ``pgqueue_jobs_reaped_total{status}``
- ``pgqueue_queue_ready_jobs{queue}`` and ``pgqueue_queue_oldest_ready_age_seconds{queue}``:
  gauges of the worker's queues, from one cheap statement
  (:func:`pgqueue._sql.statements.queue_depth_statement`) every ``depth_interval`` seconds
- ``pgqueue_queue_suspended_jobs{queue,state}``: the jobs given back by a durable sleep
  (``state="sleeping"``) or signal wait (``"awaiting signal"``), capped at ``depth_limit``
  (:func:`pgqueue._sql.durable_statements.suspended_depth_statement`, beside the depth's)

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

from pgqueue.contrib import missing_extra

try:
    from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram
except ImportError as exc:  # pragma: no cover - exercised by a subprocess test
    raise missing_extra("pgqueue.contrib.prometheus", "prometheus") from exc

from pgqueue._base.urls import error_line
from pgqueue._base.validation import check_positive_int
from pgqueue._sql import durable_statements, statements
from pgqueue.errors import InvalidArgumentError
from pgqueue.hooks import WorkerHooks

if TYPE_CHECKING:
    from datetime import timedelta

    from pgqueue.jobs import JobContext
    from pgqueue.jobs import WorkerView as Worker
    from pgqueue.results import ReapedJob

log = logging.getLogger("pgqueue.metrics")

#: Handler durations from 5 ms to 10 minutes.
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
#: Claim-to-start latencies from 1 ms to 1 minute.
LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class PrometheusHooks(WorkerHooks):
    """Worker hooks that feed Prometheus metrics; one instance may serve several workers.

    Args:
        registry: Where the metrics are registered. Default: ``prometheus_client.REGISTRY``
            (what ``start_http_server`` exposes). Create one instance per registry: a second
            one on the same registry is refused by ``prometheus_client`` as a duplicate.
        namespace: Prefix of every metric name. Default ``"pgqueue"``.
        depth_interval: Seconds between two refreshes of the queue gauges, run by a thread of
            each worker on its own engine (one short read). Default 15. ``None`` never queries:
            the gauges stay absent. The query is skipped while the worker is idle under
            scale-to-zero (``Worker(idle_poll_interval=...)``, see :attr:`pgqueue.Worker.idle`),
            so the database can suspend; the gauges then keep their last values.
        depth_limit: Most ready jobs counted per queue, which bounds the query's cost; a deeper
            backlog reads as ``depth_limit``. Default 100,000.
        duration_buckets: Buckets of the handler-duration histogram. Default
            :data:`DURATION_BUCKETS`.
        latency_buckets: Buckets of the claim-to-start histogram. Default :data:`LATENCY_BUCKETS`.

    .. versionadded:: 0.1.0
    """

    def __init__(
        self,
        *,
        registry: CollectorRegistry | None = None,
        namespace: str = "pgqueue",
        depth_interval: float | None = 15.0,
        depth_limit: int = 100_000,
        duration_buckets: Sequence[float] = DURATION_BUCKETS,
        latency_buckets: Sequence[float] = LATENCY_BUCKETS,
    ) -> None:
        if depth_interval is not None and (
            isinstance(depth_interval, bool)
            or not isinstance(depth_interval, (int, float))
            or depth_interval <= 0
        ):
            raise InvalidArgumentError(
                "depth_interval", f"must be positive seconds or None, got {depth_interval!r}"
            )
        self.depth_interval = None if depth_interval is None else float(depth_interval)
        self.depth_limit = check_positive_int("depth_limit", depth_limit)
        reg = REGISTRY if registry is None else registry
        self.claimed = Counter(
            "jobs_claimed", "Jobs claimed by workers.", ["queue"], namespace=namespace, registry=reg
        )
        self.finished = Counter(
            "jobs_finished",
            "Jobs whose attempt ended, by outcome (succeeded, retry, failed, lost, snoozed, "
            "cancelled, expired).",
            ["queue", "outcome"],
            namespace=namespace,
            registry=reg,
        )

        def histogram(name: str, doc: str, buckets: Sequence[float]) -> Histogram:
            return Histogram(
                name, doc, ["queue"], buckets=tuple(buckets), namespace=namespace, registry=reg
            )

        self.duration = histogram("job_duration_seconds", "Handler run time.", duration_buckets)
        self.start_latency = histogram(
            "job_start_latency_seconds", "Time from claim to handler start.", latency_buckets
        )
        self.lease_extensions = Counter(
            "lease_extensions",
            "Leases pushed by heartbeats.",
            ["queue"],
            namespace=namespace,
            registry=reg,
        )
        self.reaped = Counter(
            "jobs_reaped",
            "Jobs whose lease expired, requeued or failed.",
            ["status"],
            namespace=namespace,
            registry=reg,
        )
        self.ready = Gauge(
            "queue_ready_jobs",
            "Jobs ready to run now (capped at depth_limit).",
            ["queue"],
            namespace=namespace,
            registry=reg,
        )
        self.oldest_age = Gauge(
            "queue_oldest_ready_age_seconds",
            "Age of the oldest ready job (0 when none is ready).",
            ["queue"],
            namespace=namespace,
            registry=reg,
        )
        self.suspended = Gauge(
            "queue_suspended_jobs",
            "Jobs given back by a durable sleep or signal wait (capped at depth_limit).",
            ["queue", "state"],
            namespace=namespace,
            registry=reg,
        )
        self._lock = threading.Lock()
        self._pollers: dict[int, tuple[threading.Thread, threading.Event]] = {}

    # -- job events -------------------------------------------------------------------------------

    def on_claimed(self, job: JobContext) -> None:
        self.claimed.labels(job.queue).inc()

    def on_started(self, job: JobContext, latency: float) -> None:
        self.start_latency.labels(job.queue).observe(latency)

    def on_handled(self, job: JobContext, duration: float, error: BaseException | None) -> None:
        self.duration.labels(job.queue).observe(duration)

    def on_succeeded(self, job: JobContext, duration: float | None) -> None:
        self.finished.labels(job.queue, "succeeded").inc()

    def on_retry(self, job: JobContext, duration: float | None, error: str) -> None:
        self.finished.labels(job.queue, "retry").inc()

    def on_failed(self, job: JobContext, duration: float | None, error: str) -> None:
        self.finished.labels(job.queue, "failed").inc()

    def on_lost(self, job: JobContext, reason: str) -> None:
        self.finished.labels(job.queue, "lost").inc()

    def on_snoozed(self, job: JobContext, duration: float | None, delay: timedelta) -> None:
        self.finished.labels(job.queue, "snoozed").inc()

    def on_cancelled(self, job: JobContext, duration: float | None) -> None:
        self.finished.labels(job.queue, "cancelled").inc()

    def on_expired(self, queue: str, count: int) -> None:
        self.finished.labels(queue, "expired").inc(count)

    def on_lease_extended(self, jobs: Sequence[JobContext]) -> None:
        for job in jobs:
            self.lease_extensions.labels(job.queue).inc()

    def on_reaped(self, jobs: Sequence[ReapedJob]) -> None:
        for job in jobs:
            self.reaped.labels(job.status).inc()

    # -- queue gauges -----------------------------------------------------------------------------

    def on_worker_started(self, worker: Worker) -> None:
        if self.depth_interval is None:
            return
        stop = threading.Event()
        thread = threading.Thread(
            target=self._poll_depth,
            args=(worker, stop, self.depth_interval),
            name="pgqueue-metrics",
            daemon=True,
        )
        with self._lock:
            self._pollers[id(worker)] = (thread, stop)
        thread.start()

    def on_worker_stopped(self, worker: Worker) -> None:
        with self._lock:
            poller = self._pollers.pop(id(worker), None)
        if poller is not None:
            thread, stop = poller
            stop.set()
            thread.join(5.0)

    def refresh_depth(self, worker: Worker) -> None:
        """Run the depth statement for ``worker``'s queues now and set the gauges."""
        stmt = statements.queue_depth_statement(self.depth_limit)
        with worker.engine.connect() as conn:
            # A worker's queues are its handlers' and its tasks' (``Worker.queues``); a view
            # without them names its handlers' queues.
            queues = getattr(worker, "queues", None) or list(worker.handlers)
            rows = conn.execute(stmt, {"queue_names": list(queues)}).all()
            waits = durable_statements.suspended_depth_statement(self.depth_limit)
            suspended = conn.execute(waits, {"queue_names": list(queues)}).all()
        for row in rows:
            self.ready.labels(row.queue).set(row.ready)
            self.oldest_age.labels(row.queue).set(float(row.oldest_age or 0.0))
        for row in suspended:
            self.suspended.labels(row.queue, "sleeping").set(row.sleeping)
            self.suspended.labels(row.queue, "awaiting signal").set(row.awaiting_signal)

    def _poll_depth(self, worker: Worker, stop: threading.Event, interval: float) -> None:
        failing = False
        while True:
            if not worker.idle:
                try:
                    self.refresh_depth(worker)
                    failing = False
                except Exception as exc:
                    if not failing:  # once per failing streak: the next success resets it
                        log.warning("queue depth query failed: %s", error_line(exc))
                    failing = True
            if stop.wait(interval):
                return


__all__ = ["DURATION_BUCKETS", "LATENCY_BUCKETS", "PrometheusHooks"]
