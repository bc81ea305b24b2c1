"""The jobs_notify() function and AFTER INSERT trigger (R16): wake listeners with the queue name.

Revision ID: pgqueue_0002
Revises: pgqueue_0001
Create Date: 2026-11-30

Postgres folds identical notifications of one transaction into one, so a bulk insert into one
queue wakes each listener once. The payload is the queue name, never the job.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from pgqueue.migrations.options import notify_channel, qualified, target_schema

revision: str = "pgqueue_0002"
down_revision: str | Sequence[str] | None = "pgqueue_0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    schema = target_schema()
    # The channel is a checked plain identifier (``jobs`` or ``<schema>.jobs``), safe to inline.
    op.execute(
        f"""
        CREATE FUNCTION {qualified("jobs_notify", schema)}() RETURNS trigger
        LANGUAGE plpgsql AS $$
        BEGIN
          PERFORM pg_notify('{notify_channel(schema)}', NEW.queue);
          RETURN NULL;
        END;
        $$
        """
    )
    op.execute(
        f"""
        CREATE TRIGGER jobs_notify
        AFTER INSERT ON {qualified("jobs", schema)}
        FOR EACH ROW EXECUTE FUNCTION {qualified("jobs_notify", schema)}()
        """
    )


def downgrade() -> None:
    schema = target_schema()
    op.execute(f"DROP TRIGGER jobs_notify ON {qualified('jobs', schema)}")
    op.execute(f"DROP FUNCTION {qualified('jobs_notify', schema)}()")
