"""The doctor's decisions on given values, besides the real states staged in tests/cli.

``pg_stat_user_tables.last_autovacuum`` cannot be set back in time, so a stale vacuum is decided
only here; the never-vacuumed and recent vacuum states, and the backlog's, also run for real.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from pgqueue.doctor import (
    AUTOVACUUM_STALE,
    DEAD_TUPLES_MIN,
    Finding,
    backlog_findings,
    dependency_findings,
    vacuum_finding,
)

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)


def _stats(live: int, dead: int, auto: datetime | None, manual: datetime | None) -> dict[str, Any]:
    return {
        "n_live_tup": live,
        "n_dead_tup": dead,
        "last_autovacuum": auto,
        "last_vacuum": manual,
        "last_autoanalyze": None,
    }


@pytest.mark.parametrize(
    ("live", "dead"),
    [(0, DEAD_TUPLES_MIN - 1), (100_000, 20_000), (0, 0), (None, None)],
    ids=["few-dead", "ratio-at-most-20%", "empty", "no-stats-yet"],
)
def test_few_dead_tuples_are_ok_whatever_the_last_vacuum(live: Any, dead: Any) -> None:
    finding = vacuum_finding(_stats(live, dead, None, None), NOW)
    assert finding.severity == "ok"
    assert finding.fix == ""


def test_never_vacuumed() -> None:
    finding = vacuum_finding(_stats(0, 5_000, None, None), NOW)
    assert finding.severity == "warning"
    assert "last autovacuum never, last vacuum never" in finding.message
    assert finding.fix.startswith("VACUUM jobs;")
    assert "never vacuumed" in finding.fix


def test_stale_autovacuum_says_tune_it() -> None:
    two_hours_ago = NOW - timedelta(hours=2)
    finding = vacuum_finding(_stats(1_000, 5_000, two_hours_ago, None), NOW)
    assert finding.severity == "warning"
    assert "autovacuum_vacuum_scale_factor" in finding.fix
    assert "long transactions" in finding.fix


def test_recent_vacuum_points_at_the_snapshot() -> None:
    finding = vacuum_finding(_stats(1_000, 5_000, None, NOW - timedelta(minutes=5)), NOW)
    assert finding.severity == "warning"
    assert "old snapshot" in finding.fix


def test_the_later_of_manual_and_auto_vacuum_decides() -> None:
    old, recent = NOW - 2 * AUTOVACUUM_STALE, NOW - AUTOVACUUM_STALE / 2
    assert "old snapshot" in vacuum_finding(_stats(0, 5_000, old, recent), NOW).fix
    assert "old snapshot" in vacuum_finding(_stats(0, 5_000, recent, old), NOW).fix
    assert "scale_factor" in vacuum_finding(_stats(0, 5_000, old, old), NOW).fix


def test_autovacuum_off_is_named_with_its_fix() -> None:
    server = vacuum_finding(_stats(0, 5_000, None, None), NOW, server_autovacuum=False)
    assert "autovacuum is off on this server" in server.message
    assert server.fix.startswith("turn autovacuum on")
    table = vacuum_finding(_stats(0, 5_000, None, None), NOW, table_autovacuum=False)
    assert "autovacuum is off for jobs" in table.message
    assert table.fix.startswith("ALTER TABLE jobs RESET (autovacuum_enabled);")
    healthy = vacuum_finding(_stats(0, 10, None, None), NOW, server_autovacuum=False)
    assert healthy.severity == "ok"
    assert "autovacuum is off on this server" in healthy.message


# -- backlog -------------------------------------------------------------------------------------

FIVE_MINUTES = timedelta(minutes=5)


def _backlog(ready: list[tuple[str, float]], workers: int) -> list[Finding]:
    rows = [{"queue": q, "oldest_ready_s": age} for q, age in ready]
    return list(backlog_findings(rows, workers, FIVE_MINUTES))


def test_no_ready_job_is_ok_with_or_without_workers() -> None:
    for workers in (0, 3):
        (finding,) = _backlog([], workers)
        assert (finding.severity, finding.message) == ("ok", "no ready job waiting")


def test_ready_jobs_without_a_worker_warn_however_fresh() -> None:
    (finding,) = _backlog([("emails", 0.5)], 0)
    assert finding.severity == "warning"
    assert "no pgqueue worker is connected" in finding.message


def test_a_wait_past_the_threshold_warns_with_workers_connected() -> None:
    (finding,) = _backlog([("reports", 7200.0), ("emails", 299.0)], 2)
    assert finding.severity == "warning"
    assert "longer than 300 s in 1 queue(s): reports 7200 s; 2 worker" in finding.message
    assert finding.details == [{"queue": "reports", "oldest_ready_s": 7200.0}]


def test_waits_under_the_threshold_are_ok() -> None:
    (finding,) = _backlog([("emails", 300.0)], 1)
    assert finding.severity == "ok"
    assert "emails 300 s (under 300 s)" in finding.message


def test_many_queues_are_listed_five_at_a_time() -> None:
    (finding,) = _backlog([(f"q{i}", 10.0) for i in range(8)], 0)
    assert "q4 10 s (+3 more)" in finding.message
    assert len(finding.details) == 8


def _missing(ids: list[int], total: int | None = None) -> list[dict[str, Any]]:
    """Rows of waiting jobs each missing one of two dependencies, as the check reads them."""
    return [
        {"id": i, "queue": "steps", "waiting_on": 2, "found": 1, "total": total or len(ids)}
        for i in ids
    ]


def test_waiting_jobs_whose_dependencies_all_exist_are_ok() -> None:
    (finding,) = dependency_findings([])
    assert (finding.check, finding.severity, finding.fix) == ("dependencies", "ok", "")


def test_a_missing_dependency_warns_and_names_the_commands_that_unblock_or_cancel() -> None:
    (finding,) = dependency_findings(_missing([7, 9]))
    assert finding.severity == "warning"
    assert finding.message.startswith("2 waiting job(s) wait for a dependency that no longer")
    assert "7, 9; they would wait for ever" in finding.message
    assert "`pgqueue unblock 7 9` (`pgqueue.unblock(conn, ids)`)" in finding.fix
    assert "`pgqueue cancel 7 9` (`pgqueue.cancel(conn, ids)`)" in finding.fix
    assert finding.details == [
        {"id": 7, "queue": "steps", "waiting_on": 2, "found": 1},
        {"id": 9, "queue": "steps", "waiting_on": 2, "found": 1},
    ]


def test_many_missing_dependencies_are_counted_in_all_and_listed_ten_at_a_time() -> None:
    (finding,) = dependency_findings(_missing(list(range(1, 101)), total=250))
    assert finding.message.startswith("250 waiting job(s)")
    assert "1, 2, 3, 4, 5, 6, 7, 8, 9, 10 (+240 more)" in finding.message
    assert "`pgqueue unblock 1 2 3" in finding.fix
    assert "99 100 ...`" in finding.fix  # the first 100 named; more remain
    assert len(finding.details) == 100
