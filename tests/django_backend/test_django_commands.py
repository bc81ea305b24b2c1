"""``manage.py pgqueue_migrate`` and the system check; the optional extra stays optional."""

from __future__ import annotations

import io
import subprocess
import sys
from typing import Any

from django.core.management import call_command
from sqlalchemy import create_engine, text

import pgqueue.migrations
from pgqueue.contrib.django.checks import schema_current


def _head() -> str:
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(pgqueue.migrations.alembic_config("postgresql://"))
    head = script.get_revision(pgqueue.migrations.HEAD)
    assert head is not None
    return head.revision


def _revisions(url: Any) -> list[str]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return list(conn.execute(text("SELECT version_num FROM alembic_version")).scalars())
    finally:
        engine.dispose()


def test_check_warns_when_missing_or_behind_and_is_silent_when_current(
    empty_project: Any, empty_db_url: Any
) -> None:
    assert schema_current() == []  # no database named: none queried
    [missing] = schema_current(databases=["default"])
    assert missing.id == "pgqueue.W001"
    assert "no jobs table" in missing.msg
    assert "pgqueue_migrate" in missing.hint
    pgqueue.migrations.upgrade(empty_db_url, "pgqueue_0010")
    [behind] = schema_current(databases=["default"])
    assert "behind the package's head" in behind.msg
    call_command("pgqueue_migrate", stdout=io.StringIO())
    assert schema_current(databases=["default"]) == []
    assert _revisions(empty_db_url) == [_head()]
    # Django's migration history was never touched: pgqueue has its own version table.
    engine = create_engine(empty_db_url)
    try:
        with engine.connect() as conn:
            assert conn.execute(text("SELECT to_regclass('django_migrations')")).scalar() is None
    finally:
        engine.dispose()


def test_pgqueue_migrate_from_manage_py(empty_project: Any, empty_db_url: Any) -> None:
    done = empty_project.manage("pgqueue_migrate")
    assert done.returncode == 0, done.stderr
    assert "pgqueue's schema is at its head on 'default'" in done.stdout
    assert _revisions(empty_db_url) == [_head()]
    check = empty_project.manage("check", "--database", "default")
    assert check.returncode == 0, check.stderr
    assert "pgqueue.W001" not in check.stderr + check.stdout


def test_manage_py_check_shows_the_warning(empty_project: Any) -> None:
    check = empty_project.manage("check", "--database", "default")
    assert "pgqueue.W001" in check.stderr + check.stdout


def test_pgqueue_and_contrib_never_import_django() -> None:
    code = (
        "import sys\n"
        "import pgqueue, pgqueue.contrib, pgqueue.worker, pgqueue.cli\n"
        "assert not [m for m in sys.modules if m == 'django' or m.startswith('django.')], "
        "sorted(m for m in sys.modules if m.startswith('django'))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
