"""The system check: pgqueue's schema on each backend's database is at the package's head.

A database check, as Django's contract for them says: it runs when Django names the databases
it may query (``manage.py migrate``, ``manage.py check --database default``) and on those only.
Silent when the schema is current; a warning (``pgqueue.W001``) naming what was found and
``manage.py pgqueue_migrate`` when it is missing or behind. A database out of reach is not this
check's finding (Django reports that itself when it matters), so it says nothing then either.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.core import checks
from django.db import Error as DatabaseError
from django.utils.module_loading import import_string
from sqlalchemy.exc import DBAPIError

from pgqueue.doctor import revision_findings


def backend_databases() -> dict[str, str]:
    """``{TASKS alias: database alias}`` of every backend that is a ``PgQueueBackend``."""
    from pgqueue.contrib.django.backend import PgQueueBackend

    found = {}
    for alias, params in getattr(settings, "TASKS", {}).items():
        try:
            backend = import_string(params.get("BACKEND", ""))
        except ImportError:
            continue
        if isinstance(backend, type) and issubclass(backend, PgQueueBackend):
            found[alias] = params.get("OPTIONS", {}).get("database", "default")
    return found


def schema_current(
    app_configs: Any = None, databases: Iterable[str] | None = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """A warning per backend database whose pgqueue schema is missing or behind."""
    from pgqueue.contrib.django._bridge import borrowed

    messages: list[checks.CheckMessage] = []
    wanted = set(databases or ())  # None: no database may be queried
    for database in sorted(set(backend_databases().values()) & wanted):
        try:
            with borrowed(database) as conn:
                findings = revision_findings(conn)
        except (DatabaseError, DBAPIError):
            continue
        messages.extend(
            checks.Warning(
                f"pgqueue's schema on database {database!r}: {finding.message}",
                hint="run `manage.py pgqueue_migrate"
                + ("" if database == "default" else f" --database {database}")
                + "`",
                id="pgqueue.W001",
            )
            for finding in findings
            if finding.severity != "ok"
        )
    return messages
