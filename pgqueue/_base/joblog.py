"""One attempt's log lines, buffered in the worker until a write it makes anyway carries them.

A line costs the handler a tuple and an estimate of its size; it is encoded to JSON when a write
takes the buffer (on the completer's or the heartbeat's thread), a small buffer in one ``json``
call, with its passwords masked and anything a client could not read replaced by its ``repr``
(never failing the job, nor a later write). The buffer keeps the attempt's last
:data:`MAX_LINES` lines and :data:`MAX_BYTES` of them, dropping the oldest and counting them:
bounds kept by estimates while the handler adds lines, and exactly, on the encoded text, in
what a write carries. The handler's thread (or task) adds lines; the heartbeat and the
completer read what is pending from theirs: one lock guards the lines, held for an append, a
copy or the swap of lines encoded outside it, never for I/O.
"""

from __future__ import annotations

import json
import re
import threading
from collections import deque
from time import time_ns as _time_ns
from typing import Any

from pgqueue._base.storable import storable
from pgqueue._base.urls import mask_text, mask_value
from pgqueue._base.validation import MAX_JSON_DEPTH, encode_payload, json_nested_deeper_than

#: Most lines an attempt keeps (the oldest are dropped first).
MAX_LINES = 1_000
#: Most bytes of encoded lines an attempt keeps.
MAX_BYTES = 256 * 1024
#: Most bytes of one line: a longer message is cut, its fields replaced by their size.
MAX_LINE_BYTES = 16 * 1024


#: Escapes of a line that ``jsonb`` may refuse (U+0000, a surrogate): the careful path reads it.
_MAYBE_UNSTORABLE = re.compile(r"\\u0000|\\ud[89a-f]", re.IGNORECASE)
#: One encoder (``json.dumps`` with an option builds one per call: most of a line's cost),
#: without the blanks after separators (10% of a line's bytes, stored and logged as WAL), and
#: without the check for cycles (15% of the encoding): a cyclic field recurses until
#: ``RecursionError``, which sends its line to the careful path as any other unencodable one.
_ENCODER = json.JSONEncoder(allow_nan=False, separators=(",", ":"), check_circular=False)
#: Brackets in one line past which its nesting is measured (``jsonb`` has a depth limit too).
_BRACKETS_CHECKED = MAX_JSON_DEPTH


def _maybe_secret(text: str) -> bool:
    """Whether the JSON text ``text`` (ASCII) may hold what ``mask_text`` masks: a URL's
    ``://`` or a ``password`` in any case. Substring searches at C speed: the case-insensitive
    regular expression they replace took 14 us for ten lines on the project's machine, these
    1.5 us."""
    return "://" in text or "password" in text.lower()


def _needs_care(text: str) -> bool:
    """Whether encoded lines may hold a password or a character ``jsonb`` refuses (the search
    for the escapes runs only on a text that has one)."""
    return _maybe_secret(text) or ("\\u" in text and _MAYBE_UNSTORABLE.search(text) is not None)


def encode_line(
    when: int, level: str, message: object, fields: dict[str, Any], logger: str | None
) -> str:
    """One line as the JSON text ``jobs_logs.lines`` stores, ``[time, level, logger, fields,
    message]`` (``time``: microseconds since the epoch, an integer: the shortest ``repr`` of a
    float in seconds took a third of the encoding of a line on the project's machine): always
    valid ``jsonb`` (ASCII, no U+0000, no lone surrogate, no NaN, not too
    deep, at most :data:`MAX_LINE_BYTES`), whatever ``message`` and ``fields`` hold.

    The common line (a plain message, small fields) costs one ``json`` call and a few scans of
    its text at C speed; one that may hold a password, a character ``jsonb`` refuses or deep
    nesting, or that ``json`` cannot encode, takes the careful path (:func:`_careful_line`)."""
    text = message if type(message) is str else _repr(message)
    try:
        line = _ENCODER.encode([when, level, logger, fields, text])
    except (TypeError, ValueError, RecursionError):
        return _careful_line(when, level, text, fields, logger)
    if (
        _needs_care(line)
        or len(line) > MAX_LINE_BYTES
        or (line.count("[") + line.count("{") > _BRACKETS_CHECKED)
    ):
        return _careful_line(when, level, text, fields, logger)
    return line


