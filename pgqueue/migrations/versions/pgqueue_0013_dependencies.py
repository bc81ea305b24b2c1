"""Workflows: a job that waits for others, released exactly once by their completion.

Revision ID: pgqueue_0013
Revises: pgqueue_0012
Create Date: 2026-12-07

On ``jobs``, two columns with constant defaults (a catalog-only change on a table that holds jobs,
no rewrite, no backfill):

- ``waiting_on`` (int, 0): how many of the job's dependencies are not finished yet. A waiting job
  is ``queued`` (R1's four statuses stay) with a far ``run_at`` (9999-01-01, which every reader
  decodes), so the claim's range scan of ``jobs_ready_idx`` stops before it exactly as it stops
  before a future-scheduled job: the claim's statement and plan are unchanged. The last
  dependency to finish sets ``run_at = now()``.
- ``has_dependents`` (bool, false): some job waits for this one. It is what the release trigger's
  ``WHEN`` reads, so the completion of a job nobody waits for never calls the trigger function;
  and setting it is what an enqueue with ``depends_on`` locks its dependencies with, which orders
  it against their completion (see below).

``jobs_dependencies``: one row per edge (``job_id`` waits for ``depends_on``), ``pending`` while
the edge still counts in the waiting job's ``waiting_on`` (each edge is settled at most once: a
parent retried by an operator and finishing again releases nothing twice), ``run_on_failure``
from ``on_dependency_failure="run"``. Both ends reference ``jobs`` with ``ON DELETE CASCADE``
(``purge`` takes the edges with the jobs); the primary key ``(depends_on, job_id)`` is the
release's lookup, ``jobs_dependencies_job_id_idx`` the other direction's (the job page).

``jobs_release``: an ``AFTER UPDATE OF status`` row trigger on ``jobs`` for a job with dependents
that became ``done`` or ``failed``, so every way a job finishes (the worker's batched completion,
``pgqueue.complete`` in a handler's transaction, a final failure, the reaper, a cancel) releases
its dependents inside its own statement's transaction: a crash between "parent done" and "child
released" cannot happen. It settles the parent's pending edges and, per waiting job, decrements
``waiting_on`` with one row-locked ``UPDATE`` (two parents finishing at once on two workers
queue on the child's row; the second sees the first's count, so exactly one of them reaches 0).
A failed or cancelled parent instead fails its waiting dependents, and theirs transitively, with
``last_error`` naming it (cancelled ones get ``cancelled_at`` too); those enqueued with
``on_dependency_failure="run"`` are released as if it were done. Its statements run with fresh
snapshots (a trigger function is volatile): an enqueue that locked the parent first and committed
while the completion waited for that lock is seen by the release.

Frozen history: never import pgqueue.models here.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from pgqueue.migrations.options import qualified, target_schema

revision: str = "pgqueue_0013"
down_revision: str | Sequence[str] | None = "pgqueue_0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_COLUMNS = ("waiting_on", "has_dependents")


def _release_function(schema: str | None) -> str:
    """The trigger function's body (S608: only the checked schema is inlined)."""
    jobs = qualified("jobs", schema)
    edges = qualified("jobs_dependencies", schema)
    return f"""
    DECLARE
      why text;
      ids bigint[];
    BEGIN
      -- Each step collects ids, then updates by id = ANY(ids): an index probe per waiting job.
      -- (An UPDATE ... FROM a CTE was planned as a hash join over a scan of jobs: 0.5 ms a call.)
      IF NEW.status = 'done' THEN
        WITH settled AS (
          UPDATE {edges} SET pending = false
          WHERE depends_on = NEW.id AND pending
          RETURNING job_id
        )
        SELECT array_agg(job_id) INTO ids FROM settled;
        IF ids IS NOT NULL THEN
          UPDATE {jobs} AS c
          SET waiting_on = c.waiting_on - 1,
              run_at = CASE WHEN c.waiting_on = 1 THEN now() ELSE c.run_at END
          WHERE c.id = ANY(ids) AND c.status = 'queued' AND c.waiting_on > 0;
        END IF;
        RETURN NULL;
      END IF;
      why := 'dependency ' || NEW.id
        || CASE WHEN NEW.cancelled_at IS NULL THEN ' failed' ELSE ' was cancelled' END;
      -- Every waiting job that fails with it: its "fail" dependents, theirs, and so on (their
      -- own firing of this trigger then finds them failed already and settles their edges).
      WITH RECURSIVE doomed(id) AS (
          SELECT d.job_id FROM {edges} d
          WHERE d.depends_on = NEW.id AND d.pending AND NOT d.run_on_failure
        UNION
          SELECT d.job_id FROM doomed JOIN {edges} d ON d.depends_on = doomed.id
          WHERE d.pending AND NOT d.run_on_failure
      )
      SELECT array_agg(id ORDER BY id) INTO ids FROM doomed;
      IF ids IS NOT NULL THEN
        UPDATE {jobs} AS c
        SET status = 'failed',
            waiting_on = 0,
            run_at = now(),
            last_error = why,
            finished_at = now(),
            cancelled_at = CASE WHEN NEW.cancelled_at IS NOT NULL THEN now() END
        WHERE c.id = ANY(ids) AND c.status = 'queued' AND c.waiting_on > 0;
      END IF;
      -- The "run" dependents are released as by a done parent.
      WITH settled AS (
        UPDATE {edges} SET pending = false
        WHERE depends_on = NEW.id AND pending
        RETURNING job_id, run_on_failure
      )
      SELECT array_agg(job_id) FILTER (WHERE run_on_failure) INTO ids FROM settled;
      IF ids IS NOT NULL THEN
        UPDATE {jobs} AS c
        SET waiting_on = c.waiting_on - 1,
            run_at = CASE WHEN c.waiting_on = 1 THEN now() ELSE c.run_at END
        WHERE c.id = ANY(ids) AND c.status = 'queued' AND c.waiting_on > 0;
      END IF;
      RETURN NULL;
    END;
    """  # noqa: S608


