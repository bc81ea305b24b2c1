"""The dependency-failure rule written once: ``jobs_dependency_error``, called by both paths.

Revision ID: pgqueue_0014
Revises: pgqueue_0013
Create Date: 2026-12-08

A job waiting for a dependency that fails for good (or is cancelled) fails too, unless it was
enqueued with ``on_dependency_failure="run"``, and its ``last_error`` names the dependency:
``dependency 12 failed``, or ``dependency 12 was cancelled``. pgqueue_0013 wrote that text twice:
in the ``jobs_release`` trigger (a dependency failing after the enqueue) and in the enqueue's
``ATTACH`` statement (a dependency already failed when the job is enqueued). This revision adds
the SQL function ``jobs_dependency_error(cause bigint, cancelled boolean) RETURNS text``
(``IMMUTABLE``, one expression: PostgreSQL inlines it into the statement that calls it) and
replaces the trigger's function with one that calls it; ``ATTACH`` calls it too
(:class:`pgqueue._sql.workflow_statements.DependencyErrorText`), so the two paths cannot drift
apart. The trigger itself, its transition table and every other line of its function are
unchanged: no lock beyond the function's replacement, no row touched.

The downgrade puts pgqueue_0013's function back word for word, then drops the new one.

Frozen history: never import pgqueue.models here.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from pgqueue.migrations.options import qualified, target_schema

revision: str = "pgqueue_0014"
down_revision: str | Sequence[str] | None = "pgqueue_0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _error_function(schema: str | None) -> str:
    """The ``last_error`` of a job failed by its dependency ``cause``."""
    return f"""
    CREATE FUNCTION {qualified("jobs_dependency_error", schema)}(cause bigint, cancelled boolean)
    RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
      SELECT 'dependency ' || cause || CASE WHEN cancelled THEN ' was cancelled' ELSE ' failed' END
    $$
    """


def _release_0014(schema: str | None) -> str:
    """pgqueue_0013's trigger function with its ``last_error`` from :func:`_error_function`
    (S608: only the checked schema is inlined)."""
    jobs = qualified("jobs", schema)
    edges = qualified("jobs_dependencies", schema)
    error = qualified("jobs_dependency_error", schema)
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
              last_error = {error}(u.cause, p.cancelled_at IS NOT NULL),
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


def _release_0013(schema: str | None) -> str:
    """pgqueue_0013's trigger function, word for word: what the downgrade puts back (S608: only
    the checked schema is inlined)."""
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


def _replace_release(body: str, schema: str | None) -> None:
    function = qualified("jobs_release", schema)
    op.execute(
        f"CREATE OR REPLACE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS $${body}$$"
    )


def upgrade() -> None:
    schema = target_schema()
    op.execute(_error_function(schema))
    _replace_release(_release_0014(schema), schema)


def downgrade() -> None:
    schema = target_schema()
    _replace_release(_release_0013(schema), schema)
    op.execute(f"DROP FUNCTION {qualified('jobs_dependency_error', schema)}(bigint, boolean)")
