"""The durable jobs' statements (#33), compiled: every write of a running job is guarded by the
attempt, a signal locks the row before it reads what it ends, and the status literals stay
inline (a partial index's predicate is matched)."""

from __future__ import annotations

import pytest
from sqlalchemy.dialects import postgresql

import pgqueue
from pgqueue._sql import durable_calls, durable_statements


def _sql(statement: object) -> str:
    return " ".join(str(statement.compile(dialect=postgresql.dialect())).split())  # type: ignore[attr-defined]


GUARD = (
    "jobs.id = %(job_id)s::BIGINT AND jobs.status IS NOT DISTINCT FROM 'running' "
    "AND jobs.attempts = %(claimed_attempts)s::INTEGER"
)


def test_the_attempts_reads_and_writes_are_guarded() -> None:
    assert _sql(durable_statements.DURABLE_STATE).endswith(f"WHERE {GUARD}")
    assert f"WHERE {GUARD} RETURNING" in _sql(durable_statements.RECORD_STEP)


def test_the_give_back_is_guarded_and_locks_in_id_order() -> None:
    sql = _sql(durable_statements.SUSPEND_MANY)
    assert "ORDER BY jobs.id FOR UPDATE OF jobs" in sql
    assert "jobs.status IS NOT DISTINCT FROM 'running' AND jobs.attempts = mine.attempts" in sql
    # The signal that arrived while the handler ran makes it ready at once.
    assert "jobs.signals ? mine.signal" in sql


def test_a_signal_reads_the_wait_it_ends_from_the_locked_row() -> None:
    sql = _sql(durable_statements.SIGNAL)
    assert sql.startswith("WITH target AS MATERIALIZED (SELECT")
    assert "jobs.status IN ('queued', 'running') FOR UPDATE)" in sql
    assert "pg_notify(%(channel)s::VARCHAR, jobs.queue)" in sql


def test_signal_checks_its_arguments_before_any_sql() -> None:
    with pytest.raises(pgqueue.InvalidArgumentError, match="name"):
        durable_calls.signal(1, "", None, "jobs")
    with pytest.raises(pgqueue.InvalidArgumentError, match="name"):
        durable_calls.signal(1, "x" * 64, None, "jobs")
    with pytest.raises(pgqueue.InvalidPayloadError):
        durable_calls.signal(1, "go", float("nan"), "jobs")
    call = durable_calls.signal(7, "go", {"a": 1}, "jobs")
    assert call.params == {
        "job_id": 7,
        "signal_name": "go",
        "payload_json": '{"a":1}',
        "channel": "jobs",
    }


def test_a_step_entry_splices_the_checked_value() -> None:
    call = durable_calls.record_step(1, 2, "s", {"kind": "step", "n": 1}, None, "[1,2]")
    assert call.params["entry_json"] == '{"kind":"step","n":1,"value":[1,2]}'
    assert durable_calls.record_step(1, 2, "s", {}, None, "3").params["entry_json"] == (
        '{"value":3}'
    )
