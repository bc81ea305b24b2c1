"""Statements compile to the article's SQL shapes (no database needed)."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import Select, Update
from sqlalchemy.dialects import postgresql
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.compiler import SQLCompiler

import pgqueue
from pgqueue import _calls, statements
from pgqueue.schema import CANCEL_HINT

DIALECT = postgresql.psycopg.dialect()  # type: ignore[no-untyped-call]


def sql(stmt: ClauseElement) -> str:
    return re.sub(r"\s+", " ", str(stmt.compile(dialect=DIALECT)))


def test_claim_is_a_materialized_skip_locked_cte_joined_back_by_id() -> None:
    # Since pgqueue_0006 the CTE reads one priority level at a time, from the queue's highest
    # queued priority down to 0 (it read ``FROM jobs`` directly before priorities).
    text = sql(statements.claim_statement(10))
    assert text.startswith(
        "WITH next AS MATERIALIZED (SELECT ready.id AS id FROM generate_series((SELECT "
        "coalesce(max(jobs.priority), 0) AS coalesce_1 FROM jobs WHERE jobs.queue = "
        "%(queue_name)s::VARCHAR AND jobs.status = 'queued'), 0, -1) AS levels(level) "
        "JOIN LATERAL (SELECT jobs.id AS id FROM jobs WHERE"
    )
    assert "jobs.priority = levels.level" in text
    assert "jobs.status = 'queued'" in text  # a literal: generic plans can prove the partial index
    assert "jobs.run_at <= now() ORDER BY jobs.run_at" in text
    assert "FOR UPDATE SKIP LOCKED" in text
    assert "UPDATE jobs SET status='running', attempts=(jobs.attempts +" in text
    assert "locked_until=(now() + %(lease)s)" in text
    assert "FROM next WHERE jobs.id = next.id" in text
    assert "RETURNING jobs.id, jobs.queue, jobs.payload, jobs.attempts" in text


def test_claim_limit_is_rendered_inline_at_execution() -> None:
    compiled = statements.claim_statement(7).compile(dialect=DIALECT)
    assert "LIMIT __[POSTCOMPILE_" in compiled.string  # literal_execute: inline, never a $n
    assert statements.claim_statement(7) is statements.claim_statement(7)  # built once per shape


def test_serialising_variant_has_no_skip_locked() -> None:
    text = sql(statements.claim_statement(1, skip_locked=False))
    assert "FOR UPDATE)" in text
    assert "SKIP LOCKED" not in text


def test_lifecycle_updates_carry_the_guard() -> None:
    guard = (
        "WHERE jobs.id = %(job_id)s::BIGINT AND jobs.status IS NOT DISTINCT FROM 'running' "
        "AND jobs.attempts = %(claimed_attempts)s::INTEGER"
    )
    for stmt in (statements.COMPLETE, statements.FAIL, statements.EXTEND_LEASE):
        assert guard in sql(stmt)


def test_complete_clears_the_lease_and_sets_finished_at() -> None:
    assert "SET status='done', locked_until=NULL, finished_at=now()" in sql(statements.COMPLETE)


def test_fail_backs_off_and_fails_for_good_after_max_attempts() -> None:
    text = sql(statements.FAIL)
    assert "jobs.attempts < jobs.max_attempts) THEN 'queued' ELSE 'failed'" in text
    assert "least(%(cap_seconds)s, %(base_seconds)s * power(" in text
    assert "jobs.run_at - now() AS retry_in" in text
    # finished only when it fails for good, in the same UPDATE: the same test as the status'.
    assert (
        "finished_at=CASE WHEN (%(retry)s AND jobs.attempts < jobs.max_attempts) THEN NULL "
        "ELSE now() END"
    ) in text


def test_reaper_only_touches_expired_running_jobs_and_keeps_the_first_error() -> None:
    text = sql(statements.REAP_EXPIRED)
    assert "WHERE jobs.status = 'running' AND jobs.locked_until < now()" in text
    assert "jobs.attempts >= jobs.max_attempts) THEN 'failed' ELSE 'queued'" in text
    assert "last_error=coalesce(jobs.last_error," in text
    assert "finished_at=CASE WHEN (jobs.attempts >= jobs.max_attempts) THEN now() END" in text


def test_naive_claim_is_the_unlocked_subquery_of_the_article() -> None:
    text = sql(statements.NAIVE_DOUBLE_CLAIMING_CLAIM)
    assert "WHERE jobs.id = (SELECT jobs.id FROM jobs WHERE jobs.status = 'queued'" in text
    assert "FOR UPDATE" not in text


def test_enqueue_many_is_one_insert_select_over_one_json_array_in_input_order() -> None:
    text = sql(statements.ENQUEUE_MANY)
    assert text.startswith(
        "INSERT INTO jobs (queue, payload, run_at, max_attempts, headers, priority) SELECT"
    )
    assert "ON CONFLICT" not in text  # jobs without a key pay nothing for the unique index
    assert (
        "FROM jsonb_array_elements(CAST(%(batch_json)s::VARCHAR AS JSONB)) WITH ORDINALITY AS "
        "batch(element, ord) ORDER BY batch.ord RETURNING jobs.id"
    ) in text


def test_purge_deletes_one_bounded_batch_of_old_finished_jobs() -> None:
    text = sql(statements.purge_statement())
    assert "DELETE FROM jobs WHERE jobs.id IN (SELECT jobs.id FROM jobs" in text
    assert "jobs.status = 'done' AND jobs.created_at < now() - %(older_than)s" in text
    assert "LIMIT %(batch_size)s" in text


# -- batched lifecycle (the worker's completer, heartbeat and shutdown) ----------------------------

BATCHED = {
    "COMPLETE_MANY": statements.COMPLETE_MANY,
    "FAIL_MANY": statements.FAIL_MANY,
    "EXTEND_LEASE_MANY": statements.EXTEND_LEASE_MANY,
    "RELEASE_MANY": statements.RELEASE_MANY,
}

#: A status compared with or set from a bound parameter instead of a literal.
BOUND_STATUS = re.compile(r"status\s*(=|IS NOT DISTINCT FROM|IN)\s*\(?\s*%\(")


def bind_names(stmt: ClauseElement) -> set[str]:
    """The parameters a caller must supply (the statement's own constants excluded)."""
    compiled = stmt.compile(dialect=DIALECT)
    assert isinstance(compiled, SQLCompiler)
    return {name for name, bind in compiled.binds.items() if bind.required}


@pytest.mark.parametrize("name", list(BATCHED))
def test_batched_updates_first_lock_their_rows_in_id_order(name: str) -> None:
    """Two overlapping flushes queue behind each other instead of deadlocking."""
    text = sql(BATCHED[name])
    assert text.startswith(
        "WITH mine AS MATERIALIZED (SELECT jobs.id AS id, jobs.attempts AS attempts"
    )
    assert "ORDER BY jobs.id FOR UPDATE OF jobs) UPDATE jobs SET" in text
    assert "SKIP LOCKED" not in text  # a job still ours must be written, not skipped


@pytest.mark.parametrize("name", list(BATCHED))
def test_batched_updates_join_the_id_and_attempts_arrays(name: str) -> None:
    """One round trip for the batch: parallel arrays, each job matched with its own attempts."""
    text = sql(BATCHED[name])
    assert "JOIN unnest(%(batch_ids)s::BIGINT[], %(batch_attempts)s::INTEGER[]" in text
    assert "ON jobs.id = batch.id AND jobs.attempts = batch.attempts" in text
    assert {"batch_ids", "batch_attempts"} <= bind_names(BATCHED[name])


@pytest.mark.parametrize("name", list(BATCHED))
def test_batched_updates_carry_the_guard_in_the_lock_and_in_the_update(name: str) -> None:
    """Status and attempts are checked again after the lock: the row may have moved meanwhile."""
    text = sql(BATCHED[name])
    lock, update = text.split(" UPDATE jobs SET ", 1)
    assert (
        "WHERE jobs.status IS NOT DISTINCT FROM 'running' AND (SELECT set_config('lock_timeout', "
        "coalesce(%(lock_timeout)s::VARCHAR, current_setting('lock_timeout')), true) AS "
        "set_config_1) IS NOT NULL ORDER BY jobs.id" in lock
    )
    assert (
        "FROM mine WHERE jobs.id = mine.id AND jobs.status IS NOT DISTINCT FROM 'running' "
        "AND jobs.attempts = mine.attempts RETURNING" in update
    )
    assert "jobs.status = 'running'" not in text  # would imply the partial jobs_lease_idx


@pytest.mark.parametrize(
    "stmt",
    [*BATCHED.values(), statements.SETTLED_AMONG, statements.CANCEL],
    ids=[*BATCHED, "SETTLED_AMONG", "CANCEL"],
)
def test_batched_and_operator_statements_use_literal_statuses(stmt: ClauseElement) -> None:
    """Generic plans can prove partial-index predicates only from literals, never from binds."""
    text = sql(stmt)
    assert not BOUND_STATUS.search(text), text
    assert not any("status" in name for name in bind_names(stmt))


def test_complete_many_marks_done_and_clears_the_lease() -> None:
    """The batched R10 writes exactly what ``COMPLETE`` writes, and returns the matched ids."""
    text = sql(statements.COMPLETE_MANY)
    assert "UPDATE jobs SET status='done', locked_until=NULL, finished_at=now() FROM mine" in text
    assert text.endswith("RETURNING jobs.id")
    assert bind_names(statements.COMPLETE_MANY) == {"batch_ids", "batch_attempts", "lock_timeout"}


def test_fail_many_brings_each_job_its_error_and_retry_flag() -> None:
    """One backoff policy for the batch, but per-job error text and retryability."""
    text = sql(statements.FAIL_MANY)
    assert (
        "unnest(%(batch_ids)s::BIGINT[], %(batch_attempts)s::INTEGER[], "
        "%(batch_errors)s::TEXT[], %(batch_retry)s::BOOLEAN[]) "
        "AS batch(id, attempts, error, retry)"
    ) in text
    assert (
        "status=CASE WHEN (mine.retry AND jobs.attempts < jobs.max_attempts) "
        "THEN 'queued' ELSE 'failed' END"
    ) in text
    assert "least(%(cap_seconds)s, %(base_seconds)s * power(" in text
    assert "locked_until=NULL, last_error=mine.error, finished_at=CASE WHEN (mine.retry" in text
    assert text.endswith(
        "RETURNING jobs.id, jobs.status, jobs.attempts, jobs.run_at - now() AS retry_in"
    )
    assert bind_names(statements.FAIL_MANY) == {
        "lock_timeout",
        "batch_ids",
        "batch_attempts",
        "batch_errors",
        "batch_retry",
        "base_seconds",
        "cap_seconds",
    }


def test_extend_lease_many_only_pushes_the_lease() -> None:
    """The heartbeat changes nothing but ``locked_until``; a missing id means no longer ours."""
    text = sql(statements.EXTEND_LEASE_MANY)
    assert "UPDATE jobs SET locked_until=(now() + %(lease)s) FROM mine" in text
    assert text.endswith("RETURNING jobs.id")
    assert bind_names(statements.EXTEND_LEASE_MANY) == {
        "batch_ids",
        "batch_attempts",
        "lease",
        "lock_timeout",
    }


def test_release_many_requeues_without_charging_the_attempt() -> None:
    """A job given back unstarted at shutdown keeps its attempt budget."""
    text = sql(statements.RELEASE_MANY)
    assert "UPDATE jobs SET status='queued', attempts=(jobs.attempts - " in text
    assert "locked_until=NULL FROM mine" in text
    assert text.endswith("RETURNING jobs.id")
    assert statements.RELEASE_MANY.compile(dialect=DIALECT).params["attempts_1"] == 1


def test_settled_among_reads_done_or_cancelled_rows_of_the_same_attempt() -> None:
    """The heartbeat's second look: a read, no lock, only rows of the claim it held."""
    text = sql(statements.SETTLED_AMONG)
    assert text.startswith("SELECT jobs.id, jobs.status = 'failed' AS cancelled FROM jobs")
    assert "JOIN unnest(%(batch_ids)s::BIGINT[], %(batch_attempts)s::INTEGER[])" in text
    assert "ON jobs.id = batch.id AND jobs.attempts = batch.attempts" in text
    assert text.endswith(
        "WHERE jobs.status = 'done' OR jobs.status = 'failed' AND jobs.last_error = 'cancelled'"
    )  # AND binds tighter: done, or failed by a cancel
    assert "FOR UPDATE" not in text
    assert bind_names(statements.SETTLED_AMONG) == {"batch_ids", "batch_attempts"}


def test_cancel_skips_locked_rows_and_fails_queued_and_running_jobs() -> None:
    """An operator's cancel never waits on a transaction-mode worker's lock."""
    text = sql(statements.CANCEL)
    assert text.startswith(
        "WITH target AS MATERIALIZED (SELECT jobs.id AS id, jobs.status AS status FROM jobs "
        "WHERE jobs.id = any(%(job_ids)s::BIGINT[]) AND jobs.status IN ('queued', 'running') "
        "ORDER BY jobs.id FOR UPDATE SKIP LOCKED)"
    )
    assert (
        "UPDATE jobs SET status='failed', locked_until=NULL, last_error='cancelled', "
        "finished_at=now() FROM target WHERE jobs.id = target.id"
    ) in text
    assert statements.CANCELLED_ERROR == "cancelled"


def test_cancel_returns_was_running_and_notifies_only_running_jobs() -> None:
    """Only a worker holding the job needs waking; a queued job has nobody to tell."""
    text = sql(statements.CANCEL)
    assert "RETURNING jobs.id, target.status = 'running' AS was_running" in text
    assert (
        "CASE WHEN (target.status = 'running') THEN "
        "pg_notify(%(channel)s::VARCHAR, %(notify_payload)s::VARCHAR) END AS notified"
    ) in text
    assert text.count("pg_notify(") == 1  # no ELSE branch notifying the others
    assert bind_names(statements.CANCEL) == {"job_ids", "channel", "notify_payload"}


def test_retry_statements_requeue_with_a_raised_budget_and_keep_attempts() -> None:
    """``attempts`` is the fencing token: a retry raises ``max_attempts``, never resets it."""
    listed = sql(statements.retry_statement())
    every = sql(statements.retry_statement(all_failed=True))
    for text in (listed, every):
        assert (
            "SET status='queued', run_at=now(), max_attempts=least(CAST(jobs.attempts AS BIGINT) "
            "+ %(extra_attempts)s::BIGINT, 2147483647)"
        ) in text  # summed as bigint, held at the largest int: no "integer out of range"
        assert "attempts=0" not in text
        assert "locked_until=NULL, finished_at=NULL FROM candidates" in text
        assert text.endswith("RETURNING jobs.id")
    assert "jobs.status IN ('failed', 'queued')" in listed  # running jobs are left alone
    assert "WHERE jobs.status = 'failed' AND jobs.queue = coalesce(%(queue_name)s" in every
    assert statements.retry_statement() is statements.retry_statement()


# -- the call builders of the batched and operator statements --------------------------------------

HELD = [(5, 2), (3, 1)]


@pytest.mark.parametrize(
    ("build", "stmt", "extra"),
    [
        (lambda h: _calls.complete_many(h), statements.COMPLETE_MANY, {"lock_timeout": None}),
        (
            lambda h: _calls.complete_many(h, 250),
            statements.COMPLETE_MANY,
            {"lock_timeout": "250"},
        ),
        (lambda h: _calls.release_many(h), statements.RELEASE_MANY, {"lock_timeout": None}),
        (
            lambda h: _calls.extend_leases(h, timedelta(seconds=30)),
            statements.EXTEND_LEASE_MANY,
            {"lease": timedelta(seconds=30), "lock_timeout": None},
        ),
        (lambda h: _calls.settled_among(h), statements.SETTLED_AMONG, {}),
    ],
    ids=[
        "complete_many",
        "complete_many_timeout",
        "release_many",
        "extend_leases",
        "settled_among",
    ],
)
def test_batch_calls_pass_parallel_arrays_in_input_order(
    build: Callable[[list[tuple[int, int]]], _calls.Call[Any]],
    stmt: Update | Select[Any],
    extra: dict[str, Any],
) -> None:
    """Each id travels with the attempts it was claimed with, at the same array position."""
    call = build(HELD)
    assert call.statement is stmt
    assert call.params == {"batch_ids": [5, 3], "batch_attempts": [2, 1], **extra}
    assert bind_names(stmt) == set(call.params)


@pytest.mark.parametrize(
    ("build", "empty"),
    [
        (lambda: _calls.complete_many([]), set()),
        (lambda: _calls.release_many([]), set()),
        (lambda: _calls.extend_leases([], timedelta(seconds=30)), set()),
        (lambda: _calls.settled_among([]), {}),
        (lambda: _calls.fail_many([], timedelta(seconds=1), timedelta(seconds=2)), {}),
        (lambda: _calls.cancel([], "pgqueue_jobs"), []),
        (lambda: _calls.retry([], 1), []),
    ],
    ids=[
        "complete_many",
        "release_many",
        "extend_leases",
        "settled_among",
        "fail_many",
        "cancel",
        "retry",
    ],
)
def test_an_empty_batch_runs_no_sql(build: Callable[[], _calls.Call[Any]], empty: object) -> None:
    """``unnest`` of empty arrays would cost a round trip to learn nothing."""
    call = build()
    assert call.statement is None
    assert call.finish(None) == empty


def test_fail_many_call_shares_the_backoff_and_carries_each_failure() -> None:
    """Errors and retry flags line up with their ids; the policy is in seconds."""
    call = _calls.fail_many(
        [(5, 2, "ValueError: a", True), (3, 1, "KeyError: b", False)],
        base=timedelta(seconds=20),
        cap=timedelta(minutes=10),
        lock_timeout_ms=5000,
    )
    assert call.statement is statements.FAIL_MANY
    assert call.params == {
        "lock_timeout": "5000",
        "batch_ids": [5, 3],
        "batch_attempts": [2, 1],
        "batch_errors": ["ValueError: a", "KeyError: b"],
        "batch_retry": [True, False],
        "base_seconds": 20.0,
        "cap_seconds": 600.0,
    }
    assert bind_names(statements.FAIL_MANY) == set(call.params)


def test_cancel_call_takes_any_iterable_of_ids_and_the_notify_channel() -> None:
    """Ids become a list (a generator is read once); running jobs are told on ``channel``."""
    call = _calls.cancel((i for i in (9, 4)), "pgqueue_jobs")
    assert call.statement is statements.CANCEL
    assert call.params == {
        "job_ids": [9, 4],
        "channel": "pgqueue_jobs",
        "notify_payload": CANCEL_HINT,
    }
    assert bind_names(statements.CANCEL) == set(call.params)


@pytest.mark.parametrize("job_ids", ["12", b"12", 12, None])
def test_cancel_rejects_a_string_or_a_non_iterable(job_ids: Any) -> None:
    """``cancel("12")`` would otherwise cancel jobs 1 and 2."""
    with pytest.raises(pgqueue.InvalidArgumentTypeError, match="job_ids"):
        _calls.cancel(job_ids, "pgqueue_jobs")


@pytest.mark.parametrize("bad", ["7", 1.5, True, None])
def test_cancel_and_retry_reject_an_id_that_is_not_an_int(bad: Any) -> None:
    """A bad id fails the whole call before any SQL, naming the argument."""
    with pytest.raises(pgqueue.InvalidArgumentTypeError, match="job_id"):
        _calls.cancel([1, bad], "pgqueue_jobs")
    with pytest.raises(pgqueue.InvalidArgumentTypeError, match="job_id"):
        _calls.retry([1, bad], 1)


def test_retry_call_passes_ids_and_the_extra_attempts() -> None:
    """The listed jobs get ``attempts`` more tries."""
    call = _calls.retry([8, 2], 3)
    assert call.statement is statements.retry_statement()
    assert call.params == {"job_ids": [8, 2], "extra_attempts": 3}
    assert bind_names(statements.retry_statement()) == set(call.params)


@pytest.mark.parametrize("attempts", [0, -1])
def test_retry_calls_reject_a_non_positive_budget(attempts: int) -> None:
    """Zero more attempts would requeue a job that can never run."""
    with pytest.raises(pgqueue.InvalidArgumentError, match="attempts"):
        _calls.retry([1], attempts)
    with pytest.raises(pgqueue.InvalidArgumentError, match="attempts"):
        _calls.retry_failed(None, attempts)


@pytest.mark.parametrize("queue", [None, "emails"])
def test_retry_failed_call_runs_even_without_ids(queue: str | None) -> None:
    """Every failed job (of one queue, or of all: ``NULL``) is found by the statement itself."""
    call = _calls.retry_failed(queue, 2)
    assert call.statement is statements.retry_statement(all_failed=True)
    assert call.params == {"queue_name": queue, "extra_attempts": 2}
    assert bind_names(statements.retry_statement(all_failed=True)) == set(call.params)


def test_retry_failed_call_checks_the_queue_name() -> None:
    """An empty queue name is a mistake, not "every queue" (that is ``None``)."""
    with pytest.raises(pgqueue.InvalidArgumentError, match="queue"):
        _calls.retry_failed("", 1)


def test_unique_enqueue_does_nothing_on_a_live_key_through_the_partial_index() -> None:
    live = "WHERE unique_key IS NOT NULL AND status IN ('queued', 'running')"
    one = sql(statements.ENQUEUE_UNIQUE)
    many = sql(statements.ENQUEUE_MANY_UNIQUE)
    for text in (one, many):
        assert f"ON CONFLICT (queue, unique_key) {live} DO NOTHING" in text
    assert "batch.element -> 0 AS anon_2" in many  # each element is [payload, key]
    assert "batch.element ->> 1 AS anon_6" in many
    assert many.endswith("RETURNING jobs.id, jobs.unique_key")
    holders = sql(statements.KEY_HOLDERS)
    assert "jobs.unique_key = any(%(keys)s::TEXT[]) AND unique_key IS NOT NULL" in holders
    retry = sql(statements.retry_statement())
    assert "(jobs.unique_key IS NULL OR NOT (EXISTS (SELECT holder.id FROM jobs AS holder" in retry
