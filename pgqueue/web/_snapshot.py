"""What the overview shows, read in one short transaction per refresh.

The counts and the vacuum view come from :mod:`pgqueue.admin`, the findings from
:mod:`pgqueue.doctor` (without its LISTEN check). The doctor reads the whole table, so its findings
are kept for :data:`FINDINGS_TTL` and shared by every open page. Ready depth has no history in the
database: this process samples it at each refresh and keeps an hour of samples in memory.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import Engine

from pgqueue import admin, doctor, repository
from pgqueue.flow import QueueSettings
from pgqueue.retention_policy import retention_of
from pgqueue.web._chart import MINUTES, DepthChart, FinishedChart, depth_chart, finished_charts

#: How long the doctor's findings are reused before the checks run again.
FINDINGS_TTL = timedelta(seconds=30)
#: How much ready-depth history a dashboard process keeps.
DEPTH_WINDOW = timedelta(hours=1)
#: Samples closer together than this are not kept (several open pages refresh at once).
DEPTH_MIN_GAP_S = 1.0


@dataclass(frozen=True)
class Overview:
    """Everything the overview page renders."""

    queues: list[dict[str, Any]]
    findings: list[doctor.Finding]
    table: dict[str, Any]
    snapshot: dict[str, Any] | None
    finished: dict[str, FinishedChart]
    depth: dict[str, DepthChart | None]
    minutes: int = MINUTES


#: The counts of a queue that has settings (``jobs_queues``) and no job.
_NO_JOBS = dict.fromkeys(
    (
        "ready",
        "scheduled",
        "waiting",
        "running",
        "expired_leases",
        "done",
        "failed",
        "cancelled",
        "expired",
        "sleeping",
        "awaiting_signal",
    ),
    0,
)


def _with_settings(
    queues: list[dict[str, Any]], stored: list[QueueSettings]
) -> list[dict[str, Any]]:
    """Each queue's counts with its ``settings`` (pause and limits), and a row of zeros for a
    queue that has settings and no job (a paused queue stays on the page to be resumed)."""
    by_name = {s.queue: s for s in stored}
    rows = [{**q, "settings": by_name.pop(q["queue"], QueueSettings(q["queue"]))} for q in queues]
    for name, setting in by_name.items():
        rows.append(
            {
                "queue": name,
                **_NO_JOBS,
                "done_estimated": False,
                "oldest_ready_age_s": None,
                "settings": setting,
            }
        )
    return sorted(rows, key=lambda row: str(row["queue"]))


class DepthHistory:
    """Ready depth per queue, sampled by this process, for :data:`DEPTH_WINDOW`."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._samples: dict[str, deque[tuple[float, int]]] = {}
        self._last = float("-inf")
        self._lock = threading.Lock()

    def add(self, ready: Mapping[str, int]) -> None:
        now = self._clock()
        horizon = now - DEPTH_WINDOW.total_seconds()
        with self._lock:
            if now - self._last >= DEPTH_MIN_GAP_S:
                self._last = now
                for queue, depth in ready.items():
                    self._samples.setdefault(queue, deque()).append((now, depth))
            for samples in self._samples.values():
                while samples and samples[0][0] < horizon:
                    samples.popleft()

    def charts(self, queues: list[str]) -> dict[str, DepthChart | None]:
        now = self._clock()
        window = DEPTH_WINDOW.total_seconds()
        with self._lock:
            taken = {q: [(now - t, d) for t, d in self._samples.get(q, ())] for q in queues}
        return {queue: depth_chart(samples, window) for queue, samples in taken.items()}


class OverviewSource:
    """Reads :class:`Overview`; one instance per app, shared by its requests (thread-safe)."""

    def __init__(
        self,
        engine: Engine,
        *,
        idle_threshold: timedelta,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._engine = engine
        self._idle_threshold = idle_threshold
        self._clock = clock
        self._findings: tuple[float, list[doctor.Finding]] | None = None
        self._lock = threading.Lock()
        self.depth = DepthHistory(clock)

    def read(self) -> Overview:
        """One read-only transaction (rolled back): counts, vacuum, chart, cached findings."""
        with self._engine.connect() as conn:
            queues = _with_settings(admin.all_queue_counts(conn), repository.queue_settings(conn))
            kept = repository.retention(conn)
            for row in queues:
                row["retention"] = retention_of(kept, row["queue"])
            table = admin.table_stats(conn)
            snapshot = admin.oldest_snapshot(conn)
            finished = finished_charts(admin.finished_per_minute(conn))
            findings = self._cached_findings(lambda: self._check(conn))
        self.depth.add({q["queue"]: int(q["ready"]) for q in queues})
        names = [q["queue"] for q in queues]
        return Overview(
            queues=queues,
            findings=findings,
            table=table,
            snapshot=snapshot,
            finished=finished,
            depth=self.depth.charts(names),
        )

    def forget_findings(self) -> None:
        """Run the checks again at the next read (after an action changed the jobs)."""
        with self._lock:
            self._findings = None

    def _check(self, conn: Any) -> list[doctor.Finding]:
        return doctor.run_checks(conn, idle_threshold=self._idle_threshold, listen=False)

    def _cached_findings(self, run: Callable[[], list[doctor.Finding]]) -> list[doctor.Finding]:
        now = self._clock()
        with self._lock:
            cached = self._findings
        if cached is not None and now - cached[0] < FINDINGS_TTL.total_seconds():
            return cached[1]
        findings = run()
        with self._lock:
            self._findings = (now, findings)
        return findings
