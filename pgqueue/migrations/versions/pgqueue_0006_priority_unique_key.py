"""Priorities and unique keys: ``jobs.priority`` (0-9, higher first), ``jobs.unique_key``.

Revision ID: pgqueue_0006
Revises: pgqueue_0005
Create Date: 2026-12-01

``jobs_ready_idx`` gains the priority, ``(queue, priority, run_at) WHERE status = 'queued'``: the
claim walks it one priority level at a time (highest first), each level a bounded range scan of
ready rows, so future jobs of a higher priority are never walked. ``jobs_unique_key_idx`` is a
partial unique index over live jobs that have a key: jobs without a key add no entry to it.

Both columns are added with a constant default (no table rewrite); the indexes are built
CONCURRENTLY in an autocommit block, so a live table keeps taking jobs. The new ready index is
built under a temporary name, then swapped for the old one.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from pgqueue.migrations.options import drop_invalid_index, qualified, target_schema

revision: str = "pgqueue_0006"
down_revision: str | Sequence[str] | None = "pgqueue_0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_LIVE_KEYS = "unique_key IS NOT NULL AND status IN ('queued', 'running')"


def _swap_ready_index(columns: list[str], schema: str | None) -> None:
    """Build ``jobs_ready_idx`` on ``columns`` under a temporary name, then replace the old one."""
    drop_invalid_index("jobs_ready_idx_new", schema)
    op.create_index(
        "jobs_ready_idx_new",
        "jobs",
        columns,
        postgresql_where=sa.text("status = 'queued'"),
        postgresql_concurrently=True,
        schema=schema,
    )
    op.drop_index("jobs_ready_idx", table_name="jobs", postgresql_concurrently=True, schema=schema)
    op.execute(f"ALTER INDEX {qualified('jobs_ready_idx_new', schema)} RENAME TO jobs_ready_idx")


def upgrade() -> None:
    schema = target_schema()
    op.add_column(
        "jobs",
        sa.Column("priority", sa.SmallInteger(), server_default=sa.text("0"), nullable=False),
        schema=schema,
    )
    op.add_column("jobs", sa.Column("unique_key", sa.Text(), nullable=True), schema=schema)
    # op.f: this exact name whatever naming convention the user's env applies (as pgqueue_0001).
    op.create_check_constraint(
        op.f("jobs_priority_check"), "jobs", "priority >= 0 AND priority <= 9", schema=schema
    )
    with op.get_context().autocommit_block():
        _swap_ready_index(["queue", "priority", "run_at"], schema)
        drop_invalid_index("jobs_unique_key_idx", schema)
        op.create_index(
            "jobs_unique_key_idx",
            "jobs",
            ["queue", "unique_key"],
            unique=True,
            postgresql_where=sa.text(_LIVE_KEYS),
            postgresql_concurrently=True,
            schema=schema,
        )


def downgrade() -> None:
    schema = target_schema()
    with op.get_context().autocommit_block():
        op.drop_index(
            "jobs_unique_key_idx", table_name="jobs", postgresql_concurrently=True, schema=schema
        )
        _swap_ready_index(["queue", "run_at"], schema)
    op.drop_constraint(op.f("jobs_priority_check"), "jobs", type_="check", schema=schema)
    op.drop_column("jobs", "unique_key", schema=schema)
    op.drop_column("jobs", "priority", schema=schema)
