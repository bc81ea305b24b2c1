"""Dependencies between jobs (#24, pgqueue_0013) on a real PostgreSQL: a waiting job is queued but
not claimable, the finishing statement releases it exactly once (also when two parents finish at
the same moment, and when an enqueue races a parent's completion), failure and cancel travel down
the graph, bad input writes nothing, and the claim keeps its plan with waiting jobs present."""

from __future__ import annotations

import threading
from contextlib import ExitStack
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, text
from test_article import _assert_article_shape as assert_article_shape
from worker_helpers import claim_plan, row_locked, scalar

import pgqueue
from pgqueue import repository
from pgqueue._worker import store
from pgqueue.errors import InvalidArgumentError, UnknownDependencyError

LEASE = timedelta(minutes=5)


def _row(engine: Engine, job_id: int) -> Any:
    with engine.connect() as conn:
        return conn.execute(
            text(
                "SELECT status, waiting_on, run_at <= now() AS due, last_error, "
                "cancelled_at IS NOT NULL AS cancelled FROM jobs WHERE id = :id"
            ),
            {"id": job_id},
        ).one()


def _claim(engine: Engine, queue: str = "default", limit: int = 100) -> list[pgqueue.ClaimedJob]:
    with engine.begin() as conn:
        return repository.claim(conn, queue=queue, limit=limit, lease=LEASE)


def _finish(engine: Engine, job: pgqueue.ClaimedJob, *, ok: bool = True) -> None:
    with engine.begin() as conn:
        if ok:
            assert repository.complete(conn, job.id, job.attempts)
        else:
            assert repository.fail(conn, job.id, job.attempts, "boom", retry=False) is not None


def _run_all(engine: Engine, queue: str = "default", fail: set[int] | None = None) -> list[int]:
    """Claim and finish until nothing is ready; the ids in the order they ran."""
    ran: list[int] = []
    while jobs := _claim(engine, queue):
        for job in jobs:
            ran.append(job.id)
            _finish(engine, job, ok=job.id not in (fail or set()))
    return ran


def test_a_waiting_job_is_queued_but_not_claimed_until_every_dependency_is_done(
    engine: Engine,
) -> None:
    with engine.begin() as conn:
        a, b = pgqueue.enqueue_many(conn, ["a", "b"])
        child = pgqueue.enqueue(conn, "child", depends_on=[a, b, a])
    assert tuple(_row(engine, child)[:3]) == ("queued", 2, False)
    first = _claim(engine, limit=1)
    assert [j.id for j in first] == [a]
    _finish(engine, first[0])
    assert tuple(_row(engine, child)[:3]) == ("queued", 1, False)
    second = _claim(engine)
    assert [j.id for j in second] == [b]  # the child is still not claimable
    _finish(engine, second[0])
    assert tuple(_row(engine, child)[:3]) == ("queued", 0, True)
    assert [j.id for j in _claim(engine)] == [child]


def test_a_dependency_already_done_counts_as_finished(engine: Engine) -> None:
    with engine.begin() as conn:
        parent = pgqueue.enqueue(conn, "p")
    _run_all(engine)
    with engine.begin() as conn:
        child = pgqueue.enqueue(conn, "c", depends_on=[parent])
    assert tuple(_row(engine, child)[:3]) == ("queued", 0, True)


def test_a_chain_of_five_whose_third_fails_fails_the_fourth_and_fifth_naming_the_third(
    engine: Engine,
) -> None:
    with engine.begin() as conn:
        chain = [pgqueue.enqueue(conn, 1)]
        for n in range(2, 6):
            chain.append(pgqueue.enqueue(conn, n, depends_on=[chain[-1]]))
    ran = _run_all(engine, fail={chain[2]})
    assert ran == chain[:3]  # in dependency order, and nothing after the failure ran
    assert [_row(engine, i).status for i in chain] == ["done", "done", "failed", "failed", "failed"]
    for later in chain[3:]:
        _, waiting_on, _, last_error, cancelled = _row(engine, later)
        assert last_error == f"dependency {chain[2]} failed"
        assert (waiting_on, cancelled) == (0, False)
    assert scalar(engine, "SELECT count(*) FROM jobs_dependencies WHERE pending") == 0


