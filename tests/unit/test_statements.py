"""Statements compile to the article's SQL shapes (no database needed)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from sqlalchemy import Select, Update
from sqlalchemy.dialects import postgresql
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.compiler import SQLCompiler

import pgqueue
from pgqueue import demo, statements
from pgqueue._sql import calls as _calls
from pgqueue._sql import statements as _statements
from pgqueue._sql import workflow_statements
from pgqueue.results import CancelledJob, CancelReport
from pgqueue.retry_policy import MAX_TRACEBACK_LENGTH
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
    # A job past its deadline (expires_in, pgqueue_0015) is failed by the same SET instead.
    expired = (
        "(jobs.expires_in IS NOT NULL AND jobs.attempts = 0 "
        "AND jobs.run_at + jobs.expires_in < now())"
    )
    assert (
        f"UPDATE jobs SET status=CASE WHEN {expired} THEN 'failed' ELSE 'running' END, "
        f"attempts=CASE WHEN {expired} THEN jobs.attempts ELSE jobs.attempts +"
    ) in text
    assert f"locked_until=CASE WHEN {expired} THEN NULL ELSE now() + %(lease)s END" in text
    assert f"expired_at=CASE WHEN {expired} THEN now() END" in text
    assert "FROM next WHERE jobs.id = next.id" in text
    assert "RETURNING jobs.id, jobs.queue, jobs.payload, jobs.attempts" in text


def test_claim_records_who_holds_the_job_and_since_when() -> None:
    """One bound name per worker (the replay keeps one text per queue, size and lease); outside
    a worker the connection's application_name."""
    text = sql(statements.claim_statement(10))
    assert (
        "locked_by=coalesce(%(locked_by)s::VARCHAR, "
        "nullif(current_setting('application_name'), '')), locked_at=now()"
    ) in text
    params = _calls.claim("q", 10, timedelta(seconds=30), "pgqueue-worker:h:1").params
    assert params["locked_by"] == "pgqueue-worker:h:1"
    assert _calls.claim("q", 10, timedelta(seconds=30)).params["locked_by"] is None


def test_claim_limit_is_rendered_inline_at_execution() -> None:
    compiled = statements.claim_statement(7).compile(dialect=DIALECT)
    assert "LIMIT __[POSTCOMPILE_" in compiled.string  # literal_execute: inline, never a $n
    assert statements.claim_statement(7) is statements.claim_statement(7)  # built once per shape


def test_a_claim_from_a_mark_reads_every_level_from_it() -> None:
    """The worker's claim from its queue's low-water mark (pgqueue._worker.low_water): each
    level's range starts at ``since`` (a bound value, the start of an index range), and the ten
    levels are read without the backward probe for the highest one."""
    text = sql(statements.claim_statement(10, since=True))
    assert text.startswith(
        "WITH next AS MATERIALIZED (SELECT ready.id AS id FROM generate_series(9, 0, -1) "
        "AS levels(level) JOIN LATERAL (SELECT jobs.id AS id FROM jobs WHERE"
    )
    assert (
        "jobs.run_at <= now() AND jobs.run_at >= %(since)s::TIMESTAMP WITH TIME ZONE "
        "ORDER BY jobs.run_at"
    ) in text
    assert "max(jobs.priority)" not in text
    assert "since" not in sql(statements.claim_statement(10))
    since = datetime.now(timezone.utc)
    call = _calls.claim("q", 10, timedelta(seconds=30), since=since)
    assert call.statement is statements.claim_statement(10, since=True)
    assert call.params["since"] == since
    assert "since" not in _calls.claim("q", 10, timedelta(seconds=30)).params


def test_the_claim_over_several_queues_reads_each_from_its_own_mark() -> None:
    """Each queue of the JSON array carries its mark or null: a queue with one reads every level
    from it, one without probes for its highest level and reads from -infinity."""
    text = sql(_statements.claim_queues_statement(10))
    assert (
        "json_to_recordset(CAST(%(wanted)s::VARCHAR AS JSON)) AS wanted(queue TEXT, since" in text
    )
    assert "CASE WHEN (wanted.since IS NULL) THEN (SELECT coalesce(max(jobs.priority)" in text
    assert "jobs.run_at >= coalesce(wanted.since, '-infinity'::timestamptz)" in text
    assert "jobs.queue = wanted.queue" in text
    since = datetime(2026, 12, 7, tzinfo=timezone.utc)
    call = _calls.claim_queues(["a", "b"], 10, timedelta(seconds=30), since=[since, None])
    assert json.loads(call.params["wanted"]) == [
        {"queue": "a", "since": "2026-12-07T00:00:00+00:00"},
        {"queue": "b", "since": None},
    ]


