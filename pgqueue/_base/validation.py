"""Input checks that run before any SQL, so bad input writes nothing."""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime, timedelta, timezone
from itertools import accumulate, chain, compress
from typing import Any

from sqlalchemy.engine import URL
from sqlalchemy.exc import ArgumentError

from pgqueue._base.storable import unstorable, unstorable_string
from pgqueue._base.urls import mask_url, to_sqlalchemy_url
from pgqueue.errors import InvalidArgumentError, InvalidArgumentTypeError, InvalidPayloadError

#: NOTIFY payloads must stay under 8000 bytes (R16); the queue name is the payload.
MAX_QUEUE_NAME_BYTES = 7999
#: Most bytes of a job's headers as JSON text: metadata (a trace context), not a second payload.
MAX_HEADERS_BYTES = 8192

#: The longest duration pgqueue takes (``delay``, ``lease``, ``older_than``, retry ``base`` and
#: ``cap``, the worker's intervals, a periodic interval), and how far from now a ``run_at`` may
#: lie: 100 years. Every time pgqueue then stores or compares, ``now() ± MAX_DURATION`` plus a
#: lease, stays centuries inside the years 1 to 9999 that Python's ``datetime`` (and so every
#: reader: the CLI, the dashboard, your code) can load back, in any time zone; PostgreSQL itself
#: would store year 294276, which no Python client can read.
MAX_DURATION = timedelta(days=36525)
#: Integer columns are ``int`` (``attempts``, ``max_attempts``) and ``bigint`` (``id``): values
#: outside them are refused here, not by the server.
MAX_INT32 = 2**31 - 1
MIN_BIGINT = -(2**63)
MAX_BIGINT = 2**63 - 1
#: The deepest nesting of arrays and objects a payload may have (``[[1]]`` is 2 levels). Python's
#: ``json`` module recurses once per level, within the interpreter's recursion limit (1,000 by
#: default) shared with the code around it: a payload ten times deeper than any real one still
#: decodes in every worker and reader, whatever the depth of the stack it is read on.
MAX_JSON_DEPTH = 100

#: What ``json.dumps`` writes as an array or an object.
_CONTAINERS = (dict, list, tuple)
# A JSON text's brackets as signed bytes, +1 opening and -1 (0xff) closing; every other byte goes.
_STEPS = bytes.maketrans(b"[]{}", b"\x01\xff\x01\xff")
_NOT_BRACKETS = bytes(c for c in range(256) if c not in b"[]{}")
# C0 and C1 control characters (and DEL): they break the lines and tables a name is shown in.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def encode_payload(payload: Any, *, index: int | None = None, argument: str = "payload") -> str:
    """Serialise a payload to JSON text that PostgreSQL's jsonb accepts unchanged.

    ``argument`` names the value in the error (a job's ``progress``, a task's ``result``).
    """
    try:
        text = json.dumps(payload, allow_nan=False, separators=(",", ":"))
    except RecursionError:
        # Deeper than the interpreter's stack allows here: say so, unless the payload is shallow
        # and the caller's own stack is what ran out.
        if not nested_deeper_than(payload, MAX_JSON_DEPTH):
            raise
        raise InvalidPayloadError(_too_deep(), index=index, argument=argument) from None
    except (TypeError, ValueError) as exc:
        raise InvalidPayloadError(
            f"not storable as jsonb ({exc})", index=index, argument=argument
        ) from exc
    if json_nested_deeper_than(text, MAX_JSON_DEPTH):
        raise InvalidPayloadError(_too_deep(), index=index, argument=argument)
    # ``json.dumps`` writes U+0000 as ``\u0000`` and a surrogate as ``\udXXX`` (a character
    # beyond U+FFFF too, as a pair): a text without either needs nothing more. The strings of
    # one with them are read again, by the rule of :func:`~pgqueue._base.storable.unstorable`.
    if "\\u0000" in text or "\\ud" in text:
        found = unstorable_string(payload)
        if found is not None:
            raise InvalidPayloadError(found, index=index, argument=argument)
    return text


def _too_deep() -> str:
    return f"nested more than {MAX_JSON_DEPTH} levels deep (MAX_JSON_DEPTH)"


def json_nested_deeper_than(text: str, depth: int) -> bool:
    """Whether a JSON text nests arrays and objects more than ``depth`` levels deep.

    The enqueue path's test, at C speed and without recursion. Two counts (0.1 us for a small
    payload) spare any text of at most ``depth`` brackets, the common case, which costs nothing
    more. A bigger one is cut at its quotes to keep what lies outside strings, and the deepest
    prefix sum of its brackets (+1, -1) is its depth: 13 us for 50 objects of a list each, which
    ``json.dumps`` encodes in 30 us; 3 ms for 10,000, encoded in 7 ms. (A walk of the value
    took 25 us and 4 ms; one pushing every value on a stack, 70 us and 18 ms.)
    """
    if text.count("[") + text.count("{") <= depth:
        return False
    if "\\" in text:  # drop escaped backslashes, then escaped quotes: every '"' left delimits
        text = text.replace("\\\\", "").replace('\\"', "")
    outside = "".join(text.split('"')[::2])
    steps = outside.encode().translate(_STEPS, _NOT_BRACKETS)
    return max(accumulate(memoryview(steps).cast("b")), default=0) > depth


