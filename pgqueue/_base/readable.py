"""Reading rows whatever SQL wrote in them: a value no Python client can load is shown, not fatal.

pgqueue refuses such values on the way in (:mod:`pgqueue._base.validation`), but a row written by
SQL can hold a ``timestamptz`` of year 29405 or ``'infinity'`` (Python's ``datetime`` stops at year
9999: psycopg raises ``DataError``), or ``jsonb`` nested thousands of levels deep (``json.loads``
raises ``RecursionError``) or with a number of 5,000 digits (``ValueError``). Either error fails
the whole result, so one such row would break every listing it falls in. The readers select those
columns through :func:`readable` instead, and :func:`decoded` maps each row: a value Python holds
is returned as always, any other as an :class:`Unreadable` carrying the server's text.

Costs nothing a reader would notice: two ``CASE`` per timestamp column, evaluated on the rows of
the page only, and the JSON decoded by the same ``json.loads`` psycopg would have called.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, DateTime, Text, case, cast, literal_column
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Row

from pgqueue._base.validation import MAX_JSON_DEPTH, json_nested_deeper_than

#: Times a ``datetime`` holds in any session time zone: years 1 to 9999, with two days of margin
#: for the zone's offset (psycopg loads a ``timestamptz`` in the session's zone).
READABLE_FROM: ColumnElement[Any] = literal_column("'0001-01-03 00:00:00+00'::timestamptz")
READABLE_UNTIL: ColumnElement[Any] = literal_column("'9999-12-29 00:00:00+00'::timestamptz")
#: Suffix of the column that carries a timestamp's text when the timestamp itself cannot come.
STORED_SUFFIX = "__stored"
_TIME_PROBLEM = "outside the years 1 to 9999 of Python's datetime"


@dataclass(frozen=True)
class Unreadable:
    """A stored value no Python client can load, shown as PostgreSQL renders it.

    Only a row written by SQL holds one (pgqueue refuses such values before any SQL runs): a
    time outside the years 1 to 9999, or JSON nested more than
    :data:`pgqueue.MAX_JSON_DEPTH` levels deep or holding a number Python will not parse.

    Attributes:
        text: The value as the server renders it (``'29405-01-01 00:00:00+00'``, ``'infinity'``,
            the JSON text).
        problem: Why it is not loaded.

    .. versionadded:: 0.1.0
    """

    text: str
    problem: str

    def __str__(self) -> str:
        return f"unreadable ({self.problem}): {self.text}"


def readable(columns: Iterable[Any]) -> list[ColumnElement[Any]]:
    """The columns to select so that every row loads: each timestamp as itself when Python holds
    it, else ``NULL`` beside a ``<name>__stored`` text; each ``jsonb`` as its text."""
    selected: list[ColumnElement[Any]] = []
    for column in columns:
        if isinstance(column.type, DateTime):
            inside = column.between(READABLE_FROM, READABLE_UNTIL)
            selected.append(case((inside, column)).label(column.name))
            selected.append(case((~inside, cast(column, Text))).label(column.name + STORED_SUFFIX))
        elif isinstance(column.type, JSONB):
            selected.append(cast(column, Text).label(column.name))
        else:
            selected.append(column)
    return selected


def decoded(
    row: Row[Any],
    json_columns: Iterable[str] = (
        "payload",
        "headers",
        "errors",
        "result",
        "progress",
        "steps",
        "signals",
    ),
) -> dict[str, Any]:
    """A row selected with :func:`readable` as ``{column: value}``, an unreadable value as an
    :class:`Unreadable`."""
    values: dict[str, Any] = {}
    for key, value in row._mapping.items():
        if key.endswith(STORED_SUFFIX):
            if value is not None:
                values[key.removesuffix(STORED_SUFFIX)] = Unreadable(value, _TIME_PROBLEM)
        elif key in json_columns:
            values[key] = decode_json(value)
        else:
            values[key] = value
    return values


def decode_json(text: str | None) -> Any:
    """``json.loads``, or an :class:`Unreadable` for JSON too deep or with too long a number."""
    if text is None:
        return None
    try:
        value = json.loads(text)
    except RecursionError:
        return Unreadable(text, f"nested more than {MAX_JSON_DEPTH} levels deep")
    except ValueError as exc:
        return Unreadable(text, f"not decodable: {str(exc).split(';')[0]}")
    # Decodable here, but deeper than the renderers (json.dumps with an indent) are sure to take.
    if json_nested_deeper_than(text, MAX_JSON_DEPTH):
        return Unreadable(text, f"nested more than {MAX_JSON_DEPTH} levels deep")
    return value
