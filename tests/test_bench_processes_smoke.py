"""``python -m bench.processes`` runs end to end on tiny sizes (no figure is asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.db
@pytest.mark.slow
def test_processes_benchmark_runs_every_variant(pg_server: Any) -> None:
    url = pg_server.url.render_as_string(hide_password=False)
    sizes = ["--jobs", "40", "--noop-jobs", "100", "--cpu-ms", "1", "--rounds", "1"]
    proc = subprocess.run(
        [sys.executable, "-m", "bench.processes", "--url", url, *sizes],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert sorted((r["handler"], r["processes"]) for r in rows) == [
        ("cpu", 1),
        ("cpu", 2),
        ("noop", 1),
        ("noop", 2),
    ]
    assert all(r["jobs_per_s"] > 0 for r in rows)
    assert proc.stdout.count("median") == 4
