"""Helpers shared by the worker tests: bounded waits and one-value queries."""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import Engine, event, text
from sqlalchemy.engine import URL

import pgqueue
from pgqueue._base.urls import to_libpq_url
from pgqueue._worker import abandon


def until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``predicate`` every 50 ms; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


def scalar(engine: Engine, sql: str, **params: Any) -> Any:
    with engine.connect() as conn:
        return conn.execute(text(sql), params).scalar_one()


def lock_waiters_at_session_ends(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Each time a worker ends a stuck transaction-mode handler's session, the number of sessions
    then waiting for a lock that session holds, seen from the server just before the end."""
    waiting: list[int] = []
    terminate = abandon.Interrupter.terminate
    query = "SELECT count(*) FROM pg_stat_activity WHERE :pid = ANY(pg_blocking_pids(pid))"

    def probed(self: abandon.Interrupter, before: Callable[[], None]) -> bool:
        waiting.append(scalar(engine, query, pid=self.pid))
        return terminate(self, before)

    monkeypatch.setattr(abandon.Interrupter, "terminate", probed)
    return waiting


def blocks_first_attempt(release: threading.Event) -> Callable[[pgqueue.JobContext], None]:
    """A handler whose first attempt blocks in Python until ``release`` (deaf to
    ``job.stopping``, and not in the database); later attempts return at once."""

    def handler(job: pgqueue.JobContext) -> None:
        if job.attempts == 1:
            release.wait(20)

    return handler


@contextmanager
def running(worker: pgqueue.Worker, **kw: Any) -> Iterator[threading.Thread]:
    """Run the worker in a thread; stop it and wait (bounded) on the way out."""
    thread = threading.Thread(target=worker.run, kwargs=kw, daemon=True)
    thread.start()
    try:
        yield thread
    finally:
        worker.stop()
        thread.join(30)
        assert not thread.is_alive(), "worker did not stop"


@contextmanager
def statements_sent(engine: Engine, needle: str) -> Iterator[list[tuple[str, dict[str, Any]]]]:
    """Every statement (and its parameters) the engine sends that names ``needle``, while
    inside the block."""
    seen: list[tuple[str, dict[str, Any]]] = []

    def before(conn: Any, cursor: Any, statement: str, parameters: Any, *args: Any) -> None:
        if needle in statement:
            seen.append((statement, dict(parameters or {})))

    event.listen(engine, "before_cursor_execute", before)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", before)


def captured_claim(engine: Engine, queue: str = "default", limit: int = 10) -> tuple[str, Any]:
    """The exact SQL and parameters the driver receives for one claim (rolled back)."""
    with statements_sent(engine, "FOR UPDATE SKIP LOCKED") as seen, engine.connect() as conn:
        pgqueue.claim(conn, queue=queue, limit=limit)
        conn.rollback()
    (captured,) = seen
    return captured


def claim_plan(engine: Engine) -> list[str]:
    """``EXPLAIN (COSTS OFF)`` of the exact claim the driver receives, one line a row."""
    sql, params = captured_claim(engine)
    with engine.connect() as conn:
        raw = conn.connection.driver_connection
        assert raw is not None
        plan = [r[0] for r in raw.execute(f"EXPLAIN (COSTS OFF) {sql}", params).fetchall()]
        conn.rollback()
    return plan


#: Seconds a listener on this host waits after the notifications it expected: one more sent by
#: the same commit (a duplicate, a queue too many) arrives with them, well within that.
QUIET = 0.3


def heard(listener: Any, timeout: float, *, expect: int | None = None) -> list[tuple[str, str]]:
    """``(channel, payload)`` of the notifications a LISTEN connection (the ``listener`` fixture)
    gets: every one in ``timeout`` seconds; with ``expect``, as soon as that many came
    (``timeout`` at most), with any more that follow within :data:`QUIET` seconds."""
    if expect is None:
        return [(n.channel, n.payload) for n in listener.notifies(timeout=timeout)]
    got = [(n.channel, n.payload) for n in listener.notifies(timeout=timeout, stop_after=expect)]
    return got + [(n.channel, n.payload) for n in listener.notifies(timeout=QUIET)]


class Tally:
    """A handler that counts how many times each job ran (from any number of threads)."""

    def __init__(self) -> None:
        self.runs: Counter[int] = Counter()
        self._lock = threading.Lock()

    def __call__(self, job: pgqueue.JobContext) -> None:
        with self._lock:
            self.runs[job.id] += 1

    def total(self) -> int:
        with self._lock:
            return sum(self.runs.values())


def replayed_claims(records: Iterable[logging.LogRecord]) -> int:
    """Claims the worker's claim loop replayed on the driver, from its DEBUG lines."""
    found = (_REPLAYED.search(r.getMessage()) for r in records)
    return sum(int(m.group(1)) for m in found if m)


_REPLAYED = re.compile(r"given back.* after (\d+) replayed")


def terminate_others(db_url: URL) -> int:
    """Terminate every other session of the test's database (a real fault); how many."""
    with psycopg.connect(to_libpq_url(db_url), autocommit=True) as admin:
        row = admin.execute(
            "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()) t"
        ).fetchone()
    assert row is not None
    return int(row[0])


def two_workers_drain(
    engine: Engine, jobs: int, caplog: Any, **options: Any
) -> tuple[list[int], Tally]:
    """Enqueue ``jobs`` no-op jobs and drain them with two workers (concurrency 4, claims of 5);
    the ids enqueued and the tally of runs."""
    caplog.set_level(logging.DEBUG, logger="pgqueue.worker")
    with engine.begin() as conn:
        ids = pgqueue.enqueue_many(conn, [{"n": n} for n in range(jobs)])
    tally = Tally()
    workers = [
        pgqueue.Worker(
            engine,
            {"default": tally},
            concurrency=4,
            batch_size=5,
            install_signal_handlers=False,
            **options,
        )
        for _ in range(2)
    ]
    done = "SELECT count(*) FROM jobs WHERE status = 'done'"
    with running(workers[0]), running(workers[1]):
        until(lambda: tally.total() >= jobs, 60, f"{jobs} jobs handled")
        until(lambda: scalar(engine, done) == jobs, 30, "every completion committed")
    return ids, tally


@contextmanager
def row_locked(
    engine: Engine,
    job_id: int,
    seconds: float,
    sql: str = "SELECT 1 FROM jobs WHERE id = :id FOR UPDATE",
) -> Iterator[threading.Event]:
    """Another session locks the job's row (``sql``, by default ``SELECT ... FOR UPDATE``) and
    commits after ``seconds``, or when the block ends if that comes first: a real concurrent
    transaction. Yields once the lock is held; the event is set when the holder let go. A long
    hold costs nothing once the block is done with it."""
    locked, released, done = threading.Event(), threading.Event(), threading.Event()
    failure: list[BaseException] = []

    def hold() -> None:
        try:
            with engine.connect() as conn:
                conn.execute(text(sql), {"id": job_id})
                locked.set()
                done.wait(seconds)
                conn.commit()
        except BaseException as exc:  # reported by the test's thread
            failure.append(exc)
        finally:
            released.set()
            locked.set()

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    assert locked.wait(10), "the holder never took the lock"
    try:
        yield released
    finally:
        done.set()
        thread.join(30)
        assert not failure, failure


def spawned(
    app: Path, db_url: URL, *, graceful: bool
) -> Iterator[Callable[..., subprocess.Popen[str]]]:
    """The body of a ``spawn`` fixture: yields ``start(**settings)``, which runs ``app`` as a
    script (settings as ``PGQUEUE_APP_<NAME>`` in its environment) and returns once it printed
    ``ready``. On the way out every live process gets SIGTERM (``graceful``) or SIGKILL, and is
    waited for (bounded; killed if a SIGTERM is not enough)."""
    procs: list[subprocess.Popen[str]] = []
    url = db_url.render_as_string(hide_password=False)

    def start(**settings: object) -> subprocess.Popen[str]:
        env = dict(os.environ, PGQUEUE_APP_URL=url)
        env.update({f"PGQUEUE_APP_{k.upper()}": str(v) for k, v in settings.items()})
        proc = subprocess.Popen(
            [sys.executable, str(app)], env=env, stdout=subprocess.PIPE, text=True
        )
        procs.append(proc)
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM if graceful else signal.SIGKILL)
    for proc in procs:
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()


def plan_nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every node of an ``EXPLAIN (FORMAT JSON)`` plan, ``plan`` first, depth first."""
    yield plan
    for child in plan.get("Plans", ()):
        yield from plan_nodes(child)