def test_on_dependency_failure_run_releases_the_job_when_a_dependency_fails(
    engine: Engine,
) -> None:
    with engine.begin() as conn:
        a, b = pgqueue.enqueue_many(conn, ["a", "b"])
        cleanup = pgqueue.enqueue(conn, "cleanup", depends_on=[a, b], on_dependency_failure="run")
        strict = pgqueue.enqueue(conn, "strict", depends_on=[a, b])
    ran = _run_all(engine, fail={a})
    assert cleanup in ran
    assert strict not in ran
    assert _row(engine, strict).last_error == f"dependency {a} failed"
    assert _row(engine, cleanup).status == "done"


def test_a_dependency_failed_before_the_enqueue_fails_the_new_job_at_once(engine: Engine) -> None:
    with engine.begin() as conn:
        parent = pgqueue.enqueue(conn, "p", max_attempts=1)
    _run_all(engine, fail=set(_ids_of(engine)))
    with engine.begin() as conn:
        strict = pgqueue.enqueue(conn, "s", depends_on=[parent])
        lenient = pgqueue.enqueue(conn, "l", depends_on=[parent], on_dependency_failure="run")
    assert tuple(_row(engine, strict)[:2]) == ("failed", 0)
    assert _row(engine, strict).last_error == f"dependency {parent} failed"
    assert tuple(_row(engine, lenient)[:3]) == ("queued", 0, True)


def _ids_of(engine: Engine) -> list[int]:
    with engine.connect() as conn:
        return list(conn.execute(text("SELECT id FROM jobs ORDER BY id")).scalars())


def test_cancel_cancels_the_waiting_dependents_and_reports_them(engine: Engine) -> None:
    with engine.begin() as conn:
        root = pgqueue.enqueue(conn, "root")
        child = pgqueue.enqueue(conn, "child", depends_on=[root])
        grandchild = pgqueue.enqueue(conn, "grandchild", depends_on=[child])
        runner = pgqueue.enqueue(conn, "runner", depends_on=[child], on_dependency_failure="run")
        report = repository.cancel_report(conn, [root])
    assert [c.id for c in report.cancelled] == [root]
    assert report.dependents == [child, grandchild]
    for job_id in (child, grandchild):
        status, _, _, last_error, cancelled = _row(engine, job_id)
        assert (status, last_error, cancelled) == (
            "failed",
            f"dependency {root} was cancelled",
            True,
        )
    assert tuple(_row(engine, runner)[:3]) == ("queued", 0, True)


def test_a_retried_parent_that_succeeds_resurrects_no_failed_dependent(engine: Engine) -> None:
    with engine.begin() as conn:
        parent = pgqueue.enqueue(conn, "p")
        child = pgqueue.enqueue(conn, "c", depends_on=[parent])
    _run_all(engine, fail={parent})
    assert _row(engine, child).status == "failed"
    with engine.begin() as conn:
        assert repository.retry(conn, [parent]) == [parent]
    _run_all(engine)
    assert _row(engine, parent).status == "done"
    assert tuple(_row(engine, child)[:2]) == ("failed", 0)


def test_retry_leaves_a_waiting_job_waiting(engine: Engine) -> None:
    with engine.begin() as conn:
        parent = pgqueue.enqueue(conn, "p")
        child = pgqueue.enqueue(conn, "c", depends_on=[parent])
    # Refused with a reason, not silently nothing (tests/integration/test_waiting_jobs.py).
    with engine.begin() as conn, pytest.raises(pgqueue.JobWaitingError):
        repository.retry(conn, [child])
    assert tuple(_row(engine, child)[:3]) == ("queued", 1, False)


