"""One home for SQL (#30): rules written once, and no module borrowing another's private names.

Read from the source with :mod:`ast` and plain text, so a copy of "live" or a borrowed ``_name``
fails here before it is reviewed."""

from __future__ import annotations

import ast
from pathlib import Path

import pgqueue

PACKAGE_DIR = Path(pgqueue.__file__).parent
#: Frozen history: revisions spell what they created, whatever the code says today.
VERSIONS = PACKAGE_DIR / "migrations" / "versions"


def _sources() -> dict[Path, str]:
    return {
        path: path.read_text(encoding="utf-8")
        for path in sorted(PACKAGE_DIR.rglob("*.py"))
        if VERSIONS not in path.parents
    }


def _is_module(node: ast.ImportFrom, path: Path, name: str) -> bool:
    """``from pgqueue.web import _csrf`` names a module, not a private name of one."""
    if node.level:
        base = path.parent
        for _ in range(node.level - 1):
            base = base.parent
    else:
        base = PACKAGE_DIR.parent
    folder = base.joinpath(*(node.module or "").split(".")) if node.module else base
    return (folder / f"{name}.py").exists() or (folder / name / "__init__.py").exists()


def test_no_module_imports_a_private_name_of_another() -> None:
    """``from pgqueue.x import _y`` ties a module to another's internals; a shared helper is
    public in its module (a ``_``-prefixed module is private to the package, not its names)."""
    borrowed = []
    for path, source in _sources().items():
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ImportFrom) and (
                node.level or "pgqueue" in (node.module or "")
            ):
                borrowed += [
                    f"{path.relative_to(PACKAGE_DIR)}: {node.module}.{alias.name}"
                    for alias in node.names
                    if alias.name.startswith("_")
                    and not alias.name.startswith("__")
                    and not _is_module(node, path, alias.name)
                ]
    assert not borrowed, borrowed


def test_live_is_spelled_once() -> None:
    """ "Live" (``queued`` or ``running``) is :data:`pgqueue.models.LIVE_STATUSES`; the SQL text,
    the index predicate and every statement derive from it."""
    spellings = (
        "status IN ('queued', 'running')",
        "QUEUED), status_literal(JobStatus.RUNNING)",
        '["queued", "running"]',
    )
    found = [
        f"{path.relative_to(PACKAGE_DIR)}: {spelling}"
        for path, source in _sources().items()
        for spelling in spellings
        # docstrings and comments may say what live means; code may not spell it
        for line in source.splitlines()
        if spelling in line
        and not line.lstrip().startswith(("#", '"""', "``"))
        and "``" not in line
    ]
    assert not found, found
    assert pgqueue.models.LIVE_SQL == "status IN ('queued', 'running')"
    assert f"unique_key IS NOT NULL AND {pgqueue.models.LIVE_SQL}" == pgqueue.models.LIVE_KEY_SQL


def test_attach_calls_the_dependency_rule_in_the_placement_of_jobs() -> None:
    """The enqueue's ``ATTACH`` and the ``jobs_release`` trigger share ``jobs_dependency_error``
    (pgqueue_0014); in a schema the call follows ``use_schema`` as the table does."""
    from sqlalchemy.dialects import postgresql

    from pgqueue._sql.workflow_statements import ATTACH

    plain = str(ATTACH.compile(dialect=postgresql.dialect()))
    assert "THEN jobs_dependency_error((SELECT summary.broken" in plain
    assert "' was cancelled'" not in plain
    in_schema = ATTACH.compile(dialect=postgresql.dialect(), schema_translate_map={None: "queue"})
    assert "__[SCHEMA__none].jobs_dependency_error(" in str(in_schema)