def test_serialising_variant_has_no_skip_locked() -> None:
    text = sql(statements.claim_statement(1, skip_locked=False))
    assert "FOR UPDATE)" in text
    assert "SKIP LOCKED" not in text


def test_lifecycle_updates_carry_the_guard() -> None:
    guard = (
        "WHERE jobs.id = %(job_id)s::BIGINT AND jobs.status IS NOT DISTINCT FROM 'running' "
        "AND jobs.attempts = %(claimed_attempts)s::INTEGER"
    )
    for stmt in (statements.COMPLETE, statements.FAIL, statements.EXTEND_LEASE, statements.SNOOZE):
        assert guard in sql(stmt)


def test_complete_clears_the_lease_and_sets_finished_at() -> None:
    assert "SET status='done', locked_until=NULL, finished_at=now()" in sql(statements.COMPLETE)


def test_fail_backs_off_and_fails_for_good_after_max_attempts() -> None:
    text = sql(statements.FAIL)
    assert "jobs.attempts < jobs.max_attempts) THEN 'queued' ELSE 'failed'" in text
    assert "least(%(cap_seconds)s, %(base_seconds)s * power(" in text
    assert "jobs.run_at - now() AS retry_in" in text
    # Only a retry moves run_at; a failure for good keeps when its last attempt was due.
    assert (
        "run_at=CASE WHEN (%(retry)s AND jobs.attempts < jobs.max_attempts) THEN now() + least("
    ) in text
    assert "* interval '1 second' ELSE jobs.run_at END" in text
    # finished only when it fails for good, in the same UPDATE: the same test as the status'.
    assert (
        "finished_at=CASE WHEN (%(retry)s AND jobs.attempts < jobs.max_attempts) THEN NULL "
        "ELSE now() END"
    ) in text


#: The history a failed attempt appends to (item 12): ``{attempt, at, error, traceback}``.
HISTORY = (
    "errors=jsonb_path_query_array(coalesce(jobs.errors, '[]'::jsonb) || "
    "jsonb_build_array(jsonb_build_object('attempt', jobs.attempts, 'at', now(), "
    "'error', {error}, 'traceback', {traceback})), '$[last - 9 to last]')"
)


def test_fail_appends_the_attempt_to_the_error_history_in_the_same_update() -> None:
    """One statement records the failure and its history entry, with the database's clock; the
    slice keeps the last MAX_ERRORS_KEPT entries."""
    text = sql(statements.FAIL)
    assert "last_error=%(error)s::VARCHAR" in text
    assert HISTORY.format(error="%(error)s::VARCHAR", traceback="%(traceback)s::VARCHAR") in text
    assert statements.MAX_ERRORS_KEPT == 10
    assert bind_names(statements.FAIL) == {
        "job_id",
        "claimed_attempts",
        "error",
        "traceback",
        "retry",
        "base_seconds",
        "cap_seconds",
    }


def test_reaper_appends_a_lease_expired_entry_without_a_traceback() -> None:
    text = sql(statements.REAP_EXPIRED)
    assert HISTORY.format(error="'lease expired'", traceback="NULL") in text


def test_reaper_only_touches_expired_running_jobs_and_keeps_the_first_error() -> None:
    text = sql(statements.REAP_EXPIRED)
    assert "WHERE jobs.status = 'running' AND jobs.locked_until < now()" in text
    assert "jobs.attempts >= jobs.max_attempts) THEN 'failed' ELSE 'queued'" in text
    assert "last_error=coalesce(jobs.last_error," in text
    assert "finished_at=CASE WHEN (jobs.attempts >= jobs.max_attempts) THEN now() END" in text


def test_naive_claim_is_the_unlocked_subquery_of_the_article() -> None:
    text = sql(demo.NAIVE_DOUBLE_CLAIMING_CLAIM)
    assert "WHERE jobs.id = (SELECT jobs.id FROM jobs WHERE jobs.status = 'queued'" in text
    assert "FOR UPDATE" not in text


