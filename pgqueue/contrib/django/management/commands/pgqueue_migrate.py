"""``manage.py pgqueue_migrate``: pgqueue's revisions on a backend's database.

pgqueue's schema has its own Alembic history (its ``alembic_version`` table), never Django's
``django_migrations``: this is ``pgqueue migrate`` on the database Django names.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

import pgqueue.migrations
from pgqueue._base.urls import mask_url
from pgqueue.contrib.django._bridge import database_url
from pgqueue.contrib.django.checks import backend_databases


class Command(BaseCommand):  # type: ignore[misc]
    help = "Apply pgqueue's revisions to the task backend's database (its own version table)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--database", help="a DATABASES alias (default: every PgQueueBackend's database)"
        )
        parser.add_argument("--sql", action="store_true", help="print the SQL instead")

    def handle(self, *args: Any, **options: Any) -> None:
        targets = sorted(set(backend_databases().values()))
        if options["database"]:
            targets = [options["database"]]
        if not targets:
            raise CommandError("TASKS has no PgQueueBackend: name a database with --database")
        for alias in targets:
            url = database_url(alias)
            pgqueue.migrations.upgrade(url, sql=options["sql"])
            if not options["sql"]:
                self.stdout.write(f"pgqueue's schema is at its head on {alias!r} ({mask_url(url)})")