def nested_deeper_than(value: object, depth: int) -> bool:
    """Whether arrays and objects (lists, tuples, dicts) nest more than ``depth`` levels deep in
    a value ``json.dumps`` could not encode (:func:`json_nested_deeper_than` reads a text).

    One level at a time, never recursing, so the stack cannot run out, and a self-referencing
    list ends the walk at ``depth + 1``; the children of a level are gathered by ``itertools``.
    """
    level: list[object] = [value]
    for _ in range(depth + 1):
        kinds = {kind for kind in set(map(type, level)) if issubclass(kind, _CONTAINERS)}
        if not kinds:
            return False
        containers: Iterator[Any] = compress(level, map(kinds.__contains__, map(type, level)))
        level = list(
            chain.from_iterable(
                item.values() if isinstance(item, dict) else item for item in containers
            )
        )
    return True


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
        for text in (key, value):
            problem = unstorable(text)
            if problem is not None:
                raise InvalidArgumentError("headers", f"{key!r}: {problem}")
    text = json.dumps(dict(headers), separators=(",", ":"), ensure_ascii=False)
    size = len(text.encode())
    if size > MAX_HEADERS_BYTES:
        raise InvalidArgumentError(
            "headers", f"{size} bytes as JSON, more than {MAX_HEADERS_BYTES}"
        )
    return text


def check_queue(queue: object) -> str:
    """A queue name travels as the NOTIFY payload and in comma-separated CLI lists: a non-empty
    ``str``, not blank, without a comma or control characters, of at most 7,999 bytes.

    Every function that takes a queue name checks it here."""
    if not isinstance(queue, str):
        raise InvalidArgumentTypeError("queue", "str", queue)
    if not queue:
        raise InvalidArgumentError("queue", "must not be empty")
    if queue.isspace():  # " " or "\u3000": stored, it is a row no one can read or click
        raise InvalidArgumentError("queue", f"must not be blank, got {queue!r}")
    if "," in queue:
        raise InvalidArgumentError("queue", f"must not contain a comma: {queue!r}")
    problem = unstorable(queue)
    if problem is not None:
        raise InvalidArgumentError("queue", problem)
    if not queue.isprintable():  # the fast test; the search only for a name that fails it
        control = _CONTROL.search(queue)
        if control is not None:
            raise InvalidArgumentError(
                "queue",
                f"must not contain control characters, got {control.group()!r} at index "
                f"{control.start()}",
            )
    if len(queue.encode()) > MAX_QUEUE_NAME_BYTES:
        raise InvalidArgumentError(
            "queue", f"longer than {MAX_QUEUE_NAME_BYTES} bytes, too long for a NOTIFY payload"
        )
    return queue


#: PostgreSQL keeps the first 63 bytes of an ``application_name``: a name to match one fits.
MAX_NAME_BYTES = 63


def is_ascii_digits(text: str) -> bool:
    """``text`` is a number written in ASCII digits ``0-9`` only: what the command line and the
    dashboard take as an id or a count. ``str.isdigit`` and ``int`` also take other scripts'
    digits (``"٣"`` is 3 to ``int``), which nobody types as an id on purpose."""
    return text.isascii() and text.isdigit()


def check_name(name: str, value: object) -> str:
    """A worker's name (``locked_by``): a non-empty ``str`` of at most 63 bytes, no U+0000."""
    if not isinstance(value, str):
        raise InvalidArgumentTypeError(name, "str", value)
    if not value:
        raise InvalidArgumentError(name, "must not be empty")
    problem = unstorable(value)
    if problem is not None:
        raise InvalidArgumentError(name, problem)
    size = len(value.encode())
    if size > MAX_NAME_BYTES:
        raise InvalidArgumentError(name, f"{size} bytes, more than {MAX_NAME_BYTES}")
    return value


def check_task_name(value: object, *, name: str = "task") -> str:
    """A task's name (``jobs.task``): a non-empty ``str`` without control characters or U+0000.

    It is matched exactly by the worker and shown in logs, the CLI and the dashboard.
    """
    if not isinstance(value, str):
        raise InvalidArgumentTypeError(name, "str", value)
    problem = unstorable(value)
    if problem is not None:
        raise InvalidArgumentError(name, problem)
    if not value or not value.isprintable():
        raise InvalidArgumentError(
            name, f"a task's name must be non-empty and printable, got {value!r}"
        )
    return value


