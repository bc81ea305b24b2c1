"""``manage.py pgqueue_web``: ``pgqueue web`` (the dashboard, served alone) on the backend's
database. Its access is pgqueue's own (``--auth`` or ``PGQUEUE_WEB_AUTH``); to serve it behind
Django's logins instead, mount :func:`pgqueue.contrib.django.dashboard.with_dashboard`."""

from __future__ import annotations

import os
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from pgqueue.cli import main as pgqueue_main
from pgqueue.cli.common import ENV_URL
from pgqueue.contrib.django._bridge import database_url
from pgqueue.contrib.django.checks import backend_databases


class Command(BaseCommand):  # type: ignore[misc]
    help = "Serve pgqueue's dashboard on the task backend's database (`pgqueue web`)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--backend", default="default", help="the TASKS alias (default)")
        parser.add_argument("--host", help="address to bind (default 127.0.0.1)")
        parser.add_argument("--port", help="TCP port (default 8080)")
        parser.add_argument("--read-only", action="store_true", help="no actions")
        parser.add_argument(
            "--allowed-host", action="append", default=[], help="another Host name to accept"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        databases = backend_databases()
        if options["backend"] not in databases:
            raise CommandError(f"TASKS has no PgQueueBackend named {options['backend']!r}")
        os.environ[ENV_URL] = database_url(databases[options["backend"]]).render_as_string(
            hide_password=False
        )
        argv = ["web"]
        for flag in ("host", "port"):
            if options[flag] is not None:
                argv += [f"--{flag}", str(options[flag])]
        if options["read_only"]:
            argv.append("--read-only")
        for host in options["allowed_host"]:
            argv += ["--allowed-host", host]
        code = pgqueue_main(argv)
        if code:
            raise SystemExit(code)
