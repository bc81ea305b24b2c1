"""Input checks that run before any SQL, so bad input writes nothing."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any, cast

from pgqueue.errors import InvalidArgumentError, InvalidArgumentTypeError, InvalidPayloadError

#: NOTIFY payloads must stay under 8000 bytes (R16); the queue name is the payload.
MAX_QUEUE_NAME_BYTES = 7999
#: Most bytes of a job's headers as JSON text: metadata (a trace context), not a second payload.
MAX_HEADERS_BYTES = 8192

# A JSON text escape of U+0000 that is not itself an escaped backslash: jsonb rejects it.
_NUL_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


def encode_payload(payload: Any, *, index: int | None = None) -> str:
    """Serialise a payload to JSON text that PostgreSQL's jsonb accepts unchanged."""
    try:
        text = json.dumps(payload, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise InvalidPayloadError(f"not storable as jsonb ({exc})", index=index) from exc
    if "\\u0000" in text and _NUL_ESCAPE.search(text):
        raise InvalidPayloadError("contains the character U+0000, which jsonb rejects", index=index)
    return text


def encode_payloads(payloads: Iterable[Any]) -> list[str]:
    """Serialise a whole batch first: one bad payload rejects the batch."""
    if isinstance(payloads, (str, bytes, dict)):
        raise InvalidArgumentTypeError("payloads", "an iterable of payloads", payloads)
    return [encode_payload(p, index=i) for i, p in enumerate(payloads)]


def encode_headers(headers: object) -> str | None:
    """A job's headers as JSON text (``None`` for none): ``{str: str}``, at most 8 KiB."""
    if headers is None:
        return None
    if not isinstance(headers, Mapping):
        raise InvalidArgumentTypeError("headers", "a mapping of str to str", headers)
    for key, value in headers.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise InvalidArgumentError(
                "headers", f"keys and values must be str, got {key!r}: {value!r}"
            )
        if "\x00" in key or "\x00" in value:
            raise InvalidArgumentError("headers", "must not contain the character U+0000")
    text = json.dumps(dict(headers), separators=(",", ":"), ensure_ascii=False)
    try:
        size = len(text.encode())
    except UnicodeEncodeError as exc:
        raise InvalidArgumentError("headers", f"not valid Unicode ({exc.reason})") from exc
    if size > MAX_HEADERS_BYTES:
        raise InvalidArgumentError(
            "headers", f"{size} bytes as JSON, more than {MAX_HEADERS_BYTES}"
        )
    return text


def check_queue(queue: object) -> str:
    """A queue name travels as the NOTIFY payload and in comma-separated CLI lists."""
    if not isinstance(queue, str):
        raise InvalidArgumentTypeError("queue", "str", queue)
    if not queue:
        raise InvalidArgumentError("queue", "must not be empty")
    if "," in queue:
        raise InvalidArgumentError("queue", f"must not contain a comma: {queue!r}")
    if "\x00" in queue:
        raise InvalidArgumentError("queue", "must not contain the character U+0000")
    if len(queue.encode()) > MAX_QUEUE_NAME_BYTES:
        raise InvalidArgumentError(
            "queue", f"longer than {MAX_QUEUE_NAME_BYTES} bytes, too long for a NOTIFY payload"
        )
    return queue


def check_positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentTypeError(name, "int", value)
    if value < 1:
        raise InvalidArgumentError(name, f"must be at least 1, got {value}")
    return value


def check_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentTypeError(name, "int", value)
    return value


def check_seconds(
    name: str, value: object, *, allow_zero: bool = False, numbers: bool = True
) -> float:
    """A duration in seconds, given as a ``timedelta`` or (``numbers``) a number of seconds: never
    negative, and zero only with ``allow_zero``. Every duration pgqueue takes is checked here."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif numbers and isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    else:
        expected = "datetime.timedelta or seconds" if numbers else "datetime.timedelta"
        raise InvalidArgumentTypeError(name, expected, value)
    if seconds < 0 or (seconds == 0 and not allow_zero):
        bound = "negative" if allow_zero else "zero or negative"
        raise InvalidArgumentError(name, f"must not be {bound}, got {value}")
    return seconds


def check_duration(name: str, value: object, *, allow_zero: bool) -> timedelta:
    """:func:`check_seconds` for the SQL functions' durations, which are ``timedelta`` only."""
    check_seconds(name, value, allow_zero=allow_zero, numbers=False)
    return cast(timedelta, value)


#: The highest TCP port.
MAX_PORT = 65535


def check_port(name: str, value: object, *, lowest: int = 0) -> int:
    """A TCP port from ``lowest`` to :data:`MAX_PORT` (0, where allowed, lets the system choose)."""
    if isinstance(value, bool) or not isinstance(value, int) or not lowest <= value <= MAX_PORT:
        raise InvalidArgumentError(name, f"must be a TCP port {lowest}-{MAX_PORT}, got {value!r}")
    return value


#: Longest delay of a :class:`pgqueue.Snooze`. ``now() + delay`` must stay a valid timestamp (a
#: ``timedelta.max`` overflows it, and an error in a batched write would cost the whole batch);
#: beyond a year a snooze is more likely a unit mistake than a plan (enqueue with ``run_at``).
MAX_SNOOZE = timedelta(days=365)


def check_snooze_delay(delay: object) -> timedelta:
    """A snooze's delay: a ``timedelta`` or seconds (int or float), from 0 to a year."""
    if isinstance(delay, timedelta):
        seconds = delay.total_seconds()
    elif isinstance(delay, (int, float)) and not isinstance(delay, bool):
        if not math.isfinite(delay):
            raise InvalidArgumentError("delay", f"must be a finite number of seconds, got {delay}")
        seconds = float(delay)
    else:
        raise InvalidArgumentTypeError("delay", "datetime.timedelta or seconds", delay)
    if seconds < 0:
        raise InvalidArgumentError("delay", f"must not be negative, got {delay!r}")
    if seconds > MAX_SNOOZE.total_seconds():
        raise InvalidArgumentError("delay", f"must be at most {MAX_SNOOZE}, got {delay!r}")
    return delay if isinstance(delay, timedelta) else timedelta(seconds=seconds)


def check_run_at(run_at: object) -> datetime:
    if not isinstance(run_at, datetime):
        raise InvalidArgumentTypeError("run_at", "datetime.datetime", run_at)
    if run_at.tzinfo is None or run_at.tzinfo.utcoffset(run_at) is None:
        raise InvalidArgumentError(
            "run_at", "must be timezone-aware (naive datetimes are ambiguous)"
        )
    return run_at


def check_schedule(
    run_at: datetime | None, delay: timedelta | None
) -> tuple[datetime | None, timedelta]:
    """Return ``(run_at, delay)`` for ``coalesce(:run_at, now() + :delay)``."""
    if run_at is not None and delay is not None:
        raise InvalidArgumentError("run_at", "give run_at or delay, not both")
    if run_at is not None:
        return check_run_at(run_at), timedelta(0)
    if delay is not None:
        return None, check_duration("delay", delay, allow_zero=True)
    return None, timedelta(0)


#: Priorities run from 0 (the default, lowest) to 9 (highest, claimed first): ten levels, which the
#: claim reads one at a time (see ``statements.claim_statement``).
MIN_PRIORITY = 0
MAX_PRIORITY = 9
#: Most bytes (UTF-8) of a unique key: an index key, not a payload.
MAX_UNIQUE_KEY_BYTES = 1000


def check_priority(priority: object) -> int:
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise InvalidArgumentTypeError("priority", "int", priority)
    if not MIN_PRIORITY <= priority <= MAX_PRIORITY:
        raise InvalidArgumentError(
            "priority", f"must be from {MIN_PRIORITY} to {MAX_PRIORITY}, got {priority}"
        )
    return priority


def check_unique_key(key: object, *, name: str = "unique_key") -> str:
    """A non-empty ``str`` of at most :data:`MAX_UNIQUE_KEY_BYTES` bytes, without U+0000."""
    if not isinstance(key, str):
        raise InvalidArgumentTypeError(name, "str", key)
    if not key:
        raise InvalidArgumentError(name, "must not be empty")
    if "\x00" in key:
        raise InvalidArgumentError(name, "must not contain the character U+0000")
    try:
        size = len(key.encode())
    except UnicodeEncodeError as exc:
        raise InvalidArgumentError(name, f"not valid Unicode ({exc.reason})") from exc
    if size > MAX_UNIQUE_KEY_BYTES:
        raise InvalidArgumentError(name, f"{size} bytes, more than {MAX_UNIQUE_KEY_BYTES}")
    return key


def check_unique_keys(keys: object, count: int) -> list[str | None]:
    """One key (or ``None``) per payload of a batch; one bad key rejects the batch."""
    if isinstance(keys, (str, bytes, Mapping)) or not isinstance(keys, Iterable):
        raise InvalidArgumentTypeError("unique_keys", "a sequence of str or None", keys)
    checked = [
        None if k is None else check_unique_key(k, name=f"unique_keys[{i}]")
        for i, k in enumerate(keys)
    ]
    if len(checked) != count:
        raise InvalidArgumentError(
            "unique_keys", f"{len(checked)} keys for {count} payloads: give one per payload"
        )
    return checked
