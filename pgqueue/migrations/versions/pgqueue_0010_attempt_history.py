"""What operators ask of a job: its error history, who holds it, snoozes, a cancel mark, workers.

Revision ID: pgqueue_0010
Revises: pgqueue_0009
Create Date: 2026-12-04

On ``jobs``, five columns, each nullable or with a constant default (a catalog-only change on a
table that holds jobs, no rewrite, no backfill):

- ``errors`` (jsonb): the last failed attempts, oldest first, each ``{"attempt", "at", "error",
  "traceback"}``; ``last_error`` keeps the newest one-line error as before.
- ``snoozes`` (int, 0): how often a handler gave its job back with ``pgqueue.Snooze``.
- ``cancelled_at`` (timestamptz): set by a cancel, so a cancelled job is told from a failed one by
  a column instead of the text of ``last_error`` (R1's four statuses stay).
- ``locked_by`` / ``locked_at``: the worker (its ``application_name``) that claimed the job, and
  when; set by the claim, kept after the job finishes.

``jobs_workers``: one row per running worker process (name, host, pid, queues, started_at), written
once when it starts and deleted when it stops cleanly; whether it is connected is read from
``pg_stat_activity``, so a killed worker's row says nothing false.

Frozen history: never import pgqueue.models here.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from pgqueue.migrations.options import target_schema

revision: str = "pgqueue_0010"
down_revision: str | Sequence[str] | None = "pgqueue_0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_COLUMNS = ("errors", "snoozes", "cancelled_at", "locked_by", "locked_at")


def upgrade() -> None:
    schema = target_schema()
    for column in (
        sa.Column("errors", postgresql.JSONB(), nullable=True),
        sa.Column("snoozes", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("cancelled_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("locked_by", sa.Text(), nullable=True),
        sa.Column("locked_at", sa.DateTime(timezone=True), nullable=True),
    ):
        op.add_column("jobs", column, schema=schema)
    op.create_table(
        "jobs_workers",
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("host", sa.Text(), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("queues", postgresql.ARRAY(sa.Text()), nullable=False),
        sa.Column(
            "started_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        # op.f: this exact name whatever naming convention the user's env applies.
        sa.PrimaryKeyConstraint("name", name=op.f("jobs_workers_pkey")),
        schema=schema,
    )


def downgrade() -> None:
    schema = target_schema()
    op.drop_table("jobs_workers", schema=schema)
    for name in reversed(_COLUMNS):
        op.drop_column("jobs", name, schema=schema)