def _careful_line(
    when: int, level: str, text: str, fields: dict[str, Any], logger: str | None
) -> str:
    """:func:`encode_line` for a line that needs it: masked, unstorable characters escaped,
    fields that cannot be stored as their ``repr``, a line over :data:`MAX_LINE_BYTES` cut."""
    text = mask_text(storable(text))
    if fields:
        try:
            encoded_fields = encode_payload(mask_value(fields), argument="fields")
        except Exception:  # a cyclic, unencodable or unstorable field: its repr instead
            encoded_fields = json.dumps({"repr": mask_text(_repr(fields))})
    else:
        encoded_fields = "{}"
    name = json.dumps(logger if logger is None else storable(logger))
    head = f"[{when},{json.dumps(level)},{name},"
    line = f"{head}{encoded_fields},{json.dumps(text)}]"
    if len(line) <= MAX_LINE_BYTES:
        return line
    cut = json.dumps(text[: MAX_LINE_BYTES // 8] + f"... ({len(line)} bytes, cut)")
    return f'{head}{{"cut_bytes":{len(encoded_fields)}}},{cut}]'


def _repr(value: object) -> str:
    """``ascii(value)``, or what is known of it when even that raises."""
    try:
        return ascii(value)
    except Exception:
        return f"<unprintable {type(value).__name__}>"


#: What one line adds to the buffer's size beyond its message and fields (time, level, logger).
_LINE_OVERHEAD = 48
#: What a field adds beyond its name and a text value: quotes, separators, a number's digits.
_FIELD_OVERHEAD = 26
#: The field values whose size the estimate knows (others make the line encoded when recorded).
_SCALARS = frozenset({str, int, float, bool, type(None)})

#: A line as the handler recorded it: ``(time, level, logger, fields, message)``, encoded when
#: a write takes the buffer (a ``str``: already encoded, by an earlier write or when recorded).
Entry = tuple[int, str, "str | None", dict[str, Any], str] | str


def _size(text: str, fields: dict[str, Any]) -> int:
    """A line's estimated encoded size; past :data:`MAX_LINE_BYTES` when a field holds a
    container or an object (such a line is encoded when recorded, its size then exact)."""
    size = len(text) + _LINE_OVERHEAD
    for key, value in fields.items():
        kind = type(value)
        if kind is str:
            size += len(key) + len(value) + _FIELD_OVERHEAD
        elif kind in _SCALARS:
            size += len(key) + _FIELD_OVERHEAD
        else:
            return MAX_LINE_BYTES + 1
    return size


def _entry_size(entry: Entry) -> int:
    """What ``entry`` added to the buffer's size: the same estimate, or its encoded length."""
    if isinstance(entry, str):
        return len(entry)
    return _size(entry[4], entry[3])


class LogBuffer:
    """The lines of one attempt, oldest first, within the bounds; ``version`` counts additions,
    so a writer knows whether what it wrote is still the whole of it.

    A line costs the handler a tuple, an append and an estimate of its size (its message's and
    its text fields' lengths); a line whose fields hold containers or other objects, or that is
    estimated past :data:`MAX_LINE_BYTES`, is encoded when recorded instead (its size is then
    exact). Sizes are not kept per line: dropping the oldest (past the bounds, rare) estimates
    it again. A write (:meth:`pending`) encodes a small buffer in one ``json`` call, checked as
    :func:`encode_line` checks one line; a buffer whose text would pass :data:`MAX_LINE_BYTES`,
    or with a sign of a password or of a character ``jsonb`` refuses, is encoded line by line
    (each kept encoded: a later write encodes only the new lines) and held to the bounds by the
    exact sizes, so what is written never passes them.
    """

    __slots__ = (
        "_bytes",
        "_encoded",
        "_last",
        "_lines",
        "_lock",
        "_written",
        "dropped",
        "version",
    )

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lines: deque[Entry] = deque()
        self._bytes = 0
        self._encoded = 0  # lines held encoded (``str`` entries)
        self._last: tuple[int, str, int] | None = None  # what pending() last returned
        self._written = 0
        self.dropped = 0
        self.version = 0

    def add(self, level: str, message: object, fields: dict[str, Any], logger: str | None) -> None:
        """Record one line now; the oldest go once the bounds are passed."""
        text = message if type(message) is str else _repr(message)
        size = _size(text, fields) if fields else len(text) + _LINE_OVERHEAD
        when = _time_ns() // 1000
        if size > MAX_LINE_BYTES:
            self._add_encoded(encode_line(when, level, text, fields, logger))
            return
        with self._lock:
            self._lines.append((when, level, logger, fields, text))
            self._bytes += size
            self.version += 1
            if self._bytes > MAX_BYTES or len(self._lines) > MAX_LINES:
                self._trim()

    def _add_encoded(self, line: str) -> None:
        with self._lock:
            self._lines.append(line)
            self._bytes += len(line)
            self._encoded += 1
            self.version += 1
            if self._bytes > MAX_BYTES or len(self._lines) > MAX_LINES:
                self._trim()

    def pending(self) -> tuple[int, str, int] | None:
        """``(version, JSON array of the lines, dropped)`` when lines were added since the last
        :meth:`written`, else ``None``. Encoded outside the lock, once per version: asked again
        with no line added, it returns what it returned (the handler's thread asks first, when
        the handler returns, so the completer's write finds the lines encoded)."""
        with self._lock:
            if self.version <= self._written:
                return None
            last = self._last
            if last is not None and last[0] == self.version:
                return last
            version, dropped = self.version, self.dropped
            entries = None if self._encoded or self._bytes > MAX_LINE_BYTES else list(self._lines)
        answer: tuple[int, str, int] | None = None
        if entries is not None:
            try:
                text = _ENCODER.encode(entries)
            except (TypeError, ValueError, RecursionError):
                pass
            else:
                if (
                    len(text) <= MAX_LINE_BYTES
                    and not _needs_care(text)
                    and not _too_deep(text, len(entries))
                ):
                    answer = (version, text, dropped)
        if answer is None:
            answer = self._pending_line_by_line()
        with self._lock:
            if answer[0] == self.version:
                self._last = answer
        return answer

    def _pending_line_by_line(self) -> tuple[int, str, int]:
        """:meth:`pending` for a buffer that needs it: each line not encoded yet is encoded
        alone (outside the lock; a line added meanwhile, inside it) and kept so, the bounds
        applied to the exact sizes, and the whole buffer returned as it then is."""
        with self._lock:
            raw = [entry for entry in self._lines if type(entry) is tuple]
        encoded = {id(entry): _one(entry) for entry in raw}  # ``raw`` keeps every id in use
        with self._lock:
            lines: deque[Entry] = deque(
                entry if type(entry) is str else (encoded.get(id(entry)) or _one(entry))
                for entry in self._lines
            )
            self._lines = lines
            self._bytes = sum(len(line) for line in lines)
            self._encoded = len(lines)
            self._trim()
            texts = [entry for entry in self._lines if isinstance(entry, str)]  # all of them
            return self.version, "[" + ",".join(texts) + "]", self.dropped

    def _trim(self) -> None:
        """Drop the oldest lines until the bounds hold (lock held)."""
        lines = self._lines
        while len(lines) > MAX_LINES or self._bytes > MAX_BYTES:
            entry = lines.popleft()
            self._bytes -= _entry_size(entry)
            if type(entry) is str:
                self._encoded -= 1
            self.dropped += 1

    def written(self, version: int) -> None:
        """The buffer as of ``version`` (from :meth:`pending`) is on the job's row now."""
        with self._lock:
            if version > self._written:
                self._written = version
            if self._last is not None and self._last[0] <= version:
                self._last = None


def _one(entry: Entry) -> str:
    if isinstance(entry, str):
        return entry
    when, level, logger, fields, text = entry
    return encode_line(when, level, text, fields, logger)


def _too_deep(text: str, lines: int) -> bool:
    """Whether some line nests deeper than ``jsonb`` should hold: measured only when the text
    has more brackets than plain lines have (each one ``[`` and its fields' ``{``)."""
    if text.count("[") + text.count("{") <= 2 * lines + 1:
        return False
    return json_nested_deeper_than(text, MAX_JSON_DEPTH + 2)
