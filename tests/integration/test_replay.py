"""The claim loop's replay: the statement SQLAlchemy compiled once, sent again on the psycopg
connection beneath it. Same rows, same guarantees, and out of the way of anyone watching."""

from __future__ import annotations

import logging
import threading
from collections import Counter
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import URL
from sqlalchemy.exc import ProgrammingError
from worker_helpers import (
    replayed_claims,
    running,
    scalar,
    terminate_others,
    two_workers_drain,
    until,
)

import pgqueue
from pgqueue._base.urls import to_libpq_url
from pgqueue._worker.replay import Replay, claim_replayed
from pgqueue.results import ClaimedJob

LEASE = timedelta(seconds=30)
#: Every JSON shape a payload may take, and headers on some.
PAYLOADS: list[Any] = [
    {"n": 1, "nested": {"a": [1, 2.5, None, True, "é ✓"]}},
    "plain text, ünïcode ✓",
    42,
    3.25,
    [1, "two", {"three": 3}],
    {"big": "x" * 20_000},
    True,
    {"quote": 'it\'s "quoted"', "backslash": "a\\b", "percent": "100%"},
]


def _claim(replay: Replay, queue: str, limit: int = 3) -> list[ClaimedJob]:
    return claim_replayed(replay, queue=queue, limit=limit, lease=LEASE)


def _fill(engine: Engine, queue: str) -> None:
    with engine.begin() as conn:
        for i, payload in enumerate(PAYLOADS):
            pgqueue.enqueue(
                conn,
                payload,
                queue=queue,
                priority=i % 3,
                headers={"trace": f"t{i}"} if i % 2 else None,
            )


def _shape(jobs: list[ClaimedJob]) -> list[tuple[Any, ...]]:
    return [(j.payload, j.attempts, j.headers, j.priority) for j in jobs]


