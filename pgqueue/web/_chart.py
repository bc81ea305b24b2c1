"""Chart geometry, computed on the server and drawn as inline SVG by the templates.

No chart library and no script: the numbers below become ``<rect>`` and ``<polyline>`` attributes,
so the first response already holds the chart and it reads without JavaScript.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: Size of one chart in SVG user units (the CSS scales it).
WIDTH = 360
HEIGHT = 72
#: Minutes on the finished-jobs chart (the current minute is the rightmost bar).
MINUTES = 60


@dataclass(frozen=True)
class Bar:
    """One minute: a stacked bar of done (bottom) and failed (top) jobs."""

    x: float
    width: float
    done_y: float
    done_height: float
    failed_y: float
    failed_height: float
    title: str


@dataclass(frozen=True)
class FinishedChart:
    """Jobs finished per minute for one queue over the last :data:`MINUTES` minutes."""

    bars: list[Bar]
    peak: int
    total_done: int
    total_failed: int
    width: int = WIDTH
    height: int = HEIGHT


@dataclass(frozen=True)
class DepthChart:
    """Ready depth of one queue as sampled by this dashboard process."""

    points: str
    peak: int
    latest: int
    span_s: float
    width: int = WIDTH
    height: int = HEIGHT


def finished_charts(rows: Iterable[Mapping[str, Any]]) -> dict[str, FinishedChart]:
    """One chart per queue from :func:`pgqueue.admin.finished_per_minute` rows."""
    per_queue: dict[str, dict[int, tuple[int, int, str]]] = {}
    for row in rows:
        ago = int(row["minutes_ago"])
        if 0 <= ago < MINUTES:
            label = row["minute"].strftime("%H:%M")
            per_queue.setdefault(row["queue"], {})[ago] = (row["done"], row["failed"], label)
    return {queue: _finished_chart(minutes) for queue, minutes in per_queue.items()}


def _finished_chart(minutes: Mapping[int, tuple[int, int, str]]) -> FinishedChart:
    peak = max((done + failed for done, failed, _ in minutes.values()), default=0)
    step = WIDTH / MINUTES
    bars = []
    for ago, (done, failed, label) in sorted(minutes.items(), reverse=True):  # oldest first
        x = WIDTH - (ago + 1) * step
        done_h = HEIGHT * done / peak if peak else 0.0
        failed_h = HEIGHT * failed / peak if peak else 0.0
        bars.append(
            Bar(
                x=round(x + 0.5, 2),
                width=round(step - 1, 2),
                done_y=round(HEIGHT - done_h, 2),
                done_height=round(done_h, 2),
                failed_y=round(HEIGHT - done_h - failed_h, 2),
                failed_height=round(failed_h, 2),
                title=f"{label}: {done} done, {failed} failed",
            )
        )
    return FinishedChart(
        bars=bars,
        peak=peak,
        total_done=sum(m[0] for m in minutes.values()),
        total_failed=sum(m[1] for m in minutes.values()),
    )


def depth_chart(samples: Sequence[tuple[float, int]], window_s: float) -> DepthChart | None:
    """A polyline of ``(seconds ago, ready)`` samples, newest at the right, spread over the span
    they cover (at most ``window_s``); ``None`` for fewer than two samples (one point is no line).
    """
    if len(samples) < 2:
        return None
    peak = max(ready for _, ready in samples)
    span = min(window_s, max(ago for ago, _ in samples)) or 1.0
    points = " ".join(
        f"{WIDTH * (1 - min(ago, span) / span):.1f},"
        f"{HEIGHT - (HEIGHT - 2) * ready / peak if peak else HEIGHT:.1f}"
        for ago, ready in sorted(samples, key=lambda s: -s[0])
    )
    return DepthChart(
        points=points,
        peak=peak,
        latest=samples[-1][1],
        span_s=span,
    )
