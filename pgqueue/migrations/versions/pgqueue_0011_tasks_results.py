"""Typed tasks and their results: which code runs a job, what it returned, how far it got.

Revision ID: pgqueue_0011
Revises: pgqueue_0010
Create Date: 2026-12-05

On ``jobs``, three nullable columns (a catalog-only change on a table that holds jobs: no rewrite,
no backfill; existing rows read NULL):

- ``task`` (text): the name of the :class:`pgqueue.Task` that runs the job; NULL for the
  queue-keyed jobs of ``enqueue(conn, payload, queue=...)``, which keep their queue's handler.
- ``result`` (jsonb): the JSON value the task (or a queue handler) returned, written by the same
  batched statement that marks the job ``done``; it lives as long as the row (``purge`` removes
  it with the job).
- ``progress`` (jsonb): the last value a running job passed to ``set_progress``, written at most
  about once per heartbeat.

Frozen history: never import pgqueue.models here.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from pgqueue.migrations.options import target_schema

revision: str = "pgqueue_0011"
down_revision: str | Sequence[str] | None = "pgqueue_0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_COLUMNS = ("task", "result", "progress")


def upgrade() -> None:
    schema = target_schema()
    for column in (
        sa.Column("task", sa.Text(), nullable=True),
        sa.Column("result", postgresql.JSONB(), nullable=True),
        sa.Column("progress", postgresql.JSONB(), nullable=True),
    ):
        op.add_column("jobs", column, schema=schema)


def downgrade() -> None:
    schema = target_schema()
    for name in reversed(_COLUMNS):
        op.drop_column("jobs", name, schema=schema)