def test_enqueue_many_is_one_insert_select_over_one_json_array_in_input_order() -> None:
    text = sql(statements.ENQUEUE_MANY)
    assert text.startswith(
        "INSERT INTO jobs (queue, payload, run_at, max_attempts, headers, priority, task, "
        "timeout, expires_in) SELECT"
    )
    assert "ON CONFLICT" not in text  # jobs without a key pay nothing for the unique index
    assert (
        "FROM jsonb_array_elements(CAST(%(batch_json)s::VARCHAR AS JSONB)) WITH ORDINALITY AS "
        "batch(element, ord) ORDER BY batch.ord RETURNING jobs.id"
    ) in text


@pytest.mark.parametrize(
    "name", ["ENQUEUE", "ENQUEUE_UNIQUE", "ENQUEUE_MANY", "ENQUEUE_MANY_UNIQUE"]
)
def test_every_insert_writes_the_task_name_null_unless_given(name: str) -> None:
    """``jobs.task`` on every enqueue path (#22): a task's name, else the parameter's NULL."""
    stmt = getattr(statements, name)
    assert "%(task_name)s" in sql(stmt)
    bound = stmt.compile(dialect=postgresql.dialect()).binds["task_name"]
    assert (bound.value, bound.required) == (None, False)


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
    "SNOOZE_MANY": statements.SNOOZE_MANY,
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
    [
        *BATCHED.values(),
        statements.SETTLED_AMONG,
        statements.CANCEL,
        statements.LIVE_AMONG,
    ],
    ids=[*BATCHED, "SETTLED_AMONG", "CANCEL", "LIVE_AMONG"],
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
        "%(batch_errors)s::TEXT[], %(batch_retry)s::BOOLEAN[], %(batch_tracebacks)s::TEXT[]) "
        "AS batch(id, attempts, error, retry, traceback)"
    ) in text
    assert HISTORY.format(error="mine.error", traceback="mine.traceback") in text
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
        "batch_tracebacks",
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


#: A snooze's SET clause, single or batched: back to queued after the delay, one more attempt
#: allowed, one more snooze counted; ``attempts``, ``last_error`` and ``finished_at`` untouched.
SNOOZE_SET = (
    "SET status='queued', run_at=(now() + {delay} * interval '1 second'), "
    "max_attempts=(jobs.max_attempts + %(max_attempts_1)s::INTEGER), locked_until=NULL, "
    "snoozes=(jobs.snoozes + %(snoozes_1)s::INTEGER)"
)


@pytest.mark.parametrize(
    ("stmt", "delay", "binds"),
    [
        (statements.SNOOZE, "%(delay_seconds)s", {"job_id", "claimed_attempts", "delay_seconds"}),
        (
            statements.SNOOZE_MANY,
            "mine.delay",
            {"batch_ids", "batch_attempts", "batch_delays", "lock_timeout"},
        ),
    ],
    ids=["SNOOZE", "SNOOZE_MANY"],
)
def test_snooze_requeues_after_the_delay_and_raises_the_budget_not_the_attempts(
    stmt: Update, delay: str, binds: set[str]
) -> None:
    """``attempts`` stays monotonic (the guard stays unique to one claim): the snoozed run is
    paid back by ``max_attempts + 1`` instead."""
    text = sql(stmt)
    assert SNOOZE_SET.format(delay=delay) in text
    for untouched in ("attempts=", "last_error", "finished_at"):
        assert f" {untouched}" not in text.split(" SET ", 1)[1].split(" WHERE ", 1)[0]
    assert text.endswith("RETURNING jobs.id")
    assert bind_names(stmt) == binds
    params = stmt.compile(dialect=DIALECT).params
    assert (params["max_attempts_1"], params["snoozes_1"]) == (1, 1)


def test_snooze_many_brings_each_job_its_delay() -> None:
    text = sql(statements.SNOOZE_MANY)
    assert (
        "unnest(%(batch_ids)s::BIGINT[], %(batch_attempts)s::INTEGER[], %(batch_delays)s::FLOAT[]) "
        "AS batch(id, attempts, delay)"
    ) in text


