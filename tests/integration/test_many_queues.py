"""A worker of many queues: one claim reads several of them (``claim_queues_statement``), and
every job still runs once, with priorities, pauses, flow limits and expiry kept per queue."""

from __future__ import annotations

import threading
from collections import Counter
from datetime import datetime, timedelta, timezone
from typing import Any

from sqlalchemy import Engine, text
from worker_helpers import Tally, running, scalar, until

import pgqueue
from pgqueue._sql.calls import claim_queues
from pgqueue._worker.replay import Replay, claim_queues_replayed

LEASE = timedelta(seconds=30)


def _queues(n: int) -> list[str]:
    return [f"mq-{i:03d}" for i in range(n)]


def test_one_claim_takes_from_the_queues_in_their_order_up_to_its_limit(engine: Engine) -> None:
    queues = _queues(6)
    with engine.begin() as conn:
        for i, queue in enumerate(queues):
            if i != 1:  # mq-001 is empty
                pgqueue.enqueue_many(conn, [{"i": n} for n in range(3)], queue=queue)
        pgqueue.enqueue(conn, {"i": "urgent"}, queue=queues[2], priority=9)
        pgqueue.enqueue(conn, {"i": "later"}, queue=queues[0], delay=timedelta(hours=1))
    replay = Replay(engine)
    first = claim_queues_replayed(replay, queues=queues, limit=7, lease=LEASE)
    second = claim_queues_replayed(replay, queues=queues, limit=7, lease=LEASE)
    third = claim_queues_replayed(replay, queues=queues, limit=7, lease=LEASE)
    replay.release()
    # mq-000's 3 ready jobs (not the future one), then mq-002's urgent job first of its 4.
    assert Counter(j.queue for j in first) == {"mq-000": 3, "mq-002": 4}
    assert next(j.payload["i"] for j in first if j.queue == "mq-002") == "urgent"
    assert Counter(j.queue for j in second) == {"mq-003": 3, "mq-004": 3, "mq-005": 1}
    assert Counter(j.queue for j in third) == {"mq-005": 2}
    assert replay.replayed == 2  # one text for every set of queues
    running_rows = scalar(engine, "SELECT count(*) FROM jobs WHERE status = 'running'")
    assert running_rows == 16
    assert scalar(engine, "SELECT count(*) FROM jobs WHERE status = 'queued'") == 1


def test_each_queue_is_read_from_its_own_low_water_mark(engine: Engine) -> None:
    """A queue given a mark is read from it (its older jobs left to a full claim); a queue
    without one is read whole, priorities first."""
    old = datetime.now(timezone.utc) - timedelta(minutes=10)
    with engine.begin() as conn:
        for queue in ("marked", "whole"):
            pgqueue.enqueue(conn, {"age": "old"}, queue=queue, run_at=old)
            pgqueue.enqueue(conn, {"age": "new"}, queue=queue)
    mark = datetime.now(timezone.utc) - timedelta(minutes=1)
    replay = Replay(engine)
    first = claim_queues_replayed(
        replay, queues=["marked", "whole"], limit=10, lease=LEASE, since=[mark, None]
    )
    second = claim_queues_replayed(
        replay, queues=["marked", "whole"], limit=10, lease=LEASE, since=[None, None]
    )
    replay.release()
    assert sorted((j.queue, j.payload["age"]) for j in first) == [
        ("marked", "new"),
        ("whole", "new"),
        ("whole", "old"),
    ]
    assert [(j.queue, j.payload["age"]) for j in second] == [("marked", "old")]
    assert replay.replayed == 1  # the marks are values of one statement text


def test_the_claim_reads_only_the_queues_it_needs(engine: Engine) -> None:
    """The outer limit stops the per-queue reads: 64 queues named, the first two fill it."""
    queues = _queues(64)
    with engine.begin() as conn:
        for queue in queues:
            pgqueue.enqueue_many(conn, [{}] * 50, queue=queue)
        conn.execute(text("ANALYZE jobs"))
    call = claim_queues(queues, 100, LEASE)
    assert call.statement is not None
    with engine.connect() as conn:
        sent = conn.execute(call.statement, call.params)
        sql, params = sent.context.statement, sent.context.parameters[0]
        conn.rollback()
        plan = conn.exec_driver_sql("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params).scalar_one()
        conn.rollback()
    scans = _nodes(plan[0]["Plan"], "Function Scan")
    (names,) = [s for s in scans if s["Function Name"] == "json_to_recordset"]
    assert names["Actual Rows"] == 2  # the queue names read: the first two filled the claim


def _nodes(node: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    found = [node] if node.get("Node Type") == kind else []
    for child in node.get("Plans", []):
        found += _nodes(child, kind)
    return found


def test_two_workers_of_three_hundred_queues_run_every_job_once(engine: Engine) -> None:
    """Concurrent claims over overlapping sets of queues (two workers, same queues): SKIP LOCKED
    keeps every job to one claim; one queue has a concurrency limit (claimed on its own) and one
    is paused (never claimed)."""
    queues = _queues(300)
    with engine.begin() as conn:
        for n, queue in enumerate(queues):
            pgqueue.enqueue_many(conn, [{"n": n, "k": k} for k in range(4)], queue=queue)
        pgqueue.set_queue_limits(conn, queues[7], concurrency=2)
        pgqueue.pause(conn, queues[9])
    tally = Tally()
    limited_peak = _Peak(engine, queues[7])
    handlers = {q: tally for q in queues}
    handlers[queues[7]] = limited_peak
    workers = [
        pgqueue.Worker(
            engine, handlers, concurrency=4, batch_size=20, install_signal_handlers=False
        )
        for _ in range(2)
    ]
    with running(workers[0]), running(workers[1]):
        until(lambda: tally.total() + limited_peak.runs >= 4 * 299, 60, "the jobs handled")
        until(
            lambda: scalar(engine, "SELECT count(*) FROM jobs WHERE status = 'done'") == 4 * 299,
            30,
            "every completion committed",
        )
    assert sorted(tally.runs.values()) == [1] * (4 * 298)
    assert limited_peak.runs == 4
    assert limited_peak.most <= 2
    paused = "SELECT count(*) FROM jobs WHERE queue = 'mq-009' AND status = 'queued'"
    assert scalar(engine, paused) == 4


class _Peak:
    """A handler that counts its runs and the most running rows of its queue it saw."""

    def __init__(self, engine: Engine, queue: str) -> None:
        self._engine, self._queue = engine, queue
        self.runs = 0
        self.most = 0
        self._lock = threading.Lock()

    def __call__(self, job: pgqueue.JobContext) -> None:
        now = scalar(
            self._engine,
            "SELECT count(*) FROM jobs WHERE queue = :q AND status = 'running'",
            q=self._queue,
        )
        with self._lock:
            self.runs += 1
            self.most = max(self.most, int(now))
