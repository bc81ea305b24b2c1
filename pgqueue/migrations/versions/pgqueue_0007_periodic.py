"""Periodic jobs: the ``jobs_periodic`` table, one row per definition name.

Revision ID: pgqueue_0007
Revises: pgqueue_0006
Create Date: 2026-12-01

A worker that declares a periodic definition upserts its row; a tick is enqueued by one statement
that moves ``last_tick`` forward with a compare-and-set and inserts the tick's job, so any number
of workers fire each tick once, through a transaction-mode pooler too (no advisory lock, no
session state). A new, empty table: nothing on ``jobs`` changes, no lock on it is taken.

Frozen history: never import pgqueue.models here.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from pgqueue.migrations.options import target_schema

revision: str = "pgqueue_0007"
down_revision: str | Sequence[str] | None = "pgqueue_0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "jobs_periodic",
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("schedule", sa.Text(), nullable=False),
        sa.Column("timezone", sa.Text(), nullable=False),
        sa.Column("queue", sa.Text(), nullable=False),
        sa.Column("ticks_from", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_tick", sa.DateTime(timezone=True), nullable=True),
        sa.Column(
            "declared_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        # op.f: this exact name whatever naming convention the user's env applies.
        sa.PrimaryKeyConstraint("name", name=op.f("jobs_periodic_pkey")),
        schema=target_schema(),
    )


def downgrade() -> None:
    op.drop_table("jobs_periodic", schema=target_schema())
