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
- ``has_dependents`` (bool, false): some job waits for this one. It is what the release trigger
  looks for in a statement's new rows, so a statement finishing only jobs nobody waits for stops
  at that check; and setting it is what an enqueue with ``depends_on`` locks its dependencies
  with, which orders it against their completion (see below).

``jobs_dependencies``: one row per edge (``job_id`` waits for ``depends_on``), ``pending`` while
the edge still counts in the waiting job's ``waiting_on`` (each edge is settled at most once: a
parent retried by an operator and finishing again releases nothing twice), ``run_on_failure``
from ``on_dependency_failure="run"``. Both ends reference ``jobs`` with ``ON DELETE CASCADE``
(``purge`` takes the edges with the jobs); the primary key ``(depends_on, job_id)`` is the
release's lookup, ``jobs_dependencies_job_id_idx`` the other direction's (the job page).

``jobs_release``: a statement-level ``AFTER UPDATE`` trigger on ``jobs`` with the statement's new
rows as a transition table (``new_rows``), so every way a job finishes (the worker's batched
completion, ``pgqueue.complete`` in a handler's transaction, a final failure, the reaper, a
cancel) releases its dependents inside its own statement's transaction: a crash between "parent
done" and "child released" cannot happen. A whole batch at once: it settles every pending edge of
the statement's finished parents (``has_dependents``, ``done`` or ``failed``) in one ``UPDATE``
and decrements each waiting job by its count of settled edges in one row-locked ``UPDATE``, in
id order (a 10,000-member fan-in is decremented once per completion statement, not once per
member: the row trigger this replaced drained such a fan-out at 0.3x the rate of independent
jobs). Two parents finishing at once on two workers queue on the child's row; the second
re-reads the first's committed count, so exactly one of them reaches 0. A failed or cancelled
parent instead fails its waiting dependents, and theirs transitively, with ``last_error`` naming
it (the lowest such parent of the statement; cancelled ones get ``cancelled_at`` too); those
enqueued with ``on_dependency_failure="run"`` are released as if it were done. Its statements
run with fresh snapshots (a trigger function is volatile): an enqueue that locked the parent
first and committed while the completion waited for that lock is seen by the release.

Why no ``OLD TABLE`` (to compare the old status) and no ``OF status``: an edge is settled once
(``pending``), so a finished job updated again releases nothing twice; and PostgreSQL refuses a
column list on a trigger with transition tables, so it fires after every ``UPDATE`` of ``jobs``
and returns at its first check when no new row is a finished parent (about 1.6 us per job of a
no-op drain, docs/benchmarks.md). The new rows' tuplestore is shared with
``jobs_notify_finished`` (pgqueue_0011): one capture per table and event for all its triggers.

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
      ids bigint[];
      counts int[];
      causes bigint[];
    BEGIN
      -- The statement's rows that are finished parents; most statements (claims, completions
      -- of jobs nobody waits for) stop here. No OLD TABLE: a pending edge of a finished parent
      -- is due whatever the status was before, and an edge is settled once (pending), so a
      -- done job updated again releases nothing twice.
      IF NOT EXISTS (
        SELECT 1 FROM new_rows WHERE has_dependents AND status IN ('done', 'failed')
      ) THEN
        RETURN NULL;
      END IF;
      -- Every waiting job that fails with a failed parent of the statement: its "fail"
      -- dependents, theirs, and so on, each naming the lowest failed parent it descends from
      -- (the nested firing of this trigger by that UPDATE settles their own edges).
      IF EXISTS (SELECT 1 FROM new_rows WHERE has_dependents AND status = 'failed') THEN
        WITH RECURSIVE doomed(id, cause) AS (
            SELECT d.job_id, d.depends_on FROM new_rows p
            JOIN {edges} d ON d.depends_on = p.id
            WHERE p.has_dependents AND p.status = 'failed' AND d.pending
              AND NOT d.run_on_failure
          UNION
            SELECT d.job_id, doomed.cause FROM doomed JOIN {edges} d ON d.depends_on = doomed.id
            WHERE d.pending AND NOT d.run_on_failure
        ), first AS (
          SELECT id, min(cause) AS cause FROM doomed GROUP BY id
        )
        SELECT array_agg(id ORDER BY id), array_agg(cause ORDER BY id) INTO ids, causes
        FROM first;
        IF ids IS NOT NULL THEN
          UPDATE {jobs} AS c
          SET status = 'failed',
              waiting_on = 0,
              run_at = now(),
              last_error = 'dependency ' || u.cause
                || CASE WHEN p.cancelled_at IS NULL THEN ' failed' ELSE ' was cancelled' END,
              finished_at = now(),
              cancelled_at = CASE WHEN p.cancelled_at IS NOT NULL THEN now() END
          FROM unnest(ids, causes) AS u(id, cause) JOIN new_rows p ON p.id = u.cause
          WHERE c.id = u.id AND c.status = 'queued' AND c.waiting_on > 0;
        END IF;
      END IF;
      -- Settle every pending edge of the statement's finished parents at once, and decrement
      -- each waiting job by the number of its edges that count as done (a done parent, or a
      -- "run" edge of a failed one): one UPDATE of the fan-in per completion batch, not one per
      -- member. Waiting jobs in id order (unnest's order, the nested loop's), so two batches
      -- touching the same waiting jobs lock them in the same order.
      WITH settled AS (
        UPDATE {edges} AS d SET pending = false
        FROM new_rows p
        WHERE d.depends_on = p.id AND d.pending
          AND p.has_dependents AND p.status IN ('done', 'failed')
        RETURNING d.job_id, (p.status = 'done' OR d.run_on_failure) AS counted
      ), released AS (
        SELECT job_id, count(*)::int AS n FROM settled WHERE counted GROUP BY job_id
      )
      SELECT array_agg(job_id ORDER BY job_id), array_agg(n ORDER BY job_id) INTO ids, counts
      FROM released;
      IF ids IS NOT NULL THEN
        UPDATE {jobs} AS c
        SET waiting_on = c.waiting_on - u.n,
            run_at = CASE WHEN c.waiting_on = u.n THEN now() ELSE c.run_at END
        FROM unnest(ids, counts) AS u(id, n)
        WHERE c.id = u.id AND c.status = 'queued' AND c.waiting_on > 0;
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
        AFTER UPDATE ON {qualified("jobs", schema)}
        REFERENCING NEW TABLE AS new_rows
        FOR EACH STATEMENT
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
