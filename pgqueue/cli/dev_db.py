"""``pgqueue dev-db``: a throwaway PostgreSQL for developing your own app against pgqueue.

The embedded server ``pgqueue demo`` runs on (the ``embedded`` extra), started in a temporary
directory and migrated to pgqueue's head; its URL is the one line on stdout, so a script can read
it (``URL=$(pgqueue dev-db | head -1)`` in another shell, or the first line of a subprocess).
Ctrl-C (SIGINT) or SIGTERM stops the server and deletes its directory, exit 0.
"""

from __future__ import annotations

import argparse
import re
import signal
import sys
import threading
from types import FrameType

from pgqueue._base.embedded import embedded_server
from pgqueue._base.urls import to_sqlalchemy_url
from pgqueue.cli.common import ENV_URL, note, schema_arg

_EMPTY_PASSWORD = re.compile(r"^(?P<user>[a-z+]+://[^:/@]*):@")
#: The signals that stop the server: Ctrl-C, and what a process manager sends.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def plain_url(url: str) -> str:
    """The server's URL as a user types it: ``postgresql://postgres@/postgres?host=/tmp/...``.
    The embedded server trusts local connections, so its URL's password is empty (``user:@``):
    dropped, it is no ``user:***@`` in a masked line and no password a reader would look for."""
    return _EMPTY_PASSWORD.sub(r"\g<user>@", url, count=1)


def cmd_dev_db(args: argparse.Namespace) -> int:
    """Start an embedded PostgreSQL, migrate it, print its URL; Ctrl-C stops it (its data is
    deleted)."""
    import pgqueue.migrations

    schema = schema_arg(args)
    note("pgqueue dev-db: starting an embedded PostgreSQL in a temporary directory...")
    with embedded_server(prefix="pgqueue-dev-db-") as server:
        url = plain_url(server)
        pgqueue.migrations.upgrade(to_sqlalchemy_url(url), schema=schema)
        sys.stdout.write(url + "\n")  # no password to mask: the one line a script reads
        sys.stdout.flush()
        where = "" if schema is None else f" (schema {schema})"
        note(
            f"pgqueue dev-db: migrated to {pgqueue.migrations.HEAD}{where}; "
            f"export {ENV_URL}='{url}' to use it. Ctrl-C stops it and deletes its data."
        )
        _wait_for_a_stop_signal()
    note("pgqueue dev-db: stopped, its data deleted")
    return 0


def _wait_for_a_stop_signal() -> None:
    """Block until SIGINT or SIGTERM; the signals' previous handlers are put back after."""
    stop = threading.Event()

    def handle(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, handle) for sig in STOP_SIGNALS}
    try:
        while not stop.wait(1.0):
            pass
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
