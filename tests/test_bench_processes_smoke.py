"""``python -m bench.processes`` runs end to end on tiny sizes (no figure is asserted)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.bench_runs import run_bench


@pytest.mark.db
@pytest.mark.slow
def test_processes_benchmark_runs_every_variant(pg_server: Any) -> None:
    sizes = ["--jobs", "40", "--noop-jobs", "100", "--cpu-ms", "1", "--rounds", "1"]
    stdout = run_bench("bench.processes", pg_server, *sizes, timeout=300)
    rows = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    assert sorted((r["handler"], r["processes"]) for r in rows) == [
        ("cpu", 1),
        ("cpu", 2),
        ("noop", 1),
        ("noop", 2),
    ]
    assert all(r["jobs_per_s"] > 0 for r in rows)
    assert stdout.count("median") == 4
