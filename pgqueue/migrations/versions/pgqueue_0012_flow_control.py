"""Flow control: the ``jobs_queues`` table (pause and limits) and ``jobs.concurrency_key``.

Revision ID: pgqueue_0012
Revises: pgqueue_0011
Create Date: 2026-12-06

``jobs_queues``: one row per queue an operator paused or limited (a queue without a row is
unpaused and unlimited, so the claim of a queue nobody configured reads nothing new):

- ``paused``: workers claim nothing from the queue; enqueueing into it still works.
- ``concurrency`` / ``per_key``: at most this many of the queue's jobs (of one
  ``concurrency_key``) ``running`` at once, over every worker; NULL is no limit.
- ``rate_limit`` / ``rate_period``: at most ``rate_limit`` jobs start per ``rate_period``; both
  NULL or both set, the period positive.
- ``window_start`` / ``window_count``: the fixed window of the rate limit, written by the claim in
  its own statement (never by a worker's clock).
- ``updated_at``: when the settings last changed.

On ``jobs``, ``concurrency_key`` (text, nullable: a catalog-only change, no rewrite, existing rows
read NULL) and ``jobs_running_key_idx``, a partial index over running jobs that carry a key (built
CONCURRENTLY in an autocommit block, as pgqueue_0009's), so counting a key's running jobs never
reads the queued backlog or the finished history.

Frozen history: never import pgqueue.models here.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from pgqueue.migrations.options import drop_invalid_index, target_schema

revision: str = "pgqueue_0012"
down_revision: str | Sequence[str] | None = "pgqueue_0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_INDEX = "jobs_running_key_idx"
_INDEX_PREDICATE = "status = 'running' AND concurrency_key IS NOT NULL"


def upgrade() -> None:
    schema = target_schema()
    op.create_table(
        "jobs_queues",
        sa.Column("queue", sa.Text(), nullable=False),
        sa.Column("paused", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column("concurrency", sa.Integer(), nullable=True),
        sa.Column("per_key", sa.Integer(), nullable=True),
        sa.Column("rate_limit", sa.Integer(), nullable=True),
        sa.Column("rate_period", sa.Interval(), nullable=True),
        sa.Column("window_start", sa.DateTime(timezone=True), nullable=True),
        sa.Column("window_count", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        # op.f: these exact names whatever naming convention the user's env applies.
        sa.PrimaryKeyConstraint("queue", name=op.f("jobs_queues_pkey")),
        sa.CheckConstraint("concurrency >= 1", name=op.f("jobs_queues_concurrency_check")),
        sa.CheckConstraint("per_key >= 1", name=op.f("jobs_queues_per_key_check")),
        sa.CheckConstraint("rate_limit >= 1", name=op.f("jobs_queues_rate_limit_check")),
        sa.CheckConstraint(
            "(rate_limit IS NULL) = (rate_period IS NULL)", name=op.f("jobs_queues_rate_check")
        ),
        sa.CheckConstraint(
            "rate_period > interval '0'", name=op.f("jobs_queues_rate_period_check")
        ),
        schema=schema,
    )
    op.add_column("jobs", sa.Column("concurrency_key", sa.Text(), nullable=True), schema=schema)
    with op.get_context().autocommit_block():
        drop_invalid_index(_INDEX, schema)
        op.create_index(
            _INDEX,
            "jobs",
            ["queue", "concurrency_key"],
            postgresql_where=sa.text(_INDEX_PREDICATE),
            postgresql_concurrently=True,
            schema=schema,
        )


def downgrade() -> None:
    schema = target_schema()
    with op.get_context().autocommit_block():
        op.drop_index(_INDEX, table_name="jobs", postgresql_concurrently=True, schema=schema)
    op.drop_column("jobs", "concurrency_key", schema=schema)
    op.drop_table("jobs_queues", schema=schema)
