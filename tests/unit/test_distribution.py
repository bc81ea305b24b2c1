"""The distribution name: ``pip install pgqueue-sa`` (``pgqueue`` on the index is another project)
installs ``import pgqueue`` and the ``pgqueue`` command, and every install line says so."""

from __future__ import annotations

import importlib.metadata
import re
import sys
from pathlib import Path

import pgqueue
from pgqueue._base.distribution import DISTRIBUTION, pip_install

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    tomllib = None

ROOT = Path(__file__).resolve().parents[2]

#: An install line or extras spec under the index's other ``pgqueue``: ``pip install pgqueue``,
#: ``pgqueue[web]``.
_OLD_NAME = re.compile(r"pip install\s+['\"]?pgqueue(?![\w-])|(?<![\w./-])pgqueue\[")


def _texts() -> list[Path]:
    found = [ROOT / "README.md", ROOT / "CHANGELOG.md", ROOT / "pyproject.toml"]
    found += sorted((ROOT / "docs").glob("*.md"))
    for folder in ("examples", "pgqueue", "bench"):
        found += sorted(
            p
            for p in (ROOT / folder).rglob("*")
            if p.is_file() and p.suffix in {".py", ".md", ".toml", ".txt", ".ini", ".html"}
        )
    return found


def test_pyproject_names_the_distribution_and_keeps_the_command() -> None:
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    if tomllib is not None:
        project = tomllib.loads(text)["project"]
        assert project["name"] == DISTRIBUTION
        assert project["scripts"] == {"pgqueue": "pgqueue.cli:main"}
        assert project["optional-dependencies"]["dev"][0].startswith(f"{DISTRIBUTION}[")
    assert f'name = "{DISTRIBUTION}"' in text


def test_the_installed_distribution_provides_import_pgqueue_and_the_command() -> None:
    dist = importlib.metadata.distribution(DISTRIBUTION)
    assert dist.version == pgqueue.__version__
    scripts = {e.name: e.value for e in dist.entry_points if e.group == "console_scripts"}
    assert scripts == {"pgqueue": "pgqueue.cli:main"}


def test_every_install_line_uses_the_distribution_name() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in _texts()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if _OLD_NAME.search(line)
    ]
    assert offenders == []
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "`pip install pgqueue-sa`" in readme  # named, as what works once it is published
    assert pip_install("web") == 'pip install "pgqueue-sa[web]"'