def test_settled_among_reads_done_or_cancelled_rows_of_the_same_attempt() -> None:
    """The heartbeat's second look: a read, no lock, only rows of the claim it held."""
    text = sql(statements.SETTLED_AMONG)
    assert text.startswith(
        "SELECT jobs.id, jobs.cancelled_at IS NOT NULL AS cancelled FROM jobs"
    )  # the column, never the text of last_error (a handler may fail with 'cancelled')
    assert "JOIN unnest(%(batch_ids)s::BIGINT[], %(batch_attempts)s::INTEGER[])" in text
    assert "ON jobs.id = batch.id AND jobs.attempts = batch.attempts" in text
    assert text.endswith(
        "WHERE jobs.status = 'done' OR jobs.status = 'failed' AND jobs.cancelled_at IS NOT NULL"
    )  # AND binds tighter: done, or failed by a cancel
    assert "last_error" not in text
    assert "FOR UPDATE" not in text
    assert bind_names(statements.SETTLED_AMONG) == {"batch_ids", "batch_attempts"}


def test_cancel_waits_bounded_in_id_order_and_marks_the_job_cancelled() -> None:
    """The cancel waits for row locks (plain FOR UPDATE, in id order like the worker's batched
    statements), at most ``lock_timeout``, set in a one-time filter before its first row lock; it
    marks the job cancelled by a column."""
    text = sql(statements.CANCEL)
    assert text.startswith(
        "WITH target AS MATERIALIZED (SELECT jobs.id AS id, jobs.status AS status FROM jobs "
        "WHERE jobs.id = any(%(job_ids)s::BIGINT[]) AND jobs.status IN ('queued', 'running') "
        "AND (SELECT set_config('lock_timeout', coalesce(%(lock_timeout)s::VARCHAR, "
        "current_setting('lock_timeout')), true) AS set_config_1) IS NOT NULL "
        "ORDER BY jobs.id FOR UPDATE)"
    )
    assert "SKIP LOCKED" not in text
    assert (
        "UPDATE jobs SET status='failed', locked_until=NULL, last_error='cancelled', "
        "finished_at=now(), cancelled_at=now() FROM target WHERE jobs.id = target.id"
    ) in text
    assert statements.CANCELLED_ERROR == "cancelled"


def test_live_among_and_current_lock_timeout_only_read() -> None:
    assert sql(statements.LIVE_AMONG) == (
        "SELECT jobs.id FROM jobs WHERE jobs.id = any(%(job_ids)s::BIGINT[]) "
        "AND jobs.status IN ('queued', 'running') ORDER BY jobs.id"
    )
    assert sql(statements.CURRENT_LOCK_TIMEOUT) == (
        "SELECT current_setting('lock_timeout') AS current_setting_1"
    )


def test_cancel_returns_was_running_and_notifies_only_running_jobs() -> None:
    """Only a worker holding the job needs waking; a queued job has nobody to tell."""
    text = sql(statements.CANCEL)
    assert "RETURNING jobs.id, target.status = 'running' AS was_running" in text
    assert (
        "CASE WHEN (target.status = 'running') THEN "
        "pg_notify(%(channel)s::VARCHAR, %(notify_payload)s::VARCHAR) END AS notified"
    ) in text
    assert text.count("pg_notify(") == 1  # no ELSE branch notifying the others
    assert bind_names(statements.CANCEL) == {
        "job_ids",
        "lock_timeout",
        "channel",
        "notify_payload",
    }


def test_retry_statements_requeue_with_a_raised_budget_and_keep_attempts() -> None:
    """``attempts`` is the fencing token: a retry raises ``max_attempts``, never resets it."""
    listed = sql(statements.retry_statement())
    every = sql(statements.retry_statement(all_failed=True))
    with_cancelled = sql(statements.retry_statement(all_failed=True, include_cancelled=True))
    for text in (listed, every, with_cancelled):
        assert (
            "SET status='queued', run_at=now(), max_attempts=least(CAST(jobs.attempts AS BIGINT) "
            "+ %(extra_attempts)s::BIGINT, 2147483647)"
        ) in text  # summed as bigint, held at the largest int: no "integer out of range"
        assert "attempts=0" not in text
        assert (
            "locked_until=NULL, finished_at=NULL, cancelled_at=NULL, expired_at=NULL FROM "
            "candidates"
        ) in text
        assert text.endswith("RETURNING jobs.id")
    assert "jobs.status IN ('failed', 'queued')" in listed  # running jobs are left alone
    assert "cancelled_at IS NULL" not in listed  # a cancelled job named by id comes back
    assert "WHERE jobs.status = 'failed' AND jobs.queue = coalesce(%(queue_name)s" in every
    assert every.count("jobs.cancelled_at IS NULL") == 2  # the candidates and the update
    assert "cancelled_at IS NULL" not in with_cancelled
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
        (lambda: next(_calls.retry([], 1)), []),
        (lambda: next(_calls.unblock([])), []),
        (lambda: _calls.snooze_many([]), set()),
    ],
    ids=[
        "complete_many",
        "release_many",
        "extend_leases",
        "settled_among",
        "fail_many",
        "retry",
        "unblock",
        "snooze_many",
    ],
)
def test_an_empty_batch_runs_no_sql(build: Callable[[], _calls.Call[Any]], empty: object) -> None:
    """``unnest`` of empty arrays would cost a round trip to learn nothing."""
    call = build()
    assert call.statement is None
    assert call.finish(None) == empty


