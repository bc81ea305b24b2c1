"""Storage parameters that keep the jobs table healthy under queue churn (R21).

Revision ID: pgqueue_0004
Revises: pgqueue_0003
Create Date: 2026-11-30

A queue table is small and hot: every job is inserted, updated two to four times (claim, lease
extensions, completion) and eventually deleted by ``purge``, so most row versions die within
seconds. PostgreSQL's defaults vacuum a table after 50 + 20% of its rows are dead, which on a table
of 1,000,000 finished jobs waits for 200,000 dead versions, while the claim's index scans step over
them. Here (values in :data:`pgqueue.storage.JOBS_STORAGE_PARAMETERS`):

- ``autovacuum_vacuum_scale_factor = 0.01``, ``autovacuum_vacuum_threshold = 1000``: vacuum after
  1,000 + 1% dead rows, whatever the size of the done history;
- ``autovacuum_vacuum_insert_scale_factor = 0.01``: a large enqueue also gets its visibility map
  set early;
- ``autovacuum_analyze_scale_factor = 0.02``, ``autovacuum_analyze_threshold = 1000``: the
  statistics the claim's plan relies on follow the swings between queued and done.

No ``fillfactor``: a lower fill factor only leaves room for HOT updates, and an update that
changes an indexed column, or a column of an index predicate, cannot be HOT. Every pgqueue update
changes ``status`` (in the predicates of ``jobs_ready_idx`` and ``jobs_lease_idx``),
``locked_until`` or ``run_at``. Measured with ``bench/vacuum.py`` (200,000 jobs through claim,
heartbeat and complete; figures in ``docs/operations.md``): 0 HOT updates with fillfactor 100, 90
or 70, and fillfactor 70 only made the table larger. Nor ``autovacuum_vacuum_cost_delay = 0``:
against the default 2 ms it kept no fewer dead rows and cost throughput.

Frozen history: never import pgqueue.models here; the values come from the constant module.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from pgqueue.migrations.options import qualified, target_schema
from pgqueue.storage import JOBS_STORAGE_PARAMETERS, parameters_clause

revision: str = "pgqueue_0004"
down_revision: str | Sequence[str] | None = "pgqueue_0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    schema = target_schema()
    # Only constants and the checked schema identifier are inlined.
    op.execute(f"ALTER TABLE {qualified('jobs', schema)} SET ({parameters_clause()})")


def downgrade() -> None:
    schema = target_schema()
    names = ", ".join(JOBS_STORAGE_PARAMETERS)
    op.execute(f"ALTER TABLE {qualified('jobs', schema)} RESET ({names})")
