"""A limited queue's claim riding on the completions of its finished jobs (#32), against PostgreSQL.

One transaction locks the queue's settings row, completes this worker's finished jobs of the
queue, claims within the limits and reads what is left: the claim counts the slots just freed,
replayed in one round trip with the completions' ids as parameters. And a claim takes, beyond the
worker's idle handler slots, prefetch into the room a ``concurrency`` limit leaves, keeping half
of it or one worker's slots free, whichever is less.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

from sqlalchemy import Engine, text
from worker_helpers import scalar

import pgqueue
from pgqueue._sql.calls import Call
from pgqueue._worker.claimer import Claimer
from pgqueue._worker.replay import Replay, limited_claim_replayed
from pgqueue.results import ClaimedJob

LEASE = timedelta(seconds=30)


def _queue(engine: Engine, jobs: int, **limits: int) -> None:
    with engine.begin() as conn:
        pgqueue.enqueue_many(conn, [{"i": i} for i in range(jobs)], queue="q")
        pgqueue.set_queue_limits(conn, "q", **limits)


def _claim(
    replay: Replay,
    limit: int,
    free: int,
    completing: list[ClaimedJob] | None = None,
    *,
    slots: int = 4,
    per_key: bool = False,
    completions_first: bool = False,
) -> tuple[set[int], list[ClaimedJob], bool]:
    done, claimed, state = limited_claim_replayed(
        replay,
        queue="q",
        limit=limit,
        lease=LEASE,
        per_key=per_key,
        free_slots=free,
        lane_slots=slots,
        lock_timeout_ms=2000,
        locked_by="w",
        completing=[(j.id, j.attempts) for j in completing or []],
        completions_first=completions_first,
    )
    return done, claimed, state.at_limit


def test_completions_free_their_slots_for_the_claim_in_the_same_transaction(
    engine: Engine,
) -> None:
    _queue(engine, 20, concurrency=2)
    replay = Replay(engine)
    try:
        _, first, _ = _claim(replay, 4, free=4)
        assert len(first) == 2
        _, none, at_limit = _claim(replay, 4, free=4)  # both slots held: nothing
        assert (none, at_limit) == ([], True)
        # Round after round, each completes the two it holds and takes the next two: the same
        # text replayed with other ids (the first two rounds compile it).
        held = first
        for _ in range(5):
            done, held_next, _ = _claim(replay, 4, free=2, completing=held)
            assert done == {j.id for j in held}
            assert len(held_next) == 2
            assert not {j.id for j in held_next} & {j.id for j in held}
            held = held_next
        assert replay.replayed >= 3
    finally:
        replay.release()
    assert scalar(engine, "SELECT count(*) FROM jobs WHERE status = 'done'") == 10
    assert scalar(engine, "SELECT count(*) FROM jobs WHERE status = 'running'") == 2


def test_the_completions_in_the_claims_transaction_run_one_generic_plan(engine: Engine) -> None:
    """Four completions per claim, as a worker of 4 on ``concurrency=4`` sends them: once the
    driver prepared the statements, the completions' batch is not planned again at every call
    (its custom plan, 0.14 ms of a 1.2 ms transaction, was the same probe of ``jobs_pkey``).
    The planner prefers the custom plan of a small batch once the table is as big as a drain's
    and analyzed (over 200 jobs it picked the generic plan by itself)."""
    _queue(engine, 20_000, concurrency=4)
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("ANALYZE jobs"))
    replay = Replay(engine)
    try:
        held = _claim(replay, 4, free=4)[1]
        for _ in range(20):
            held = _claim(replay, 4, free=4, completing=held)[1]
            assert len(held) == 4
        plans = replay.read(
            Call(
                text(
                    "SELECT generic_plans, custom_plans FROM pg_prepared_statements"
                    " WHERE statement LIKE '%WITH mine AS MATERIALIZED%'"
                ),
                {},
                lambda result: [tuple(row) for row in result] if result is not None else [],
            )
        )
    finally:
        replay.release()
    ((generic, custom),) = plans
    assert generic >= 10
    assert custom == 0


def test_a_completion_whose_guard_fails_is_not_counted_as_written(engine: Engine) -> None:
    _queue(engine, 4, concurrency=4)
    replay = Replay(engine)
    try:
        _, held, _ = _claim(replay, 2, free=2)
        with engine.begin() as conn:  # one of them taken away (cancelled)
            pgqueue.cancel(conn, [held[0].id])
        done, _, _ = _claim(replay, 2, free=2, completing=held)
    finally:
        replay.release()
    assert done == {held[1].id}


@contextmanager
def _six_running(engine: Engine) -> Iterator[Replay]:
    """Queue ``q`` at ``concurrency=6``, filled by a worker of 4 idle slots asking for 8 (4 +
    4 prefetched): 4, then a second claim the 2 left; the claims' replay."""
    _queue(engine, 200, concurrency=6)
    replay = Replay(engine)
    try:
        assert len(_claim(replay, 8, free=4)[1]) == 4
        assert len(_claim(replay, 8, free=4)[1]) == 2
        yield replay
    finally:
        replay.release()


