"""One contract for :mod:`pgqueue.repository` and its asyncio twins in :mod:`pgqueue.aio`.

Every test runs four times: sync ``Connection``, sync ``Session``, ``AsyncConnection`` and
``AsyncSession`` (psycopg's async driver). The test body names the function; the runner calls the
sync one or awaits the async twin in one transaction of its own.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Session
from worker_helpers import row_locked

import pgqueue.aio
from pgqueue import InvalidArgumentError, InvalidArgumentTypeError, InvalidPayloadError, repository
from pgqueue._worker import store
from pgqueue.results import CancelledJob

Op = tuple[str, Sequence[Any], dict[str, Any]]


def op(name: str, *args: Any, **kwargs: Any) -> Op:
    return (name, args, kwargs)


class Transactions:
    """Runs one body in one transaction of its own on a sync ``Connection`` or ``Session``, or
    (awaited on a loop of its own) an ``AsyncConnection`` or ``AsyncSession``: ``kind`` says
    which."""

    def __init__(self, kind: str, engine: Engine, url: URL) -> None:
        self.kind = kind
        self.engine = engine
        self.url = url
        self.loop: asyncio.AbstractEventLoop | None = None
        if kind.startswith("async"):
            self.loop = asyncio.new_event_loop()
            self.async_engine = create_async_engine(url)

    def _tx(
        self, sync: Callable[[Any], Any], aio: Callable[[Any], Awaitable[Any]], commit: bool
    ) -> Any:
        """``sync(conn)`` or ``await aio(conn)``, then commit or roll back; what it returned."""
        if self.loop is not None:
            return self.loop.run_until_complete(self._atx(aio, commit))
        with Session(self.engine) if self.kind == "sync-session" else self.engine.connect() as c:
            out = sync(c)
            c.commit() if commit else c.rollback()
            return out

    async def _atx(self, aio: Callable[[Any], Awaitable[Any]], commit: bool) -> Any:
        if self.kind == "async-session":
            async with AsyncSession(self.async_engine) as session:
                out = await aio(session)
                await (session.commit() if commit else session.rollback())
                return out
        async with self.async_engine.connect() as conn:
            out = await aio(conn)
            await (conn.commit() if commit else conn.rollback())
            return out

    def close(self) -> None:
        if self.loop is not None:
            self.loop.run_until_complete(self.async_engine.dispose())
            self.loop.close()


class Runner(Transactions):
    """Runs repository calls, given by name, in one transaction: sync or awaited."""

    def run(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """One call in its own committed transaction."""
        return self.tx([op(name, *args, **kwargs)])[0]

    def tx(self, ops: Sequence[Op], *, commit: bool = True) -> list[Any]:
        """Several calls in one transaction, committed or rolled back at the end."""

        async def aio(c: Any) -> list[Any]:
            return [await getattr(pgqueue.aio, n)(c, *a, **kw) for n, a, kw in ops]

        out: list[Any] = self._tx(
            lambda c: [getattr(repository, n)(c, *a, **kw) for n, a, kw in ops], aio, commit
        )
        return out


@pytest.fixture(params=["sync-connection", "sync-session", "async-connection", "async-session"])
def q(request: pytest.FixtureRequest, engine: Engine, db_url: URL) -> Iterator[Runner]:
    runner = Runner(request.param, engine, db_url)
    yield runner
    runner.close()


def _jobs(engine: Engine) -> list[dict[str, Any]]:
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT id, queue, payload, status, attempts, max_attempts, last_error, "
                "run_at > now() AS scheduled, cancelled_at IS NOT NULL AS cancelled "
                "FROM jobs ORDER BY id"
            )
        )
        return [dict(r._mapping) for r in rows]


#: A time after year 9999 in UTC (23:00 at UTC-14 is 13:00 the next day in UTC).
_YEAR_9999 = datetime(9999, 12, 31, 23, 0, tzinfo=timezone(timedelta(hours=-14)))


def _nested(depth: int) -> object:
    value: object = 1
    for _ in range(depth):
        value = [value]
    return value


def _sql(engine: Engine, sql: str, **params: Any) -> None:
    with engine.begin() as conn:
        conn.execute(text(sql), params)


def test_same_public_names_and_signatures() -> None:
    import inspect

    # Every coroutine function of the module, exported or not (#30 left out of its __all__ the
    # twins of functions the package does not export).
    twins = [
        name
        for name, value in vars(pgqueue.aio).items()
        if not name.startswith("_")
        and inspect.iscoroutinefunction(value)
        and value.__module__ == "pgqueue.aio"
    ]
    assert set(pgqueue.aio.__all__) - {"AsyncExecutor"} <= set(twins)
    for name in twins:
        # wait_for takes an engine, not a connection: its sync twin is pgqueue.wait_for; chain
        # and group (#24) are pgqueue.workflows', above the repository.
        others = {"wait_for": pgqueue.wait_for, "chain": pgqueue.chain, "group": pgqueue.group}
        sync = others[name] if name in others else getattr(repository, name)
        twin = getattr(pgqueue.aio, name)
        assert inspect.iscoroutinefunction(twin)
        sync_params = list(inspect.signature(sync).parameters.values())[1:]
        twin_params = list(inspect.signature(twin).parameters.values())[1:]
        assert sync_params == twin_params, name


def test_enqueue_defaults_and_payload(q: Runner) -> None:
    job_id = q.run("enqueue", {"to": "a@example.com", "n": [1, None]}, queue="mail")
    (row,) = _jobs(q.engine)
    assert row["id"] == job_id
    assert (row["queue"], row["status"], row["attempts"], row["max_attempts"]) == (
        "mail",
        "queued",
        0,
        5,
    )
    assert row["payload"] == {"to": "a@example.com", "n": [1, None]}
    assert row["scheduled"] is False


def test_enqueue_joins_the_callers_transaction(q: Runner) -> None:
    q.tx([op("enqueue", {"a": 1}), op("enqueue_many", [1, 2])], commit=False)
    assert _jobs(q.engine) == []
    q.tx([op("enqueue", {"a": 1}), op("enqueue_many", [1, 2])], commit=True)
    assert len(_jobs(q.engine)) == 3


def test_enqueue_many_returns_ids_in_input_order(q: Runner) -> None:
    ids = q.run("enqueue_many", ["a", "b", "c"], queue="m", delay=timedelta(minutes=1))
    rows = _jobs(q.engine)
    assert ids == [r["id"] for r in rows]
    assert [r["payload"] for r in rows] == ["a", "b", "c"]
    assert all(r["scheduled"] for r in rows)
    assert q.run("enqueue_many", []) == []


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (op("enqueue_many", [{"ok": 1}, {"bad": object()}]), InvalidPayloadError),
        (op("enqueue", {"ok": 1}, queue=""), InvalidArgumentError),
        (op("enqueue", {"ok": 1}, max_attempts=0), InvalidArgumentError),
        (op("enqueue", {}, delay=timedelta(seconds=-1)), InvalidArgumentError),
        (op("claim", limit=0), InvalidArgumentError),
        (op("claim", lease=timedelta(0)), InvalidArgumentError),
        (op("complete", "1", 1), InvalidArgumentTypeError),
        (op("fail", 1, 1, "x", base=timedelta(seconds=-1)), InvalidArgumentError),
        (op("extend_lease", 1, 1, timedelta(0)), InvalidArgumentError),
        (op("purge_done", batch_size=0), InvalidArgumentError),
        (op("enqueue", {}, headers=[("a", "b")]), InvalidArgumentTypeError),
        (op("enqueue", {}, headers={"a": 1}), InvalidArgumentError),
        (op("enqueue_many", [1], headers={1: "a"}), InvalidArgumentError),
        (op("enqueue", {}, headers={"a": "\x00"}), InvalidArgumentError),
        (op("enqueue", {}, headers={"a": "x" * 9000}), InvalidArgumentError),
        # Values the schema's types or a client's datetime cannot hold: refused here, not by the
        # server (whose error would be a DataError, not a PgQueueError).
        (op("enqueue", {}, max_attempts=2**40), InvalidArgumentError),
        (op("enqueue", {}, delay=timedelta(days=3_000_000)), InvalidArgumentError),
        (op("enqueue", {}, run_at=_YEAR_9999), InvalidArgumentError),
        (op("enqueue", _nested(5_000)), InvalidPayloadError),
        (op("enqueue", {}, queue="a\nb"), InvalidArgumentError),
        (op("enqueue", {}, queue="tab\tq"), InvalidArgumentError),
        (op("enqueue_unique", {}, unique_key="k", max_attempts=2**31), InvalidArgumentError),
        (op("enqueue_unique", {}, unique_key="k", delay=timedelta.max), InvalidArgumentError),
        (op("enqueue_many", [{}, {}], max_attempts=2**31), InvalidArgumentError),
        (op("enqueue_many", [{}, _nested(5_000), {}]), InvalidPayloadError),
        (op("enqueue_many", [{}], delay=timedelta(days=40_000)), InvalidArgumentError),
        (op("claim", limit=2**31), InvalidArgumentError),
        (op("claim", lease=timedelta(days=3_000_000)), InvalidArgumentError),
        (op("extend_lease", 1, 1, timedelta(days=3_000_000)), InvalidArgumentError),
        (op("fail", 1, 1, "x", cap=timedelta(days=3_000_000)), InvalidArgumentError),
        (op("complete", 2**63, 1), InvalidArgumentError),
        (op("complete", 1, 2**31), InvalidArgumentError),
        (op("purge", older_than=timedelta(days=99_999_999)), InvalidArgumentError),
        (op("purge_done", older_than=timedelta(days=99_999_999)), InvalidArgumentError),
        (op("purge", batch_size=2**31), InvalidArgumentError),
        (op("retry", [10**20]), InvalidArgumentError),
        (op("retry", [1], attempts=2**31), InvalidArgumentError),
        (op("retry_failed", attempts=2**40), InvalidArgumentError),
        (op("cancel", [1, 2**63]), InvalidArgumentError),
        (op("cancel", [-(2**63) - 1]), InvalidArgumentError),
        # #23: the one keyword the enqueue signatures gained, checked like a unique key.
        (op("enqueue", {}, concurrency_key=""), InvalidArgumentError),
        (op("enqueue_unique", {}, unique_key="k", concurrency_key=1), InvalidArgumentTypeError),
        (op("enqueue_many", [1, 2], concurrency_keys=["a"]), InvalidArgumentError),
        (op("set_queue_limits", "q", concurrency=0), InvalidArgumentError),
    ],
)
def test_bad_input_raises_before_sql_and_writes_nothing(
    q: Runner, call: Op, error: type[Exception]
) -> None:
    with pytest.raises(error):
        q.tx([op("enqueue", {"first": True}), call])
    assert _jobs(q.engine) == []


def test_claim_takes_ready_jobs_oldest_first_up_to_limit(q: Runner) -> None:
    later = q.run("enqueue", "later", queue="c", delay=timedelta(hours=1))
    first, second, third = q.run("enqueue_many", ["1", "2", "3"], queue="c")
    q.run("enqueue", "other", queue="d")
    claimed = q.run("claim", queue="c", limit=2)
    assert [(j.id, j.queue, j.payload, j.attempts) for j in claimed] == [
        (first, "c", "1", 1),
        (second, "c", "2", 1),
    ]
    assert [j.id for j in q.run("claim", queue="c")] == [third]
    assert q.run("claim", queue="c") == []
    assert later not in {r["id"] for r in _jobs(q.engine) if r["status"] == "running"}


def test_complete_is_guarded_by_attempts(q: Runner) -> None:
    job_id = q.run("enqueue", {})
    (job,) = q.run("claim")
    assert q.run("complete", job_id, job.attempts + 1) is False
    assert q.run("complete", job_id, job.attempts) is True
    assert q.run("complete", job_id, job.attempts) is False
    assert _jobs(q.engine)[0]["status"] == "done"


def test_fail_retries_with_backoff_then_fails_for_good(q: Runner) -> None:
    job_id = q.run("enqueue", {}, max_attempts=2)
    (job,) = q.run("claim")
    result = q.run("fail", job_id, job.attempts, "SMTP 451")
    assert (result.id, result.status, result.attempts) == (job_id, "queued", 1)
    assert result.retry_in == timedelta(seconds=20)
    assert q.run("fail", job_id, job.attempts, "again") is None
    _sql(q.engine, "UPDATE jobs SET run_at = now() WHERE id = :id", id=job_id)
    (job,) = q.run("claim")
    result = q.run("fail", job_id, job.attempts, ValueError("boom"))
    assert (result.status, result.attempts, result.retry_in) == ("failed", 2, None)
    assert _jobs(q.engine)[0]["last_error"] == "boom"


def test_non_retryable_failure_fails_at_once(q: Runner) -> None:
    job_id = q.run("enqueue", {})
    (job,) = q.run("claim")
    result = q.run("fail", job_id, job.attempts, "bad address", retry=False)
    assert (result.status, result.retry_in) == ("failed", None)


def test_extend_lease_and_reap_expired(q: Runner) -> None:
    kept, lost = q.run("enqueue_many", [1, 2])
    jobs = {j.id: j for j in q.run("claim", lease=timedelta(seconds=30))}
    assert q.run("extend_lease", kept, jobs[kept].attempts, timedelta(hours=1)) is True
    _sql(
        q.engine,
        "UPDATE jobs SET locked_until = now() - interval '1 second' WHERE id = :id",
        id=lost,
    )
    reaped = q.run("reap_expired")
    assert [(r.id, r.status, r.attempts) for r in reaped] == [(lost, "queued", 1)]
    assert q.run("extend_lease", lost, jobs[lost].attempts) is False
    assert q.run("reap_expired") == []


def test_purge_done_deletes_one_batch(q: Runner) -> None:
    ids = q.run("enqueue_many", list(range(5)))
    _sql(
        q.engine,
        "UPDATE jobs SET status = 'done', created_at = now() - interval '8 days' WHERE id <= :id",
        id=ids[3],
    )
    assert q.run("purge_done", batch_size=3) == 3
    assert q.run("purge_done", batch_size=3) == 1
    assert q.run("purge_done") == 0
    assert [r["id"] for r in _jobs(q.engine)] == [ids[4]]


def test_headers_travel_beside_the_payload_to_the_claim(q: Runner) -> None:
    trace = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
    one = q.run("enqueue", [1, 2], queue="h", headers=trace)
    many = q.run("enqueue_many", ["a", "b"], queue="h", headers={"k": "v"})
    plain = q.run("enqueue", "none", queue="h")
    with q.engine.connect() as conn:
        stored = dict(conn.execute(text("SELECT id, headers FROM jobs")).all())
        assert conn.execute(
            text("SELECT payload FROM jobs WHERE id = :i"), {"i": one}
        ).scalar() == [
            1,
            2,
        ]
    assert stored == {one: trace, many[0]: {"k": "v"}, many[1]: {"k": "v"}, plain: None}
    claimed = {c.id: c.headers for c in q.run("claim", queue="h", limit=10)}
    assert claimed == stored


def test_cancel_fails_queued_and_running_jobs_and_skips_the_rest(q: Runner) -> None:
    finished, running, waiting = q.run("enqueue_many", ["f", "r", "w"])
    claimed = {j.id: j for j in q.run("claim", limit=2)}
    assert set(claimed) == {finished, running}
    assert q.run("complete", finished, claimed[finished].attempts) is True
    assert q.run("cancel", [waiting, finished, running, 99_999]) == [running, waiting]
    assert q.run("cancel", [running]) == []  # already failed
    assert q.run("cancel", []) == []
    rows = {r["id"]: r for r in _jobs(q.engine)}
    assert (rows[running]["status"], rows[running]["last_error"]) == ("failed", "cancelled")
    assert (rows[waiting]["status"], rows[waiting]["last_error"]) == ("failed", "cancelled")
    assert rows[running]["cancelled"]
    assert rows[waiting]["cancelled"]
    assert rows[finished]["status"] == "done"
    assert not rows[finished]["cancelled"]
    # Its worker's guard no longer matches: it cannot complete the cancelled job.
    assert q.run("complete", running, claimed[running].attempts) is False


def test_cancel_jobs_tells_which_were_running(q: Runner) -> None:
    waiting, held = q.run("enqueue_many", ["w", "h"], queue="c")
    _sql(q.engine, "UPDATE jobs SET status = 'running', attempts = 1 WHERE id = :id", id=held)
    cancelled = q.run("cancel_jobs", [held, waiting])
    assert [(c.id, c.was_running) for c in cancelled] == [(waiting, False), (held, True)]


def test_retry_failed_leaves_cancelled_jobs_unless_asked(q: Runner) -> None:
    """A cancel is told by ``cancelled_at``, not by the text of ``last_error``: a handler's own
    error "cancelled" is an ordinary failure and comes back with the failed jobs."""
    failed, said_cancelled, running, waiting = q.run(
        "enqueue_many", [1, 2, 3, 4], queue="rc", max_attempts=1
    )
    claimed = {j.id: j for j in q.run("claim", queue="rc", limit=3)}
    q.run("fail", failed, claimed[failed].attempts, "boom")
    q.run("fail", said_cancelled, claimed[said_cancelled].attempts, "cancelled")
    assert q.run("cancel", [running, waiting]) == [running, waiting]
    assert q.run("retry_failed", queue="rc") == [failed, said_cancelled]
    rows = {r["id"]: r for r in _jobs(q.engine)}
    assert [(rows[i]["status"], rows[i]["cancelled"]) for i in (running, waiting)] == [
        ("failed", True),
        ("failed", True),
    ]
    assert q.run("retry_failed", queue="rc", include_cancelled=True) == [running, waiting]
    rows = {r["id"]: r for r in _jobs(q.engine)}
    assert {(r["status"], r["cancelled"]) for r in rows.values()} == {("queued", False)}
    with pytest.raises(InvalidArgumentTypeError, match="include_cancelled"):
        q.run("retry_failed", include_cancelled="yes")


def test_retry_by_id_requeues_a_cancelled_job_and_clears_the_mark(q: Runner) -> None:
    """Naming the id is asking for it: ``retry`` takes a cancelled job back."""
    job_id = q.run("enqueue", {}, queue="ri")
    assert q.run("cancel", [job_id]) == [job_id]
    assert q.run("retry", [job_id]) == [job_id]
    (row,) = _jobs(q.engine)
    assert (row["status"], row["cancelled"]) == ("queued", False)


def test_cancel_waits_for_a_row_another_statement_holds_briefly(q: Runner) -> None:
    """A worker's claim, heartbeat or completion locks a row for milliseconds: the cancel waits
    for it (100 ms here) instead of skipping the job (issue #20, item 4)."""
    job_id = q.run("enqueue", {}, queue="brief")
    with row_locked(q.engine, job_id, 0.1) as released:
        report = q.run("cancel_report", [job_id])
        assert released.is_set()  # it did wait for the holder
    assert report.cancelled == [CancelledJob(job_id, False)]
    assert report.skipped == []
    assert _jobs(q.engine)[0]["cancelled"]


def test_cancel_skips_a_row_held_for_long_and_names_it(q: Runner) -> None:
    """A transaction holding the row until the cancel returned (30 s at most): the cancel gives
    up on that row after its lock timeout, cancels the others, names the one skipped, and the
    caller's transaction (a write before and one after) commits as if nothing happened."""
    held, free = q.run("enqueue_many", ["held", "free"], queue="long")
    with row_locked(q.engine, held, 30.0) as released:
        started = time.monotonic()
        _, report, _ = q.tx(
            [
                op("enqueue", "before", queue="side"),
                op("cancel_report", [held, free]),
                op("enqueue", "after", queue="side"),
            ]
        )
        waited = time.monotonic() - started
        assert not released.is_set()  # it returned while the row was still held
    assert waited < 3.0, waited  # the brief: "within ~1 s" (500 ms lock timeout)
    assert report.cancelled == [CancelledJob(free, False)]
    assert report.skipped == [held]
    rows = {r["payload"]: r for r in _jobs(q.engine)}
    assert (rows["held"]["status"], rows["held"]["cancelled"]) == ("queued", False)
    assert rows["free"]["cancelled"]
    assert rows["before"]["queue"] == rows["after"]["queue"] == "side"
    assert q.run("cancel_jobs", [held]) == [CancelledJob(held, False)]  # once it let go


def test_retry_and_retry_failed_raise_the_budget(q: Runner) -> None:
    a, b, c = q.run("enqueue_many", [1, 2, 3], queue="r", max_attempts=1)
    for job in q.run("claim", queue="r", limit=3):
        q.run("fail", job.id, job.attempts, "boom")
    assert q.run("retry", [a, 77]) == [a]
    assert q.run("retry_failed", queue="other") == []
    assert q.run("retry_failed", queue="r", attempts=2) == [b, c]
    rows = {r["id"]: r for r in _jobs(q.engine)}
    assert [
        (rows[i]["status"], rows[i]["attempts"], rows[i]["max_attempts"]) for i in (a, b, c)
    ] == [
        ("queued", 1, 6),
        ("queued", 1, 3),
        ("queued", 1, 3),
    ]


def test_purge_takes_done_or_failed(q: Runner) -> None:
    done, _failed = q.run("enqueue_many", [1, 2])
    _sql(
        q.engine,
        "UPDATE jobs SET status = CASE WHEN id = :d THEN 'done' ELSE 'failed' END, "
        "created_at = now() - interval '8 days'",
        d=done,
    )
    assert q.run("purge", status=pgqueue.JobStatus.FAILED) == 1
    assert [r["id"] for r in _jobs(q.engine)] == [done]
    with pytest.raises(InvalidArgumentError):
        q.run("purge", status=pgqueue.JobStatus.QUEUED)
    assert q.run("purge") == 1


def test_priority_orders_the_claim_and_travels_to_the_claimed_job(q: Runner) -> None:
    low = q.run("enqueue", "low", queue="p")
    high = q.run("enqueue_many", ["h1", "h2"], queue="p", priority=9)
    claimed = q.run("claim", queue="p", limit=3)
    assert [(c.id, c.priority) for c in claimed] == [(high[0], 9), (high[1], 9), (low, 0)]


def test_unique_keys_give_the_live_holder_and_align_batches(q: Runner) -> None:
    first = q.run("enqueue", {"n": 1}, queue="u", unique_key="k1")
    assert q.run("enqueue", {"n": 2}, queue="u", unique_key="k1") == first
    ids = q.run("enqueue_many", [1, 2, 3, 4], queue="u", unique_keys=["k1", "k2", None, "k2"])
    assert ids[0] == first
    assert ids[1] == ids[3] != ids[2]
    rows = _jobs(q.engine)
    assert len(rows) == 3
    with q.engine.connect() as conn:
        keys = dict(conn.execute(text("SELECT id, unique_key FROM jobs")).all())
    assert keys == {first: "k1", ids[1]: "k2", ids[2]: None}


@pytest.mark.parametrize(
    "call",
    [
        op("enqueue", {}, priority=10),
        op("enqueue", {}, unique_key=""),
        op("enqueue_many", [1, 2], unique_keys=["a", "b" * 1001]),
    ],
)
def test_bad_priority_or_key_writes_nothing(q: Runner, call: Op) -> None:
    with pytest.raises(InvalidArgumentError):
        q.tx([op("enqueue", {"first": True}), call])
    assert _jobs(q.engine) == []


def test_periodic_states_and_remove_periodic(q: Runner) -> None:
    from datetime import datetime, timezone

    definitions = [
        pgqueue.Periodic("b-nightly", "0 3 * * *", "reports", timezone="Europe/Paris"),
        pgqueue.Periodic("a-minutely", timedelta(minutes=1), "crm"),
    ]
    with q.engine.begin() as conn:
        store.declare_periodic(conn, definitions, datetime.now(timezone.utc))
    rows = q.run("periodic_states")
    assert [(r.name, r.schedule, r.timezone, r.queue, r.last_tick) for r in rows] == [
        ("a-minutely", "every 60s", "UTC", "crm", None),
        ("b-nightly", "0 3 * * *", "Europe/Paris", "reports", None),
    ]
    assert [r.name for r in q.run("periodic_states", ["b-nightly", "nope"])] == ["b-nightly"]
    assert q.run("periodic_states", []) == []
    with pytest.raises(InvalidArgumentTypeError):
        q.run("periodic_states", "a-minutely")
    assert q.run("remove_periodic", "a-minutely") is True
    assert q.run("remove_periodic", "a-minutely") is False
    assert [r.name for r in q.run("periodic_states")] == ["b-nightly"]


def test_enqueue_unique_says_whether_it_inserted(q: Runner) -> None:
    first = q.run("enqueue_unique", {"n": 1}, unique_key="k", queue="u", priority=3)
    assert first == pgqueue.EnqueuedJob(first.id, True)
    again = q.run("enqueue_unique", {"n": 2}, unique_key="k", queue="u")
    assert again == pgqueue.EnqueuedJob(first.id, False)
    other = q.run("enqueue_unique", {"n": 3}, unique_key="k", queue="elsewhere")
    assert other.inserted
    assert other.id != first.id
    rows = _jobs(q.engine)
    assert [r["payload"] for r in rows] == [{"n": 1}, {"n": 3}]
    with pytest.raises(InvalidArgumentError, match="unique_key"):
        q.run("enqueue_unique", {}, unique_key="")
    assert len(_jobs(q.engine)) == 2