def test_replayed_claims_return_what_sqlalchemy_returns(engine: Engine) -> None:
    _fill(engine, "through-sqlalchemy")
    _fill(engine, "replayed")
    expected: list[tuple[Any, ...]] = []
    while True:
        with engine.begin() as conn:
            batch = pgqueue.claim(conn, queue="through-sqlalchemy", limit=3, lease=LEASE)
        if not batch:
            break
        expected += _shape(batch)
    replay = Replay(engine)
    got: list[tuple[Any, ...]] = []
    while batch := _claim(replay, "replayed"):
        got += _shape(batch)
    replay.release()
    assert got == expected
    assert len(got) == len(PAYLOADS)
    assert [p for (p, *_rest) in got] != PAYLOADS  # priority first: the order is the claim's
    # The first claim compiled the statement; every later one (the empty one too) was replayed.
    assert replay.replayed == -(-len(PAYLOADS) // 3)
    leased = scalar(
        engine,
        "SELECT count(*) FROM jobs WHERE queue = 'replayed' AND status = 'running' "
        "AND locked_until BETWEEN now() + interval '25 seconds' AND now() + interval '31 seconds'",
    )
    assert leased == len(PAYLOADS)  # committed on return, with the lease it was given


def test_each_size_is_its_own_statement_and_each_queue_and_lease_its_parameters(
    engine: Engine,
) -> None:
    with engine.begin() as conn:
        for queue in ("a", "b"):
            pgqueue.enqueue_many(conn, [{"q": queue}] * 6, queue=queue)
    replay = Replay(engine)
    for _ in range(2):
        for queue in ("a", "b"):
            jobs = _claim(replay, queue, limit=1)
            assert [j.payload for j in jobs] == [{"q": queue}]
    assert [j.queue for j in _claim(replay, "a", limit=2)] == ["a", "a"]
    longer = claim_replayed(replay, queue="b", limit=1, lease=timedelta(hours=2))
    replay.release()
    # Size 1 compiled once, for "a": "b" and the longer lease are its parameters; size 2 anew.
    assert replay.replayed == 4
    assert longer[0].queue == "b"
    held = scalar(
        engine,
        "SELECT locked_until > now() + interval '1 hour' FROM jobs WHERE id = :id",
        id=longer[0].id,
    )
    assert held is True


def test_a_worker_of_many_queues_compiles_each_claim_size_once(engine: Engine) -> None:
    """More queues than the replay remembers statements: a memory keyed by the queue's name
    sent most of their claims through SQLAlchemy again."""
    queues = [f"many-{n:03d}" for n in range(300)]
    with engine.begin() as conn:
        for queue in queues:
            pgqueue.enqueue_many(conn, [{"q": queue, "i": i} for i in range(2)], queue=queue)
    replay = Replay(engine)
    for _ in range(2):
        for queue in queues:
            jobs = _claim(replay, queue, limit=1)
            assert [j.payload["q"] for j in jobs] == [queue]
    replay.release()
    assert replay.replayed == 2 * len(queues) - 1
    assert scalar(engine, "SELECT count(*) FROM jobs WHERE status = 'running'") == 600
    assert scalar(engine, "SELECT count(DISTINCT locked_until) > 1 FROM jobs") is True


def test_replay_follows_the_schema_option(empty_db_url: URL) -> None:
    pgqueue.migrations.upgrade(empty_db_url, schema="replayq")  # no public.jobs at all
    engine = pgqueue.use_schema(create_engine(empty_db_url), "replayq")
    try:
        with engine.begin() as conn:
            ids = pgqueue.enqueue_many(conn, [{"n": n} for n in range(3)])
        replay = Replay(engine)
        claimed = [job.id for _ in range(3) for job in _claim(replay, "default", limit=1)]
        replay.release()
        assert claimed == ids
        assert replay.replayed == 2
    finally:
        engine.dispose()


def test_a_watched_engine_sees_every_claim(engine: Engine) -> None:
    with engine.begin() as conn:
        pgqueue.enqueue_many(conn, [{"n": n} for n in range(6)])
    seen: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append(statement)

    replay = Replay(engine)
    event.listen(engine, "after_cursor_execute", record)
    try:
        for _ in range(2):
            assert len(_claim(replay, "default", limit=1)) == 1
    finally:
        event.remove(engine, "after_cursor_execute", record)
    assert len([s for s in seen if "SKIP LOCKED" in s]) == 2
    assert replay.replayed == 0
    sa_logger = logging.getLogger("sqlalchemy.engine.Engine")
    level = sa_logger.level
    sa_logger.setLevel(logging.INFO)  # what echo=True or a logging config does
    try:
        assert len(_claim(replay, "default", limit=1)) == 1
    finally:
        sa_logger.setLevel(level)
    assert replay.replayed == 0
    for _ in range(3):
        assert len(_claim(replay, "default", limit=1)) == 1
    assert replay.replayed == 3  # nobody watches any more
    replay.release()


def test_a_terminated_claim_connection_is_replaced_and_no_claim_is_lost(db_url: URL) -> None:
    engine = create_engine(db_url, pool_size=1, max_overflow=0)
    try:
        with engine.begin() as conn:
            first = pgqueue.enqueue_many(conn, [{"n": n} for n in range(2)])
        replay = Replay(engine)
        assert [j.id for j in _claim(replay, "default", limit=1)] == first[:1]
        assert [j.id for j in _claim(replay, "default", limit=1)] == first[1:]
        assert replay.replayed == 1
        assert terminate_others(db_url) >= 1  # the held connection among them
        with psycopg.connect(to_libpq_url(db_url), autocommit=True) as producer:
            later = producer.execute(
                "INSERT INTO jobs (queue, payload) VALUES ('default', '{}') RETURNING id"
            ).fetchone()
        assert later is not None
        # The replay fails on the dead connection; the claim runs again on a new one, at once.
        assert [j.id for j in _claim(replay, "default", limit=1)] == [later[0]]
        assert replay.replayed == 1
        assert _claim(replay, "default", limit=1) == []
        assert replay.replayed == 2  # replaying again, on the new connection
        replay.release()
        attempts = scalar(engine, "SELECT array_agg(DISTINCT attempts) FROM jobs")
        assert attempts == [1]  # each job claimed once
    finally:
        engine.dispose()


def test_a_statement_error_surfaces_as_sqlalchemy_error(engine: Engine) -> None:
    replay = Replay(engine)
    assert _claim(replay, "default") == []
    with engine.begin() as conn:
        conn.exec_driver_sql("ALTER TABLE jobs RENAME TO jobs_elsewhere")
    try:
        with pytest.raises(ProgrammingError, match="jobs"):
            _claim(replay, "default")
        assert engine.pool.checkedout() == 0  # the failed connection was given back
    finally:
        with engine.begin() as conn:
            conn.exec_driver_sql("ALTER TABLE jobs_elsewhere RENAME TO jobs")
    assert _claim(replay, "default") == []
    replay.release()


def test_the_connection_is_held_between_claims_and_given_back(engine: Engine) -> None:
    checkouts = Counter[str]()

    def checkout(*args: Any) -> None:
        checkouts["n"] += 1

    event.listen(engine, "checkout", checkout)
    try:
        held = Replay(engine)
        for _ in range(4):
            _claim(held, "default")
        assert (checkouts["n"], engine.pool.checkedout()) == (1, 1)
        held.release()
        assert engine.pool.checkedout() == 0
        checkouts.clear()
        short = Replay(engine, max_hold=0.0)  # given back before each claim: pre_ping, recycle
        for _ in range(4):
            _claim(short, "default")
        short.release()
        assert checkouts["n"] == 4
        assert short.replayed == 3
    finally:
        event.remove(engine, "checkout", checkout)


def test_calls_without_a_row_mapping_are_refused(engine: Engine) -> None:
    from pgqueue._sql import calls as _calls

    replay = Replay(engine)
    with pytest.raises(ValueError, match="replayed"):
        replay.run(_calls.complete(1, 1))
    assert engine.pool.checkedout() == 0


def test_workers_replay_their_claims_and_run_each_job_once(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    ids, tally = two_workers_drain(engine, 2_000, caplog)
    assert sorted(tally.runs) == ids
    assert set(tally.runs.values()) == {1}
    assert replayed_claims(caplog.records) > 0, "the workers never replayed a claim"


def test_an_idle_worker_holds_no_pooled_connection(engine: Engine) -> None:
    done = threading.Event()
    worker = pgqueue.Worker(
        engine,
        {"default": lambda job: done.set()},
        listen=False,
        poll_interval=0.1,
        idle_after=0.3,
        idle_poll_interval=1.0,
        install_signal_handlers=False,
    )
    with running(worker):
        with engine.begin() as conn:
            pgqueue.enqueue(conn, {"n": 1})
        assert done.wait(10)
        until(lambda: worker.idle, 10, "the worker to go idle")
        until(lambda: engine.pool.checkedout() == 0, 5, "every pooled connection given back")


def test_a_claim_from_a_mark_is_one_text_for_every_mark_and_reads_from_each(
    engine: Engine,
) -> None:
    """The claim's ``since`` (the queue's low-water mark) changes from claim to claim: the replay
    keeps one text for it and sends each claim's own value, so a later mark skips what an
    earlier one would have taken."""
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO jobs (queue, payload, run_at) SELECT 'marked', to_jsonb(i), "
                "now() - (10 - i) * interval '1 minute' FROM generate_series(1, 6) AS i"
            )
        )
        start = conn.execute(text("SELECT min(run_at) FROM jobs")).scalar_one()
    replay = Replay(engine)

    def claim_from(minutes: int) -> list[Any]:
        since = start + timedelta(minutes=minutes)
        batch = claim_replayed(replay, queue="marked", limit=1, lease=LEASE, since=since)
        return [j.payload for j in batch]

    assert claim_from(0) == [1]
    assert claim_from(3) == [4]  # 2 and 3 lie behind this mark
    assert claim_from(1) == [2]  # an earlier mark reads them again
    assert claim_from(10) == []
    replay.release()
    assert replay.replayed == 3  # compiled once, for the first mark
