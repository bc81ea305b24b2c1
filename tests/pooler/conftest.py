"""A real PgBouncer (Debian's package) in ``pool_mode = transaction`` in front of the test server.

The fixture needs the server on TCP (``PGQUEUE_TEST_DATABASE_URL`` with a host name), because
PgBouncer connects to it by host and port; against the embedded server (a Unix socket) the tests
skip, as they do where no ``pgbouncer`` binary is installed (``.ci/run`` installs it). PgBouncer
refuses to run as root: as root it is started with ``-u postgres``, so its config, auth file, log
and pid file live in a directory under ``/tmp`` that the ``postgres`` user can reach (pytest's own
temporary directories are private to root).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import Engine, create_engine
from sqlalchemy.engine import URL

import pgqueue
from pgqueue._base.urls import to_libpq_url
from tests.conftest import Server

#: Where Debian puts the binary (``/usr/sbin`` is not on every user's PATH).
DEBIAN_BINARY = "/usr/sbin/pgbouncer"
#: Seconds PgBouncer gets to accept connections, and to exit once told to.
START_TIMEOUT = 15.0
STOP_TIMEOUT = 10.0

_CONFIG = """\
[databases]
* = host={host} port={port}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {listen_port}
unix_socket_dir =
auth_type = trust
auth_file = {dir}/userlist.txt
admin_users = {user}
pool_mode = transaction
max_client_conn = 500
default_pool_size = 20
ignore_startup_parameters = extra_float_digits,options
logfile = {dir}/pgbouncer.log
pidfile = {dir}/pgbouncer.pid
"""


@dataclass
class PgBouncer:
    """A running PgBouncer: ``url_for(db_url)`` is the same database through the pooler."""

    port: int
    directory: Path
    process: subprocess.Popen[bytes]

    def url_for(self, db_url: URL) -> URL:
        return db_url.set(host="127.0.0.1", port=self.port)

    def log(self) -> str:
        path = self.directory / "pgbouncer.log"
        return path.read_text(errors="replace") if path.exists() else ""


def _binary() -> str | None:
    found = shutil.which("pgbouncer")
    if found is None and os.access(DEBIAN_BINARY, os.X_OK):
        found = DEBIAN_BINARY
    return found


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)  # immediate shutdown: close every connection
    try:
        process.wait(STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(STOP_TIMEOUT)


@pytest.fixture(scope="session")
def pgbouncer(pg_server: Server) -> Iterator[PgBouncer]:
    binary = _binary()
    if binary is None:
        pytest.skip("no pgbouncer binary (apt-get install pgbouncer; .ci/run installs it)")
    host = pg_server.url.host
    if pg_server.kind != "url" or not host or host.startswith("/") or "host" in pg_server.url.query:
        pytest.skip(
            f"PgBouncer needs the test server on TCP (PGQUEUE_TEST_DATABASE_URL with a host); "
            f"this run uses the {pg_server.kind} server"
        )
    user = pg_server.url.username or "postgres"
    directory = Path(tempfile.mkdtemp(prefix="pgqueue-pgbouncer-", dir="/tmp"))
    directory.chmod(0o777)
    port = _free_port()
    config = directory / "pgbouncer.ini"
    config.write_text(
        _CONFIG.format(
            host=host,
            port=pg_server.url.port or 5432,
            listen_port=port,
            dir=directory,
            user=user,
        )
    )
    (directory / "userlist.txt").write_text(f'"{user}" ""\n')
    for path in directory.iterdir():
        path.chmod(0o644)
    command = [binary, str(config)]
    if os.geteuid() == 0:
        command[1:1] = ["-u", "postgres"]  # PgBouncer refuses to run as root
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    bouncer = PgBouncer(port, directory, process)
    try:
        conninfo = to_libpq_url(bouncer.url_for(pg_server.url))
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            try:
                with psycopg.connect(conninfo, connect_timeout=2, prepare_threshold=None) as conn:
                    conn.execute("SELECT 1")
                break
            except psycopg.OperationalError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"PgBouncer did not start:\n{bouncer.log()}") from None
                time.sleep(0.1)
        yield bouncer
    finally:
        _stop(process)
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def pooled_url(pgbouncer: PgBouncer, db_url: URL) -> URL:
    """This test's database, through PgBouncer."""
    return pgbouncer.url_for(db_url)


@pytest.fixture
def pooled_engine(pooled_url: URL) -> Iterator[Engine]:
    """An engine through PgBouncer with the options pgqueue documents for it."""
    options: dict[str, Any] = pgqueue.pooled_engine_options()
    eng = create_engine(pooled_url, pool_size=12, max_overflow=10, **options)
    yield eng
    eng.dispose()
