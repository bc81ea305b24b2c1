"""One outcome decision for the completer's batches and the one-job writes (#21).

Lease mode writes outcomes in batches (:class:`~pgqueue._worker.completer.Flush`); transaction mode
and ``pgqueue.testing.drain`` write one job at a time (:func:`~pgqueue._worker.executors.settle`).
Both must end a job the same way: the same outcome and the same detail (its log line, its hook's
text), for each write (complete, fail, snooze) and whatever happened to the row meanwhile.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta

import pytest
from sqlalchemy import Connection, Engine, text

from pgqueue import repository
from pgqueue._worker.completer import Failure, Flush
from pgqueue._worker.executors import settle
from pgqueue._worker.window import Held, Lane
from pgqueue.jobs import JobContext, Outcome, Snooze
from pgqueue.retry_policy import RetryPolicy, describe_error

POLICY = RetryPolicy()
SNOOZE = timedelta(seconds=30)


def _ours(conn: Connection, held: Held) -> None:
    """Nothing happened: the guard matches."""


def _done_by_handler(conn: Connection, held: Held) -> None:
    assert repository.complete(conn, held.job.id, held.job.attempts)


def _cancelled(conn: Connection, held: Held) -> None:
    assert repository.cancel(conn, [held.job.id]) == [held.job.id]


def _taken_elsewhere(conn: Connection, held: Held) -> None:
    """Reaped and claimed by another worker: the attempt this one holds is gone."""
    bump = text("UPDATE jobs SET attempts = attempts + 1 WHERE id = :id")
    conn.execute(bump, {"id": held.job.id})


MEANWHILE: dict[str, Callable[[Connection, Held], None]] = {
    "ours": _ours,
    "done by its handler": _done_by_handler,
    "cancelled": _cancelled,
    "taken elsewhere": _taken_elsewhere,
}

#: Each write: the handler's result (``None`` completes, an error fails, a Snooze snoozes) and the
#: job's ``max_attempts`` (1: the failure is its last attempt).
WRITES: dict[str, tuple[BaseException | None, int]] = {
    "complete": (None, 5),
    "fail, retries left": (ValueError("boom"), 5),
    "fail, last attempt": (ValueError("boom"), 1),
    "snooze": (Snooze(SNOOZE), 5),
}


def _claim_two(engine: Engine, error: BaseException | None, max_attempts: int) -> list[Held]:
    """Two equal jobs, claimed: one for each way of writing."""
    with engine.begin() as conn:
        repository.enqueue_many(conn, [{}, {}], queue="decide", max_attempts=max_attempts)
        claimed = repository.claim(conn, queue="decide", limit=2)
    held = [Held(JobContext.of(c), Lane.THREADS, time.monotonic()) for c in claimed]
    for h in held:
        if isinstance(error, Snooze):
            h.snooze = error.delay
    return held


def _batched(engine: Engine, held: Held, error: BaseException | None) -> tuple[Outcome, str]:
    done = [held] if error is None else []
    snoozed = [held] if isinstance(error, Snooze) else []
    failed = []
    if error is not None and not isinstance(error, Snooze):
        failed = [Failure(held, describe_error(error), POLICY.should_retry(error), POLICY)]
    with engine.connect() as conn:
        conn.execution_options(isolation_level="AUTOCOMMIT")
        ((_, outcome, detail),) = Flush(done, failed, snoozed, lock_timeout_ms=1000)(conn)
    return outcome, detail


@pytest.mark.parametrize("write", list(WRITES))
@pytest.mark.parametrize("meanwhile", list(MEANWHILE))
def test_a_batch_and_a_single_write_decide_alike(
    engine: Engine, meanwhile: str, write: str
) -> None:
    """Before #21 a failure whose guard matched nothing was lost with the handler's error as its
    detail in the one-job write, and with "guard matched no row at failure" in a batch."""
    error, max_attempts = WRITES[write]
    one, batch = _claim_two(engine, error, max_attempts)
    with engine.begin() as conn:
        for held in (one, batch):
            MEANWHILE[meanwhile](conn, held)
    with engine.begin() as conn:
        single = settle(conn, one, error, POLICY)
    assert _batched(engine, batch, error) == single

    outcome, detail = single
    if meanwhile == "taken elsewhere":
        assert outcome is Outcome.LOST
        at = {"complete": "completion", "snooze": "snooze"}.get(write, "failure")
        assert detail == f"guard matched no row at {at}"
    elif meanwhile != "ours":
        expected = {"done by its handler": Outcome.DONE_BY_HANDLER, "cancelled": Outcome.CANCELLED}
        assert (outcome, detail) == (expected[meanwhile], "")
    elif write == "complete":
        assert (outcome, detail) == (Outcome.DONE, "")
    elif write == "snooze":
        assert (outcome, detail) == (Outcome.SNOOZED, str(SNOOZE))
    elif max_attempts == 1:
        assert (outcome, detail) == (Outcome.FAILED, "ValueError: boom")
    else:
        assert outcome is Outcome.RETRY
        assert detail.startswith("retry in ")
        assert detail.endswith(": ValueError: boom")
