"""Partial index on the leases of running jobs, so the reaper never scans finished history.

Revision ID: pgqueue_0003
Revises: pgqueue_0002
Create Date: 2026-11-30

Built CONCURRENTLY outside a transaction: online-safe on a big live table.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from pgqueue.migrations.options import drop_invalid_index, target_schema

revision: str = "pgqueue_0003"
down_revision: str | Sequence[str] | None = "pgqueue_0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    schema = target_schema()
    with op.get_context().autocommit_block():
        drop_invalid_index("jobs_lease_idx", schema)
        op.create_index(
            "jobs_lease_idx",
            "jobs",
            ["locked_until"],
            postgresql_where=sa.text("status = 'running'"),
            postgresql_concurrently=True,
            schema=schema,
        )


def downgrade() -> None:
    schema = target_schema()
    with op.get_context().autocommit_block():
        op.drop_index(
            "jobs_lease_idx", table_name="jobs", postgresql_concurrently=True, schema=schema
        )
