"""Statements compile to the article's SQL shapes (no database needed)."""

from __future__ import annotations

import re

from sqlalchemy.dialects import postgresql
from sqlalchemy.sql import ClauseElement

from pgqueue import statements

DIALECT = postgresql.psycopg.dialect()  # type: ignore[no-untyped-call]


def sql(stmt: ClauseElement) -> str:
    return re.sub(r"\s+", " ", str(stmt.compile(dialect=DIALECT)))


def test_claim_is_a_materialized_skip_locked_cte_joined_back_by_id() -> None:
    text = sql(statements.claim_statement(10))
    assert text.startswith("WITH next AS MATERIALIZED (SELECT jobs.id AS id FROM jobs WHERE")
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


def test_complete_clears_the_lease() -> None:
    assert "SET status='done', locked_until=NULL" in sql(statements.COMPLETE)


def test_fail_backs_off_and_fails_for_good_after_max_attempts() -> None:
    text = sql(statements.FAIL)
    assert "jobs.attempts < jobs.max_attempts) THEN 'queued' ELSE 'failed'" in text
    assert "least(%(cap_seconds)s, %(base_seconds)s * power(" in text
    assert "jobs.run_at - now() AS retry_in" in text


def test_reaper_only_touches_expired_running_jobs_and_keeps_the_first_error() -> None:
    text = sql(statements.REAP_EXPIRED)
    assert "WHERE jobs.status = 'running' AND jobs.locked_until < now()" in text
    assert "jobs.attempts >= jobs.max_attempts) THEN 'failed' ELSE 'queued'" in text
    assert "last_error=coalesce(jobs.last_error," in text


def test_naive_claim_is_the_unlocked_subquery_of_the_article() -> None:
    text = sql(statements.NAIVE_DOUBLE_CLAIMING_CLAIM)
    assert "WHERE jobs.id = (SELECT jobs.id FROM jobs WHERE jobs.status = 'queued'" in text
    assert "FOR UPDATE" not in text


def test_enqueue_many_is_one_insert_select_over_unnest_in_input_order() -> None:
    text = sql(statements.ENQUEUE_MANY)
    assert text.startswith(
        "INSERT INTO jobs (queue, payload, run_at, max_attempts, headers) SELECT"
    )
    assert "unnest(%(payloads)s::TEXT[]) WITH ORDINALITY" in text
    assert "ORDER BY anon_2.ord RETURNING jobs.id" in text


def test_purge_deletes_one_bounded_batch_of_old_finished_jobs() -> None:
    text = sql(statements.purge_statement())
    assert "DELETE FROM jobs WHERE jobs.id IN (SELECT jobs.id FROM jobs" in text
    assert "jobs.status = 'done' AND jobs.created_at < now() - %(older_than)s" in text
    assert "LIMIT %(batch_size)s" in text
