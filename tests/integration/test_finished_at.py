"""``finished_at`` (pgqueue_0009): set by the UPDATE of every transition to done or failed, cleared
by a retry, never set on the way back to queued."""

from __future__ import annotations

from sqlalchemy import Engine, text

import pgqueue
from pgqueue import demo
from pgqueue._worker import store


def _finished(engine: Engine, job_id: int) -> tuple[str, bool]:
    """The job's status, and whether ``finished_at`` is set (to the transaction's ``now()``)."""
    with engine.connect() as conn:
        row = conn.execute(
            text(
                "SELECT status, finished_at IS NOT NULL AS finished, "
                "finished_at > now() - interval '1 minute' AS recent FROM jobs WHERE id = :id"
            ),
            {"id": job_id},
        ).one()
    assert row.finished is bool(row.recent)
    return row.status, row.finished


def _claimed(engine: Engine, *, max_attempts: int = 5) -> pgqueue.ClaimedJob:
    with engine.begin() as conn:
        pgqueue.enqueue(conn, {}, max_attempts=max_attempts)
        (job,) = pgqueue.claim(conn, limit=1)
    assert _finished(engine, job.id) == ("running", False)
    return job


def test_complete_and_complete_many_set_it(engine: Engine) -> None:
    one, batch = _claimed(engine), _claimed(engine)
    with engine.begin() as conn:
        assert pgqueue.complete(conn, one.id, one.attempts)
        assert store.complete_many(conn, [(batch.id, batch.attempts)]) == {batch.id}
    assert _finished(engine, one.id) == ("done", True)
    assert _finished(engine, batch.id) == ("done", True)


def test_fail_sets_it_only_for_good(engine: Engine) -> None:
    retried, spent, fatal = _claimed(engine), _claimed(engine, max_attempts=1), _claimed(engine)
    with engine.begin() as conn:
        pgqueue.fail(conn, retried.id, retried.attempts, "boom")
        pgqueue.fail(conn, spent.id, spent.attempts, "boom")
        store.fail_many(conn, [(fatal.id, fatal.attempts, "bad", False)])
    assert _finished(engine, retried.id) == ("queued", False)
    assert _finished(engine, spent.id) == ("failed", True)
    assert _finished(engine, fatal.id) == ("failed", True)


def test_reap_sets_it_only_for_spent_jobs(engine: Engine) -> None:
    requeued, spent = _claimed(engine), _claimed(engine, max_attempts=1)
    with engine.begin() as conn:
        conn.execute(text("UPDATE jobs SET locked_until = now() - interval '1 second'"))
        assert len(pgqueue.reap_expired(conn)) == 2
    assert _finished(engine, requeued.id) == ("queued", False)
    assert _finished(engine, spent.id) == ("failed", True)


def test_cancel_sets_it_and_retry_clears_it(engine: Engine) -> None:
    running = _claimed(engine)
    with engine.begin() as conn:
        queued = pgqueue.enqueue(conn, {})
        assert pgqueue.cancel(conn, [running.id, queued]) == sorted([running.id, queued])
    assert _finished(engine, running.id) == ("failed", True)
    assert _finished(engine, queued) == ("failed", True)
    with engine.begin() as conn:
        assert pgqueue.retry(conn, [running.id]) == [running.id]
        assert pgqueue.retry_failed(conn) == []  # cancelled on purpose: left alone
        assert pgqueue.retry_failed(conn, include_cancelled=True) == [queued]
    assert _finished(engine, running.id) == ("queued", False)
    assert _finished(engine, queued) == ("queued", False)


def test_the_naive_claim_of_the_demo_sets_it_too(engine: Engine) -> None:
    with engine.begin() as conn:
        job_id = pgqueue.enqueue(conn, {})
        conn.execute(demo.NAIVE_DOUBLE_CLAIMING_CLAIM, {"new_status": "done"})
    assert _finished(engine, job_id) == ("done", True)


def test_a_worker_leaves_every_finished_job_with_it_and_no_other(engine: Engine) -> None:
    """The batched completer and failer of a real worker, for the invariant as a whole."""
    with engine.begin() as conn:
        pgqueue.enqueue_many(conn, [{"ok": i % 3 != 0} for i in range(30)], max_attempts=1)

    def handler(job: pgqueue.JobContext) -> None:
        if not job.payload["ok"]:
            raise ValueError("not ok")

    worker = pgqueue.Worker(
        engine, {"default": handler}, listen=False, install_signal_handlers=False
    )
    worker.run(until_empty=True)
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT status, finished_at IS NOT NULL AS finished, count(*) FROM jobs "
                "GROUP BY 1, 2 ORDER BY 1"
            )
        ).all()
    assert [tuple(r) for r in rows] == [("done", True, 20), ("failed", True, 10)]
