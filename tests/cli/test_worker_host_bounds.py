"""``--processes`` and ``--concurrency`` above the machine's bound are refused before anything
starts: the whole output is one line on stderr, exit 2, and the target module is never imported.
``--force-bounds`` lets them through. Each run is a real ``pgqueue`` process: the point is what
it prints, and that it starts nothing."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy.engine import URL

from pgqueue._base.validation import MAX_THREADS, max_processes
from tests.cli.conftest import plain

#: The target writes this file when it is imported: a refused command never gets that far.
APP = """\
from pathlib import Path
Path(__file__).with_name("imported").write_text("yes")
raise SystemExit("stopped at import: the bounds let the command through")
"""


@pytest.fixture
def app(tmp_path: Path) -> Path:
    (tmp_path / "bounded_app.py").write_text(APP)
    return tmp_path


def _worker(app: Path, db_url: URL, *flags: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PGQUEUE_DATABASE_URL"}
    command = [sys.executable, "-m", "pgqueue", "worker", "bounded_app:handlers", *flags]
    return subprocess.run(
        [*command, "--url", plain(db_url)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=app,
        check=False,
    )


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--processes", str(max_processes() + 1)], f"--processes: {max_processes() + 1} worker"),
        (["--processes", "1000"], "--processes: 1000 worker processes is more than"),
        (["--concurrency", str(MAX_THREADS + 1)], f"--concurrency: {MAX_THREADS + 1} handler"),
        (["--concurrency", "100000"], "--concurrency: 100000 handler threads is more than"),
        (["--processes", "1000", "--concurrency", "100000"], "--processes: 1000"),
    ],
    ids=["processes-just-over", "processes-1000", "threads-just-over", "threads-100000", "both"],
)
def test_a_refusal_is_one_line_exit_2_and_starts_nothing(
    app: Path, db_url: URL, flags: list[str], needle: str
) -> None:
    started = time.monotonic()
    done = _worker(app, db_url, *flags)
    assert done.returncode == 2, done
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr  # no log line, no usage, no traceback: this line alone
    assert lines[0].startswith("pgqueue: error: " + needle), lines[0]
    assert "--force-bounds" in lines[0]
    assert not (app / "imported").exists()  # the target was never imported: nothing started
    assert time.monotonic() - started < 30


def test_the_bound_is_the_machines(app: Path, db_url: URL) -> None:
    """The message says the bound and where it comes from."""
    done = _worker(app, db_url, "--processes", str(max_processes() + 1))
    cpus = os.cpu_count() or 1
    assert f"more than {max_processes()} (4 per CPU, {cpus} CPUs here)" in done.stderr


@pytest.mark.parametrize(
    "flags", [["--concurrency", str(MAX_THREADS + 1)], ["--concurrency", str(MAX_THREADS)]]
)
def test_force_bounds_or_a_value_at_the_bound_goes_through(
    app: Path, db_url: URL, flags: list[str]
) -> None:
    forced = [] if flags[1] == str(MAX_THREADS) else ["--force-bounds"]
    done = _worker(app, db_url, *flags, *forced)
    assert (app / "imported").exists()  # past the bounds, on to importing the target
    assert "stopped at import" in done.stderr
    assert "--force-bounds" not in done.stderr
