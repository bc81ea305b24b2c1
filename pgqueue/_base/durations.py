"""Durations as people type them (``7d``, ``5m``, ``250ms``): the CLI's options, the dashboard's
purge form."""

from __future__ import annotations

import re
from datetime import timedelta

from pgqueue._base.validation import MAX_DURATION

# Matched against the stripped text: a pattern that also allowed blanks around the unit and at
# the end would try every split of a run of blanks between them, quadratic in its length.
# ASCII digits only: ``\d`` (and ``float``) also read other scripts' digits as numbers.
_DURATION = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*(ms|s|m|h|d)?")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(value: str) -> timedelta:
    """``7d``, ``5m``, ``30s``, ``1h``, ``250ms`` or plain seconds (``1.5``) as a timedelta, at
    most :data:`pgqueue.MAX_DURATION` (100 years).

    Raises:
        ValueError: with a message saying what is accepted.
    """
    match = _DURATION.fullmatch(value.strip())
    if match is None:
        raise ValueError(
            f"invalid duration {value!r}: use seconds or a number with s, m, h, d or ms (e.g. 7d)"
        )
    seconds = float(match.group(1)) * _UNIT_SECONDS[match.group(2) or "s"]
    if seconds > MAX_DURATION.total_seconds():
        raise ValueError(
            f"duration {value.strip()!r} is too long: at most {MAX_DURATION.days}d (100 years)"
        )
    return timedelta(seconds=seconds)


def format_duration(value: timedelta) -> str:
    """The inverse of :func:`parse_duration` for whole units: ``7d``, ``90m``, ``30s``."""
    seconds = value.total_seconds()
    for unit in ("d", "h", "m"):
        size = _UNIT_SECONDS[unit]
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"
