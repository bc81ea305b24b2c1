"""Retention: how long finished jobs are kept, per queue, and where workers note their pruning.

Revision ID: pgqueue_0016
Revises: pgqueue_0015
Create Date: 2026-12-10

``jobs_retention``: one row per queue with a retention of its own, plus the default's row (queue
``''``, a name no queue may have) once someone sets it, plus a row per queue a worker pruned:

- ``done`` / ``failed`` (interval): how long the queue's ``done`` and ``failed`` jobs are kept
  after ``finished_at``; ``done_set`` / ``failed_set`` say whether the row sets the kind at all
  (false: the default's setting applies). Set with a NULL interval is "kept for ever".
- ``pruned_at`` / ``pruned_by``: when, and by which worker, the queue was last pruned. A worker
  prunes a queue in short transactions that each hold this row locked (``FOR UPDATE SKIP
  LOCKED``: the others skip it, no two delete at once) and move ``pruned_at``; another worker
  starts only once ``pruned_at`` is a minute old. A row lock, not an advisory lock: it is
  transaction-scoped, so it works through a transaction-mode pooler.

On ``jobs``, ``jobs_prune_idx`` on ``(queue, status, finished_at)`` over finished rows (built
CONCURRENTLY in an autocommit block, as pgqueue_0009's): a queue's prune reads its own expired
rows in ``finished_at`` order and stops at the batch's limit, never another queue's history nor
the live rows.

Frozen history: never import pgqueue.models here.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from pgqueue.migrations.options import drop_invalid_index, target_schema

revision: str = "pgqueue_0016"
down_revision: str | Sequence[str] | None = "pgqueue_0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_INDEX = "jobs_prune_idx"
_INDEX_PREDICATE = "finished_at IS NOT NULL"


def upgrade() -> None:
    schema = target_schema()
    op.create_table(
        "jobs_retention",
        sa.Column("queue", sa.Text(), nullable=False),
        sa.Column("done", sa.Interval(), nullable=True),
        sa.Column("failed", sa.Interval(), nullable=True),
        sa.Column("done_set", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column("failed_set", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column("pruned_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("pruned_by", sa.Text(), nullable=True),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        # op.f: these exact names whatever naming convention the user's env applies.
        sa.PrimaryKeyConstraint("queue", name=op.f("jobs_retention_pkey")),
        sa.CheckConstraint("done > interval '0'", name=op.f("jobs_retention_done_check")),
        sa.CheckConstraint("failed > interval '0'", name=op.f("jobs_retention_failed_check")),
        sa.CheckConstraint("done_set OR done IS NULL", name=op.f("jobs_retention_done_set_check")),
        sa.CheckConstraint(
            "failed_set OR failed IS NULL", name=op.f("jobs_retention_failed_set_check")
        ),
        schema=schema,
    )
    with op.get_context().autocommit_block():
        drop_invalid_index(_INDEX, schema)
        op.create_index(
            _INDEX,
            "jobs",
            ["queue", "status", "finished_at"],
            postgresql_where=sa.text(_INDEX_PREDICATE),
            postgresql_concurrently=True,
            schema=schema,
        )


def downgrade() -> None:
    schema = target_schema()
    with op.get_context().autocommit_block():
        op.drop_index(_INDEX, table_name="jobs", postgresql_concurrently=True, schema=schema)
    op.drop_table("jobs_retention", schema=schema)