def test_snooze_many_call_carries_each_delay_in_seconds() -> None:
    call = _calls.snooze_many(
        [(5, 2, timedelta(seconds=30)), (3, 1, timedelta(0))], lock_timeout_ms=250
    )
    assert call.statement is statements.SNOOZE_MANY
    assert call.params == {
        "lock_timeout": "250",
        "batch_ids": [5, 3],
        "batch_attempts": [2, 1],
        "batch_delays": [30.0, 0.0],
    }
    assert bind_names(statements.SNOOZE_MANY) == set(call.params)


def test_snooze_call_checks_the_delay_before_any_sql() -> None:
    call = _calls.snooze(7, 2, timedelta(minutes=1))
    assert call.params == {"delay_seconds": 60.0, "job_id": 7, "claimed_attempts": 2}
    assert _calls.snooze(7, 2, 1.5).params["delay_seconds"] == 1.5
    with pytest.raises(pgqueue.InvalidArgumentError, match="delay"):
        _calls.snooze(7, 2, -1)


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
        "batch_tracebacks": [None, None],
        "base_seconds": 20.0,
        "cap_seconds": 600.0,
    }
    assert bind_names(statements.FAIL_MANY) == set(call.params)


def _finish(plan: Any, value: Any) -> Any:
    with pytest.raises(StopIteration) as stopped:
        plan.send(value)
    return stopped.value.value


def test_fail_many_call_carries_each_traceback_trimmed_to_the_bound() -> None:
    """The worker's 5-tuples bring a traceback (or None), at the same position as their id."""
    huge = "x" * (MAX_TRACEBACK_LENGTH * 3)
    call = _calls.fail_many(
        [
            (5, 2, "ValueError: a", True, "Traceback ...\nValueError: a"),
            (3, 1, "b", True, None),
            (4, 1, "c", True, huge),
            (6, 1, "d", True),
        ],
        base=timedelta(seconds=20),
        cap=timedelta(minutes=10),
    )
    tracebacks = call.params["batch_tracebacks"]
    assert tracebacks[:2] == ["Traceback ...\nValueError: a", None]
    assert len(tracebacks[2]) <= MAX_TRACEBACK_LENGTH
    assert tracebacks[2].endswith("x" * 1000)
    assert tracebacks[3] is None


def test_fail_call_binds_the_traceback_trimmed_and_refuses_a_non_text_one() -> None:
    """``pgqueue.fail(..., traceback=...)``: text or None, kept to its end; nothing else."""
    args = (7, 1, "KeyError: 'email'", True, timedelta(seconds=1), timedelta(seconds=2))
    assert _calls.fail(*args).params["traceback"] is None
    assert _calls.fail(*args, "Traceback\nKeyError").params["traceback"] == "Traceback\nKeyError"
    trimmed = _calls.fail(*args, "line\n" * 10_000).params["traceback"]
    assert len(trimmed) <= MAX_TRACEBACK_LENGTH
    assert trimmed.startswith("[... ")
    with pytest.raises(pgqueue.InvalidArgumentTypeError, match="traceback: expected a str"):
        _calls.fail(*args, 42)  # type: ignore[arg-type]


