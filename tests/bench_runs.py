"""Running a benchmark module of ``bench`` end to end against the test server, for the smoke
tests (no figure is asserted by them, only that each runs and reports)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def run_bench(module: str, pg_server: Any, *args: str, timeout: float = 120) -> str:
    """``python -m <module> --url <the test server> <args>`` from the project's root; its
    standard output, once it exited 0 (else the assertion shows the end of its stderr)."""
    url = pg_server.url.render_as_string(hide_password=False)
    proc = subprocess.run(
        [sys.executable, "-m", module, "--url", url, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc.stdout
