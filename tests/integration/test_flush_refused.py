"""A batched write never fails for one row's sake: the database's refusal of one job's values
is isolated (the rows written again in halves), the others land, and that job fails saying why.

The faults are real: ``CHECK`` constraints a test adds to its own database's ``jobs`` table
(what a constraint or trigger of an application's own does), and a JSON text the server refuses.
pgqueue's own checks (``tests/integration/test_unstorable.py``) keep its values from ever being
refused; these are the values no check foresaw. Before, the whole flush failed, every job of it
was reported "lost (completion not written)" and ran again after its lease, the real error
nowhere but in the worker's log.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

from sqlalchemy import Engine, text
from test_flush import SHORT, autocommit, by_id, claim_held, statuses
from worker_helpers import scalar, statements_sent, until

import pgqueue
from pgqueue._worker.completer import Completer, Failure, Flush
from pgqueue._worker.window import Held
from pgqueue.jobs import Outcome

QUIET: dict[str, Any] = {"listen": False, "install_signal_handlers": False, "poll_interval": 0.1}
#: What the database says of a row its test constraint refuses.
CHECK = '(psycopg.errors.CheckViolation) new row for relation "jobs" violates check constraint'


def constrain(engine: Engine, name: str, check: str) -> None:
    """A ``CHECK`` constraint of the test's own on ``jobs`` (the test's names and SQL only)."""
    with engine.begin() as conn:
        conn.execute(text(f"ALTER TABLE jobs ADD CONSTRAINT {name} CHECK ({check}) NOT VALID"))


def last_errors(engine: Engine) -> dict[int, str | None]:
    with engine.connect() as conn:
        return {r.id: r.last_error for r in conn.execute(text("SELECT id, last_error FROM jobs"))}


def test_a_refused_completion_fails_its_job_and_the_others_of_the_batch_are_done(
    engine: Engine,
) -> None:
    """Eight completions in one flush, two refused: one by a constraint, one a JSON text the
    server cannot parse. Six are done by their statement; the two fail for good, their
    ``last_error`` saying what the database refused and why; a few statements more, not one per
    job."""
    constrain(engine, "test_no_poison", "result IS DISTINCT FROM '\"poison\"'::jsonb")
    held = claim_held(engine, 8)
    for n, h in enumerate(held):
        h.result = f'"ok {n}"'
    held[2].result = '"poison"'
    held[5].result = '"\\udce9"'  # a lone surrogate's escape: invalid input syntax for type json
    flush = Flush(held, [], [], lock_timeout_ms=5000)
    with statements_sent(engine, "jobs") as sent, autocommit(engine) as conn:
        outcomes = by_id(flush(conn))

    refused = {held[2].job.id, held[5].job.id}
    for h in held:
        if h.job.id not in refused:
            assert outcomes[h.job.id] == (Outcome.DONE, "")
    poison, surrogate = outcomes[held[2].job.id], outcomes[held[5].job.id]
    assert poison[0] is surrogate[0] is Outcome.FAILED
    assert poison[1].startswith(f"the database refused this job's completion: {CHECK}")
    assert surrogate[1].startswith(
        "the database refused this job's completion: (psycopg.errors.InvalidTextRepresentation) "
        "invalid input syntax for type json"
    )
    rows = statuses(engine)
    assert [rows[h.job.id] for h in held] == [
        "failed" if h.job.id in refused else "done" for h in held
    ]
    assert last_errors(engine)[held[2].job.id] == poison[1]
    with engine.connect() as conn:
        results = {r.id: r.result for r in conn.execute(text("SELECT id, result FROM jobs"))}
    assert results[held[7].job.id] == "ok 7"
    # 1 refused batch, halves down to the two culprits (1 + 2 + 4 + 4 here), then 1 failure
    # statement for both: far under one statement per job and per try.
    assert len(sent) <= 12, len(sent)


def test_a_refused_failure_or_snooze_fails_that_job_alone(engine: Engine) -> None:
    """The failure whose error text a constraint refuses, the snooze a constraint refuses: each
    job fails for good with pgqueue's own text (which the constraint takes), the handler's error
    kept in the log line; the other failures and snoozes of the flush are written."""
    constrain(engine, "test_error_text", "last_error IS NULL OR last_error NOT LIKE '%refuse-me%'")
    constrain(engine, "test_five_never_snoozes", "snoozes = 0 OR payload->>'n' <> '5'")
    held = claim_held(engine, 6)
    failures = [Failure(h, f"ValueError: plain {i}", True, SHORT) for i, h in enumerate(held[:3])]
    failures[1] = Failure(held[1], "ValueError: refuse-me", True, SHORT, traceback="Traceback ...")
    snoozed = held[3:]
    for h in snoozed:
        h.snooze = timedelta(minutes=5)
    with autocommit(engine) as conn:
        outcomes = by_id(Flush([], failures, snoozed, lock_timeout_ms=5000)(conn))

    ids = [h.job.id for h in held]
    assert outcomes[ids[0]] == (Outcome.RETRY, "retry in 0:00:02: ValueError: plain 0")
    assert outcomes[ids[2]] == (Outcome.RETRY, "retry in 0:00:02: ValueError: plain 2")
    failed, detail = outcomes[ids[1]]
    assert failed is Outcome.FAILED
    assert detail.startswith(f"the database refused this job's failure: {CHECK}")
    assert detail.endswith("(its error: ValueError: refuse-me)")  # for the log and the hooks
    assert outcomes[ids[3]] == outcomes[ids[4]] == (Outcome.SNOOZED, "0:05:00")
    snooze_refused, why = outcomes[ids[5]]
    assert snooze_refused is Outcome.FAILED
    assert why.startswith(f"the database refused this job's snooze: {CHECK}")
    rows = statuses(engine)
    assert [rows[i] for i in ids] == ["queued", "failed", "queued", "queued", "queued", "failed"]
    errors = last_errors(engine)
    assert errors[ids[1]] is not None
    assert errors[ids[1]].startswith("the database refused this job's failure")


def test_a_job_whose_failure_is_refused_too_is_reported_lost_and_keeps_its_row(
    engine: Engine,
) -> None:
    """The one real loss: the database refuses the completion and the failure that replaces
    it. That job alone is reported lost, its row left running (its lease brings it back)."""
    held = claim_held(engine, 3)
    stuck = held[1].job.id
    constrain(engine, "test_one_stays_running", f"id <> {stuck} OR status = 'running'")
    with autocommit(engine) as conn:
        outcomes = by_id(Flush(held, [], [], lock_timeout_ms=5000)(conn))
    outcome, detail = outcomes[stuck]
    assert outcome is Outcome.LOST
    assert detail.startswith(f"completion refused, and its failure too: {CHECK}")
    assert [outcomes[h.job.id][0] for h in held] == [Outcome.DONE, Outcome.LOST, Outcome.DONE]
    assert statuses(engine)[stuck] == "running"


class Reports:
    def __init__(self) -> None:
        self.batches: list[dict[int, tuple[Outcome, str]]] = []

    def __call__(self, outcomes: list[tuple[Held, Outcome, str]]) -> None:
        self.batches.append(by_id(outcomes))


def test_a_flush_that_breaks_midway_reports_what_it_wrote_as_written(engine: Engine) -> None:
    """Nothing reported lost that was not: a flush whose failure statement breaks (a trigger
    that raises: no data error, no retry) after its completions committed reports those jobs
    done, and only the failure's job lost."""
    with engine.begin() as conn:
        conn.execute(
            text(
                "CREATE FUNCTION test_refuse_failures() RETURNS trigger LANGUAGE plpgsql AS $$ "
                "BEGIN RAISE EXCEPTION 'no failures today'; END $$;"
                "CREATE TRIGGER test_refuse_failures BEFORE UPDATE ON jobs FOR EACH ROW "
                "WHEN (NEW.status IN ('queued', 'failed') AND OLD.status = 'running') "
                "EXECUTE FUNCTION test_refuse_failures();"
            )
        )
    done_1, done_2, failed = claim_held(engine, 3)
    reports = Reports()
    completer = Completer(engine, reports, lock_timeout_ms=1000, flush_delay=0.05)
    completer.start()
    try:
        completer.complete(done_1)
        completer.complete(done_2)
        completer.fail(failed, "ValueError: x", retry=True, policy=SHORT)
        until(lambda: len(reports.batches) == 1, 10, "the batch reported")
    finally:
        completer.close(time.monotonic() + 5.0)
    assert reports.batches == [
        {
            done_1.job.id: (Outcome.DONE, ""),
            done_2.job.id: (Outcome.DONE, ""),
            failed.job.id: (Outcome.LOST, "failure not written"),
        }
    ]
    assert [statuses(engine)[h.job.id] for h in (done_1, done_2, failed)] == [
        "done",
        "done",
        "running",
    ]


