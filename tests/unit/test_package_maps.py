"""True maps (#30): every package's ``__init__`` docstring names every module and subpackage in
it, and docs/worker.md's list of the worker's components names the modules of ``_worker/``.

A module added without a word in its folder's map fails here, so the map a new contributor reads
first stays the folder's contents."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pgqueue

PACKAGE_DIR = Path(pgqueue.__file__).parent
DOCS = PACKAGE_DIR.parent / "docs"


def packages() -> list[Path]:
    """Every folder of the package that holds Python: with an ``__init__``, or a namespace."""
    return sorted(
        p
        for p in [PACKAGE_DIR, *PACKAGE_DIR.rglob("*")]
        if p.is_dir() and p.name != "__pycache__" and any(p.glob("*.py"))
    )


def members(package: Path) -> list[str]:
    """Its modules (``__init__`` aside) and the folders under it that hold Python."""
    modules = [p.stem for p in package.glob("*.py") if p.name != "__init__.py"]
    folders = [p.name for p in package.iterdir() if p.is_dir() and p in set(packages())]
    return sorted(modules + folders)


def named(text: str, name: str) -> bool:
    """``name`` as a word of ``text`` (``claimer`` is not named by ``claimers``)."""
    return re.search(rf"(?<!\w){re.escape(name)}(?!\w)", text) is not None


def test_every_package_docstring_names_its_modules_and_subpackages() -> None:
    missing = {}
    for package in packages():
        init = package / "__init__.py"
        if not init.exists():
            continue  # a namespace (migrations/versions): its parent's map names it
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
        absent = [m for m in members(package) if not named(doc, m)]
        if absent:
            missing[str(package.relative_to(PACKAGE_DIR.parent))] = absent
    assert not missing, missing


def test_the_checker_sees_a_missing_module() -> None:
    assert named("``claimer`` is the main loop", "claimer")
    assert named(":mod:`pgqueue._worker.store`", "store")
    assert not named("the claimers", "claimer")
    assert not named("restore it", "store")
    assert "store" in members(PACKAGE_DIR / "_worker")
    assert "versions" in members(PACKAGE_DIR / "migrations")


def _component_list(text: str) -> str:
    """docs/worker.md's section listing the worker's components."""
    start = text.index("## How it runs")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


def test_docs_worker_names_every_component_module() -> None:
    components = _component_list((DOCS / "worker.md").read_text(encoding="utf-8"))
    absent = [m for m in members(PACKAGE_DIR / "_worker") if not named(components, m)]
    assert not absent, absent
    listed = set(re.findall(r"`_worker/(\w+)\.py`", components))
    assert listed <= set(members(PACKAGE_DIR / "_worker")), sorted(listed)


def test_worker_docstring_names_every_component_module() -> None:
    source = (PACKAGE_DIR / "worker.py").read_text(encoding="utf-8")
    doc = ast.get_docstring(ast.parse(source)) or ""
    absent = [m for m in members(PACKAGE_DIR / "_worker") if not named(doc, m)]
    assert not absent, absent