def test_every_enqueue_path_takes_depends_on(engine: Engine) -> None:
    with engine.begin() as conn:
        parent = pgqueue.enqueue(conn, "p")
        batch = pgqueue.enqueue_many(conn, ["x", "y"], depends_on=[parent])
        keyed = pgqueue.enqueue_many(
            conn, ["k1", "k2"], unique_keys=["k", "k"], depends_on=[parent]
        )
        unique = repository.enqueue_unique(conn, "u", unique_key="u", depends_on=[parent])
        again = repository.enqueue_unique(conn, "u2", unique_key="u", depends_on=[parent])
    assert keyed[0] == keyed[1]
    assert unique.inserted
    assert not again.inserted
    waiting = [*batch, keyed[0], unique.id]
    assert all(tuple(_row(engine, i)[:3]) == ("queued", 1, False) for i in waiting)
    assert scalar(engine, "SELECT count(*) FROM jobs_dependencies") == len(waiting)
    assert sorted(_run_all(engine)) == sorted([parent, *waiting])


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"depends_on": "12"}, InvalidArgumentError),
        ({"depends_on": [1.5]}, InvalidArgumentError),
        ({"depends_on": [1], "delay": timedelta(seconds=1)}, InvalidArgumentError),
        ({"depends_on": [1], "on_dependency_failure": "ignore"}, InvalidArgumentError),
    ],
)
def test_bad_dependency_options_are_refused_before_any_sql(
    engine: Engine, kwargs: dict[str, Any], error: type[Exception]
) -> None:
    with engine.begin() as conn, pytest.raises((error, TypeError)) as raised:
        pgqueue.enqueue(conn, "x", **kwargs)
    assert isinstance(raised.value, pgqueue.PgQueueError)
    assert scalar(engine, "SELECT count(*) FROM jobs") == 0


@pytest.mark.parametrize("path", ["enqueue", "enqueue_many", "enqueue_unique", "keyed_many"])
def test_an_unknown_dependency_is_refused_and_nothing_of_the_call_is_written(
    engine: Engine, path: str
) -> None:
    with engine.begin() as conn:
        known = pgqueue.enqueue(conn, "known")
    with engine.begin() as conn:
        deps = [known, known + 1000, known + 1001]
        calls = {
            "enqueue": lambda: pgqueue.enqueue(conn, "x", depends_on=deps),
            "enqueue_many": lambda: pgqueue.enqueue_many(conn, ["x", "y"], depends_on=deps),
            "enqueue_unique": lambda: repository.enqueue_unique(
                conn, "x", unique_key="k", depends_on=deps
            ),
            "keyed_many": lambda: pgqueue.enqueue_many(
                conn, ["x"], unique_keys=["k"], depends_on=deps
            ),
        }
        with pytest.raises(UnknownDependencyError) as raised:
            calls[path]()
        assert raised.value.ids == [known + 1000, known + 1001]
        assert str(known + 1000) in str(raised.value)
        # The caller's transaction is unharmed and holds nothing of the call.
        assert conn.execute(text("SELECT count(*) FROM jobs")).scalar_one() == 1
    assert _row(engine, known).status == "queued"
    assert scalar(engine, "SELECT count(*) FROM jobs WHERE has_dependents") == 0
    assert scalar(engine, "SELECT count(*) FROM jobs_dependencies") == 0


def test_one_statement_finishing_several_dependencies_settles_them_together(
    engine: Engine,
) -> None:
    """The worker's batched completion of three parents decrements each waiting job once by its
    count of settled edges: the fan-in of the three is released, a job that also waits for an
    unfinished fourth is left at 1 with only that edge pending."""
    with engine.begin() as conn:
        a, b, c, d = pgqueue.enqueue_many(conn, ["a", "b", "c", "d"])
        fan_in = pgqueue.enqueue(conn, "fan-in", depends_on=[a, b, c])
        partial = pgqueue.enqueue(conn, "partial", depends_on=[a, b, d])
    held = {j.id: j for j in _claim(engine)}
    with engine.begin() as conn:
        done = store.complete_many(conn, [(i, held[i].attempts) for i in (a, b, c)])
    assert done == {a, b, c}
    assert tuple(_row(engine, fan_in)) == ("queued", 0, True, None, False)
    assert tuple(_row(engine, partial)) == ("queued", 1, False, None, False)
    pending = "SELECT count(*) FROM jobs_dependencies WHERE pending"
    assert scalar(engine, pending) == 1
    _finish(engine, held[d], ok=False)
    assert _row(engine, partial).last_error == f"dependency {d} failed"
    assert scalar(engine, pending) == 0


