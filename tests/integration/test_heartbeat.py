"""The heartbeat on a real PostgreSQL: leases extended, lost jobs learnt, its own stop signal.

The heartbeat's one decision is SQL (which leases the guarded extension matched, and how the
others ended), so it runs against real rows here: a job completed by its handler's own
transaction, one cancelled, one reaped and claimed by another worker. What the runtime then does
with each is also ``tests/unit/test_runtime.py``'s, without a database.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta

from sqlalchemy import Engine, text
from worker_helpers import scalar

import pgqueue
from pgqueue import repository
from pgqueue._worker.heartbeat import Heartbeat
from pgqueue._worker.runtime import Runtime
from pgqueue._worker.window import ClaimWindow, Held, Lane, State
from pgqueue.results import ClaimedJob
from tests.worker_parts import FakeCompleter, Recorder, make_runtime, stop, until

T = Lane.THREADS
THIRTY = timedelta(seconds=30)


def held_jobs(engine: Engine, count: int) -> tuple[Runtime, Recorder, list[ClaimedJob]]:
    """A runtime holding ``count`` freshly claimed jobs (pending: a test starts those it runs)."""
    with engine.begin() as conn:
        pgqueue.enqueue_many(conn, [{"n": n} for n in range(count)], queue="q")
        claimed = pgqueue.claim(conn, queue="q", limit=count, lease=THIRTY)
    hooks = Recorder()
    window = ClaimWindow({T: count}, {T: 0}, batch_size=count, backlog=10)
    runtime = make_runtime(window, completer=FakeCompleter(), hooks=[hooks])
    with runtime.lock:
        runtime.accept(T, claimed)
    return runtime, hooks, claimed


def start(runtime: Runtime, count: int) -> list[Held]:
    with runtime.lock:
        held = [runtime.window.start_next(T) for _ in range(count)]
    return [h for h in held if h is not None]


def lease_end(engine: Engine, job_id: int) -> datetime:
    end: datetime = scalar(engine, "SELECT locked_until FROM jobs WHERE id = :i", i=job_id)
    return end


def test_a_beat_extends_the_held_leases_and_tells_the_runtime_how_each_missed_one_ended(
    engine: Engine,
) -> None:
    runtime, hooks, _ = held_jobs(engine, 5)
    kept, self_done, cancelled, lost = start(runtime, 4)
    (unstarted,) = runtime.window.in_state(State.PENDING)
    with engine.begin() as conn:
        pgqueue.complete(conn, self_done.job.id, self_done.job.attempts)  # its own transaction
        pgqueue.cancel(conn, [cancelled.job.id, unstarted.job.id])
        conn.execute(
            text("UPDATE jobs SET locked_until = now() - interval '1 second' WHERE id = :i"),
            {"i": lost.job.id},
        )
        assert [r.id for r in repository.reap_expired(conn)] == [lost.job.id]
    with engine.begin() as conn:  # another worker claims it: attempt 2 is not ours
        assert [c.id for c in pgqueue.claim(conn, queue="q", lease=THIRTY)] == [lost.job.id]
    before = lease_end(engine, kept.job.id)

    heartbeat = Heartbeat(runtime, engine, timedelta(minutes=10), lock_timeout_ms=1000)
    with runtime.lock:
        leased = runtime.window.leased()
    heartbeat.beat(leased, deadline=time.monotonic() + 10)

    assert lease_end(engine, kept.job.id) - before > timedelta(minutes=9)
    assert hooks.extended == [[kept.job.id]]
    assert not kept.job.stopping.is_set()
    # Done by its handler: its lease is no longer kept, its handler finishes undisturbed.
    assert not self_done.job.stopping.is_set()
    with runtime.lock:
        assert [h.job.id for h in runtime.window.leased()] == [
            kept.job.id,
            cancelled.job.id,
            lost.job.id,
        ]
        assert runtime.window.holds(self_done)
        assert not runtime.window.holds(unstarted)  # dropped at once
    # Cancelled, lost: their handlers are told to stop; the outcome is dropped when they return.
    assert (cancelled.job.cancelled, cancelled.job.stopping.is_set()) == (True, True)
    assert (lost.job.lease_lost, lost.job.stopping.is_set()) == (True, True)
    assert (runtime.stats.cancelled, runtime.stats.lost) == (1, 0)
    assert hooks.events(unstarted.job.id) == ["on_claimed", "on_cancelled"]


def test_the_heartbeat_beats_through_the_shutdown_grace_until_its_own_stop(
    engine: Engine,
) -> None:
    """It beats every ``lease / 3``; the worker's stop does not stop it (the handlers still
    running keep their leases through the grace), its own :meth:`Heartbeat.stop` does, for good:
    no beat after it, not even when poked."""
    runtime, hooks, (claimed,) = held_jobs(engine, 1)
    start(runtime, 1)
    heartbeat = Heartbeat(runtime, engine, timedelta(seconds=0.6), lock_timeout_ms=1000)
    heartbeat.start()
    try:
        until(lambda: len(hooks.extended) >= 2, "two beats")
        stop(runtime)  # the worker stops: the grace for its running handlers begins
        beats = len(hooks.extended)
        until(lambda: len(hooks.extended) >= beats + 2, "two beats after the worker's stop")
    finally:
        heartbeat.join(5.0)
    beats, lease = len(hooks.extended), lease_end(engine, claimed.id)
    heartbeat.poke()
    time.sleep(0.6)  # three periods
    assert len(hooks.extended) == beats
    assert lease_end(engine, claimed.id) == lease
    assert hooks.extended[0] == [claimed.id]


def test_a_poke_beats_at_once(engine: Engine) -> None:
    """The cancel NOTIFY pokes it: the held leases are checked now, not a third of a lease later,
    and a cancelled job's handler is told to stop."""
    runtime, hooks, (claimed,) = held_jobs(engine, 1)
    (held,) = start(runtime, 1)
    heartbeat = Heartbeat(runtime, engine, timedelta(minutes=1), lock_timeout_ms=1000)
    heartbeat.start()
    try:
        with engine.begin() as conn:
            pgqueue.cancel(conn, [claimed.id])
        heartbeat.poke()
        until(lambda: held.job.stopping.is_set(), "the cancel learnt", timeout=10.0)
    finally:
        heartbeat.join(5.0)
    assert held.job.cancelled
    assert hooks.extended == []  # the only lease was not extended: the job is not ours
