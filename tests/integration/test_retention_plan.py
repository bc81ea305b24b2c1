"""The prune's plan (#31 item 3): an index range of one queue's expired rows, whatever the rest.

A queue that keeps its history for ever must not make another queue's prune read it: the table
holds 200,000 done jobs of a kept queue and 20,000 of a pruned one, whose 500 oldest are needed
by a waiting dependent each, vacuumed and analyzed; the prune's ``DELETE`` is explained as the
driver receives it.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.dialects import postgresql
from worker_helpers import plan_nodes

from pgqueue._sql.retention_statements import PRUNE_BATCH, prune_statement


@pytest.fixture
def history(engine: Engine) -> Engine:
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO jobs (queue, payload, status, attempts, finished_at) "
                "SELECT CASE WHEN i % 11 = 0 THEN 'pruned' ELSE 'kept' END, '{}', 'done', 1, "
                "now() - make_interval(secs => i * 5) FROM generate_series(1, 220000) AS i"
            )
        )
        # The oldest 500 of the pruned queue are needed by a waiting dependent each.
        conn.execute(
            text(
                "WITH parents AS (SELECT id, row_number() OVER (ORDER BY finished_at) AS n "
                "FROM jobs WHERE queue = 'pruned' ORDER BY finished_at LIMIT 500), "
                "marked AS (UPDATE jobs SET has_dependents = true FROM parents "
                "WHERE jobs.id = parents.id), "
                "children AS (INSERT INTO jobs (queue, payload, waiting_on, run_at) "
                "SELECT 'pruned', jsonb_build_object('n', n), 1, '9999-01-01' FROM parents "
                "RETURNING id, (payload->>'n')::bigint AS n) "
                "INSERT INTO jobs_dependencies (depends_on, job_id, pending) "
                "SELECT parents.id, children.id, false FROM parents JOIN children USING (n)"
            )
        )
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("VACUUM ANALYZE jobs"))
    return engine


def test_the_prune_reads_its_queues_expired_rows_by_index_under_the_limit(history: Engine) -> None:
    compiled = prune_statement("done").compile(dialect=postgresql.dialect())  # type: ignore[no-untyped-call]
    params = {"queue_name": "pruned", "kept": timedelta(days=7)}
    with history.connect() as conn:
        explained = conn.exec_driver_sql(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + str(compiled),
            compiled.construct_params(params),
        ).scalar_one()
        conn.rollback()
    plan = (explained if isinstance(explained, list) else json.loads(explained))[0]["Plan"]
    nodes = list(plan_nodes(plan))
    scans = [n for n in nodes if n.get("Relation Name") == "jobs" and "Scan" in n["Node Type"]]
    assert any(n.get("Index Name") == "jobs_prune_idx" for n in scans), scans
    assert not [n for n in nodes if n["Node Type"] in ("Seq Scan", "Sort")]
    reader = next(n for n in scans if n.get("Index Name") == "jobs_prune_idx")
    # The 500 needed rows are read and kept, then a full batch of the others.
    assert reader["Actual Rows"] == PRUNE_BATCH
    assert reader["Rows Removed by Filter"] == 500
    assert plan["Node Type"] == "ModifyTable"
