"""The LISTEN connection: a direct server connection that turns notifications into wake-ups.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import psycopg
import psycopg.sql
from sqlalchemy.engine import URL

from pgqueue._base.connections import name_kwargs, worker_name
from pgqueue._base.urls import error_line, mask_url, to_libpq_url
from pgqueue.schema import DEFAULT_CHANNEL

log = logging.getLogger("pgqueue.listener")

#: The channel of the default placement's ``jobs_notify()`` trigger; a schema of its own
#: notifies ``<schema>.jobs`` (:func:`pgqueue.schema.channel_for`). The payload is the queue name.
CHANNEL = DEFAULT_CHANNEL

_LISTEN = psycopg.sql.SQL("LISTEN {}")


class Listener:
    """``LISTEN jobs`` on one autocommit psycopg connection, in its own thread (R15-R17).

    A notification is a hint, never the job: ``on_notify(queue)`` is called for each one, and
    ``on_connected()`` after every (re)connection, because anything sent while the connection was
    down is gone and the caller must poll once. On connection loss it reconnects with a capped
    exponential backoff; so it does after any other error (logged with its traceback), and a
    callback that raises is logged and costs that one call: the thread lives until :meth:`stop`.
    It needs a direct server connection (not a transaction-mode pooler).

    Args:
        url: Where to connect: any ``postgresql[+driver]://`` string or SQLAlchemy URL.
        on_notify: Called from the listener thread with the queue name of each notification.
        on_connected: Called from the listener thread after each successful ``LISTEN``.
        min_backoff: First wait before a reconnect, in seconds (default 0.1).
        max_backoff: Longest wait between reconnect attempts, in seconds (default 10).
        min_reconnect_interval: A callable giving the least time between two connection attempts,
            evaluated at each attempt (an idle scale-to-zero worker stretches it; default 0).
        channel: The NOTIFY channel (default ``jobs``; ``<schema>.jobs`` for a schema of its own).
        application_name: The connection's name in ``pg_stat_activity`` unless the URL sets
            one. Default ``pgqueue-worker:<host>:<pid>``.

    .. versionadded:: 0.1.0
    """

    def __init__(
        self,
        url: str | URL,
        on_notify: Callable[[str], None],
        on_connected: Callable[[], None],
        *,
        min_backoff: float = 0.1,
        max_backoff: float = 10.0,
        min_reconnect_interval: Callable[[], float] = lambda: 0.0,
        channel: str = CHANNEL,
        application_name: str | None = None,
    ) -> None:
        self.channel = channel
        self._conninfo = to_libpq_url(url)
        self._name = name_kwargs(url, application_name or worker_name())
        self._masked = mask_url(url)
        self._on_notify = on_notify
        self._on_connected = on_connected
        self._min_backoff = min_backoff
        self._max_backoff = max_backoff
        self._min_reconnect_interval = min_reconnect_interval
        self._stop = threading.Event()
        self._conn: psycopg.Connection[tuple[object, ...]] | None = None
        self._thread = threading.Thread(target=self._run, name="pgqueue-listener", daemon=True)
        self.connected = threading.Event()

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop listening and close the connection (waits up to ``timeout`` seconds)."""
        self._stop.set()
        self._thread.join(timeout)

    def _run(self) -> None:
        backoff = self._min_backoff
        last_attempt = float("-inf")
        while not self._stop.is_set():
            wait = max(0.0, last_attempt + self._min_reconnect_interval() - time.monotonic())
            if wait and self._stop.wait(wait):
                break
            last_attempt = time.monotonic()
            try:
                with psycopg.connect(
                    self._conninfo, autocommit=True, connect_timeout=10, **self._name
                ) as conn:
                    conn.execute(
                        psycopg.sql.SQL("LISTEN {}").format(psycopg.sql.Identifier(self.channel))
                    )
                    log.info("listening on %s (channel %r)", self._masked, self.channel)
                    self.connected.set()
                    backoff = self._min_backoff
                    self._on_connected()
                    self._listen(conn)
            except psycopg.Error as exc:
                if self._stop.is_set():
                    break
                log.warning(
                    "LISTEN connection to %s lost (%s); reconnecting in %.1fs",
                    self._masked,
                    error_line(exc),
                    backoff,
                )
            except Exception:
                # Not the connection's failure: a bug. The thread must not die of it (a worker
                # would go on with no wake-ups but its fallback poll): logged, and reconnected.
                if self._stop.is_set():
                    break
                log.exception(
                    "LISTEN on %s failed unexpectedly; reconnecting in %.1fs", self._masked, backoff
                )
            finally:
                self.connected.clear()
            if self._stop.wait(backoff):
                break
            backoff = min(backoff * 2, self._max_backoff)

    def _listen(self, conn: psycopg.Connection[tuple[object, ...]]) -> None:
        while not self._stop.is_set():
            # The timeout only bounds how long a stop() waits; an idle wait sends no query.
            for note in conn.notifies(timeout=0.5):
                try:
                    self._on_notify(note.payload)
                except Exception:  # the caller's wake-up: one that raises costs one hint
                    log.exception("LISTEN on %s: handling a notification failed", self._masked)
