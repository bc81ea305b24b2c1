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

And the ``jobs_notify_finished()`` function with its statement-level ``AFTER UPDATE`` trigger:
each UPDATE that leaves jobs ``done`` or ``failed`` (a completion, a final failure, the reaper, a
cancel, by a worker or by hand) sends their ids, comma-separated, on the placement's finished
channel (``jobs_done`` or ``<schema>.done``), at most 300 ids per notification (a payload stays
under PostgreSQL's 8,000 bytes); delivered on commit, and what ``pgqueue.wait_for`` wakes on. It
reads the statement's new rows from a transition table, like ``jobs_notify`` (pgqueue_0008):
one trigger call per statement, not per row; one that finished no job sends nothing.

Frozen history: never import pgqueue.models here.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from pgqueue.migrations.options import finished_channel, qualified, target_schema

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
    function = qualified("jobs_notify_finished", schema)
    # The channel is a checked plain identifier and a constant suffix, safe to inline.
    op.execute(
        f"""
        CREATE FUNCTION {function}() RETURNS trigger
        LANGUAGE plpgsql AS $$
        BEGIN
          PERFORM pg_notify('{finished_channel(schema)}', string_agg(id::text, ','))
          FROM (
            SELECT id, (row_number() OVER ()) / 300 AS chunk
            FROM finished WHERE status IN ('done', 'failed')
          ) AS ids
          GROUP BY chunk;
          RETURN NULL;
        END;
        $$
        """  # noqa: S608
    )
    op.execute(
        f"""
        CREATE TRIGGER jobs_notify_finished
        AFTER UPDATE ON {qualified("jobs", schema)}
        REFERENCING NEW TABLE AS finished FOR EACH STATEMENT EXECUTE FUNCTION {function}()
        """
    )


def downgrade() -> None:
    schema = target_schema()
    op.execute(f"DROP TRIGGER jobs_notify_finished ON {qualified('jobs', schema)}")
    op.execute(f"DROP FUNCTION {qualified('jobs_notify_finished', schema)}()")
    for name in reversed(_COLUMNS):
        op.drop_column("jobs", name, schema=schema)
