"""The ``per_key`` claim's plan (#32 item 2): its cost follows the keys, not the backlog.

100,000 ready jobs over 20 keys (and 40 running, 2 per key) in a queue with ``per_key=4``,
vacuumed and analyzed; the limited claim is explained as the driver receives it, in a
transaction rolled back after. Before ``jobs_ready_key_idx`` the claim ranked every ready job of
the queue (a window over 100,000 rows per claim).
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, text
from worker_helpers import plan_nodes, statements_sent

import pgqueue
from pgqueue._sql.limited_claim import limited_claim_statement

pytestmark = pytest.mark.slow

READY = 100_000
KEYS = 20


@pytest.fixture
def backlog(engine: Engine) -> Engine:
    with engine.begin() as conn:
        pgqueue.set_queue_limits(conn, "keyed", per_key=4)
        conn.execute(
            text(
                "INSERT INTO jobs (queue, payload, concurrency_key) "
                "SELECT 'keyed', '{}', 'k' || (i % :keys) FROM generate_series(1, :n) AS i"
            ),
            {"keys": KEYS, "n": READY},
        )
        conn.execute(
            text(
                "INSERT INTO jobs (queue, payload, concurrency_key, status, attempts, "
                "locked_until) SELECT 'keyed', '{}', 'k' || (i % :keys), 'running', 1, "
                "now() + interval '1 minute' FROM generate_series(1, :running) AS i"
            ),
            {"keys": KEYS, "running": 2 * KEYS},
        )
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("VACUUM ANALYZE jobs"))
    return engine


def _buffers(node: dict[str, Any]) -> int:
    return int(node.get("Shared Hit Blocks", 0)) + int(node.get("Shared Read Blocks", 0))


def test_a_per_key_claim_probes_each_key_and_takes_each_keys_share(backlog: Engine) -> None:
    params = {
        "queue_name": "keyed",
        "lease": timedelta(seconds=30),
        "locked_by": "plan-test",
        "asked": 100,
        "free_slots": 0,
        "lane_slots": 4,
    }
    with statements_sent(backlog, "ready_keys") as seen, backlog.connect() as conn:
        conn.execute(limited_claim_statement(100, per_key=True), params)
        conn.rollback()
    ((sql, sent),) = seen
    with backlog.connect() as conn:
        raw = conn.connection.driver_connection
        assert raw is not None
        cursor = raw.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}", sent)
        row = cursor.fetchone()
        assert row is not None
        explained = row[0]
        claimed = raw.execute(
            "SELECT concurrency_key, count(*) FROM jobs WHERE locked_by = 'plan-test' GROUP BY 1"
        ).fetchall()
        conn.rollback()
    plan = (explained if isinstance(explained, list) else json.loads(explained))[0]["Plan"]
    nodes = list(plan_nodes(plan))
    on_jobs = [n for n in nodes if n.get("Relation Name") == "jobs" or n.get("Index Name")]
    assert not [n for n in nodes if n["Node Type"] == "Seq Scan"], on_jobs
    assert any(n.get("Index Name") == "jobs_ready_key_idx" for n in nodes), on_jobs
    assert "WindowAgg" not in {n["Node Type"] for n in nodes}
    # Each key had 2 running of its 4: each gets 2 more, 40 in all.
    assert sorted(claimed) == sorted((f"k{i}", 2) for i in range(KEYS))
    # 20 keys, a probe and a short range each, plus the look-ahead for jobs without a key: a
    # thousand buffers at most, where ranking the backlog read every ready job (100,000).
    assert _buffers(plan) < 1_500, _buffers(plan)  # 897 seen
