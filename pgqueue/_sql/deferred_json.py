"""A psycopg cursor whose ``jsonb`` columns come back as their JSON text, decoded later.

Why: the worker claims a batch and holds its jobs until they finish. A payload decoded at the
claim is a tree of containers that lives that long, and the garbage collector counts the
containers allocated towards its next young collection: a typed task's
``{"args": [...], "kwargs": {}}`` is three per job, and a drain of 20,000 task jobs ran 90-129
young collections (and with them, in some drains, a collection of the whole process, 50-85 ms)
where the same drain with the payload ``{"i": i}`` ran 3-29 (docs/benchmarks.md). Kept as
``bytes`` (no references, never tracked), a payload costs the collector nothing until a handler
reads it (:attr:`pgqueue.JobContext.payload` decodes it then), and a task's arguments are decoded
for its call alone (:func:`pgqueue.jobs.fresh_payload`).

Only where the cursor would decode with the standard ``json.loads``, so the value is the one
psycopg would have made: a cursor given another ``loads`` (psycopg's ``set_json_loads``, globally
or on the engine's connections) keeps decoding as it did. Registered on the worker's held claim
cursors only (:class:`pgqueue._worker.replay.Replay` with ``defer_json``).
"""

from __future__ import annotations

import json
from typing import Any

import psycopg
from psycopg.adapt import Buffer, Loader
from psycopg.pq import Format

#: ``jsonb``'s type oid, from psycopg's registry of the built-in types.
JSONB_OID = psycopg.postgres.types["jsonb"].oid


class _JsonText(Loader):
    """``jsonb`` in text format, kept as its text (``bytes``)."""

    format = Format.TEXT

    def load(self, data: Buffer) -> bytes:
        return bytes(data)


def defer_jsonb(cursor: psycopg.Cursor[Any]) -> bool:
    """Make ``cursor`` return its text-format ``jsonb`` values as their JSON text (``bytes``),
    when it would have decoded them with ``json.loads``. True when it does."""
    current = cursor.adapters.get_loader(JSONB_OID, Format.TEXT)
    if current is None or getattr(current(JSONB_OID, cursor), "loads", None) is not json.loads:
        return False
    cursor.adapters.register_loader(JSONB_OID, _JsonText)
    return True
