"""No worker thread dies silently: each loop logs what it did not expect and goes on, and a loop
that cannot go on stops the worker, which gives back what it holds and says so.

Each test injects a failure into one loop of a real worker on a real PostgreSQL. Where the
database can raise it, the fault is the database's own: a trigger of the test's that raises
(``RAISE EXCEPTION``: no transient error, nothing pgqueue retries by itself) on the statements of
one loop only, the first ``n`` times (a sequence counts them, outside any transaction). The
completer and the listener meet no statement of their own that could raise so (the completer's
writes are guarded already); there the worker's own seam is used: a subclass of the component,
which the worker builds by name, raising once where the component calls back into the worker.

Before, the heartbeat's, the scheduler's, the completer's and the listener's threads ended at
their first such error ("Exception in thread pgqueue-heartbeat"), the worker claiming on without
them; the claimer's error ended ``run()``.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.engine import URL
from worker_helpers import running, scalar, until

import pgqueue
import pgqueue.worker
from pgqueue import WorkerFailedError
from pgqueue._worker.completer import Completer
from pgqueue.listener import Listener
from tests.cli.conftest import plain, run_pgqueue

QUIET: dict[str, Any] = {"listen": False, "install_signal_handlers": False, "poll_interval": 0.2}
#: A job's row going from ``running`` to ``running``: the heartbeat's lease extension, alone.
HEARTBEAT = "OLD.status = 'running' AND NEW.status = 'running'"
#: A claim: ``queued`` to ``running``.
CLAIM = "OLD.status = 'queued' AND NEW.status = 'running'"
ALWAYS = 1_000_000


def inject(
    engine: Engine,
    when: str,
    times: int,
    *,
    table: str = "jobs",
    on: str = "UPDATE",
    code: str = "raise_exception",
) -> None:
    """Make the database raise ``injected fault`` (SQLSTATE ``code``) on the first ``times``
    rows ``on`` writes to ``table`` that match ``when`` (the test's own SQL, no user input)."""
    with engine.begin() as conn:
        conn.execute(
            text(
                "CREATE SEQUENCE IF NOT EXISTS test_faults;"
                "CREATE OR REPLACE FUNCTION test_fault() RETURNS trigger LANGUAGE plpgsql AS $$ "
                "BEGIN IF nextval('test_faults') <= TG_ARGV[0]::bigint THEN "
                "RAISE EXCEPTION 'injected fault' USING ERRCODE = TG_ARGV[1]; END IF; "
                "RETURN NEW; END $$;"
                f"CREATE TRIGGER test_fault BEFORE {on} ON {table} FOR EACH ROW WHEN ({when}) "
                f"EXECUTE FUNCTION test_fault('{times}', '{code}');"
            )
        )


def injected(engine: Engine) -> int:
    """How many times the trigger ran (raised or not)."""
    with engine.connect() as conn:
        return int(conn.execute(text("SELECT last_value FROM test_faults")).scalar_one())


def logged(caplog: pytest.LogCaptureFixture, text_: str) -> list[logging.LogRecord]:
    """The records saying ``text_`` that carry a traceback."""
    return [r for r in caplog.records if text_ in r.getMessage() and r.exc_info]


def job_rows(engine: Engine) -> list[tuple[Any, ...]]:
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT id, status, attempts FROM jobs ORDER BY id"))
        return [tuple(r) for r in rows]


@pytest.fixture
def caplog_worker(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger="pgqueue")
    return caplog


def test_the_heartbeat_logs_a_failed_beat_and_keeps_the_lease(
    engine: Engine, caplog_worker: pytest.LogCaptureFixture
) -> None:
    """Two beats raise: each is logged with its traceback and tried again within the lease, so
    a job of two leases still runs once, and ``/livez`` stays healthy."""
    inject(engine, HEARTBEAT, 2)
    with engine.begin() as conn:
        pgqueue.enqueue(conn, {}, queue="long")
    worker = pgqueue.Worker(engine, {"long": lambda job: time.sleep(5.0)}, lease=3.0, **QUIET)
    with running(worker):
        until(lambda: injected(engine) >= 3, 10, "a beat after the two faults")
        assert worker.liveness().ok, worker.liveness()
        until(lambda: job_rows(engine)[0][1] == "done", 15, "the job done")
    assert job_rows(engine)[0][2] == 1  # never reaped, never run twice
    assert len(logged(caplog_worker, "heartbeat: a step failed")) == 2
    assert worker.stats.lost == 0


def test_a_heartbeat_that_cannot_go_on_stops_the_worker_which_gives_back_what_it_holds(
    engine: Engine, caplog_worker: pytest.LogCaptureFixture
) -> None:
    """Every beat raises: within a beat period of the first failure (before the leases expire)
    the worker stops claiming, gives back the job it had not started, lets the running one
    finish (its handler sees ``stopping``) and ``run()`` raises :class:`WorkerFailedError`."""
    inject(engine, HEARTBEAT, ALWAYS)
    with engine.begin() as conn:
        ids = pgqueue.enqueue_many(conn, [{"n": n} for n in range(4)], queue="long")
    started = threading.Event()

    def handler(job: pgqueue.JobContext) -> None:
        started.set()
        job.stopping.wait(30)

    worker = pgqueue.Worker(
        engine, {"long": handler}, lease=3.0, concurrency=1, prefetch=1, batch_size=2, **QUIET
    )
    failure: list[BaseException] = []

    def run() -> None:
        try:
            worker.run()
        except BaseException as exc:
            failure.append(exc)

    began = time.monotonic()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(20)
    assert not thread.is_alive(), "the worker went on without its heartbeat"
    assert time.monotonic() - began < 3.0 + 2.0  # stopped about when the lease would expire
    (error,) = failure
    assert isinstance(error, WorkerFailedError)
    assert error.loop == "heartbeat"
    assert "injected fault" in str(error.__cause__)
    assert started.is_set()
    rows = {row[0]: row[1:] for row in job_rows(engine)}
    assert rows[ids[0]] == ("done", 1)  # the running one finished and was written
    assert rows[ids[1]] == ("queued", 0)  # claimed ahead, never started: given back
    assert rows[ids[2]] == rows[ids[3]] == ("queued", 0)  # never claimed
    assert worker.stats.released == 1
    assert [r for r in caplog_worker.records if r.levelno == logging.CRITICAL]


def test_pgqueue_worker_exits_1_when_its_heartbeat_cannot_go_on(
    db_url: URL, engine: Engine, tmp_path: Path
) -> None:
    inject(engine, HEARTBEAT, ALWAYS)
    (tmp_path / "fault_app.py").write_text(
        "handlers = {'long': lambda job: job.stopping.wait(30)}\n"
    )
    with engine.begin() as conn:
        pgqueue.enqueue(conn, {}, queue="long")
    got = run_pgqueue(
        "worker", "fault_app:handlers", "--url", plain(db_url), "--lease", "3", cwd=str(tmp_path)
    )
    assert got.code == 1, got.err[-2000:]
    last = got.err.strip().splitlines()[-1]
    assert last.startswith("pgqueue: error: the worker's heartbeat could not go on"), last
    assert "injected fault" in last


def test_the_claimer_logs_a_failed_claim_and_claims_again(
    engine: Engine, caplog_worker: pytest.LogCaptureFixture
) -> None:
    inject(engine, CLAIM, 2)
    with engine.begin() as conn:
        pgqueue.enqueue(conn, {}, queue="q")
    stats = pgqueue.Worker(engine, {"q": lambda job: None}, **QUIET).run(until_empty=True)
    assert stats.done == 1
    assert len(logged(caplog_worker, "claimer: a step failed")) == 2


def test_a_claimer_whose_every_claim_fails_stops_the_worker(engine: Engine) -> None:
    inject(engine, CLAIM, ALWAYS)
    with engine.begin() as conn:
        pgqueue.enqueue(conn, {}, queue="q")
    worker = pgqueue.Worker(engine, {"q": lambda job: None}, **QUIET)
    with pytest.raises(WorkerFailedError, match="the worker's claimer could not go on") as raised:
        worker.run()
    assert raised.value.loop == "claimer"
    assert job_rows(engine)[0][1:] == ("queued", 0)


def test_the_scheduler_logs_a_failed_declaration_and_fires_its_ticks(
    engine: Engine, caplog_worker: pytest.LogCaptureFixture
) -> None:
    """The first two writes of the periodic table raise (a data exception, which the scheduler
    handles nowhere itself): the declaration is tried again, and the ticks are enqueued and
    run."""
    inject(engine, "true", 2, table="jobs_periodic", on="INSERT OR UPDATE", code="data_exception")
    every = pgqueue.Periodic("ticks", timedelta(seconds=1), "ticks")
    worker = pgqueue.Worker(engine, {"ticks": lambda job: None}, periodic=[every], **QUIET)
    with running(worker):
        until(
            lambda: scalar(engine, "SELECT count(*) FROM jobs WHERE status = 'done'") >= 1,
            20,
            "a tick enqueued and run",
        )
    assert logged(caplog_worker, "periodic scheduler: a step failed")


class FlakyCompleter(Completer):
    """The worker's completer, whose first report back to the worker raises."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        report, raised = self._report, threading.Event()

        def flaky(outcomes: Any) -> None:
            if not raised.is_set():
                raised.set()
                raise RuntimeError("injected fault")
            report(outcomes)

        self._report = flaky


def test_the_completer_logs_a_failed_report_and_goes_on(
    engine: Engine, caplog_worker: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pgqueue.worker, "Completer", FlakyCompleter)
    with engine.begin() as conn:
        pgqueue.enqueue(conn, {"n": 0}, queue="q")
    worker = pgqueue.Worker(engine, {"q": lambda job: None}, **QUIET)
    with running(worker):
        until(lambda: job_rows(engine)[0][1] == "done", 10, "the first job written")
        until(lambda: bool(logged(caplog_worker, "completer: a step failed")), 10, "the log")
        with engine.begin() as conn:
            later = pgqueue.enqueue_many(conn, [{"n": n} for n in range(1, 4)], queue="q")
        until(lambda: worker.stats.done == 3, 10, "the later jobs reported done")
        assert worker.liveness().ok, worker.liveness()
    assert {row[0]: row[1] for row in job_rows(engine) if row[0] in later} == dict.fromkeys(
        later, "done"
    )


class FlakyListener(Listener):
    """The worker's listener, whose first listening round raises (a bug, not the connection's
    failure)."""

    raised = threading.Event()

    def _listen(self, conn: Any) -> None:
        if not FlakyListener.raised.is_set():
            FlakyListener.raised.set()
            raise RuntimeError("injected fault")
        super()._listen(conn)


@pytest.fixture
def flaky_listener(monkeypatch: pytest.MonkeyPatch) -> type[FlakyListener]:
    FlakyListener.raised.clear()
    monkeypatch.setattr(pgqueue.worker, "Listener", FlakyListener)
    return FlakyListener


def test_the_listener_logs_an_unexpected_error_and_listens_again(
    engine: Engine,
    caplog_worker: pytest.LogCaptureFixture,
    flaky_listener: type[FlakyListener],
) -> None:
    """A worker that polls once a minute is woken by the NOTIFY of a job enqueued after its
    listener's error: the listener reconnected."""
    done = threading.Event()
    worker = pgqueue.Worker(
        engine,
        {"q": lambda job: done.set()},
        poll_interval=60,
        install_signal_handlers=False,
    )
    with running(worker):
        until(flaky_listener.raised.is_set, 10, "the listener's fault")
        until(lambda: worker.readiness().ok, 10, "the listener connected again")
        time.sleep(0.3)  # past the poll its reconnection asked for
        with engine.begin() as conn:
            pgqueue.enqueue(conn, {}, queue="q")
        assert done.wait(10), "the NOTIFY was not heard"
    assert logged(caplog_worker, "failed unexpectedly; reconnecting")


def test_a_listener_callback_that_raises_costs_that_notification_only(engine: Engine) -> None:
    heard: list[str] = []

    def on_notify(payload: str) -> None:
        if not heard:
            heard.append("raised")
            raise RuntimeError("injected fault")
        heard.append(payload)

    connected = threading.Event()
    listener = Listener(engine.url, on_notify, connected.set)
    listener.start()
    try:
        assert connected.wait(10)
        for queue in ("first", "second"):
            with engine.begin() as conn:
                conn.execute(text("SELECT pg_notify('jobs', :q)"), {"q": queue})
        until(lambda: len(heard) == 2, 10, "the second notification")
    finally:
        listener.stop()
    assert heard == ["raised", "second"]