def test_prefetch_near_the_limit_takes_at_most_half_the_room_beyond_the_idle_slots(
    engine: Engine,
) -> None:
    """``concurrency=6``, a worker of 4 idle slots asking for 8 (4 + 4 prefetched): 4, and a
    second worker's claim the 2 left; ``concurrency=12``, room 12 for a worker of 8 slots, 4
    idle: half of it."""
    with _six_running(engine) as replay:
        with engine.begin() as conn:
            pgqueue.set_queue_limits(conn, "q", concurrency=18)
        assert len(_claim(replay, 16, free=4, slots=8)[1]) == 6
        assert len(_claim(replay, 16, free=2, slots=8)[1]) == 3  # half the 6 left


def test_far_from_the_limit_prefetch_leaves_one_workers_slots(engine: Engine) -> None:
    """``concurrency=100`` with 6 running, a worker of 4 slots asking for 100: 90, leaving 4
    (where half the room, 47, made a lone worker's claims half as deep as on an unlimited
    queue); the idle slots are taken whatever is left, up to the limit."""
    with _six_running(engine) as replay:
        with engine.begin() as conn:
            pgqueue.set_queue_limits(conn, "q", concurrency=100)
        assert len(_claim(replay, 100, free=4)[1]) == 90
        assert len(_claim(replay, 100, free=3)[1]) == 3  # 4 left: the idle slots only
        assert len(_claim(replay, 100, free=30)[1]) == 1  # the idle slots, up to the limit


def test_claims_of_every_size_up_to_a_power_of_two_share_one_compiled_statement(
    engine: Engine,
) -> None:
    """The worker asks a limited queue for what its window has room for, a different number at
    almost every claim: each takes exactly what it asked, and the sizes 9 to 16 are one
    statement compiled once (through SQLAlchemy), then replayed on the driver. A size written in
    the statement's text compiled each anew: 10-12 compilations of 10-20 ms per drain."""
    _queue(engine, 50, concurrency=100)
    replay = Replay(engine)
    try:
        taken = [len(_claim(replay, size, free=size)[1]) for size in (9, 13, 16)]
        assert taken == [9, 13, 16]
        assert replay.replayed == 2  # the first compiled, the next two replayed its text
        assert len(_claim(replay, 3, free=3)[1]) == 3  # below the smallest size: 8 compiled
        assert replay.replayed == 2
    finally:
        replay.release()
    assert scalar(engine, "SELECT count(*) FROM jobs WHERE status = 'running'") == 9 + 13 + 16 + 3


def test_a_per_key_claim_takes_each_keys_first_ready_job_past_a_future_one(
    engine: Engine,
) -> None:
    """``per_key=1``: a key whose first job in claim order is ready gives that job (the loose
    scan found it, no probe of its own); a key whose first job is not due yet (a higher
    priority, an hour ahead) gives its first ready job instead, and a key with a job running
    gives none."""
    with engine.begin() as conn:
        pgqueue.set_queue_limits(conn, "q", per_key=1)
        ready_a = pgqueue.enqueue(conn, {"a": 1}, queue="q", concurrency_key="a")
        pgqueue.enqueue(conn, {"a": 2}, queue="q", concurrency_key="a")
        pgqueue.enqueue(conn, {"b": 0}, queue="q", concurrency_key="b", priority=9, delay=3600)
        ready_b = pgqueue.enqueue(conn, {"b": 1}, queue="q", concurrency_key="b")
        pgqueue.enqueue(conn, {"c": 1}, queue="q", concurrency_key="c")
        pgqueue.enqueue(conn, {"c": 2}, queue="q", concurrency_key="c")
        conn.execute(
            text("UPDATE jobs SET status = 'running', attempts = 1 WHERE payload = '{\"c\": 1}'")
        )
    replay = Replay(engine)
    try:
        _, claimed, _ = _claim(replay, 10, free=4, per_key=True)
    finally:
        replay.release()
    assert sorted(job.id for job in claimed) == sorted([ready_a, ready_b])


def test_a_second_ride_completes_its_jobs_while_another_holds_the_queues_lock(
    engine: Engine,
) -> None:
    """``completions_first`` (the completer's second rider): the ride's completions are written
    while another transaction holds the queue's lock, then the ride waits for it; once that one
    commits, the claim counts the freed slots and takes jobs for them."""
    _queue(engine, 20, concurrency=4)
    replay = Replay(engine)
    try:
        _, held, _ = _claim(replay, 4, free=4)
        assert len(held) == 4
        answer: list[Any] = []
        with engine.connect() as holder:
            tx = holder.begin()
            holder.execute(text("SELECT 1 FROM jobs_queues WHERE queue = 'q' FOR UPDATE"))
            ride = threading.Thread(
                target=lambda: answer.append(
                    _claim(replay, 4, free=4, completing=held, completions_first=True)
                )
            )
            ride.start()
            # The ride's backend waits for the lock with the completions already written:
            # it holds the row locks of its four jobs (their UPDATE ran) and no claim yet.
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                waiting = scalar(
                    engine,
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                    " AND query LIKE '%jobs_queues%'",
                )
                if waiting:
                    break
                time.sleep(0.01)
            assert waiting == 1
            locked = scalar(
                engine,
                "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid)"
                " WHERE a.wait_event_type = 'Lock' AND l.locktype = 'transactionid'"
                " AND l.granted AND l.mode = 'ExclusiveLock'",
            )
            assert locked == 1  # it has written (a transaction id), before the lock
            assert ride.is_alive()
            tx.commit()
        ride.join(10)
        assert not ride.is_alive()
    finally:
        replay.release()
    done, claimed, _ = answer[0]
    assert done == {j.id for j in held}
    assert len(claimed) == 4  # the four slots its own completions freed
    assert scalar(engine, "SELECT count(*) FROM jobs WHERE status = 'done'") == 4
    assert scalar(engine, "SELECT count(*) FROM jobs WHERE status = 'running'") == 4


