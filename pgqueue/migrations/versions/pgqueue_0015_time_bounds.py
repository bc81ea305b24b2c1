"""Time bounds: a job's execution timeout and its not-started deadline.

Revision ID: pgqueue_0015
Revises: pgqueue_0014
Create Date: 2026-12-08

On ``jobs``, three nullable columns without defaults (a catalog-only change on a table that holds
jobs, no rewrite, no backfill; existing rows read NULL: no timeout, no deadline):

- ``timeout`` (interval): how long one attempt's handler may run (``timeout=``). Any worker
  enforces it: the claim returns it with the job.
- ``expires_in`` (interval): a job not started within this long of its ``run_at`` is never run
  (``expires_in=``). The claim itself fails such a job (see below), so it never reaches a handler.
- ``expired_at`` (timestamptz): when a claim found the job past its deadline and failed it; what
  tells an expired job from one that failed on its own (as ``cancelled_at`` tells a cancelled one).

On ``jobs_workers``, ``stuck`` (int, default 0, a constant default: catalog-only too): how many of
the worker's handler threads are stuck in a handler past its timeout, for ``pgqueue workers``.

The claim's scan is unchanged (``jobs_ready_idx``, no new index): the deadline is tested on the
rows the claim already locked, in its SET clause.

Frozen history: never import pgqueue.models here.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from pgqueue.migrations.options import target_schema

revision: str = "pgqueue_0015"
down_revision: str | Sequence[str] | None = "pgqueue_0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    schema = target_schema()
    op.add_column("jobs", sa.Column("timeout", sa.Interval(), nullable=True), schema=schema)
    op.add_column("jobs", sa.Column("expires_in", sa.Interval(), nullable=True), schema=schema)
    op.add_column(
        "jobs", sa.Column("expired_at", sa.DateTime(timezone=True), nullable=True), schema=schema
    )
    op.add_column(
        "jobs_workers",
        sa.Column("stuck", sa.Integer(), server_default=sa.text("0"), nullable=False),
        schema=schema,
    )


def downgrade() -> None:
    schema = target_schema()
    op.drop_column("jobs_workers", "stuck", schema=schema)
    for name in ("expired_at", "expires_in", "timeout"):
        op.drop_column("jobs", name, schema=schema)
