"""One attempt's log lines, buffered in the worker until a write it makes anyway carries them.

A line is encoded to JSON when it is recorded (so a line no client could read is caught at once
and replaced by its ``repr``: it never fails the job, nor a later write), its passwords masked.
The buffer keeps the attempt's last :data:`MAX_LINES` lines and :data:`MAX_BYTES` of them,
dropping the oldest and counting them. The handler's thread (or task) adds lines; the heartbeat
and the completer read what is pending from theirs: one lock guards the lines, held for an
append or a copy, never for I/O.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from typing import Any

from pgqueue._base.storable import storable
from pgqueue._base.urls import mask_text, mask_value
from pgqueue._base.validation import encode_payload

#: Most lines an attempt keeps (the oldest are dropped first).
MAX_LINES = 1_000
#: Most bytes of encoded lines an attempt keeps.
MAX_BYTES = 256 * 1024
#: Most bytes of one line: a longer message is cut, its fields replaced by their size.
MAX_LINE_BYTES = 16 * 1024


def encode_line(
    when: float, level: str, message: object, fields: dict[str, Any], logger: str | None
) -> str:
    """One line as the JSON text ``jobs_logs.lines`` stores: always valid ``jsonb`` (ASCII,
    no U+0000, no lone surrogate, no NaN), whatever ``message`` and ``fields`` hold."""
    text = message if isinstance(message, str) else _repr(message)
    text = mask_text(storable(text))
    if fields:
        try:
            encoded_fields = encode_payload(mask_value(fields), argument="fields")
        except Exception:  # a cyclic, unencodable or unstorable field: its repr instead
            encoded_fields = json.dumps({"repr": mask_text(_repr(fields))})
    else:
        encoded_fields = "{}"
    name = json.dumps(logger if logger is None else storable(logger))
    head = f'{{"t":{when:.6f},"l":{json.dumps(level)},"g":{name},"f":'
    line = f'{head}{encoded_fields},"m":{json.dumps(text)}}}'
    if len(line) <= MAX_LINE_BYTES:
        return line
    cut = json.dumps(text[: MAX_LINE_BYTES // 8] + f"... ({len(line)} bytes, cut)")
    return f'{head}{{"cut_bytes":{len(encoded_fields)}}},"m":{cut}}}'


def _repr(value: object) -> str:
    """``ascii(value)``, or what is known of it when even that raises."""
    try:
        return ascii(value)
    except Exception:
        return f"<unprintable {type(value).__name__}>"


class LogBuffer:
    """The lines of one attempt, oldest first, within the bounds; ``version`` counts additions,
    so a writer knows whether what it wrote is still the whole of it."""

    __slots__ = ("_bytes", "_lines", "_lock", "_written", "dropped", "version")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lines: deque[str] = deque()
        self._bytes = 0
        self._written = 0
        self.dropped = 0
        self.version = 0

    def add(self, level: str, message: object, fields: dict[str, Any], logger: str | None) -> None:
        """Record one line now (encoded outside the lock; ASCII: its length is its size)."""
        line = encode_line(time.time(), level, message, fields, logger)
        with self._lock:
            self._lines.append(line)
            self._bytes += len(line)
            while len(self._lines) > MAX_LINES or self._bytes > MAX_BYTES:
                self._bytes -= len(self._lines.popleft())
                self.dropped += 1
            self.version += 1

    def pending(self) -> tuple[int, str, int] | None:
        """``(version, JSON array of the lines, dropped)`` when lines were added since the last
        :meth:`written`, else ``None``."""
        with self._lock:
            if self.version <= self._written:
                return None
            return self.version, "[" + ",".join(self._lines) + "]", self.dropped

    def written(self, version: int) -> None:
        """The buffer as of ``version`` (from :meth:`pending`) is on the job's row now."""
        with self._lock:
            if version > self._written:
                self._written = version