def _worker_on_concurrency_100(
    engine: Engine, jobs: int, seconds: float = 0.0
) -> tuple[pgqueue.Worker, list[int]]:
    """``jobs`` jobs of queue ``q`` at ``concurrency=100``, and a worker of 4 threads for them
    (listen off), with the list its handler appends each job's id to; the handler sleeps
    ``seconds`` (0: returns at once)."""
    with engine.begin() as conn:
        pgqueue.enqueue_many(conn, [{"i": i} for i in range(jobs)], queue="q")
        pgqueue.set_queue_limits(conn, "q", concurrency=100)
    ran: list[int] = []

    def handler(job: pgqueue.JobContext) -> None:
        if seconds:
            time.sleep(seconds)
        ran.append(job.id)

    worker = pgqueue.Worker(
        engine,
        {"q": handler},
        concurrency=4,
        listen=False,
        install_signal_handlers=False,
    )
    return worker, ran


def test_a_worker_rides_two_at_a_time_within_its_limit(engine: Engine) -> None:
    """A worker of 4 threads on ``concurrency=100``, jobs of 1 ms: rides go two at a time (the
    handlers keep finishing jobs while a ride is on the wire, so the completer's second rider
    sends some), and from outside the queue never has more than 100 ``running``; every job
    runs once. (No-op jobs can settle into one ride at a time, each carrying the whole window
    while no handler runs: docs/benchmarks.md, "Two rides at a time".)"""
    jobs = 2000
    worker, ran = _worker_on_concurrency_100(engine, jobs, seconds=0.001)
    beside: list[bool] = []
    real = Claimer.complete_and_claim

    def spy(self: Claimer, replay: Replay, queue: str, finished: Any, beside_: bool = False) -> Any:
        beside.append(beside_)
        return real(self, replay, queue, finished, beside_)

    peak = 0
    runner = threading.Thread(target=worker.run, kwargs={"until_empty": True})
    Claimer.complete_and_claim = spy  # type: ignore[method-assign,assignment]
    try:
        runner.start()
        while runner.is_alive():
            running = scalar(
                engine, "SELECT count(*) FROM jobs WHERE queue = 'q' AND status = 'running'"
            )
            peak = max(peak, running)
            time.sleep(0.002)
        runner.join()
    finally:
        Claimer.complete_and_claim = real  # type: ignore[method-assign]
    assert peak <= 100
    assert len(ran) == jobs
    assert len(set(ran)) == jobs
    done_once = "SELECT count(*) FROM jobs WHERE status = 'done' AND attempts = 1"
    assert scalar(engine, done_once) == jobs
    assert True in beside  # the second rider rode
    assert False in beside


def test_rides_cut_by_terminated_backends_lose_and_repeat_nothing(engine: Engine) -> None:
    """Real faults in the rides: while a worker of 4 threads drains ``concurrency=100``, the
    backends waiting for the queue's lock (a second ride, or a claim, behind the ride that holds
    it) are terminated, ten times. A cut ride wrote nothing; its completions are written the
    usual way and its slots claimed again: every job ends done in its one attempt, and the queue
    never has more than 100 ``running``."""
    jobs = 4000
    worker, ran = _worker_on_concurrency_100(engine, jobs)
    kills = 0
    peak = 0
    runner = threading.Thread(target=worker.run, kwargs={"until_empty": True})
    runner.start()
    deadline = time.monotonic() + 120
    while runner.is_alive() and time.monotonic() < deadline:
        peak = max(
            peak,
            scalar(engine, "SELECT count(*) FROM jobs WHERE queue = 'q' AND status = 'running'"),
        )
        if kills < 10:
            kills += scalar(
                engine,
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE datname = current_database() AND wait_event_type = 'Lock'"
                " AND query LIKE '%jobs_queues%' AND pid <> pg_backend_pid()",
            )
        time.sleep(0.001)
    runner.join(30)
    assert not runner.is_alive()
    assert kills > 0
    assert peak <= 100
    assert len(ran) == jobs
    assert len(set(ran)) == jobs
    done_once = "SELECT count(*) FROM jobs WHERE status = 'done' AND attempts = 1"
    assert scalar(engine, done_once) == jobs
