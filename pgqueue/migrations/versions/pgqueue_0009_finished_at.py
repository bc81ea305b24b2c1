"""``jobs.finished_at``: when a job became ``done`` or ``failed``, and two small partial indexes.

Revision ID: pgqueue_0009
Revises: pgqueue_0008
Create Date: 2026-12-03

Every transition to ``done`` or ``failed`` sets ``finished_at = now()`` in the same UPDATE (a retry
clears it), so the dashboard can chart jobs finished per minute. ``jobs_finished_at_idx`` holds
finished rows only (``WHERE finished_at IS NOT NULL``): the last hour is a range scan of it however
long the history. ``jobs_failed_idx`` holds the ids of failed jobs only, so a page of failed jobs
(and ``retry --failed``) reads them by id without walking the done history.

Jobs finished before this revision keep ``finished_at`` NULL: no backfill, which would rewrite
every finished row of a live table. A nullable column without a default is a catalog-only change;
the indexes are built CONCURRENTLY in an autocommit block, as pgqueue_0006's.

Frozen history: never import pgqueue.models here.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from pgqueue.migrations.options import drop_invalid_index, target_schema

revision: str = "pgqueue_0009"
down_revision: str | Sequence[str] | None = "pgqueue_0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: name -> (columns, predicate)
_INDEXES = {
    "jobs_finished_at_idx": (["finished_at"], "finished_at IS NOT NULL"),
    "jobs_failed_idx": (["id"], "status = 'failed'"),
}


def upgrade() -> None:
    schema = target_schema()
    op.add_column(
        "jobs",
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        schema=schema,
    )
    with op.get_context().autocommit_block():
        for name, (columns, predicate) in _INDEXES.items():
            drop_invalid_index(name, schema)
            op.create_index(
                name,
                "jobs",
                columns,
                postgresql_where=sa.text(predicate),
                postgresql_concurrently=True,
                schema=schema,
            )


def downgrade() -> None:
    schema = target_schema()
    with op.get_context().autocommit_block():
        for name in _INDEXES:
            op.drop_index(name, table_name="jobs", postgresql_concurrently=True, schema=schema)
    op.drop_column("jobs", "finished_at", schema=schema)