def test_cancel_call_takes_any_iterable_of_ids_and_the_notify_channel() -> None:
    """Ids become a list (a generator is read once); running jobs are told on ``channel``; the
    caller's lock_timeout is read first and put back last."""
    plan = _calls.cancel((i for i in (9, 4)), "pgqueue_jobs")
    assert next(plan).statement is statements.CURRENT_LOCK_TIMEOUT
    call = plan.send("3s")
    assert call.statement is statements.CANCEL
    assert call.on_lock_refused is not None
    assert call.params == {
        "job_ids": [9, 4],
        "channel": "pgqueue_jobs",
        "notify_payload": CANCEL_HINT,
        "lock_timeout": str(_calls.CANCEL_LOCK_TIMEOUT_MS),
    }
    assert bind_names(statements.CANCEL) == set(call.params)
    took = [CancelledJob(4, False), CancelledJob(9, True)]
    restore = plan.send(took)
    assert restore.statement is statements.SET_LOCAL_LOCK_TIMEOUT
    assert restore.params == {"lock_timeout": "3s"}
    # Then the jobs that waited for the cancelled ones (depends_on), cancelled with them.
    dependents = plan.send(None)
    assert dependents.statement is workflow_statements.CANCELLED_DEPENDENTS
    assert dependents.params == {"job_ids": [4, 9]}
    assert _finish(plan, [12]) == CancelReport(took, [], [12])


def test_cancel_of_no_id_runs_no_sql() -> None:
    plan = _calls.cancel([], "pgqueue_jobs")
    call = next(plan)
    assert call.statement is None
    assert _finish(plan, call.finish(None)) == CancelReport([], [])


def test_cancel_goes_one_id_at_a_time_once_a_row_is_held_for_long() -> None:
    """The whole batch refused: each id still queued or running gets a savepoint of its own, in
    id order; a refused one is skipped, never the others."""
    plan = _calls.cancel([7, 3, 5, 11], "pgqueue_jobs")
    next(plan)
    whole = plan.send("0")
    assert whole.on_lock_refused is not None
    assert whole.on_lock_refused() is None
    lookup = plan.send(whole.on_lock_refused())
    assert lookup.statement is statements.LIVE_AMONG
    assert lookup.params == {"job_ids": [7, 3, 5, 11]}
    first = plan.send([3, 5, 7])  # 11: unknown or finished
    assert (first.statement, first.params["job_ids"]) == (statements.CANCEL, [3])
    assert first.params["lock_timeout"] == str(_calls.CANCEL_LOCK_TIMEOUT_MS)
    second = plan.send([CancelledJob(3, False)])
    assert second.params["job_ids"] == [5]
    assert second.on_lock_refused is not None
    third = plan.send(second.on_lock_refused())  # 5 stayed locked
    assert third.params["job_ids"] == [7]
    restore = plan.send([CancelledJob(7, True)])
    assert restore.params == {"lock_timeout": "0"}
    dependents = plan.send(None)
    assert dependents.params == {"job_ids": [3, 7]}
    report = _finish(plan, [])
    assert report == CancelReport([CancelledJob(3, False), CancelledJob(7, True)], [5])


def test_cancel_lock_timeout_is_bounded_and_at_least_200_ms() -> None:
    assert 200 <= _calls.CANCEL_LOCK_TIMEOUT_MS <= 1000
    assert pgqueue.repository.CANCEL_LOCK_TIMEOUT_MS == _calls.CANCEL_LOCK_TIMEOUT_MS


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
    """The listed jobs get ``attempts`` more tries, once none of them waits for a dependency."""
    plan = _calls.retry([8, 2], 3)
    first = next(plan)
    assert first.statement is workflow_statements.WAITING_AMONG
    assert first.params == {"job_ids": [8, 2]}
    assert bind_names(workflow_statements.WAITING_AMONG) == set(first.params)
    call = plan.send({})
    assert call.statement is statements.retry_statement()
    assert call.params == {"job_ids": [8, 2], "extra_attempts": 3}
    assert bind_names(statements.retry_statement()) == set(call.params)
    assert _finish(plan, [2, 8]) == [2, 8]


def test_a_retry_naming_a_waiting_job_raises_before_it_writes() -> None:
    """What the first statement found waiting is the error; the retry statement never comes."""
    plan = _calls.retry([8, 2, 5], 3)
    next(plan)
    with pytest.raises(pgqueue.JobWaitingError) as raised:
        plan.send({2: [1], 5: []})
    assert raised.value.waiting == {2: [1], 5: []}
    said = str(raised.value)
    assert "job 2 waits for job 1 (depends_on): it runs once it is done" in said
    assert "job 5 waits for a dependency that no longer exists" in said
    assert "`pgqueue unblock 5` frees it" in said
    assert said.endswith("nothing was retried (cancel them: `pgqueue cancel 2 5`)")


