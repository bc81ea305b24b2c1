"""What the in-process drains measure: when handlers ran, and the CPU a thread or process spent."""

from __future__ import annotations

import os
import threading
import time

_TICK = os.sysconf("SC_CLK_TCK")


class Calls:
    """When each handler call started (``time.perf_counter``); the steady rate is taken from
    them, from the first call to the last, so start-up and the last empty claim are left out."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self._lock = threading.Lock()

    def record(self) -> None:
        now = time.perf_counter()
        with self._lock:
            self.times.append(now)

    def first(self) -> float | None:
        with self._lock:
            return self.times[0] if self.times else None

    def steady_rate(self) -> float:
        return (len(self.times) - 1) / (max(self.times) - min(self.times))

    def within(self, seconds: float) -> int:
        """The calls made within ``seconds`` of the first."""
        return sum(1 for t in self.times if t <= self.times[0] + seconds)


def cpu_seconds(stat_path: str) -> float | None:
    """utime + stime of one ``/proc/.../stat`` file (a process or a thread), in seconds;
    ``None``: it is gone, or not readable (a server on another machine)."""
    try:
        with open(stat_path) as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / _TICK
