"""The claimer's flow bookkeeping (:mod:`pgqueue._worker.flow`) and the limited claim's shape."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy.dialects import postgresql

from pgqueue._sql.limited_claim import ClaimState, limited_claim_statement
from pgqueue._worker.flow import LIMIT_POLL, FlowGate
from pgqueue.flow import QueueSettings, Rate
from pgqueue.statements import claim_statement

LIMITED = QueueSettings("a", concurrency=4)


def test_a_paused_queue_is_not_claimable_until_resumed() -> None:
    gate = FlowGate()
    assert gate.update({"a": QueueSettings("a", paused=True)}) == []
    assert not gate.claimable("a")
    assert gate.claimable("b")  # no row: unpaused, unlimited
    assert gate.update({}) == ["a"]  # resumed (its row gone): worth a claim now
    assert gate.claimable("a")
    assert gate.settings("a") == QueueSettings("a")


def test_a_queue_at_its_limit_waits_for_a_finished_job_or_the_short_poll() -> None:
    gate = FlowGate()
    gate.update({"a": LIMITED})
    assert gate.claimed("a", ClaimState(LIMITED, at_limit=True), now=10.0, finished=3)
    assert not gate.claimable("a")
    assert list(gate.unpark(now=10.1, finished=3)) == []
    assert gate.next_unpark() == 10.0 + LIMIT_POLL
    assert list(gate.unpark(now=10.1, finished=4)) == ["a"]  # one of ours finished
    assert gate.claimable("a")
    gate.claimed("a", ClaimState(LIMITED, at_limit=True), now=20.0, finished=4)
    assert list(gate.unpark(now=20.0 + LIMIT_POLL, finished=4)) == ["a"]


def test_a_queue_at_its_limit_or_the_prefetch_bound_is_claimed_by_its_completions() -> None:
    """Parked for a finish, at the limit (``running`` reached ``concurrency``) or short at the
    prefetch bound: the completer's flush carries the claim. Not a spent rate window (a finish
    frees nothing there), nor a queue not parked."""
    gate = FlowGate()
    gate.update({"a": LIMITED, "b": LIMITED})
    assert not gate.parked("a")
    gate.claimed("a", ClaimState(LIMITED, at_limit=True, ready=True), now=0.0, finished=0)
    assert gate.parked("a")
    rate = QueueSettings("b", concurrency=4, rate=Rate(10, timedelta(seconds=1)))
    gate.claimed("b", ClaimState(rate, at_limit=True, wait=0.5), now=0.0, finished=0)
    assert not gate.parked("b")


def test_a_spent_rate_window_waits_for_its_end_whatever_finishes() -> None:
    gate = FlowGate()
    rate = QueueSettings("a", rate=Rate(10, timedelta(seconds=1)))
    gate.claimed("a", ClaimState(rate, at_limit=True, wait=0.7), now=5.0, finished=0)
    assert list(gate.unpark(now=5.5, finished=9)) == []
    assert list(gate.unpark(now=5.7, finished=9)) == ["a"]


def test_a_short_claim_not_at_a_limit_parks_nothing() -> None:
    gate = FlowGate()
    assert not gate.claimed("a", ClaimState(LIMITED, at_limit=False), now=0.0, finished=0)
    assert gate.claimable("a")
    assert not gate.any_parked()


def test_a_change_of_limits_unparks_the_queue() -> None:
    gate = FlowGate()
    gate.update({"a": LIMITED})
    gate.claimed("a", ClaimState(LIMITED, at_limit=True), now=0.0, finished=0)
    assert gate.update({"a": QueueSettings("a", concurrency=8)}) == ["a"]
    assert gate.claimable("a")


def _sql(statement: object) -> str:
    return str(statement.compile(dialect=postgresql.dialect()))  # type: ignore[attr-defined]


def test_the_unlimited_claim_never_reads_the_settings_table() -> None:
    assert "jobs_queues" not in _sql(claim_statement(100))


def test_the_limited_claim_counts_and_claims_in_one_statement() -> None:
    for per_key in (False, True):
        sql = _sql(limited_claim_statement(100, per_key=per_key))
        assert "FOR UPDATE SKIP LOCKED" in sql
        assert "UPDATE jobs SET status=CASE WHEN" in sql  # running, or failed when expired
        assert "THEN 'failed' ELSE 'running' END" in sql
        assert "UPDATE jobs_queues SET window_start" in sql  # the rate window, same statement
        # per_key: the keys and their first jobs by a loose scan, then each key's first ready
        # jobs where it has room for more (or its first is not due); no ranking of
        # the whole backlog.
        assert ("ready_keys(value, id, priority, run_at) AS" in sql) is per_key
        assert "row_number()" not in sql
