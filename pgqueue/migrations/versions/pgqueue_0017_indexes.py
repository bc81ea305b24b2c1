"""Two index changes: one index of finished rows, and one of the ready jobs that carry a key.

Revision ID: pgqueue_0017
Revises: pgqueue_0016
Create Date: 2026-12-06

Every job that finishes writes one entry into each partial index over finished rows. Two such
indexes (``jobs_finished_at_idx`` on ``finished_at``, pgqueue_0009, and the retention's
``jobs_prune_idx`` on ``(queue, status, finished_at)``, pgqueue_0016) cost the drain about 10%
(docs/benchmarks.md, "The drain after issues 30 and 31"). The dashboard's chart now reads the
last hour per queue from ``jobs_prune_idx`` (a loose scan for the queues, then a range scan per
queue and status), so the older index is dropped.

``jobs_ready_key_idx`` on ``(queue, concurrency_key, priority DESC, run_at, id)`` over queued
jobs that carry a ``concurrency_key``: the claim of a ``per_key`` queue finds each key's first
ready jobs through it (one probe per key) instead of ranking the queue's whole backlog. Jobs
without a key (every job of a queue without ``per_key``) add no entry.

Both CONCURRENTLY in an autocommit block, as the indexes were built; the downgrade undoes both
the same way.

Frozen history: never import pgqueue.models here.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from pgqueue.migrations.options import drop_invalid_index, target_schema

revision: str = "pgqueue_0017"
down_revision: str | Sequence[str] | None = "pgqueue_0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_DROPPED = "jobs_finished_at_idx"
_KEYED = "jobs_ready_key_idx"


def upgrade() -> None:
    schema = target_schema()
    with op.get_context().autocommit_block():
        op.drop_index(
            _DROPPED,
            table_name="jobs",
            postgresql_concurrently=True,
            if_exists=True,
            schema=schema,
        )
        drop_invalid_index(_KEYED, schema)
        op.create_index(
            _KEYED,
            "jobs",
            ["queue", "concurrency_key", sa.text("priority DESC"), "run_at", "id"],
            postgresql_where=sa.text("status = 'queued' AND concurrency_key IS NOT NULL"),
            postgresql_concurrently=True,
            schema=schema,
        )


def downgrade() -> None:
    schema = target_schema()
    with op.get_context().autocommit_block():
        op.drop_index(_KEYED, table_name="jobs", postgresql_concurrently=True, schema=schema)
        drop_invalid_index(_DROPPED, schema)
        op.create_index(
            _DROPPED,
            "jobs",
            ["finished_at"],
            postgresql_where=sa.text("finished_at IS NOT NULL"),
            postgresql_concurrently=True,
            schema=schema,
        )
