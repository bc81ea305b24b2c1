"""Transaction mode's lane owns its tickets: the room it gives the claimer, and what it counts.

No database: the lane's threads start only where a test needs a ticket taken, and then connect to
a socket that accepts and never answers (a real connection attempt that hangs until the test
closes it), or see a stop before they take anything.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta

from sqlalchemy import Engine, create_engine

from pgqueue._worker.abandon import Interrupter
from pgqueue._worker.completer import Completer
from pgqueue._worker.runtime import Runtime
from pgqueue._worker.threads import TransactionLane
from pgqueue._worker.window import ClaimWindow, Held, Lane
from pgqueue.flow import QueueSettings, Rate
from pgqueue.jobs import JobContext, WorkerStats
from pgqueue.retry_policy import RetryPolicy

T = Lane.THREADS


def handler(job: JobContext) -> None:
    raise AssertionError("no job is ever claimed here")


def make_lane(slots: int, engine: Engine | None = None) -> tuple[TransactionLane, Runtime]:
    engine = engine or create_engine("postgresql+psycopg://nobody@127.0.0.1:9/never")
    completer = Completer(engine, lambda outcomes: None, lock_timeout_ms=1000)
    window = ClaimWindow({T: slots}, {T: 0}, batch_size=10, backlog=0)
    runtime = Runtime(window, WorkerStats(), None, lambda queue: RetryPolicy(), completer=completer)
    lane = TransactionLane(
        runtime,
        {"emails": handler},
        slots,
        engine=engine,
        lease=timedelta(seconds=30),
        on_job=lambda queue: None,
    )
    return lane, runtime


@contextmanager
def silent_server() -> Iterator[tuple[Engine, list[socket.socket]]]:
    """An engine whose connections reach a socket that accepts them and never answers."""
    server = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            accepted.append(conn)

    threading.Thread(target=accept, daemon=True).start()
    port = server.getsockname()[1]
    engine = create_engine(f"postgresql+psycopg://nobody@127.0.0.1:{port}/never", pool_size=4)
    try:
        yield engine, accepted
    finally:
        server.close()
        for conn in accepted:
            conn.close()
        engine.dispose()


def until(predicate: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 10
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_each_free_thread_is_worth_one_ticket_and_nothing_more() -> None:
    """A ticket (a queue a thread claims one job from) takes a thread: nothing is claimed ahead,
    and the claimer claims nothing itself."""
    lane, runtime = make_lane(slots=3)
    with runtime.lock:
        assert lane.worth_claim(T)
        assert lane.any_worth_claim()
        assert lane.in_flight() == 0
        assert lane.take("emails", T) == 0
        assert lane.take("webhooks", T) == 0
        assert lane.worth_claim(T)  # one thread is still free: any free thread is worth it
        assert lane.in_flight() == 2
        assert lane.take("emails", T) == 0
        assert not lane.worth_claim(T)
        assert not lane.any_worth_claim()
        assert lane.in_flight() == 3
    assert len(runtime.window) == 0  # the window holds none of it
    assert runtime.window.in_flight() == 0


def test_a_taken_ticket_counts_until_its_transaction_ends() -> None:
    """A thread that took a ticket holds its place while its transaction is open (here: its
    connection hangs), and gives it back when the transaction ends (here: the connection fails)."""
    with silent_server() as (engine, accepted):
        lane, runtime = make_lane(slots=2, engine=engine)
        with runtime.lock:
            lane.take("emails", T)
        lane.start()
        until(lambda: len(accepted) == 1, "the thread's connection")
        with runtime.lock:
            assert lane.in_flight() == 1  # taken: no ticket waits, one transaction is open
            assert lane.worth_claim(T)
            lane.take("emails", T)
        until(lambda: len(accepted) == 2, "the second thread's connection")
        with runtime.lock:
            assert lane.in_flight() == 2
            assert not lane.worth_claim(T)
        runtime.stop.set()  # the failed claims do not wait a second before their thread ends
        for conn in accepted:
            conn.close()
        lane.join(time.monotonic() + 10)
        with runtime.lock:
            assert lane.in_flight() == 0
            assert lane.worth_claim(T)


def test_a_stop_drops_the_tickets_no_thread_took() -> None:
    """Shutdown: tickets still waiting are forgotten by the threads on their way out (nothing
    was claimed for them), so nothing stays in flight."""
    lane, runtime = make_lane(slots=2)
    with runtime.lock:
        lane.take("emails", T)
        lane.take("emails", T)
        runtime.stop.set()
    lane.start()
    lane.join(time.monotonic() + 10)
    with runtime.lock:
        assert lane.in_flight() == 0
        assert lane.worth_claim(T)


def test_the_intake_says_which_queues_its_claims_can_hold_limits_of() -> None:
    """The lease/transaction difference is the intake's: the window's claims commit at once and
    hold any queue's limits; the transaction lane's jobs run inside their open transaction, so it
    admits only queues without limits (the claimer asks, and branches on no mode)."""
    lane, runtime = make_lane(2)
    limited = [
        QueueSettings("q", concurrency=1),
        QueueSettings("q", per_key=1),
        QueueSettings("q", rate=Rate(5, timedelta(seconds=1))),
    ]
    assert all(runtime.window.admits(s) for s in [*limited, QueueSettings("q")])
    assert lane.admits(QueueSettings("q"))
    assert lane.admits(QueueSettings("q", paused=True))  # a pause is not a limit
    assert not any(lane.admits(s) for s in limited)


def test_no_thread_takes_a_ticket_while_a_stuck_handlers_session_is_being_ended() -> None:
    """Ending a stuck handler's session frees its row: a thread of the same lane that claimed
    meanwhile could run the attempt again before its failure is written. So tickets wait until
    the ending is over (here it hangs on its connection, then fails: the session is not ended,
    and the handler's own transaction keeps the job)."""
    with silent_server() as (engine, accepted):
        lane, runtime = make_lane(slots=1, engine=engine)
        lane.start()
        held = Held(JobContext(7, "emails", {}, 1), T, time.monotonic())
        held.timeout = 0.5
        interrupter = Interrupter(engine, pid=4242)
        ending = threading.Thread(target=lane._abandon, args=(held, interrupter, RetryPolicy()))
        ending.start()
        until(lambda: len(accepted) == 1, "the ending's connection")
        with runtime.lock:
            lane.take("emails", T)
        time.sleep(0.3)  # a thread free to claim would have connected by now
        assert len(accepted) == 1
        with runtime.lock:
            assert lane.in_flight() == 1  # the ticket waits, untaken
        accepted[0].close()  # the ending fails to connect: nothing is ended, the pause is over
        ending.join(10)
        assert not held.abandoned
        until(lambda: len(accepted) == 2, "the ticket's claim")
        runtime.stop.set()
        for conn in accepted:
            conn.close()
        lane.join(time.monotonic() + 10)
