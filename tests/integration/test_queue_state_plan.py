"""The limited claim's read of what it left (#32): whether a ready job remains, from the index.

20,000 jobs of a queue with ``concurrency=4``, analyzed while all were queued, then the first
16,000 finished as a drain leaves them (no vacuum): the read is explained as the driver receives
it. Its ``ready`` test was a plain ``EXISTS`` over the queue's queued jobs, planned as a
sequential scan of ``jobs`` (the statistics say nearly every row is queued) that read every
finished row before the first queued one, at every claim of a limited queue: 0.1 ms at the start
of a drain, 1.0 ms at its end.
"""

from __future__ import annotations

import json

import pytest
from sqlalchemy import Engine, text
from worker_helpers import plan_nodes, statements_sent

import pgqueue
from pgqueue._sql.limited_claim import QUEUE_STATE

pytestmark = pytest.mark.server

JOBS = 20_000
FINISHED = 16_000


@pytest.fixture
def drained(engine: Engine) -> Engine:
    with engine.begin() as conn:
        pgqueue.set_queue_limits(conn, "q", concurrency=4)
        conn.execute(
            text("INSERT INTO jobs (queue, payload) SELECT 'q', '{}' FROM generate_series(1, :n)"),
            {"n": JOBS},
        )
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("ANALYZE jobs"))
        conn.execute(
            text(
                "UPDATE jobs SET status = 'done', finished_at = now() WHERE id IN "
                "(SELECT id FROM jobs WHERE queue = 'q' ORDER BY id LIMIT :n)"
            ),
            {"n": FINISHED},
        )
    return engine


def test_ready_is_read_from_the_ready_index_not_past_the_finished_jobs(drained: Engine) -> None:
    with statements_sent(drained, "window_left") as seen, drained.connect() as conn:
        state = conn.execute(QUEUE_STATE, {"queue_name": "q"}).one()
        conn.rollback()
    assert state.ready
    assert state.running == 0
    ((sql, sent),) = seen
    with drained.connect() as conn:
        raw = conn.connection.driver_connection
        assert raw is not None
        cursor = raw.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}", sent)
        row = cursor.fetchone()
        assert row is not None
        explained = row[0]
        conn.rollback()
    plan = (explained if isinstance(explained, list) else json.loads(explained))[0]["Plan"]
    nodes = list(plan_nodes(plan))
    assert not [n for n in nodes if n["Node Type"] == "Seq Scan"], nodes
    assert any(n.get("Index Name") == "jobs_ready_idx" for n in nodes), nodes
    # No bound on the buffers read: the first read marks the 16,000 finished jobs' index entries
    # dead (22 buffers after it, where the sequential scan read 201, on a quiet server), but only
    # when no snapshot older than their update is held in the database; on the CI's PostgreSQL
    # 18 (autovacuum on, tests in parallel) one sometimes was, and the walk visited their heap
    # pages (218 buffers).
