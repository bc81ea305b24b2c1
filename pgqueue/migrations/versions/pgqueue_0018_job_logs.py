"""Per-job logs: the lines each attempt of a job recorded, beside the job.

Revision ID: pgqueue_0018
Revises: pgqueue_0017
Create Date: 2026-12-06

``jobs_logs``: one row per (job, attempt) that recorded a line (``JobContext.log``, or a
``logging`` record the worker captured while the handler ran). ``lines`` is the attempt's
buffer as a JSON array (``json``: written and read whole, cheaper to write than ``jsonb``),
oldest first, at most 1,000 lines / 256 KiB; ``dropped`` counts the older lines the bound
dropped. The worker rewrites the row from the statements that already
write the job's outcome or extend its lease, never in one of its own. The primary key leads with
``job_id``: it serves the reads of one job and the deletes of the purge and the retention
pruner, which remove a batch's lines in the statement that deletes its jobs. No foreign key: its
``ON DELETE CASCADE`` is a trigger per deleted job, which made the purge 1.5x slower; a job
deleted by hand leaves its lines behind (job ids are never reused).

Frozen history: never import pgqueue.models here.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from pgqueue.migrations.options import target_schema

revision: str = "pgqueue_0018"
down_revision: str | Sequence[str] | None = "pgqueue_0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    schema = target_schema()
    op.create_table(
        "jobs_logs",
        sa.Column("job_id", sa.BigInteger(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("lines", postgresql.JSON(astext_type=sa.Text()), nullable=False),
        sa.Column("dropped", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        # op.f: this exact name whatever naming convention the user's env applies.
        sa.PrimaryKeyConstraint("job_id", "attempt", name=op.f("jobs_logs_pkey")),
        schema=schema,
    )


def downgrade() -> None:
    op.drop_table("jobs_logs", schema=target_schema())
