"""Names in ``pg_stat_activity``: every connection pgqueue opens says whose it is.

Worker processes name theirs ``pgqueue-worker:<host>:<pid>`` (``pgqueue doctor`` counts them
against ``max_connections``), the other commands ``pgqueue-cli``. A name the user put in the URL
(``?application_name=...``) always wins.
"""

from __future__ import annotations

import os
import socket
from typing import Any

from sqlalchemy.engine import URL

from pgqueue._base.urls import to_sqlalchemy_url

#: The prefix of every worker process's connections, what ``doctor`` counts.
WORKER_PREFIX = "pgqueue-worker:"
#: PostgreSQL keeps the first 63 bytes of ``application_name`` (NAMEDATALEN - 1).
_MAX_NAME = 63


def worker_name(pid: int | None = None, host: str | None = None) -> str:
    """``pgqueue-worker:<host>:<pid>``, the host shortened so the pid always fits in 63 bytes."""
    pid_text = str(os.getpid() if pid is None else pid)
    host = (socket.gethostname() if host is None else host).encode("ascii", "replace").decode()
    room = _MAX_NAME - len(WORKER_PREFIX) - len(pid_text) - 1
    return f"{WORKER_PREFIX}{host[:room]}:{pid_text}"


def names_itself(url: str | URL) -> bool:
    """Whether the URL sets ``application_name`` in its query."""
    return "application_name" in to_sqlalchemy_url(url).query


def name_kwargs(url: str | URL, name: str | None) -> dict[str, Any]:
    """``{"application_name": name}`` for ``psycopg.connect``, unless the URL names itself."""
    return {} if name is None or names_itself(url) else {"application_name": name}