def test_unblock_locks_the_waiting_jobs_then_counts_again_in_a_statement_of_its_own() -> None:
    """Two statements: the count must be read in a snapshot taken after the rows are locked."""
    plan = _calls.unblock([9, 4])
    lock = next(plan)
    assert lock.statement is workflow_statements.LOCK_WAITING
    assert lock.params == {"job_ids": [9, 4]}
    assert "FOR UPDATE" in sql(workflow_statements.LOCK_WAITING)
    recount = plan.send([4])
    assert recount.statement is workflow_statements.UNBLOCK
    assert recount.params == {"job_ids": [4]}
    assert bind_names(workflow_statements.UNBLOCK) == set(recount.params)
    assert _finish(plan, [4]) == [4]
    nothing_waits = _calls.unblock([9])
    next(nothing_waits)
    assert _finish(nothing_waits, []) == []  # no second statement
    with pytest.raises(pgqueue.InvalidArgumentTypeError, match="job_ids"):
        _calls.unblock("9")


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
    call = next(_calls.retry_failed(queue, 2))
    assert call.statement is statements.retry_statement(all_failed=True)
    assert call.params == {"queue_name": queue, "extra_attempts": 2}
    assert bind_names(statements.retry_statement(all_failed=True)) == set(call.params)


def test_retry_failed_call_checks_the_queue_name() -> None:
    """An empty queue name is a mistake, not "every queue" (that is ``None``)."""
    with pytest.raises(pgqueue.InvalidArgumentError, match="queue"):
        _calls.retry_failed("", 1)
    with pytest.raises(pgqueue.InvalidArgumentTypeError, match="reset_steps"):
        _calls.retry_failed(None, 1, reset_steps="yes")  # type: ignore[arg-type]


def test_unique_enqueue_does_nothing_on_a_live_key_through_the_partial_index() -> None:
    live = "WHERE unique_key IS NOT NULL AND status IN ('queued', 'running')"
    one = sql(statements.ENQUEUE_UNIQUE)
    many = sql(statements.ENQUEUE_MANY_UNIQUE)
    for text in (one, many):
        assert f"ON CONFLICT (queue, unique_key) {live} DO NOTHING" in text
    assert "batch.element -> 0 AS anon_2" in many  # each element is [payload, key]
    assert "batch.element ->> 1 AS anon_9" in many
    assert many.endswith("RETURNING jobs.id, jobs.unique_key")
    holders = sql(statements.KEY_HOLDERS)
    assert "jobs.unique_key = any(%(keys)s::TEXT[]) AND unique_key IS NOT NULL" in holders
    retry = sql(statements.retry_statement())
    assert "(jobs.unique_key IS NULL OR NOT (EXISTS (SELECT holder.id FROM jobs AS holder" in retry


def test_a_workers_row_is_upserted_by_name_and_deleted_only_by_the_run_that_wrote_it() -> None:
    upsert = sql(statements.REGISTER_WORKER)
    assert upsert.startswith("INSERT INTO jobs_workers (name, host, pid, queues, started_at)")
    assert "ON CONFLICT (name) DO UPDATE SET host = %(host)s" in upsert
    assert "started_at = now() RETURNING jobs_workers.started_at" in upsert
    delete = sql(statements.UNREGISTER_WORKER)
    assert delete.startswith(
        "DELETE FROM jobs_workers WHERE jobs_workers.name = %(worker_name)s::VARCHAR "
        "AND jobs_workers.started_at = %(started_at)s::TIMESTAMP WITH TIME ZONE AND "
    )
    # Neither waits for the disk to commit (a courtesy row, on the critical path of run()).
    for statement in (statements.REGISTER_WORKER, statements.UNREGISTER_WORKER):
        assert sql(statement).count("(SELECT set_config(") == 1
        params = statement.compile(dialect=DIALECT).params
        assert {
            "param_1": "synchronous_commit",
            "param_2": "off",
            "set_config_2": True,
        }.items() <= (params.items())
