"""The worker's claim under a pinned xmin horizon (#32 item 6): its reads do not grow with the
jobs claimed since the snapshot was taken.

A second connection holds a REPEATABLE READ snapshot, so no row version the claims leave behind
can be removed, and no index scan can mark its ``jobs_ready_idx`` entry dead: every job claimed
leaves a dead entry at the front of its level's range (oldest ``run_at`` first). A worker drains
20,000 jobs under it while every claim it sends is recorded; the last of them are explained as
sent, against 20 fresh ready jobs, in transactions rolled back. A claim that reads the range
whole walks the 20,000 dead entries and visits each one's heap row; the worker's claim, from its
queue's low-water mark (``pgqueue._worker.low_water``), walks those of the last half second of
the backlog's ``run_at`` only. Buffers, not time: the test asserts no speed.
"""

from __future__ import annotations

import json
import statistics
from typing import Any

import psycopg
import pytest
from sqlalchemy import Engine, text
from sqlalchemy.engine import URL
from worker_helpers import captured_claim, plan_nodes, running, scalar, statements_sent, until

import pgqueue
from pgqueue._base.urls import to_libpq_url

pytestmark = pytest.mark.slow

JOBS = 20_000
#: The backlog's ``run_at`` step: 5 ms, so the claim's half-second margin spans 100 jobs.
STEP_MS = 5
#: The worker's last claims explained.
LAST = 10


def _scan_buffers(engine: Engine, sql: str, params: Any) -> int:
    """Shared buffers the claim's CTE (its scan of the ready index and its row locks) reads,
    explained as sent and rolled back: the UPDATE's own writes are left out."""
    with engine.connect() as conn:
        raw = conn.connection.driver_connection
        assert raw is not None
        row = raw.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}", params).fetchone()
        conn.rollback()
    assert row is not None
    explained = row[0] if isinstance(row[0], list) else json.loads(row[0])
    (cte,) = [n for n in plan_nodes(explained[0]["Plan"]) if n.get("Subplan Name") == "CTE next"]
    return int(cte.get("Shared Hit Blocks", 0)) + int(cte.get("Shared Read Blocks", 0))


def _fresh_jobs(engine: Engine, count: int) -> None:
    with engine.begin() as conn:
        pgqueue.enqueue_many(conn, [{}] * count)


def test_the_workers_claims_skip_the_dead_entries_a_pinned_snapshot_keeps(
    engine: Engine, db_url: URL
) -> None:
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO jobs (queue, payload, run_at) SELECT 'default', '{}', "
                "now() - interval '1 hour' + i * :step * interval '1 millisecond' "
                "FROM generate_series(1, :n) AS i"
            ),
            {"n": JOBS, "step": STEP_MS},
        )
    done: list[int] = []
    worker = pgqueue.Worker(
        engine,
        {"default": lambda job: done.append(job.id)},
        concurrency=4,
        poll_interval=3600.0,  # no fallback poll (a full claim) while the test watches
        install_signal_handlers=False,
    )
    with psycopg.connect(to_libpq_url(db_url)) as pin:
        pin.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        pin.execute("SELECT count(*) FROM jobs")  # the snapshot is taken here
        with statements_sent(engine, "FOR UPDATE SKIP LOCKED") as sent, running(worker):
            until(lambda: len(done) >= JOBS, 300, f"{JOBS} jobs run")
        assert scalar(engine, "SELECT count(*) FROM jobs WHERE status = 'done'") == JOBS
        _fresh_jobs(engine, 20)
        # The claim that reads every level whole walks every job claimed under the snapshot.
        whole = _scan_buffers(engine, *captured_claim(engine, limit=20))
        last = [_scan_buffers(engine, sql, params) for sql, params in sent[-LAST:]]
        pin.rollback()
    assert len(sent) > LAST
    # 20,000 dead entries and their heap rows: 209 buffers for 10,000, so about twice that.
    assert whole > 300, whole
    # The worker's claims read the ten levels' first pages, the dead entries from their mark on
    # (100 to a few hundred: the last claims of the drain) and the fresh jobs: 47-64 buffers
    # seen with 10,000 or 20,000 behind the mark. One of them at most is a full claim (one a
    # second).
    assert statistics.median(last) < 100, (last, whole)
