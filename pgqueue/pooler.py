"""Running behind PgBouncer (or another pooler) in transaction mode.

Everything pgqueue does through the engine is one transaction at a time with no session state:
no plain ``SET`` (only ``set_config(..., true)``, which is ``SET LOCAL``), no advisory locks, no
temporary tables. Two things still need care:

- psycopg prepares a statement on the server after it ran it 5 times (``prepare_threshold``);
  under transaction pooling the next execution may land on another server connection that never
  saw the ``PREPARE``. PgBouncer 1.21+ tracks prepared statements (``max_prepared_statements``);
  older ones (Debian 12 ships 1.18) fail with ``prepared statement "_pg3_0" does not exist``.
  :func:`pooled_engine_options` turns psycopg's automatic preparation off.
- ``LISTEN`` belongs to a session: through a transaction-mode pooler it is run on some server
  connection that is handed to other clients right after, and the notifications never come
  back. Give the worker a direct server URL as ``listen_url``. :func:`check_listen` notices the
  mistake (the worker runs it once at start-up, :func:`pgqueue.wait_for` once per process and
  listen URL, and each logs one warning).

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from typing import Any

import psycopg
import psycopg.sql
from sqlalchemy import Engine, text
from sqlalchemy.engine import URL

from pgqueue._base.connections import name_kwargs
from pgqueue._base.urls import mask_url, to_libpq_url, to_sqlalchemy_url

log = logging.getLogger("pgqueue.pooler")

#: PgBouncer's customary port: a worker whose engine uses it and has no ``listen_url`` is warned.
PGBOUNCER_PORT = 6432
#: How long :func:`check_listen` waits for its own notification, in seconds.
LISTEN_CHECK_TIMEOUT = 2.0


def pooled_engine_options() -> dict[str, Any]:
    """Keyword arguments for ``create_engine`` when the URL is a transaction-mode pooler.

    ``create_engine(pooler_url, **pgqueue.pooled_engine_options())`` turns off psycopg's automatic
    prepared statements (``prepare_threshold=None``), which PgBouncer before 1.21 cannot route.
    Merge your own ``connect_args`` into the returned dict if you have some.

    .. versionadded:: 0.1.0
    """
    return {"connect_args": {"prepare_threshold": None}}


def check_listen(
    listen_url: str | URL,
    engine: Engine | str | URL,
    *,
    timeout: float = LISTEN_CHECK_TIMEOUT,
    stop: threading.Event | None = None,
    application_name: str = "pgqueue-listen-check",
) -> bool | None:
    """Whether ``LISTEN`` on ``listen_url`` receives a ``NOTIFY`` sent through ``engine``.

    Listens on a private channel, sends one notification from another connection and waits up to
    ``timeout`` seconds. ``False`` means ``listen_url`` swallows notifications (a
    transaction-mode pooler); ``None`` means the check could not run (connection refused, or
    ``stop`` was set: once it is, nothing is sent through ``engine``, whose owner may be done
    with it). The listening connection is named ``application_name`` unless ``listen_url`` sets
    one. ``engine`` may also be the URL the application's engine uses:
    the notification is then sent on a connection of its own to that URL (what
    :func:`pgqueue.wait_for` does, whose caller owns its engine and may dispose of it, or whose
    ``AsyncEngine`` a thread cannot use).
    """
    channel = f"pgqueue_listen_check_{uuid.uuid4().hex[:12]}"
    try:
        with psycopg.connect(
            to_libpq_url(listen_url),
            autocommit=True,
            connect_timeout=10,
            **name_kwargs(listen_url, application_name),
        ) as conn:
            conn.execute(psycopg.sql.SQL("LISTEN {}").format(psycopg.sql.Identifier(channel)))
            if stop is not None and stop.is_set():
                return None  # the caller is done with ``engine`` (maybe disposed of): not sent
            _notify(engine, channel, application_name)
            deadline = time.monotonic() + timeout
            while (left := deadline - time.monotonic()) > 0:
                if stop is not None and stop.is_set():
                    return None
                for note in conn.notifies(timeout=min(left, 0.25)):
                    if note.channel == channel:
                        return True
            return False
    except Exception as exc:  # a check: never let it take the worker down
        log.debug("LISTEN check on %s could not run: %s", mask_url(listen_url), exc)
        return None


def _notify(engine: Engine | str | URL, channel: str, application_name: str) -> None:
    """One notification on ``channel``, sent through ``engine`` (or on a connection to a URL)."""
    if isinstance(engine, Engine):
        with engine.begin() as sender:
            sender.execute(text("SELECT pg_notify(:channel, '')"), {"channel": channel})
        return
    with psycopg.connect(
        to_libpq_url(engine),
        autocommit=True,
        connect_timeout=10,
        prepare_threshold=None,
        **name_kwargs(engine, application_name),
    ) as sender:
        sender.execute("SELECT pg_notify(%s, '')", (channel,))


#: What a worker whose LISTEN hears nothing should do (the end of its warning).
WORKER_ADVICE = (
    "Workers wake only on their fallback poll; pass listen_url=<direct server URL> "
    "(see pgqueue.pooler)"
)


def warn_if_listen_is_deaf(
    listen_url: str | URL,
    engine: Engine | str | URL,
    *,
    stop: threading.Event | None = None,
    application_name: str = "pgqueue-listen-check",
    advice: str = WORKER_ADVICE,
) -> bool | None:
    """Log a warning when ``LISTEN`` on ``listen_url`` cannot work, ending with ``advice``;
    :func:`check_listen`'s result.

    One warning at most: a ``listen_url`` that is the engine's own URL on port
    :data:`PGBOUNCER_PORT` is warned about at once, before the check itself (which then says
    nothing more); else the check's ``False`` is.
    """
    engine_url = engine.url if isinstance(engine, Engine) else to_sqlalchemy_url(engine)
    same = to_sqlalchemy_url(listen_url).render_as_string(hide_password=False) == (
        engine_url.render_as_string(hide_password=False)
    )
    warned = same and engine_url.port == PGBOUNCER_PORT
    if warned:
        log.warning(
            "the engine uses port %d (PgBouncer's) and no listen_url is set: LISTEN through "
            "a transaction-mode pooler receives nothing. %s",
            PGBOUNCER_PORT,
            advice,
        )
    reached = check_listen(listen_url, engine, stop=stop, application_name=application_name)
    if reached is False and not warned:
        log.warning(
            "LISTEN on %s received no notification within %.0f s: is it a transaction-mode "
            "pooler? %s",
            mask_url(listen_url),
            LISTEN_CHECK_TIMEOUT,
            advice,
        )
    return reached


def start_listen_check(
    listen_url: str | URL,
    engine: Engine | str | URL,
    stop: threading.Event,
    application_name: str = "pgqueue-listen-check",
    advice: str = WORKER_ADVICE,
) -> threading.Thread:
    """Run :func:`warn_if_listen_is_deaf` in a daemon thread, so start-up never waits for it."""
    thread = threading.Thread(
        target=warn_if_listen_is_deaf,
        args=(listen_url, engine),
        kwargs={"stop": stop, "application_name": application_name, "advice": advice},
        name="pgqueue-listen-check",
        daemon=True,
    )
    thread.start()
    return thread
