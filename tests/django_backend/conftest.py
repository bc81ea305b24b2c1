"""The Django tests: a project made here (``djproject``, one app ``djapp`` with a model and
tasks), on Django 6's ``django.tasks`` or on Django 5.2 with the ``django_tasks`` backport.

Without either, nothing here is collected: Django is not in the ``dev`` extra, and ``.ci/run``
runs this folder in venvs of its own (Python 3.12 + Django 6.1, Python 3.11 + Django 5.2 +
django-tasks). In process, Django is set up once with ``djproject.settings``; the
:func:`project` fixture points its ``default`` database at the test's own database (the
``engine`` fixture's) and creates the app's table there.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).parent


def _has_task_api() -> bool:
    try:
        return importlib.util.find_spec("django.tasks") is not None
    except ModuleNotFoundError:
        return importlib.util.find_spec("django_tasks") is not None


if not (_has_task_api() or importlib.util.find_spec("django_tasks") is not None):
    collect_ignore_glob = ["test_*.py"]
else:
    sys.path.insert(0, str(HERE))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "djproject.settings")
    os.environ.setdefault("DJANGO_TEST_DB_NAME", "postgres")
    import django

    django.setup()

    from django_project import Project


@pytest.fixture
def project(engine, tmp_path: Path) -> Iterator[Project]:  # type: ignore[no-untyped-def]
    """Django on the test's migrated database, with the app's table."""
    yield from _pointed(engine.url, tmp_path)


@pytest.fixture
def empty_project(empty_db_url, tmp_path: Path) -> Iterator[Project]:  # type: ignore[no-untyped-def]
    """Django on a database without pgqueue's schema, with the app's table."""
    yield from _pointed(empty_db_url, tmp_path)


def _pointed(url, tmp_path: Path) -> Iterator[Project]:  # type: ignore[no-untyped-def]
    from asgiref.sync import sync_to_async
    from django.conf import settings
    from django.db import connection, connections
    from djapp.models import Note

    values = {
        "NAME": url.database or "",
        "HOST": url.host or "",
        "PORT": str(url.port or ""),
        "USER": url.username or "",
        "PASSWORD": url.password or "",
    }
    connections.close_all()
    settings.DATABASES["default"].update(values)
    with connection.schema_editor() as editor:
        editor.create_model(Note)
    env = {**os.environ, **{f"DJANGO_TEST_DB_{k}": v for k, v in values.items()}}
    env["DJANGO_SETTINGS_MODULE"] = "djproject.settings"
    env.pop("PGQUEUE_DATABASE_URL", None)
    try:
        yield Project(env=env, tmp=tmp_path)
    finally:
        connections.close_all()
        # And the connections of the thread async code's database calls run on
        # (sync_to_async's thread-sensitive executor), which the next test's database replaces.
        asyncio.run(sync_to_async(connections.close_all)())
