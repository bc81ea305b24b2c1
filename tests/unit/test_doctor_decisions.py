"""The doctor's decisions on given values: the states a test cannot stage on a real server.

``pg_stat_user_tables.last_autovacuum`` cannot be set back in time, so a stale vacuum is decided
here from values; the never-vacuumed and recent states also run for real in tests/cli.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from pgqueue.doctor import AUTOVACUUM_STALE, DEAD_TUPLES_MIN, vacuum_finding

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
