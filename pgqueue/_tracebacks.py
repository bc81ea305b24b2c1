"""A failed attempt's traceback, as ``jobs.errors`` stores it and the worker logs it.

Formatted on the thread where the handler raised (``traceback.format_exception``: chained causes
included), passwords in URLs masked, then trimmed to :data:`MAX_TRACEBACK_LENGTH` characters by
keeping the end: the raising frame and the exception line come last, so a deep stack or a long
chain loses its outermost frames first, behind a marker saying how much was cut.
"""

from __future__ import annotations

import traceback

from pgqueue._urls import mask_text
from pgqueue.errors import InvalidArgumentTypeError

#: A stored traceback is at most this many characters (the marker included): ten of them are
#: 80 KiB of history per job at most, rewritten with each failed attempt.
MAX_TRACEBACK_LENGTH = 8192

#: Room kept for the marker in front of a trimmed traceback (it needs under 50 characters).
_MARKER_ROOM = 64


def format_traceback(exc: BaseException) -> str:
    """``exc``'s traceback as the worker stores and logs it: masked, trimmed to the bound."""
    text = mask_text("".join(traceback.format_exception(exc)))
    return trim_traceback(text.rstrip("\n"))


def trim_traceback(text: str) -> str:
    """``text`` if within :data:`MAX_TRACEBACK_LENGTH`, else its end (from a frame's first line,
    else a line's start, where it can) behind ``[... N characters cut ...]``."""
    if len(text) <= MAX_TRACEBACK_LENGTH:
        return text
    tail = text[len(text) - (MAX_TRACEBACK_LENGTH - _MARKER_ROOM) :]
    start = tail.find("\n  File ")  # a whole frame first, else a whole line
    if start < 0:
        start = tail.find("\n")
    if 0 <= start < len(tail) - 1:
        tail = tail[start + 1 :]
    return f"[... {len(text) - len(tail)} characters cut ...]\n{tail}"


def check_traceback(value: object) -> str | None:
    """A traceback given to :func:`pgqueue.fail`: text (trimmed to the bound) or ``None``."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidArgumentTypeError("traceback", "a str or None", value)
    return trim_traceback(value)
