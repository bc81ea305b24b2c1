"""pgqueue under Django's task API (``django.tasks``, or the ``django_tasks`` backport).

Needs the ``django`` extra (``pip install "pgqueue-sa[django]"``). Put ``"pgqueue.contrib.django"``
in ``INSTALLED_APPS`` (the app of the management commands and the system check) and name
:class:`PgQueueBackend` in ``TASKS``; docs/django.md says the rest.

- ``backend``: :class:`PgQueueBackend` and its ``task_class``, ``PgQueueTask``; the mapping of
  Django's task fields onto a job, and of a job's row onto a ``TaskResult``.
- ``_bridge``: pgqueue's statements on Django's own connection, in Django's transaction.
- ``_compat``: Django's task API from ``django.tasks`` or ``django_tasks``.
- ``runner``: what ``manage.py pgqueue_worker`` runs: the project's tasks as a
  :class:`pgqueue.Registry`, each job run as Django runs a task (signals, context, connections).
- ``apps``: the Django app; ``checks``: the system check that pgqueue's schema is current.
- ``management``: ``pgqueue_worker``, ``pgqueue_migrate`` and ``pgqueue_web``.
- ``dashboard``: the dashboard mounted in the project's ASGI application, for staff users.

Importing :mod:`pgqueue` or :mod:`pgqueue.contrib` never imports Django; this package's
``__init__`` does not either (Django imports it to find the app): :class:`PgQueueBackend` is
loaded on first access.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["PgQueueBackend", "PgQueueTask", "connection", "database_url"]

#: Where each public name lives: ``connection`` (a SQLAlchemy ``Connection`` on Django's own
#: connection, in its transaction, for pgqueue's own API) and ``database_url`` (the alias's URL,
#: for an engine of one's own) are the bridge's.
_HOMES = {
    "PgQueueBackend": ("backend", "PgQueueBackend"),
    "PgQueueTask": ("backend", "PgQueueTask"),
    "connection": ("_bridge", "borrowed"),
    "database_url": ("_bridge", "database_url"),
}


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        module, attr = _HOMES[name]
        try:
            found = importlib.import_module(f"pgqueue.contrib.django.{module}")
        except ImportError as exc:
            if (exc.name or "").partition(".")[0] not in ("django", "django_tasks", "asgiref"):
                raise
            from pgqueue.contrib import missing_extra

            raise missing_extra("pgqueue.contrib.django", "django") from exc
        return getattr(found, attr)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
