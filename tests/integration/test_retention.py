"""Retention (#31 item 3): settings on a real database, and real workers that prune by them.

The API tests run four times through the contract's runner (sync ``Connection``, ``Session``,
``AsyncConnection``, ``AsyncSession``). The pruning tests age rows by moving their
``finished_at`` back (the column the retention reads), or wait out a one-second retention; the
"once a minute" visit is shortened through the pruner's ``interval`` (a constructor argument) or,
for a whole worker, the module's :data:`~pgqueue._worker.pruner.PRUNE_INTERVAL`.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, event, text
from sqlalchemy.engine import URL
from test_contract import Runner, op
from worker_helpers import running, scalar, until

import pgqueue
import pgqueue._worker.pruner as pruner_module
from pgqueue import InvalidArgumentError, InvalidArgumentTypeError, Retention
from pgqueue._worker import store
from pgqueue._worker.pruner import Pruner

DAY = timedelta(days=1)


@pytest.fixture(params=["sync-connection", "sync-session", "async-connection", "async-session"])
def q(request: pytest.FixtureRequest, engine: Engine, db_url: URL) -> Iterator[Runner]:
    runner = Runner(request.param, engine, db_url)
    yield runner
    runner.close()


def _rows(engine: Engine) -> list[tuple[Any, ...]]:
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT queue, done, failed, done_set, failed_set FROM jobs_retention "
                "ORDER BY queue"
            )
        )
        return [tuple(r) for r in rows]


# -- settings ----------------------------------------------------------------------------------


def test_the_built_in_default_is_7_days_for_done_and_30_for_failed(q: Runner) -> None:
    assert q.run("retention") == [
        Retention(None, timedelta(days=7), timedelta(days=30), inherited=("done", "failed"))
    ]
    assert _rows(q.engine) == []


def test_set_retention_round_trips_and_an_omitted_kind_keeps_its_value(q: Runner) -> None:
    got = q.run("set_retention", None, done=DAY)
    assert got == Retention(None, DAY, timedelta(days=30), inherited=("failed",))
    got = q.run("set_retention", "mail", failed=None)  # failed kept for ever, done inherited
    assert got == Retention("mail", DAY, None, inherited=("done",))
    got = q.run("set_retention", "mail", done=3600)  # seconds; failed keeps None
    assert got == Retention("mail", timedelta(hours=1), None)
    # The default changes under a queue that inherits from it, not under one that does not.
    q.run("set_retention", None, done=2 * DAY, failed=None)
    q.run("set_retention", "api", failed=timedelta(hours=5))
    assert q.run("retention") == [
        Retention(None, 2 * DAY, None),
        Retention("api", 2 * DAY, timedelta(hours=5), inherited=("done",)),
        Retention("mail", timedelta(hours=1), None),
    ]
    assert _rows(q.engine) == [
        ("", 2 * DAY, None, True, True),
        ("api", None, timedelta(hours=5), False, True),
        ("mail", timedelta(hours=1), None, True, True),
    ]


def test_set_retention_joins_the_callers_transaction(q: Runner) -> None:
    assert q.tx([op("set_retention", "mail", done=DAY)], commit=False) == [
        Retention("mail", DAY, timedelta(days=30), inherited=("failed",))
    ]
    assert _rows(q.engine) == []


@pytest.mark.parametrize(
    ("args", "kwargs", "argument"),
    [
        ((), {"done": 0}, "done"),
        ((), {"done": timedelta(0)}, "done"),
        ((), {"failed": -1}, "failed"),
        ((), {"failed": timedelta(seconds=-1)}, "failed"),
        ((), {"done": math.nan}, "done"),
        ((), {"done": pgqueue.MAX_DURATION + timedelta(seconds=1)}, "done"),
        ((), {"failed": math.inf}, "failed"),
        ((), {"cancelled": DAY}, "cancelled"),
        ((), {}, "done"),
        ((" ",), {"done": DAY}, "queue"),
        (("",), {"done": DAY}, "queue"),
    ],
)
def test_bad_retention_is_refused_before_any_sql(
    engine: Engine, args: tuple[Any, ...], kwargs: dict[str, Any], argument: str
) -> None:
    sent: list[str] = []
    with engine.connect() as conn:
        event.listen(conn, "before_cursor_execute", lambda *a: sent.append(a[2]))
        with pytest.raises(InvalidArgumentError) as caught:
            pgqueue.set_retention(conn, *args, **kwargs)
        conn.commit()
    assert caught.value.argument == argument
    assert isinstance(caught.value, pgqueue.PgQueueError)
    assert sent == []
    assert _rows(engine) == []


def test_a_retention_of_the_wrong_type_names_it(engine: Engine) -> None:
    with engine.connect() as conn, pytest.raises(InvalidArgumentTypeError, match="done"):
        pgqueue.set_retention(conn, "mail", done="7d")
    assert _rows(engine) == []


# -- pruning -----------------------------------------------------------------------------------


def _finished(engine: Engine, queue: str, status: str, count: int, age: str) -> list[int]:
    """``count`` jobs of ``queue`` stored ``status``, finished ``age`` ago (an SQL interval)."""
    with engine.begin() as conn:
        ids = pgqueue.enqueue_many(conn, [{"n": n} for n in range(count)], queue=queue)
        conn.execute(
            text(
                "UPDATE jobs SET status = :status, finished_at = now() - CAST(:age AS interval) "
                "WHERE id = ANY(:ids)"
            ),
            {"status": status, "age": age, "ids": ids},
        )
    return ids


def _left(engine: Engine, ids: list[int]) -> int:
    return int(scalar(engine, "SELECT count(*) FROM jobs WHERE id = ANY(:ids)", ids=ids))


def _pruner(
    engine: Engine, queues: list[str], *, name: str = "w1", interval: float = 60.0
) -> Pruner:
    return Pruner(
        engine,
        queues,
        worker=name,
        stop=threading.Event(),
        idle=lambda: False,
        interval=interval,
        lock_timeout_ms=5000,
    )


def test_the_defaults_prune_old_done_jobs_and_keep_failed_ones_for_30_days(engine: Engine) -> None:
    old_done = _finished(engine, "mail", "done", 2500, "8 days")
    fresh_done = _finished(engine, "mail", "done", 3, "6 days")
    old_failed = _finished(engine, "mail", "failed", 3, "29 days")
    ancient_failed = _finished(engine, "mail", "failed", 3, "31 days")
    other_queue = _finished(engine, "api", "done", 3, "8 days")
    assert _pruner(engine, ["mail"]).prune("mail") == 2503  # three full and partial batches
    assert _left(engine, old_done) == 0
    assert _left(engine, ancient_failed) == 0
    assert _left(engine, fresh_done) == 3
    assert _left(engine, old_failed) == 3
    assert _left(engine, other_queue) == 3  # not this worker's queue
    row = scalar(engine, "SELECT pruned_by FROM jobs_retention WHERE queue = 'mail'")
    assert row == "w1"


def test_a_kind_kept_for_ever_is_never_pruned(engine: Engine) -> None:
    with engine.begin() as conn:
        pgqueue.set_retention(conn, "mail", done=None)
        pgqueue.set_retention(conn, failed=timedelta(hours=1))
    done = _finished(engine, "mail", "done", 3, "1000 days")
    failed = _finished(engine, "mail", "failed", 3, "2 hours")
    assert _pruner(engine, ["mail"]).prune("mail") == 3
    assert _left(engine, done) == 3
    assert _left(engine, failed) == 0


def test_jobs_without_finished_at_are_never_pruned(engine: Engine) -> None:
    """Finished before pgqueue_0009 (no ``finished_at``), or still queued: not history."""
    with engine.begin() as conn:
        ids = pgqueue.enqueue_many(conn, [1, 2], queue="mail")
        conn.execute(
            text(
                "UPDATE jobs SET status = 'done', created_at = now() - interval '1 year' "
                "WHERE id = :id"
            ),
            {"id": ids[0]},
        )
    assert _pruner(engine, ["mail"]).prune("mail") == 0
    assert _left(engine, ids) == 2


def test_a_done_job_a_waiting_dependent_needs_is_kept_until_it_is_settled(engine: Engine) -> None:
    with engine.begin() as conn:
        parent = pgqueue.enqueue(conn, {"p": 1}, queue="mail")
        other = pgqueue.enqueue(conn, {"p": 2}, queue="mail")
        child = pgqueue.enqueue(conn, {"c": 1}, queue="mail", depends_on=[parent, other])
    with engine.begin() as conn:  # the first parent finishes, long ago: the child still waits
        claimed = pgqueue.claim(conn, queue="mail", limit=1)
        assert [j.id for j in claimed] == [parent]
        assert pgqueue.complete(conn, parent, claimed[0].attempts)
        conn.execute(
            text("UPDATE jobs SET finished_at = now() - interval '30 days' WHERE id = :id"),
            {"id": parent},
        )
    waiting = scalar(engine, "SELECT waiting_on FROM jobs WHERE id = :id", id=child)
    assert waiting == 1
    assert _pruner(engine, ["mail"], interval=0.001).prune("mail") == 0
    assert _left(engine, [parent]) == 1
    with engine.begin() as conn:  # the other parent and then the child finish
        for job_id in (other, child):
            (job,) = pgqueue.claim(conn, queue="mail", limit=1)
            assert job.id == job_id
            assert pgqueue.complete(conn, job.id, job.attempts)
    assert _pruner(engine, ["mail"], interval=0.001).prune("mail") == 1
    assert _left(engine, [parent]) == 0
    assert _left(engine, [other, child]) == 2  # fresh


def test_a_queue_another_transaction_prunes_is_skipped_and_then_not_due(engine: Engine) -> None:
    """The lock is the row's, for the transaction: a second pruner neither waits nor deletes;
    after the first commits, the queue is not due again before the interval."""
    ids = _finished(engine, "mail", "done", 5, "8 days")
    with engine.begin() as conn:
        store.ensure_retention_row(conn, "mail")
    with engine.begin() as first:
        kept = store.take_prune(first, "mail", "w1", timedelta(seconds=60), continuing=False)
        assert kept == {"done": timedelta(days=7), "failed": timedelta(days=30)}
        assert _pruner(engine, ["mail"], name="w2", interval=0.001).prune("mail") == 0
    assert _left(engine, ids) == 5
    assert _pruner(engine, ["mail"], name="w2", interval=60.0).prune("mail") == 0  # not due
    assert _pruner(engine, ["mail"], name="w2", interval=0.001).prune("mail") == 5


_STATEMENT_LOG = """
CREATE TABLE prune_log (pid int, alone boolean);
CREATE FUNCTION prune_logged() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  -- Held until the deleting transaction ends: a second one that deletes meanwhile cannot take it.
  INSERT INTO prune_log VALUES (pg_backend_pid(), pg_try_advisory_xact_lock(31031));
  -- A deleting transaction that lasts: without the row lock, the other worker's would overlap.
  PERFORM pg_sleep(0.1);
  RETURN NULL;
