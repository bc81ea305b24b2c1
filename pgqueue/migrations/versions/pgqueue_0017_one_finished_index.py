"""One index of finished rows: ``jobs_finished_at_idx`` goes, ``jobs_prune_idx`` serves both.

Revision ID: pgqueue_0017
Revises: pgqueue_0016
Create Date: 2026-12-06

Every job that finishes writes one entry into each partial index over finished rows. Two such
indexes (``jobs_finished_at_idx`` on ``finished_at``, pgqueue_0009, and the retention's
``jobs_prune_idx`` on ``(queue, status, finished_at)``, pgqueue_0016) cost the drain about 10%
(docs/benchmarks.md, "The drain after issues 30 and 31"). The dashboard's chart now reads the
last hour per queue from ``jobs_prune_idx`` (a loose scan for the queues, then a range scan per
queue and status), so the older index is dropped, CONCURRENTLY in an autocommit block as it was
built. The downgrade builds it again the same way.

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

_INDEX = "jobs_finished_at_idx"


def upgrade() -> None:
    schema = target_schema()
    with op.get_context().autocommit_block():
        op.drop_index(
            _INDEX,
            table_name="jobs",
            postgresql_concurrently=True,
            if_exists=True,
            schema=schema,
        )


def downgrade() -> None:
    schema = target_schema()
    with op.get_context().autocommit_block():
        drop_invalid_index(_INDEX, schema)
        op.create_index(
            _INDEX,
            "jobs",
            ["finished_at"],
            postgresql_where=sa.text("finished_at IS NOT NULL"),
            postgresql_concurrently=True,
            schema=schema,
        )
