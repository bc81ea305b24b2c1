"""The storage parameters pgqueue keeps on ``jobs``: one place for the revision and ``doctor``.

Revision ``pgqueue_0004`` applies :data:`JOBS_STORAGE_PARAMETERS`; ``pgqueue doctor`` compares the
table's ``reloptions`` with them and prints :func:`alter_table_sql` when they were changed back.
This module imports nothing from :mod:`pgqueue.models` so that revisions may read it.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

from collections.abc import Mapping

#: Per-table autovacuum settings scaled for a small, hot queue table (reasoning in the revision
#: ``pgqueue_0004``). Values are the text PostgreSQL stores in ``pg_class.reloptions``.
JOBS_STORAGE_PARAMETERS: Mapping[str, str] = {
    # Vacuum after 1,000 + 1% dead rows instead of 50 + 20%: a queue table churns its rows.
    "autovacuum_vacuum_scale_factor": "0.01",
    "autovacuum_vacuum_threshold": "1000",
    # Inserts alone (a backlog being enqueued) also trigger a vacuum that sets visibility bits.
    "autovacuum_vacuum_insert_scale_factor": "0.01",
    # Fresh statistics for the claim's plan when the queued/done mix swings.
    "autovacuum_analyze_scale_factor": "0.02",
    "autovacuum_analyze_threshold": "1000",
}


def parameters_clause(parameters: Mapping[str, str] = JOBS_STORAGE_PARAMETERS) -> str:
    """``name = value, ...`` for ``ALTER TABLE ... SET (...)`` (names and values are constants)."""
    return ", ".join(f"{name} = {value}" for name, value in parameters.items())


def alter_table_sql(table: str = "jobs") -> str:
    """The statement that restores pgqueue's storage parameters on ``table`` (an SQL name)."""
    return f"ALTER TABLE {table} SET ({parameters_clause()});"
