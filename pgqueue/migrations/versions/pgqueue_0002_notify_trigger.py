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

revision: str = "pgqueue_0002"
down_revision: str | Sequence[str] | None = "pgqueue_0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute(
        """
        CREATE FUNCTION jobs_notify() RETURNS trigger
        LANGUAGE plpgsql AS $$
        BEGIN
          PERFORM pg_notify('jobs', NEW.queue);
          RETURN NULL;
        END;
        $$
        """
    )
    op.execute(
        """
        CREATE TRIGGER jobs_notify
        AFTER INSERT ON jobs
        FOR EACH ROW EXECUTE FUNCTION jobs_notify()
        """
    )


def downgrade() -> None:
    op.execute("DROP TRIGGER jobs_notify ON jobs")
    op.execute("DROP FUNCTION jobs_notify()")
