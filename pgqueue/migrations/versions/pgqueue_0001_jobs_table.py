"""The jobs table and its partial ready index (R1, R2).

Revision ID: pgqueue_0001
Revises:
Create Date: 2026-11-30

Frozen history: never import pgqueue.models here.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from pgqueue.migrations.options import quoted_schema, target_schema

revision: str = "pgqueue_0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = ("pgqueue",)
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    schema = target_schema()
    if schema is not None:
        op.execute(f"CREATE SCHEMA IF NOT EXISTS {quoted_schema(schema)}")
    op.create_table(
        "jobs",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=True), nullable=False),
        sa.Column("queue", sa.Text(), server_default=sa.text("'default'"), nullable=False),
        sa.Column("payload", postgresql.JSONB(), nullable=False),
        sa.Column("status", sa.Text(), server_default=sa.text("'queued'"), nullable=False),
        sa.Column(
            "run_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False
        ),
        sa.Column("attempts", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("max_attempts", sa.Integer(), server_default=sa.text("5"), nullable=False),
        sa.Column("locked_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("jobs_pkey")),
        sa.CheckConstraint(
            "status IN ('queued', 'running', 'done', 'failed')", name=op.f("jobs_status_check")
        ),
        schema=schema,
    )
    op.create_index(
        "jobs_ready_idx",
        "jobs",
        ["queue", "run_at"],
        postgresql_where=sa.text("status = 'queued'"),
        schema=schema,
    )


def downgrade() -> None:
    schema = target_schema()
    op.drop_index("jobs_ready_idx", table_name="jobs", schema=schema)
    op.drop_table("jobs", schema=schema)
