"""The operator side reads through :mod:`pgqueue._sql.reads` (#21): no SQL built elsewhere."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import pgqueue

PACKAGE_DIR = Path(pgqueue.__file__).parent

#: Builders of SQL that a reading module must not take from SQLAlchemy: it runs what reads built.
SQL_BUILDERS = {"text", "select", "table", "insert", "update", "delete", "func", "literal_column"}


@pytest.mark.parametrize(
    "module",
    ["admin.py", "doctor.py", "testing.py", "_worker/registration.py", "contrib/prometheus.py"],
)
def test_a_reading_module_builds_no_sql_of_its_own(module: str) -> None:
    tree = ast.parse((PACKAGE_DIR / module).read_text())
    imported = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sqlalchemy")
        for alias in node.names
    }
    assert not imported & SQL_BUILDERS, f"{module} builds SQL: {sorted(imported & SQL_BUILDERS)}"