def test_one_statement_finishing_a_done_and_a_failed_dependency_applies_both(
    engine: Engine,
) -> None:
    """Any statement that finishes parents releases their dependents (the trigger's contract, not
    only the worker's): one ``UPDATE`` making one parent done and the other failed releases the
    ``on_dependency_failure="run"`` job (both edges count) and fails the strict one, naming the
    failed parent."""
    with engine.begin() as conn:
        ok, bad = pgqueue.enqueue_many(conn, ["ok", "bad"])
        run = pgqueue.enqueue(conn, "run", depends_on=[ok, bad], on_dependency_failure="run")
        strict = pgqueue.enqueue(conn, "strict", depends_on=[ok, bad])
        conn.execute(
            text(
                "UPDATE jobs SET status = CASE WHEN id = :ok THEN 'done' ELSE 'failed' END, "
                "finished_at = now() WHERE id IN (:ok, :bad)"
            ),
            {"ok": ok, "bad": bad},
        )
    assert tuple(_row(engine, run)) == ("queued", 0, True, None, False)
    assert tuple(_row(engine, strict)) == ("failed", 0, True, f"dependency {bad} failed", False)
    assert scalar(engine, "SELECT count(*) FROM jobs_dependencies WHERE pending") == 0


def test_the_last_two_dependencies_finishing_at_once_release_the_job_exactly_once(
    engine: Engine,
) -> None:
    """Two sessions complete the two parents behind one barrier, fifty times over: each child
    ends with ``waiting_on = 0``, released once (its edges settled), claimed once."""
    rounds = 50
    with engine.begin() as conn:
        pairs = [pgqueue.enqueue_many(conn, [n, n]) for n in range(rounds)]
        children = [pgqueue.enqueue(conn, "child", depends_on=pair) for pair in pairs]
    held = {j.id: j for j in _claim(engine, limit=2 * rounds)}
    assert set(held) == {i for pair in pairs for i in pair}
    for pair in pairs:
        barrier = threading.Barrier(2)
        errors: list[BaseException] = []

        def finish(
            job_id: int,
            barrier: threading.Barrier = barrier,
            errors: list[BaseException] = errors,
        ) -> None:
            try:
                with engine.begin() as conn:
                    barrier.wait(5)
                    job = held[job_id]
                    assert repository.complete(conn, job.id, job.attempts)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=finish, args=(i,)) for i in pair]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        assert not errors
    assert scalar(engine, "SELECT count(*) FROM jobs WHERE waiting_on <> 0") == 0
    claimed = [j.id for j in _claim(engine, limit=1000)]
    assert sorted(claimed) == children
    assert _claim(engine) == []


def test_an_enqueue_that_locked_its_dependency_first_is_released_by_its_completion(
    engine: Engine,
) -> None:
    """The enqueue holds the parent's row (``has_dependents``) while a worker completes it: the
    completion waits, then its trigger's fresh snapshot sees the committed edge and releases the
    child. The other order (completion first) makes the enqueue read ``done``."""
    with engine.begin() as conn:
        parent = pgqueue.enqueue(conn, "p")
    (job,) = _claim(engine)
    producer = engine.connect()
    tx = producer.begin()
    child = pgqueue.enqueue(producer, "c", depends_on=[parent])
    completed = threading.Event()

    def complete() -> None:
        with engine.begin() as conn:
            assert store.complete_many(conn, [(job.id, job.attempts)]) == {job.id}
        completed.set()

    worker = threading.Thread(target=complete)
    worker.start()
    assert not completed.wait(0.5)  # it waits for the producer's lock
    tx.commit()
    producer.close()
    worker.join(10)
    assert completed.is_set()
    assert tuple(_row(engine, child)[:3]) == ("queued", 0, True)

    with engine.begin() as conn:
        parent2 = pgqueue.enqueue(conn, "p2", queue="other")
    (job2,) = _claim(engine, "other")
    finisher = engine.connect()
    ftx = finisher.begin()
    assert store.complete_many(finisher, [(job2.id, job2.attempts)]) == {job2.id}
    enqueued: list[int] = []
    producer_thread = threading.Thread(
        target=lambda: enqueued.append(_enqueue_child(engine, parent2))
    )
    producer_thread.start()
    producer_thread.join(0.5)
    assert not enqueued  # waits for the completion's row lock
    ftx.commit()
    finisher.close()
    producer_thread.join(10)
    assert tuple(_row(engine, enqueued[0])[:3]) == ("queued", 0, True)