END $$;
CREATE TRIGGER prune_logged AFTER DELETE ON jobs FOR EACH STATEMENT EXECUTE FUNCTION prune_logged();
"""


def test_running_workers_prune_done_jobs_one_at_a_time_and_keep_failed_ones(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """done=1 s: two real workers (a short visit interval in place of the minute) delete the
    done jobs of their queue, never at once (a statement-level trigger logs every deleting
    transaction and whether it was alone), and keep the failed ones (30 days)."""
    with engine.begin() as conn:
        conn.exec_driver_sql(_STATEMENT_LOG)
        pgqueue.set_retention(conn, "mail", done=1)
    backlog = _finished(engine, "mail", "done", 3000, "1 hour")  # three batches and more
    with engine.begin() as conn:
        fresh = pgqueue.enqueue_many(conn, [{"ok": n} for n in range(20)], queue="mail")
        failing = pgqueue.enqueue_many(
            conn, [{"fail": n} for n in range(5)], queue="mail", max_attempts=1
        )

    def handler(job: pgqueue.JobContext) -> None:
        if "fail" in job.payload:
            raise RuntimeError("no")

    monkeypatch.setattr(pruner_module, "PRUNE_INTERVAL", 0.2)
    workers = [
        pgqueue.Worker(engine, {"mail": handler}, install_signal_handlers=False, poll_interval=0.2)
        for _ in range(2)
    ]
    with running(workers[0]), running(workers[1]):
        until(lambda: _left(engine, backlog + fresh) == 0, 60.0, "done jobs pruned")
        until(
            lambda: (
                scalar(
                    engine,
                    "SELECT count(*) FROM jobs WHERE status = 'failed' AND id = ANY(:ids)",
                    ids=failing,
                )
                == 5
            ),
            30.0,
            "failed jobs failed",
        )
    assert _left(engine, failing) == 5
    pids, alone = scalar(
        engine,
        "SELECT ARRAY[count(DISTINCT pid), count(*) FILTER (WHERE NOT alone)] FROM prune_log",
    )
    assert pids >= 1
    assert alone == 0
    assert scalar(engine, "SELECT count(*) FROM prune_log") >= 4  # batches of at most 1,000


def test_a_worker_with_prune_off_deletes_nothing(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = _finished(engine, "mail", "done", 3, "8 days")
    with engine.begin() as conn:
        pgqueue.enqueue(conn, {"n": 1}, queue="mail")
    worker = pgqueue.Worker(
        engine, {"mail": lambda job: None}, install_signal_handlers=False, prune=False
    )
    worker.run(until_empty=True)
    assert _left(engine, old) == 3
    pgqueue.Worker(engine, {"mail": lambda job: None}, install_signal_handlers=False).run(
        until_empty=True
    )
    assert _left(engine, old) == 0  # a drain prunes once, after it drained
