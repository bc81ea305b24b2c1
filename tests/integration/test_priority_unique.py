"""Priorities and unique keys on a real server: claim order, the ready index walked per level,
one live job per key under concurrent enqueues, retries that keep or yield their key."""

from __future__ import annotations

import re
import threading
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, text
from worker_helpers import captured_claim

import pgqueue
import pgqueue.testing
from pgqueue._sql import calls as _calls
from pgqueue._sql import runners
from pgqueue.errors import UniqueKeyError


def _rows(engine: Engine) -> dict[int, Any]:
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT id, status, priority, unique_key, attempts FROM jobs"))
        return {r.id: r for r in rows}


def test_claim_takes_the_highest_priority_first_then_oldest(engine: Engine) -> None:
    with engine.begin() as conn:
        low = pgqueue.enqueue_many(conn, ["l1", "l2"], queue="p")
        high = pgqueue.enqueue(conn, "h", queue="p", priority=9)
        mid = pgqueue.enqueue_many(conn, ["m1", "m2"], queue="p", priority=5)
        # Not ready: a higher priority in the future never blocks the ready jobs.
        pgqueue.enqueue_many(conn, ["later"] * 50, queue="p", priority=9, delay=timedelta(hours=1))
    with engine.begin() as conn:
        claimed = pgqueue.claim(conn, queue="p", limit=4)
    assert [c.id for c in claimed] == [high, *mid, low[0]]
    assert [c.priority for c in claimed] == [9, 5, 5, 0]
    with engine.begin() as conn:
        assert [c.id for c in pgqueue.claim(conn, queue="p", limit=10)] == [low[1]]


def test_the_worker_hands_the_priority_to_the_handler_and_runs_high_first(engine: Engine) -> None:
    with engine.begin() as conn:
        pgqueue.enqueue_many(conn, list(range(5)), queue="w")
        pgqueue.enqueue_many(conn, list(range(5)), queue="w", priority=3)
    seen: list[int] = []

    def handler(job: pgqueue.JobContext) -> None:
        seen.append(job.priority)

    worker = pgqueue.Worker(engine, {"w": handler}, concurrency=1, prefetch=0, listen=False)
    assert worker.run(until_empty=True).done == 10
    assert seen == [3] * 5 + [0] * 5


def test_future_high_priority_backlog_is_not_walked(engine: Engine) -> None:
    """EXPLAIN ANALYZE: each level's scan stops at its first future job."""
    with engine.begin() as conn:
        pgqueue.enqueue_many(conn, [{}] * 20, queue="b")
        pgqueue.enqueue_many(conn, [{}] * 5000, queue="b", priority=7, delay=timedelta(hours=1))
        conn.execute(text("ANALYZE jobs"))
    sql, params = captured_claim(engine, queue="b")
    with engine.connect() as conn:
        raw = conn.connection.driver_connection
        assert raw is not None
        plan = "\n".join(
            r[0]
            for r in raw.execute(
                f"EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF) {sql}", params
            ).fetchall()
        )
        conn.rollback()
    print(plan)
    # The ten ready jobs, claimed (PostgreSQL 18 prints rows=10.00).
    assert re.match(r"Update on jobs \(actual rows=10(\.00)? loops=1\)", plan), plan
    assert "Index Scan using jobs_ready_idx" in plan
    assert "Sort" not in plan
    # 10 levels probed, and far fewer buffers than the 5,000 future entries would cost.
    hits = [int(n) for n in re.findall(r"shared hit=(\d+)", plan)]
    assert hits
    assert max(hits) < 200, plan


def test_unique_key_returns_the_live_holder_then_frees_when_it_finishes(engine: Engine) -> None:
    with engine.begin() as conn:
        first = pgqueue.enqueue(conn, {"n": 1}, queue="u", unique_key="user:7")
        assert pgqueue.enqueue(conn, {"n": 2}, queue="u", unique_key="user:7") == first
        other_queue = pgqueue.enqueue(conn, {}, queue="v", unique_key="user:7")
    assert other_queue != first
    with engine.begin() as conn:
        (job,) = pgqueue.claim(conn, queue="u")
        assert pgqueue.enqueue(conn, {}, queue="u", unique_key="user:7") == first  # running
        assert pgqueue.complete(conn, job.id, job.attempts)
    with engine.begin() as conn:
        second = pgqueue.enqueue(conn, {}, queue="u", unique_key="user:7")
    assert second != first
    assert _rows(engine)[second].unique_key == "user:7"
    with engine.connect() as conn:
        pgqueue.testing.assert_enqueued(conn, "u", count=2)