def upgrade() -> None:
    schema = target_schema()
    op.add_column(
        "jobs",
        sa.Column("waiting_on", sa.Integer(), server_default=sa.text("0"), nullable=False),
        schema=schema,
    )
    op.add_column(
        "jobs",
        sa.Column("has_dependents", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        schema=schema,
    )
    jobs_ref = "jobs.id" if schema is None else f"{schema}.jobs.id"
    op.create_table(
        "jobs_dependencies",
        sa.Column("job_id", sa.BigInteger(), nullable=False),
        sa.Column("depends_on", sa.BigInteger(), nullable=False),
        sa.Column("pending", sa.Boolean(), nullable=False),
        sa.Column("run_on_failure", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        # op.f: these exact names whatever naming convention the user's env applies.
        sa.PrimaryKeyConstraint("depends_on", "job_id", name=op.f("jobs_dependencies_pkey")),
        sa.ForeignKeyConstraint(
            ["job_id"],
            [jobs_ref],
            name=op.f("jobs_dependencies_job_id_fkey"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["depends_on"],
            [jobs_ref],
            name=op.f("jobs_dependencies_depends_on_fkey"),
            ondelete="CASCADE",
        ),
        schema=schema,
    )
    op.create_index(
        op.f("jobs_dependencies_job_id_idx"), "jobs_dependencies", ["job_id"], schema=schema
    )
    function = qualified("jobs_release", schema)
    op.execute(
        f"CREATE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS $$"
        f"{_release_function(schema)}$$"
    )
    op.execute(
        f"""
        CREATE TRIGGER jobs_release
        AFTER UPDATE OF status ON {qualified("jobs", schema)}
        FOR EACH ROW
        WHEN (NEW.has_dependents AND NEW.status IN ('done', 'failed')
              AND OLD.status IS DISTINCT FROM NEW.status)
        EXECUTE FUNCTION {function}()
        """
    )


def downgrade() -> None:
    schema = target_schema()
    op.execute(f"DROP TRIGGER jobs_release ON {qualified('jobs', schema)}")
    op.execute(f"DROP FUNCTION {qualified('jobs_release', schema)}()")
    op.drop_table("jobs_dependencies", schema=schema)
    for name in reversed(_COLUMNS):
        op.drop_column("jobs", name, schema=schema)
