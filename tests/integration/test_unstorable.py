"""Strings PostgreSQL cannot store never reach it: refused before any SQL where they come in,
written escaped where pgqueue stores rather than refuses, and a worker that meets one goes on.

The strings: U+0000, and surrogates (U+D800 to U+DFFF), which a ``str`` holds when bytes that are
not UTF-8 were decoded with ``errors="surrogateescape"``: what ``os.listdir`` gives for such a
file name. ``json.dumps`` takes them (``"\\udce9"``) and the server refuses them, so before they
were checked a payload raised a raw ``DataError``, a result or an exception's text failed the
whole batched flush of a worker (its good neighbours lost and run again), and a progress value
killed the heartbeat thread. Real workers, a real PostgreSQL, the four kinds of connection.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.engine import URL
from test_contract import Runner, op
from worker_helpers import running, scalar, until

import pgqueue
from pgqueue import InvalidPayloadError
from tests.cli.conftest import plain, run_pgqueue

#: A file name that is not UTF-8 (``b"caf\xe9.txt"``), as ``os.listdir`` returns it.
NAME = b"caf\xe9.txt".decode("utf-8", "surrogateescape")
#: What PostgreSQL cannot store, as a payload or inside one: the surrogate alone, in a list, as
#: a key, two surrogates that happen to make a pair (the server would store another character),
#: and U+0000.
PAYLOADS = ["\udce9", {"files": ["a.txt", NAME]}, {NAME: 1}, "\ud83d\ude00", {"a": "x\x00"}]
QUIET: dict[str, Any] = {"listen": False, "install_signal_handlers": False, "poll_interval": 0.1}


@pytest.fixture(params=["sync-connection", "sync-session", "async-connection", "async-session"])
def q(request: pytest.FixtureRequest, engine: Engine, db_url: URL) -> Iterator[Runner]:
    runner = Runner(request.param, engine, db_url)
    yield runner
    runner.close()


def count(engine: Engine) -> int:
    return int(scalar(engine, "SELECT count(*) FROM jobs"))


@pytest.mark.parametrize("payload", PAYLOADS, ids=["alone", "in-list", "key", "pair", "nul"])
def test_every_enqueue_refuses_what_postgresql_cannot_store_before_any_sql(
    q: Runner, payload: Any
) -> None:
    """``enqueue``, ``enqueue_unique``, ``enqueue_many`` and their ``pgqueue.aio`` twins: an
    ``InvalidPayloadError`` naming the problem and where it is, nothing written (a good job
    enqueued earlier in the same transaction is rolled back with it)."""
    calls = [
        op("enqueue", payload),
        op("enqueue_unique", payload, unique_key="k"),
        op("enqueue_many", [{"ok": 1}, payload]),
    ]
    for call in calls:
        with pytest.raises(InvalidPayloadError, match="PostgreSQL cannot store") as raised:
            q.tx([op("enqueue", {"first": True}), call])
        assert str(raised.value).isprintable()  # the bad character is named, never printed
    assert count(q.engine) == 0
    with pytest.raises(InvalidPayloadError) as batch:
        q.tx([calls[2]])
    assert str(batch.value).startswith("payloads[1]: ")


def test_a_payload_error_says_where_the_string_is(engine: Engine) -> None:
    with engine.begin() as conn, pytest.raises(InvalidPayloadError) as raised:
        pgqueue.enqueue(conn, {"files": ["a.txt", NAME]})
    assert str(raised.value).startswith(
        "payload: the string at ['files'][1]: not valid Unicode: U+DCE9 at index 3 is a surrogate"
    )
    with engine.begin() as conn, pytest.raises(InvalidPayloadError) as raised:
        pgqueue.enqueue(conn, {NAME: 1})
    assert str(raised.value).startswith("payload: the key ['caf\\udce9.txt']: not valid Unicode")


def test_a_task_call_postgresql_cannot_store_is_refused_when_made_and_when_enqueued(
    engine: Engine,
) -> None:
    registry = pgqueue.Registry()

    @registry.task(queue="files")
    def index(path: str, *, tags: list[str] | None = None) -> None: ...

    attempts = [
        lambda conn: index.s(NAME),
        lambda conn: index.enqueue(conn, NAME),
        lambda conn: index.enqueue(conn, "a.txt", tags=["ok", "x\x00"]),
        lambda conn: index.enqueue_many(conn, [index.args("a.txt"), index.args(NAME)]),
    ]
    for attempt in attempts:
        with engine.begin() as conn, pytest.raises(InvalidPayloadError) as raised:
            attempt(conn)
        assert "PostgreSQL cannot store" in str(raised.value)
        assert f"(task {index.name!r})" in str(raised.value)
    assert count(engine) == 0


@pytest.mark.parametrize(
    "argument", ['{"path": "caf\\udce9.txt"}', json.dumps({"path": NAME}, ensure_ascii=False)]
)
def test_the_cli_refuses_such_a_payload_in_one_line(db_url: URL, argument: str) -> None:
    """As a JSON escape, or as the raw bytes of a file name in ``argv``: one line, exit 2."""
    got = run_pgqueue("enqueue", "files", argument, "--url", plain(db_url))
    assert got.code == 2, got.err
    (line,) = got.err.splitlines()
    assert line.startswith("pgqueue: error: payload: the string at ['path']: not valid Unicode")
    assert got.out == ""


def jobs(engine: Engine) -> dict[int, Any]:
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT id, status, attempts, result, progress, last_error, errors "
                "FROM jobs ORDER BY id"
            )
        )
        return {r.id: r for r in rows}


def enqueue_numbers(engine: Engine, queue: str, n: int, **kw: Any) -> list[int]:
    with engine.begin() as conn:
        return pgqueue.enqueue_many(conn, [{"n": i} for i in range(n)], queue=queue, **kw)


def test_a_result_postgresql_cannot_store_fails_its_job_for_good_and_spares_the_batch(
    engine: Engine,
) -> None:
    """A task returning a file name that is not UTF-8: its job fails for good (no retry: the
    same code returns the same value), saying why; the five others of its flush are done,
    once, and nothing is lost."""
    registry = pgqueue.Registry()

    @registry.task(queue="files", max_attempts=5)
    def name_of(n: int) -> Any:
        return {"name": NAME} if n == 0 else f"file {n}"

    with engine.begin() as conn:
        ids = name_of.enqueue_many(conn, [name_of.args(n) for n in range(6)])
    stats = pgqueue.Worker(engine, registry, concurrency=6, **QUIET).run(until_empty=True)

    assert (stats.done, stats.failed, stats.retried, stats.lost) == (5, 1, 0, 0)
    rows = jobs(engine)
    bad = rows[ids[0]]
    assert (bad.status, bad.attempts, bad.result) == ("failed", 1, None)
    assert bad.last_error.startswith(f"InvalidResultError: the result of task {name_of.name!r}")
    assert "the string at ['name']: not valid Unicode: U+DCE9 at index 3" in bad.last_error
    for n, job_id in enumerate(ids[1:], start=1):
        assert (rows[job_id].status, rows[job_id].attempts) == ("done", 1)
        assert rows[job_id].result == f"file {n}"


def test_set_progress_with_such_a_value_raises_in_the_handler_and_nothing_else_happens(
    engine: Engine,
) -> None:
    """The call raises :class:`InvalidPayloadError`; the heartbeat never sees the value, so it
    keeps the leases (a 3 s job on a 1.5 s lease runs once) and writes the next good progress."""
    refused: list[InvalidPayloadError] = []
    beats = threading.Event()

    def handler(job: pgqueue.JobContext) -> None:
        try:
            job.set_progress({"file": NAME})
        except InvalidPayloadError as exc:
            refused.append(exc)
        job.set_progress({"at": 1})
        until(lambda: scalar(engine, "SELECT progress FROM jobs") is not None, 10, "a beat")
        beats.set()
        time.sleep(3.0)  # two leases: the heartbeat must keep extending it

    enqueue_numbers(engine, "long", 1)
    worker = pgqueue.Worker(engine, {"long": handler}, lease=1.5, **QUIET)
    stats = worker.run(until_empty=True)

    (exc,) = refused
    assert str(exc).startswith("progress: the string at ['file']: not valid Unicode: U+DCE9")
    assert beats.is_set()
    (row,) = jobs(engine).values()
    assert (row.status, row.attempts, row.progress) == ("done", 1, {"at": 1})
    assert (stats.done, stats.lost) == (1, 0)


def test_an_error_text_and_traceback_postgresql_cannot_store_are_stored_escaped(
    engine: Engine,
) -> None:
    """Never dropped: the job fails with its real error, each bad character written as its
    Python escape, in ``last_error`` and in its traceback; the neighbours of its flush are done."""

    def handler(job: pgqueue.JobContext) -> None:
        if job.payload["n"] == 0:
            raise FileNotFoundError(f"cannot open {NAME}\x00")

    ids = enqueue_numbers(engine, "files", 4, max_attempts=1)
    stats = pgqueue.Worker(engine, {"files": handler}, concurrency=4, **QUIET).run(until_empty=True)

    assert (stats.done, stats.failed, stats.lost) == (3, 1, 0)
    rows = jobs(engine)
    bad = rows[ids[0]]
    assert bad.status == "failed"
    assert bad.last_error == "FileNotFoundError: cannot open caf\\udce9.txt\\x00"
    (history,) = bad.errors
    assert history["error"] == bad.last_error
    assert history["traceback"].endswith("FileNotFoundError: cannot open caf\\udce9.txt\\x00")
    assert [rows[i].status for i in ids[1:]] == ["done"] * 3


def test_pgqueue_fail_stores_such_an_error_escaped(engine: Engine) -> None:
    enqueue_numbers(engine, "q", 1)
    with engine.begin() as conn:
        (job,) = pgqueue.claim(conn, queue="q")
        pgqueue.fail(
            conn, job.id, job.attempts, f"bad {NAME}", traceback="Traceback\x00", retry=False
        )
    (row,) = jobs(engine).values()
    assert row.last_error == "bad caf\\udce9.txt"
    assert row.errors[0]["traceback"] == "Traceback\\x00"


def test_a_worker_meeting_them_everywhere_keeps_its_heartbeat_and_its_leases(
    engine: Engine,
) -> None:
    """The issue's worker: progress, a result and an error text that PostgreSQL cannot store, in
    jobs that outlive their lease: every job runs once, nothing is lost, the heartbeat lives."""
    registry = pgqueue.Registry()

    @registry.task(queue="mixed", max_attempts=3)
    def poison(n: int) -> Any:
        job = pgqueue.current_job()
        try:
            job.set_progress(NAME)
        except InvalidPayloadError:
            job.set_progress(n)
        time.sleep(2.0)
        if n == 1:
            raise ValueError(NAME)
        return NAME if n == 2 else n

    with engine.begin() as conn:
        ids = poison.enqueue_many(conn, [poison.args(n) for n in range(6)])
    worker = pgqueue.Worker(engine, registry, lease=1.2, concurrency=6, **QUIET)
    with running(worker):
        until(
            lambda: (
                scalar(
                    engine, "SELECT count(*) FROM jobs WHERE status <> 'running' AND attempts = 1"
                )
                == 6
            ),
            20,
            "every job's first attempt ended",
        )
        assert worker.liveness().ok, worker.liveness()
    rows = jobs(engine)
    assert [(rows[i].status, rows[i].attempts) for i in ids] == [
        ("done", 1),
        ("queued", 1),  # its retry, in 20 s
        ("failed", 1),
        ("done", 1),
        ("done", 1),
        ("done", 1),
    ]
    assert [rows[i].progress for i in ids] == list(range(6))
    assert rows[ids[1]].last_error == "ValueError: caf\\udce9.txt"
    assert (worker.stats.lost, worker.stats.claimed) == (0, 6)
