"""``manage.py pgqueue_worker``: ``pgqueue worker`` on the project's Django tasks.

It runs pgqueue's command line (``pgqueue.cli.main``) on the target
``pgqueue.contrib.django.runner:registry``, with the backend database's URL in
``PGQUEUE_DATABASE_URL`` (never on a command line: a supervised child inherits it), so leases,
the reaper, heartbeats, the SIGTERM drain, ``--processes``, ``--health-port`` and the exit codes
are ``pgqueue worker``'s own.
"""

from __future__ import annotations

import os
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from pgqueue.cli import main as pgqueue_main
from pgqueue.cli.common import ENV_URL
from pgqueue.contrib.django._bridge import database_url
from pgqueue.contrib.django.checks import backend_databases

TARGET = "pgqueue.contrib.django.runner:registry"

#: The options passed through to ``pgqueue worker``, as (flag, takes a value).
_PASSED = (
    ("--queues", True),
    ("--concurrency", True),
    ("--processes", True),
    ("--lease", True),
    ("--poll-interval", True),
    ("--default-timeout", True),
    ("--health-port", True),
    ("--health-host", True),
    ("--burst", False),
)


class Command(BaseCommand):  # type: ignore[misc]
    help = "Run pgqueue's worker on this project's tasks (the options of `pgqueue worker`)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--backend", default="default", help="the TASKS alias (default)")
        parser.add_argument("--queues", help="comma-separated queues (default: all)")
        parser.add_argument("--concurrency", help="handler threads per process (default 4)")
        parser.add_argument("--processes", help="worker processes under one supervisor")
        parser.add_argument("--lease", help="lease length, e.g. 30s (default 5m)")
        parser.add_argument("--poll-interval", help="fallback poll interval (default 5s)")
        parser.add_argument("--default-timeout", help="an attempt's handler may run this long")
        parser.add_argument("--health-port", help="serve /livez and /readyz on this port")
        parser.add_argument("--health-host", help="the probes' address (default 127.0.0.1)")
        parser.add_argument("--burst", action="store_true", help="drain the ready jobs and exit")

    def handle(self, *args: Any, **options: Any) -> None:
        databases = backend_databases()
        if options["backend"] not in databases:
            raise CommandError(
                f"TASKS has no PgQueueBackend named {options['backend']!r} "
                f"(it has: {', '.join(databases) or 'none'})"
            )
        url = database_url(databases[options["backend"]])
        os.environ[ENV_URL] = url.render_as_string(hide_password=False)
        argv = ["worker", TARGET]
        for flag, valued in _PASSED:
            value = options[flag[2:].replace("-", "_")]
            if valued and value is not None:
                argv += [flag, str(value)]
            elif not valued and value:
                argv.append(flag)
        code = pgqueue_main(argv)
        if code:
            raise SystemExit(code)