def test_a_worker_whose_result_a_constraint_refuses_loses_nothing(engine: Engine) -> None:
    """End to end: six jobs of one flush, one result refused. Five done once, the sixth failed
    for good saying why; nothing lost, nothing run twice."""
    constrain(engine, "test_no_poison", "result IS DISTINCT FROM '\"poison\"'::jsonb")
    registry = pgqueue.Registry()

    @registry.task(queue="q", max_attempts=5)
    def answer(n: int) -> str:
        return "poison" if n == 3 else f"ok {n}"

    with engine.begin() as conn:
        ids = answer.enqueue_many(conn, [answer.args(n) for n in range(6)])
    stats = pgqueue.Worker(engine, registry, concurrency=6, **QUIET).run(until_empty=True)
    assert (stats.done, stats.failed, stats.lost, stats.retried) == (5, 1, 0, 0)
    assert scalar(engine, "SELECT max(attempts) FROM jobs") == 1
    rows = statuses(engine)
    assert [rows[i] for i in ids] == ["done", "done", "done", "failed", "done", "done"]
    assert (last_errors(engine)[ids[3]] or "").startswith(
        f'the database refused this job\'s completion: {CHECK} "test_no_poison"'
    )


def test_a_progress_the_database_refuses_is_dropped_and_every_lease_kept(engine: Engine) -> None:
    """The heartbeat's one statement extends every lease and writes the progress: a refused
    progress is isolated (the leases are extended first, the progress written in halves), so
    both jobs outlive their lease without running twice, and the good progress lands."""
    constrain(engine, "test_no_poison_progress", "progress IS DISTINCT FROM '\"poison\"'")
    beat = threading.Event()

    def handler(job: pgqueue.JobContext) -> None:
        job.set_progress("poison" if job.payload["n"] == 0 else "fine")
        until(beat.is_set, 10, "the first beat")
        time.sleep(2.5)  # past two leases

    with engine.begin() as conn:
        pgqueue.enqueue_many(conn, [{"n": 0}, {"n": 1}], queue="long")

    def watch() -> None:
        until(lambda: scalar(engine, "SELECT count(progress) FROM jobs") > 0, 10, "a progress")
        beat.set()

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    stats = pgqueue.Worker(engine, {"long": handler}, lease=1.2, concurrency=2, **QUIET).run(
        until_empty=True
    )
    watcher.join(10)
    assert (stats.done, stats.lost) == (2, 0)
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT payload->>'n', attempts, progress FROM jobs ORDER BY 1"))
        assert [tuple(r) for r in rows] == [("0", 1, None), ("1", 1, "fine")]
