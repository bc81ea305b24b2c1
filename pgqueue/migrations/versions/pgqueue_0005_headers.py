"""A nullable ``headers jsonb`` column: metadata a producer attaches to a job, beside its payload.

Revision ID: pgqueue_0005
Revises: pgqueue_0004
Create Date: 2026-11-30

Headers carry what is about the job rather than in it (a trace context from
``pgqueue.contrib.otel.inject_headers()``, for example): the payload is the user's and need not even
be a JSON object, so nothing of pgqueue's goes inside it. A nullable column without a default is a
catalog-only change: no table rewrite, a brief ``ACCESS EXCLUSIVE`` lock only.

Frozen history: never import pgqueue.models here.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from pgqueue.migrations.options import target_schema

revision: str = "pgqueue_0005"
down_revision: str | Sequence[str] | None = "pgqueue_0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "jobs",
        sa.Column("headers", postgresql.JSONB(), nullable=True),
        schema=target_schema(),
    )


def downgrade() -> None:
    op.drop_column("jobs", "headers", schema=target_schema())