def test_failed_jobs_free_the_key_and_a_retry_keeps_it_or_yields(engine: Engine) -> None:
    with engine.begin() as conn:
        old = pgqueue.enqueue(conn, {}, queue="r", unique_key="k", max_attempts=1)
        (job,) = pgqueue.claim(conn, queue="r")
        pgqueue.fail(conn, job.id, job.attempts, "boom")
        new = pgqueue.enqueue(conn, {}, queue="r", unique_key="k")  # the failed one freed it
    assert new != old
    with engine.begin() as conn:
        assert pgqueue.retry(conn, [old]) == []  # k is held by the new job: left alone
    assert _rows(engine)[old].status == "failed"
    with engine.begin() as conn:
        assert pgqueue.cancel(conn, [new]) == [new]
        assert pgqueue.retry(conn, [old]) == [old]  # free again: back with its key
    assert (_rows(engine)[old].status, _rows(engine)[old].unique_key) == ("queued", "k")
    with engine.begin() as conn:
        assert pgqueue.retry(conn, [new]) == []  # old holds k again: new is left alone
        assert pgqueue.cancel(conn, [old]) == [old]  # now both are failed with key k
    with engine.begin() as conn:
        # Both failed with key k: only the newest comes back, the other is left alone.
        assert pgqueue.retry(conn, [new, old]) == [new]
    assert _rows(engine)[old].status == "failed"
    with engine.connect() as conn:
        # A write that would give k a second live job anyway (a race, a hand-made update) is
        # reported as UniqueKeyError at the repository boundary, never as a bare IntegrityError.
        forced = _calls.Call(
            text("UPDATE jobs SET status = 'queued' WHERE id = :id"), {"id": old}, lambda r: None
        )
        with pytest.raises(UniqueKeyError, match="unique key 'k' of queue 'r'"):
            runners.run(conn, forced)
        conn.rollback()


def test_enqueue_many_with_no_key_held_inserts_every_key(engine: Engine) -> None:
    with engine.begin() as conn:
        ids = pgqueue.enqueue_many(conn, [1, 2, 3], queue="n", unique_keys=["x", None, "y"])
    assert len(set(ids)) == 3
    assert sorted(ids) == ids


def test_enqueue_many_collapses_equal_keys_and_aligns_ids(engine: Engine) -> None:
    with engine.begin() as conn:
        held = pgqueue.enqueue(conn, "held", queue="m", unique_key="b")
        ids = pgqueue.enqueue_many(
            conn,
            ["a1", "b1", None, "a2", "c", None],
            queue="m",
            unique_keys=["a", "b", None, "a", "c", None],
        )
    assert ids[0] == ids[3]
    assert ids[1] == held
    assert len({ids[0], ids[2], ids[4], ids[5], held}) == 5
    rows = _rows(engine)
    assert len(rows) == 5
    assert {rows[i].unique_key for i in (ids[0], ids[4])} == {"a", "c"}
    assert rows[ids[2]].unique_key is None


@pytest.mark.parametrize("outcome", ["commit", "rollback"])
def test_concurrent_enqueues_of_one_key_give_one_job(engine: Engine, outcome: str) -> None:
    first = engine.connect()
    first_id = pgqueue.enqueue(first, {"by": "first"}, queue="c", unique_key="order:1")
    result: list[int] = []
    started = threading.Event()

    def second() -> None:
        with engine.begin() as conn:
            started.set()
            result.append(pgqueue.enqueue(conn, {"by": "second"}, queue="c", unique_key="order:1"))

    thread = threading.Thread(target=second)
    thread.start()
    assert started.wait(10)
    thread.join(1.0)
    assert thread.is_alive(), "the second enqueue must wait for the first transaction"
    with engine.connect() as watcher:
        waiting = watcher.execute(
            text(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock'"
            )
        ).scalar_one()
    assert waiting == 1
    if outcome == "commit":
        first.commit()
    else:
        first.rollback()
    first.close()
    thread.join(10)
    assert not thread.is_alive()
    rows = _rows(engine)
    assert len(rows) == 1
    (only,) = rows.values()
    assert result == [only.id]
    assert (only.id == first_id) is (outcome == "commit")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"unique_key": ""}, "unique_key: must not be empty"),
        ({"unique_key": 7}, "unique_key: expected str"),
        ({"unique_key": "x" * 1001}, "more than 1000"),
        ({"unique_key": "a\x00b"}, r"U\+0000"),
        ({"priority": 10}, "priority: must be from 0 to 9"),
        ({"priority": -1}, "priority: must be from 0 to 9"),
        ({"priority": True}, "priority: expected int"),
    ],
)
def test_bad_priority_or_key_writes_nothing(
    engine: Engine, kwargs: dict[str, Any], message: str
) -> None:
    def good_then_bad() -> None:
        with engine.begin() as conn:
            pgqueue.enqueue(conn, {"first": True})
            pgqueue.enqueue(conn, {}, **kwargs)

    with pytest.raises(pgqueue.PgQueueError, match=message):
        good_then_bad()
    assert _rows(engine) == {}


def test_one_bad_key_in_a_batch_rejects_the_batch(engine: Engine) -> None:
    for keys, message in (
        (["ok", ""], r"unique_keys\[1\]: must not be empty"),
        (["ok"], "1 keys for 2 payloads"),
        ("ab", "unique_keys: expected a sequence"),
    ):
        with engine.begin() as conn, pytest.raises(pgqueue.PgQueueError, match=message):
            pgqueue.enqueue_many(conn, [1, 2], unique_keys=keys)
    assert _rows(engine) == {}