def _enqueue_child(engine: Engine, parent: int) -> int:
    with engine.begin() as conn:
        return pgqueue.enqueue(conn, "c", depends_on=[parent])


def test_the_claim_keeps_its_plan_with_waiting_jobs_present(engine: Engine) -> None:
    """The article's shape (test_article's check: Limit over LockRows over an index scan of
    jobs_ready_idx, no Sort, no Seq Scan), with 10,000 waiting jobs among a few ready ones,
    ANALYZE'd so the planner knows them; then the claim takes only the ready ones."""
    with engine.begin() as conn:
        parents = pgqueue.enqueue_many(conn, ["p"] * 5)
        pgqueue.enqueue_many(conn, ["w"] * 10_000, depends_on=parents)
        conn.execute(text("ANALYZE jobs"))
    assert_article_shape(claim_plan(engine))
    assert sorted(j.id for j in _claim(engine)) == parents


@pytest.mark.parametrize("mode", ["engine", "connection"])
def test_testing_drain_runs_a_fan_out_and_its_fan_in_to_the_end_in_dependency_order(
    engine: Engine, mode: str
) -> None:
    """A chain across queues feeding a fan-out of three and a fan-in: each job runs after every
    job it depends on, whichever queue is visited first, in lease mode and in the caller's
    transaction alike."""
    from pgqueue import testing

    with engine.begin() as conn:
        first = pgqueue.enqueue(conn, "first", queue="b")
        members = pgqueue.enqueue_many(conn, ["m"] * 3, queue="a", depends_on=[first])
        fan_in = pgqueue.enqueue(conn, "in", queue="a", depends_on=members)
        last = pgqueue.enqueue(conn, "last", queue="b", depends_on=[fan_in])
    order: list[int] = []
    handlers = {"a": lambda job: order.append(job.id), "b": lambda job: order.append(job.id)}
    if mode == "engine":
        result = testing.drain(engine, handlers)
    else:
        with engine.begin() as conn:
            result = testing.drain(conn, handlers)
    assert len(result.ran) == 6
    assert order[0] == first
    assert sorted(order[1:4]) == members
    assert order[4:] == [fan_in, last]


def test_a_worker_drain_runs_the_job_the_last_completion_released(engine: Engine) -> None:
    """``run(until_empty=True)`` on a chain of two: the parent's completion waits for another
    session's row lock (a real transaction) while the claimer polls every 50 ms and finds
    nothing, as the child still waits; the drain polls again once the completion released the
    child, and runs it."""
    with engine.begin() as conn:
        parent = pgqueue.enqueue(conn, "parent")
        child = pgqueue.enqueue(conn, "child", depends_on=[parent])
    ran: list[int] = []
    with ExitStack() as holder:

        def handler(job: pgqueue.JobContext) -> None:
            ran.append(job.id)
            if job.id == parent:  # held for a second: the completion waits, the claimer polls
                holder.enter_context(row_locked(engine, job.id, 1.0))

        worker = pgqueue.Worker(engine, {"default": handler}, listen=False, poll_interval=0.05)
        stats = worker.run(until_empty=True)
    assert ran == [parent, child]
    assert stats.done == 2
    assert [_row(engine, i).status for i in (parent, child)] == ["done", "done"]
