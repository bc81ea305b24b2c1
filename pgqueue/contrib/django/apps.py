"""The Django app ``pgqueue.contrib.django``: its management commands and its system check."""

from __future__ import annotations

from django.apps import AppConfig


class PgQueueConfig(AppConfig):  # type: ignore[misc]
    """Registers :func:`pgqueue.contrib.django.checks.schema_current` when Django is ready."""

    name = "pgqueue.contrib.django"
    label = "pgqueue"
    verbose_name = "pgqueue"

    def ready(self) -> None:
        from django.core import checks

        from pgqueue.contrib.django.checks import schema_current

        checks.register(schema_current, checks.Tags.database)  # migrate, check --database
