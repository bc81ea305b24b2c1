"""Durable steps, sleeps and signals: what a job remembers across its attempts.

Revision ID: pgqueue_0019
Revises: pgqueue_0018
Create Date: 2026-12-12

On ``jobs``, four nullable columns without defaults (catalog-only, no rewrite, no backfill;
existing rows read NULL: no step, no signal, not suspended):

- ``steps`` (jsonb): the steps, sleeps and signal waits the job reached, in order:
  ``[{"name", "kind", "at", "attempt", "value"?, "wake_at"?}, ...]``. Written by the job's own
  guarded statements, one per step; deleted with the row (retention, purge).
- ``signals`` (jsonb): the signals received, ``{name: {"payload", "at"}}``; a signal that arrives
  before the job asks for it waits here.
- ``suspended_until`` (timestamptz): the job gave itself back until then (a durable sleep's
  wake-up, a signal wait's timeout, or pgqueue's far-future ``run_at`` for a wait without one).
  While it is in the future the job is shown ``sleeping`` or ``awaiting signal``; its stored
  status stays ``queued``.
- ``awaiting_signal`` (text): the signal a suspended job waits for (NULL: a sleep).

No index: a suspended job's ``run_at`` is its wake-up (or the far future), so it sits at the end
of its level in ``jobs_ready_idx`` and the claim's range scan stops before it, as it does before a
job waiting for its dependencies.

Frozen history: never import pgqueue.models here.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from pgqueue.migrations.options import target_schema

revision: str = "pgqueue_0019"
down_revision: str | Sequence[str] | None = "pgqueue_0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    schema = target_schema()
    op.add_column("jobs", sa.Column("steps", postgresql.JSONB(), nullable=True), schema=schema)
    op.add_column("jobs", sa.Column("signals", postgresql.JSONB(), nullable=True), schema=schema)
    op.add_column(
        "jobs",
        sa.Column("suspended_until", sa.DateTime(timezone=True), nullable=True),
        schema=schema,
    )
    op.add_column("jobs", sa.Column("awaiting_signal", sa.Text(), nullable=True), schema=schema)


def downgrade() -> None:
    schema = target_schema()
    for name in ("awaiting_signal", "suspended_until", "signals", "steps"):
        op.drop_column("jobs", name, schema=schema)
