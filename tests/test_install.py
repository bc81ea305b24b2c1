"""Installable as the README says: the wheel built from this tree (``python -m pip wheel . -w
dist``, hatchling fetched from the package index for the build) installs, with its dependencies
from the index, into a fresh virtual environment whose ``pgqueue`` command then runs. Nothing of
this tree or its own environment is on that environment's path."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

import pgqueue

ROOT = Path(__file__).resolve().parents[1]
#: The README's commands that build the wheel and install it, run here as they are written
#: (``dist`` in a temporary folder instead of the clone's).
WHEEL_COMMAND = "python -m pip wheel . --no-deps -w dist"
INSTALL_COMMAND = f"pip install dist/pgqueue_sa-{pgqueue.__version__}-py3-none-any.whl"


def _install_section() -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    start = readme.index("## Install into your application")
    return readme[start : readme.index("\n## ", start + 1)]


def test_the_readme_says_where_the_distribution_comes_from() -> None:
    """Not from the index (where ``pgqueue-sa`` is not yet): from a clone or a built wheel, with
    the commands the test below runs."""
    section = _install_section()
    assert "is not on the package index yet" in section
    assert "pip install /path/to/pgqueue" in section
    assert "pip install -e /path/to/pgqueue" in section
    assert f"cd /path/to/pgqueue && {WHEEL_COMMAND}" in section
    assert INSTALL_COMMAND in section
    assert "\npip install pgqueue-sa" not in section  # no line tells to install it from the index


def _run(*args: str | Path, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    proc = subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert proc.returncode == 0, (args, proc.stdout, proc.stderr)
    return proc


@pytest.mark.slow
def test_the_built_wheel_installs_in_a_fresh_venv_and_runs(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    build = WHEEL_COMMAND.split()
    assert build[:4] == ["python", "-m", "pip", "wheel"]
    assert build[-2:] == ["-w", "dist"]
    _run(sys.executable, *build[1:-1], dist, "-q", cwd=ROOT)
    (wheel,) = dist.glob("pgqueue_sa-*-py3-none-any.whl")
    assert wheel.name == INSTALL_COMMAND.split("/")[-1]

    home = tmp_path / "venv"
    venv.create(home, with_pip=True)  # fresh: no site-packages of this environment
    python = home / "bin" / "python"
    _run(python, "-m", "pip", "install", "-q", wheel.relative_to(tmp_path), cwd=tmp_path)

    elsewhere = tmp_path / "elsewhere"  # not the clone: `import pgqueue` must find the wheel's
    elsewhere.mkdir()
    version = _run(home / "bin" / "pgqueue", "--version", cwd=elsewhere)
    assert version.stdout.strip() == f"pgqueue {pgqueue.__version__}"
    where = _run(python, "-c", "import pgqueue; print(pgqueue.__file__)", cwd=elsewhere)
    assert Path(where.stdout.strip()).is_relative_to(home)
    # The revisions ship in the wheel: the offline migration prints the schema's SQL.
    sql = _run(home / "bin" / "pgqueue", "migrate", "--sql", cwd=elsewhere)
    assert "CREATE TABLE jobs" in sql.stdout
