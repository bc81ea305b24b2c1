"""A ``stop()`` is never lost: made at any point of a real worker's start-up, it makes ``run()``
return within ``shutdown_timeout`` + 1 s, and the worker runs again afterwards (#21).

Each point is reached honestly: the worker runs on the real database, and the test blocks one real
step of the start-up (or a hook the worker calls) until it has called ``stop()`` from its own
thread, then lets the step go on. ``worker.run`` used to clear its stop event and then swap it for
its run's: a stop made in between (while the health server started, or before ``run()`` got that
far) was lost and ``run()`` never returned.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL
from worker_helpers import scalar, until

import pgqueue
import pgqueue.health
import pgqueue.listener
import pgqueue.pooler
import pgqueue.worker

SHUTDOWN_TIMEOUT = 1.0
#: How late a run may return after its stop: the shutdown's second on a quiet machine, several on
#: one under ``stress --cpu 2`` (3.2 s seen: threads start and join slowly there), and always far
#: short of the 60 s poll that a lost stop would wait for.
RETURN_SLACK = 10.0


class Gate:
    """Holds the first call of a start-up step until the test let it go."""

    def __init__(self) -> None:
        self.reached = threading.Event()
        self.go = threading.Event()

    def hold(self) -> None:
        if not self.reached.is_set():
            self.reached.set()
            self.go.wait(30)

    def around(self, step: Callable[..., Any]) -> Callable[..., Any]:
        def held(*args: Any, **kwargs: Any) -> Any:
            self.hold()
            return step(*args, **kwargs)

        return held


class HoldAtStart(pgqueue.WorkerHooks):
    """``on_worker_started``: the components are built, none of their threads started."""

    def __init__(self, gate: Gate) -> None:
        self.gate = gate

    def on_worker_started(self, worker: pgqueue.Worker) -> None:
        self.gate.hold()


#: Where ``stop()`` is made: (point, needs the health server).
POINTS = {
    "before run() is called": False,
    "while run() builds its runtime": False,
    "while the health server starts": True,
    "before any thread is up (the worker_started hook)": False,
    "while the listener starts": False,
    "once everything is up": False,
}


@pytest.mark.parametrize(
    ("point", "health_port"),
    [
        (point, port)
        for point, needs_server in POINTS.items()
        for port in ((0,) if needs_server else (None, 0))
    ],
)
def test_a_stop_at_any_point_of_start_up_ends_the_run_and_is_reset(
    engine: Engine, monkeypatch: pytest.MonkeyPatch, point: str, health_port: int | None
) -> None:
    gate = Gate()
    hooks: list[pgqueue.WorkerHooks] = []
    if point == "while run() builds its runtime":
        monkeypatch.setattr(
            pgqueue.worker.Worker, "_runtime", gate.around(pgqueue.worker.Worker._runtime)
        )
    elif point == "while the health server starts":
        monkeypatch.setattr(
            pgqueue.health.HealthServer, "start", gate.around(pgqueue.health.HealthServer.start)
        )
    elif point == "before any thread is up (the worker_started hook)":
        hooks.append(HoldAtStart(gate))
    elif point == "while the listener starts":
        monkeypatch.setattr(
            pgqueue.listener.Listener, "start", gate.around(pgqueue.listener.Listener.start)
        )
    done = threading.Event()
    worker = pgqueue.Worker(
        engine,
        {"q": lambda job: done.set()},
        shutdown_timeout=SHUTDOWN_TIMEOUT,
        poll_interval=60,  # nothing but the stop ends this run
        health_port=health_port,
        install_signal_handlers=False,
        hooks=hooks,
    )
    returned: list[float] = []

    def run() -> None:
        worker.run()
        returned.append(time.monotonic())

    thread = threading.Thread(target=run, daemon=True)
    try:
        if point == "before run() is called":
            stopped = time.monotonic()
            worker.stop()
            thread.start()
        else:
            thread.start()
            if point == "once everything is up":
                until(lambda: worker.readiness().ok, 20, "the worker up")
            else:
                assert gate.reached.wait(20), f"the worker never got {point}"
            stopped = time.monotonic()
            worker.stop()
            gate.go.set()
        thread.join(SHUTDOWN_TIMEOUT + RETURN_SLACK + 10.0)
        assert not thread.is_alive(), f"a stop {point} was lost: run() did not return"
    finally:
        gate.go.set()
        if thread.is_alive():  # end the run that lost its stop, for the next test's sake
            worker.stop()
            thread.join(30)
    assert returned[0] - stopped <= SHUTDOWN_TIMEOUT + RETURN_SLACK, returned[0] - stopped

    # The stop was spent by that run: the worker runs again (a pending stop would end this
    # drain before it claimed anything).
    monkeypatch.undo()
    with engine.begin() as conn:
        job_id = pgqueue.enqueue(conn, {}, queue="q")
    worker.run(until_empty=True)
    assert done.is_set()
    assert scalar(engine, "SELECT status FROM jobs WHERE id = :id", id=job_id) == "done"


def test_the_listen_check_takes_no_connection_of_the_engine_once_the_run_stopped(
    db_url: URL, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The LISTEN check (a daemon thread the run starts, never waited for at start-up) sends its
    notification through the worker's engine. It used to get there whenever its thread did: on a
    loaded machine after ``run()`` had returned and the caller had disposed of the engine, so
    the connection it took went back to a pool nobody disposed of again and was
    garbage-collected open (``ResourceWarning: connection ... was deleted while still open``, in
    whichever test the collector ran: one full suite run in six). Here the check is held until
    the worker was stopped: it sends nothing through the engine then, and ``run()`` returns only
    once its thread ended."""
    engine = create_engine(db_url)
    gate = Gate()
    check_threads: list[threading.Thread] = []
    real_check = pgqueue.pooler.check_listen

    def held_check(*args: Any, **kwargs: Any) -> bool | None:
        check_threads.append(threading.current_thread())
        gate.hold()  # the check's thread is late: the run is stopped meanwhile
        return real_check(*args, **kwargs)

    monkeypatch.setattr(pgqueue.pooler, "check_listen", held_check)
    taken_by_check: list[str] = []

    def on_checkout(*_: Any) -> None:
        if threading.current_thread() in check_threads:
            taken_by_check.append(threading.current_thread().name)

    event.listen(engine, "checkout", on_checkout)  # kept by the pool dispose() makes
    worker = pgqueue.Worker(
        engine,
        {"q": lambda job: None},
        shutdown_timeout=SHUTDOWN_TIMEOUT,
        poll_interval=60,
        install_signal_handlers=False,
    )
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        assert gate.reached.wait(20), "the worker never started its LISTEN check"
        worker.stop()
        gate.go.set()
        thread.join(SHUTDOWN_TIMEOUT + RETURN_SLACK + 10.0)
        assert not thread.is_alive(), "run() did not return after its stop"
        assert not check_threads[0].is_alive(), "run() returned with its LISTEN check running"
        engine.dispose()  # the caller is done with the engine
        check_threads[0].join(10.0)  # (without the join in run(): let a late check finish)
        assert taken_by_check == []
        assert engine.pool.checkedin() == 0  # nothing came back to the pool after dispose()
    finally:
        gate.go.set()
        if thread.is_alive():
            worker.stop()
            thread.join(30)
        engine.dispose()