def check_positive_int(name: str, value: object, *, most: int = MAX_INT32) -> int:
    """An ``int`` from 1 to ``most`` (default: the largest PostgreSQL ``integer``)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentTypeError(name, "int", value)
    if value < 1:
        raise InvalidArgumentError(name, f"must be at least 1, got {value}")
    if value > most:
        raise InvalidArgumentError(name, f"must be at most {most}, got {value}")
    return value


#: Handler threads one worker process starts at most (``Worker(concurrency=...)``,
#: ``--concurrency``) unless forced: each holds a stack and, while it runs a job, a connection;
#: 100,000 of them ended in a double traceback and a worker deaf to SIGTERM for 20 s.
MAX_THREADS = 1000
#: Coroutines one worker's event loop runs at once at most (``async_concurrency``) unless forced:
#: cheaper than threads, yet each holds a claimed job and its lease.
MAX_ASYNC_CONCURRENCY = 10_000
#: Worker processes a supervisor starts per CPU at most (``--processes``) unless forced: 1,000
#: processes took a 2-CPU host into the OOM killer.
PROCESSES_PER_CPU = 4


def max_processes() -> int:
    """The most worker processes one supervisor starts unforced: :data:`PROCESSES_PER_CPU` times
    ``os.cpu_count()`` (8 on 2 CPUs)."""
    return PROCESSES_PER_CPU * (os.cpu_count() or 1)


def check_threads(name: str, value: int, *, force: bool, forced_by: str) -> int:
    """``value`` handler threads, refused above :data:`MAX_THREADS` unless ``force``."""
    return _within_host(name, value, "handler threads", MAX_THREADS, "", force, forced_by)


def check_coroutines(name: str, value: int, *, force: bool, forced_by: str) -> int:
    """``value`` coroutines, refused above :data:`MAX_ASYNC_CONCURRENCY` unless ``force``."""
    most = MAX_ASYNC_CONCURRENCY
    return _within_host(name, value, "coroutines", most, "", force, forced_by)


def check_processes(name: str, value: int, *, force: bool, forced_by: str) -> int:
    """``value`` worker processes, refused above :func:`max_processes` unless ``force``."""
    basis = f" ({PROCESSES_PER_CPU} per CPU, {os.cpu_count() or 1} CPUs here)"
    return _within_host(name, value, "worker processes", max_processes(), basis, force, forced_by)


def _within_host(
    name: str, value: int, unit: str, most: int, basis: str, force: bool, forced_by: str
) -> int:
    """The one rule of the bounds that protect the host: above ``most``, only when forced
    (``forced_by`` says how: ``force_bounds=True``, ``--force-bounds``)."""
    if value > most and not check_bool("force_bounds", force):
        raise InvalidArgumentError(
            name,
            f"{value} {unit} is more than {most}{basis}, the most pgqueue starts unless told "
            f"to: pass {forced_by} to start that many anyway",
        )
    return value


def check_bool(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise InvalidArgumentTypeError(name, "bool", value)
    return value


def check_int(
    name: str, value: object, *, least: int = -MAX_INT32 - 1, most: int = MAX_INT32
) -> int:
    """An ``int`` within ``least`` and ``most`` (default: PostgreSQL's ``integer``)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentTypeError(name, "int", value)
    if not least <= value <= most:
        raise InvalidArgumentError(name, f"must be from {least} to {most}, got {value}")
    return value


def check_job_id(value: object, *, name: str = "job_id") -> int:
    """A job id: an ``int`` a ``bigint`` holds (an id no job has is not an error)."""
    return check_int(name, value, least=MIN_BIGINT, most=MAX_BIGINT)


#: The values of ``on_dependency_failure``: fail with the dependency (the default), or run anyway.
DEPENDENCY_FAILURE_MODES = ("fail", "run")


def check_dependencies(value: object) -> tuple[int, ...]:
    """``depends_on``: an iterable of job ids (not a string), as a sorted tuple without repeats."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise InvalidArgumentTypeError("depends_on", "an iterable of job ids", value)
    return tuple(sorted({check_job_id(i, name="depends_on") for i in value}))


def check_dependency_failure(value: object) -> bool:
    """``on_dependency_failure``: ``"fail"`` or ``"run"``; ``True`` for ``"run"``."""
    if value not in DEPENDENCY_FAILURE_MODES:
        raise InvalidArgumentError(
            "on_dependency_failure", f"must be 'fail' or 'run', got {value!r}"
        )
    return value == "run"


def check_duration(
    name: str, value: object, *, allow_zero: bool, most: timedelta = MAX_DURATION
) -> timedelta:
    """The one rule of every duration pgqueue takes: a ``timedelta`` or a number of seconds
    (``int`` or ``float``, never a ``bool``), finite, never negative, zero only with
    ``allow_zero``, at most ``most`` (default :data:`MAX_DURATION`). Returned as a ``timedelta``.

    Raises:
        InvalidArgumentTypeError: neither a ``timedelta`` nor a number.
        InvalidArgumentError: NaN or infinite, negative (or zero), or longer than ``most``.
    """
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise InvalidArgumentError(name, f"must be a finite number of seconds, got {value}")
        seconds = float(value)
    else:
        raise InvalidArgumentTypeError(name, "datetime.timedelta or seconds", value)
    if seconds < 0 or (seconds == 0 and not allow_zero):
        bound = "negative" if allow_zero else "zero or negative"
        raise InvalidArgumentError(name, f"must not be {bound}, got {value!r}")
    if seconds > most.total_seconds():
        raise InvalidArgumentError(name, _too_long(value, most))
    return value if isinstance(value, timedelta) else timedelta(seconds=seconds)


def check_seconds(name: str, value: object, *, allow_zero: bool = False) -> float:
    """:func:`check_duration` in seconds, for the durations that are waited on in Python."""
    return check_duration(name, value, allow_zero=allow_zero).total_seconds()


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
    """A snooze's delay (:func:`check_duration`), from 0 to :data:`MAX_SNOOZE`."""
    return check_duration("delay", delay, allow_zero=True, most=MAX_SNOOZE)


def _too_long(value: object, most: timedelta) -> str:
    if most == MAX_DURATION:
        return f"must be at most {MAX_DURATION.days} days (100 years, MAX_DURATION), got {value}"
    return f"must be at most {most}, got {value!r}"


def check_run_at(run_at: object) -> datetime:
    """An aware ``datetime`` within :data:`MAX_DURATION` of now (either side)."""
    if not isinstance(run_at, datetime):
        raise InvalidArgumentTypeError("run_at", "datetime.datetime", run_at)
    if run_at.tzinfo is None or run_at.tzinfo.utcoffset(run_at) is None:
        raise InvalidArgumentError(
            "run_at", "must be timezone-aware (naive datetimes are ambiguous)"
        )
    try:
        away = abs(run_at - datetime.now(timezone.utc))
    except OverflowError:  # year 1 or 9999 with an offset that leaves the range
        away = timedelta.max
    if away > MAX_DURATION:
        raise InvalidArgumentError(
            "run_at",
            f"must lie within {MAX_DURATION.days} days (100 years, MAX_DURATION) of now, "
            f"got {run_at.isoformat()}",
        )
    return run_at


def check_schedule(run_at: object, delay: object) -> tuple[datetime | None, timedelta]:
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
    problem = unstorable(key)
    if problem is not None:
        raise InvalidArgumentError(name, problem)
    size = len(key.encode())
    if size > MAX_UNIQUE_KEY_BYTES:
        raise InvalidArgumentError(name, f"{size} bytes, more than {MAX_UNIQUE_KEY_BYTES}")
    return key


def check_unique_keys(keys: object, count: int, *, name: str = "unique_keys") -> list[str | None]:
    """One key (or ``None``) per payload of a batch; one bad key rejects the batch. The keys of
    ``concurrency_key`` follow the rules of unique keys (``name`` says which)."""
    if isinstance(keys, (str, bytes, Mapping)) or not isinstance(keys, Iterable):
        raise InvalidArgumentTypeError(name, "a sequence of str or None", keys)
    checked = [
        None if k is None else check_unique_key(k, name=f"{name}[{i}]") for i, k in enumerate(keys)
    ]
    if len(checked) != count:
        raise InvalidArgumentError(
            name, f"{len(checked)} keys for {count} payloads: give one per payload"
        )
    return checked


def check_database_url(name: str, value: object) -> URL:
    """A PostgreSQL URL given as a ``postgresql[+driver]://`` (or ``postgres://``) string or a
    SQLAlchemy ``URL``, as a ``URL`` (``listen_url``): refused here, not where it is first used
    (a LISTEN thread, a background check), and never printed with its password."""
    if not isinstance(value, (str, URL)):
        raise InvalidArgumentTypeError(name, "str or sqlalchemy URL", value)
    try:
        url = to_sqlalchemy_url(value)
    except ArgumentError:
        raise InvalidArgumentError(
            name,
            f"not a database URL: {mask_url(value)!r}; expected "
            "postgresql://user:password@host:5432/dbname",
        ) from None
    if url.get_backend_name() != "postgresql":
        raise InvalidArgumentError(
            name, f"not a PostgreSQL URL: {mask_url(url)!r}; pgqueue needs postgresql://..."
        )
    return url
