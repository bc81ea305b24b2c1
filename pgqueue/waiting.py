"""Waiting for a job to finish: :func:`wait_for`, woken by a notification, with a fallback poll.

The table's ``jobs_notify_finished`` trigger (pgqueue_0011) names the jobs each UPDATE left
``done`` or ``failed`` on the placement's finished channel (``jobs_done``, or ``<schema>.done``).
A process holds one ``LISTEN`` connection per listen URL and channel, shared by all its waits
(threads and coroutines alike) and closed a few seconds after the last one ended. A notification
is a hint: the wait reads the job again and returns only on what the row says. Whatever can go
missing (the LISTEN connection drops, a transaction-mode pooler swallows the ``LISTEN``, the
listener is still connecting) costs at most one ``poll_interval``: the wait reads the job again
then, and once more after each (re)connection of the listener.

Through a transaction-mode pooler (PgBouncer), give a direct server URL as ``listen_url`` (as for
:class:`pgqueue.Worker`), or pass ``listen=False`` and rely on polling. The first wait on a listen
URL checks in the background that a notification reaches it, as the worker does at start-up,
and logs one warning (``pgqueue.pooler``) naming both when none does.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from datetime import timedelta

from sqlalchemy import Engine
from sqlalchemy.engine import URL

from pgqueue import pooler, repository
from pgqueue._base.connections import worker_name
from pgqueue._base.urls import to_libpq_url
from pgqueue._base.validation import (
    check_bool,
    check_database_url,
    check_job_id,
    check_seconds,
)
from pgqueue.errors import InvalidArgumentTypeError, JobNotFoundError, JobTimeoutError
from pgqueue.listener import Listener
from pgqueue.results import JobResult
from pgqueue.schema import finished_channel_for, schema_of

log = logging.getLogger("pgqueue.waiting")

#: Seconds between two reads of a waited job when no notification came (the fallback poll).
DEFAULT_POLL_INTERVAL = 1.0
#: Seconds a process keeps its LISTEN connection open after its last wait ended, so that waits
#: one after the other do not each open one.
LINGER = 5.0

#: The isolation level of a wait's reads: each one statement, in no transaction.
AUTOCOMMIT = "AUTOCOMMIT"
#: What a wait whose LISTEN hears nothing should do (the end of its warning).
WAIT_ADVICE = (
    "pgqueue.wait_for wakes only on its poll (every poll_interval); pass listen_url=<direct "
    "server URL>, or listen=False to poll without listening (see pgqueue.pooler)"
)

Wake = Callable[[], None]


class Deadline:
    """One wait's arguments, checked before any SQL, and its clock: what the sync and the async
    loop share, so the two differ only by how they read and sleep."""

    def __init__(self, job_id: object, timeout: object, poll_interval: object) -> None:
        self.job_id = check_job_id(job_id)
        self.timeout = check_seconds("timeout", timeout, allow_zero=True)
        self.poll_interval = check_seconds("poll_interval", poll_interval)
        self._ends = time.monotonic() + self.timeout
        #: Reads of the job so far (the first, then one per wake-up or poll).
        self.reads = 0

    def after(self, found: JobResult | None) -> float | None:
        """What to do after a read: ``None`` when the job finished, else seconds to sleep.

        Raises:
            JobNotFoundError: no job has the id (never enqueued, or purged meanwhile).
            JobTimeoutError: the job had not finished when ``timeout`` ran out.
        """
        self.reads += 1
        if found is None:
            raise JobNotFoundError(self.job_id)
        if found.finished:
            return None
        left = self._ends - time.monotonic()
        if left <= 0:
            raise JobTimeoutError(self.job_id, self.timeout, found)
        return min(self.poll_interval, left)


class _Hub:
    """One LISTEN connection and the waits it wakes: ``job id -> wake-ups``."""

    def __init__(self, url: str | URL, channel: str) -> None:
        self._url = url
        self._channel = channel
        self._lock = threading.Lock()
        self._waits: dict[int, list[Wake]] = {}
        self._listener: Listener | None = None
        self._idle_since: float | None = None
        self._checked = False

    def check_once(self, sender: URL) -> None:
        """The first wait on this URL checks that a notification reaches it (never waited
        for: a daemon thread, at most a few seconds); one warning when none does."""
        with self._lock:
            if self._checked:
                return
            self._checked = True
        pooler.start_listen_check(self._url, sender, threading.Event(), advice=WAIT_ADVICE)

    def add(self, job_id: int, wake: Wake) -> None:
        with self._lock:
            self._waits.setdefault(job_id, []).append(wake)
            self._idle_since = None
            if self._listener is None:
                self._listener = Listener(
                    self._url,
                    self._on_notify,
                    self._on_connected,
                    channel=self._channel,
                    application_name=f"pgqueue-wait:{worker_name().split(':', 1)[-1]}",
                )
                self._listener.start()

    def remove(self, job_id: int, wake: Wake) -> None:
        with self._lock:
            wakes = self._waits.get(job_id, [])
            if wake in wakes:
                wakes.remove(wake)
            if not wakes:
                self._waits.pop(job_id, None)
            if self._waits or self._listener is None:
                return
            self._idle_since = since = time.monotonic()
        timer = threading.Timer(LINGER, self._close_if_idle, args=(since,))
        timer.daemon = True
        timer.start()

    def _close_if_idle(self, since: float) -> None:
        with self._lock:
            if self._idle_since != since or self._listener is None:
                return  # a wait came (and maybe went) since
            listener, self._listener = self._listener, None
        listener.stop(timeout=0)  # its thread ends within half a second; never wait for it

    def _on_notify(self, payload: str) -> None:
        with self._lock:
            wakes = [w for part in payload.split(",") for w in self._waits.get(_id(part), ())]
        for wake in wakes:
            _call(wake)

    def _on_connected(self) -> None:
        # Whatever finished while not listening was not heard: every wait reads its job again.
        with self._lock:
            wakes = [w for ws in self._waits.values() for w in ws]
        for wake in wakes:
            _call(wake)


def _id(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return -1


def _call(wake: Wake) -> None:
    with suppress(RuntimeError):  # an asyncio wait whose loop has closed: nobody left to wake
        wake()


_hubs: dict[tuple[str, str], _Hub] = {}
_hubs_lock = threading.Lock()


def _hub(url: str | URL, channel: str) -> _Hub:
    key = (to_libpq_url(url), channel)
    with _hubs_lock:
        hub = _hubs.get(key)
        if hub is None:
            hub = _hubs[key] = _Hub(url, channel)
        return hub


def listen_target(engine: Engine, listen: object, listen_url: object) -> URL | None:
    """Where a wait listens (``None``: it polls only), checked before any SQL."""
    if not check_bool("listen", listen):
        return None
    if listen_url is None:
        return engine.url
    return check_database_url("listen_url", listen_url)


def check_engine(engine: object, expected: type, what: str) -> None:
    if not isinstance(engine, expected):
        raise InvalidArgumentTypeError("engine", what, engine)


@contextmanager
def subscribed(engine: Engine, job_id: int, wake: Wake, url: URL | None) -> Iterator[None]:
    """``wake`` is called when a notification names ``job_id`` (and after each reconnection of
    the LISTEN connection), while the block runs; nothing when ``url`` is ``None``.

    The first wait on a listen URL checks, in the background, that a notification sent to the
    engine's URL reaches it: through a transaction-mode pooler none does, and one warning says
    so (:func:`pgqueue.pooler.warn_if_listen_is_deaf`). The check sends on a connection of its
    own, never one of the engine's pool: the caller may dispose of the engine (or, for an
    ``AsyncEngine``, own its connections' event loop) while the check still runs.
    """
    if url is None:
        yield
        return
    hub = _hub(url, finished_channel_for(schema_of(engine)))
    hub.check_once(engine.url)
    hub.add(job_id, wake)
    try:
        yield
    finally:
        hub.remove(job_id, wake)


def wait_for(
    engine: Engine,
    job_id: int,
    *,
    timeout: timedelta | float,
    poll_interval: timedelta | float = DEFAULT_POLL_INTERVAL,
    listen: bool = True,
    listen_url: str | URL | None = None,
) -> JobResult:
    """Block until job ``job_id`` is ``done`` or ``failed`` for good, and return its result.

    A failed attempt that will be retried puts the job back to ``queued``: that is not the end,
    the wait goes on. Each read is one autocommit ``SELECT`` on a connection of ``engine`` (never
    the caller's transaction; no connection is held while sleeping), of the columns
    ``pgqueue grants --role-producer`` grants.

    Args:
        engine: The application's engine (with :func:`pgqueue.use_schema` if pgqueue lives in a
            schema of its own: the wait listens on that placement's channel).
        job_id: The job, as ``enqueue`` returned it.
        timeout: How long to wait at most: a ``timedelta`` or seconds. ``0`` reads once.
        poll_interval: Seconds (or a ``timedelta``) between two reads when no notification
            came: what a missed notification costs at most. Default 1 s.
        listen: ``False``: never LISTEN, only poll every ``poll_interval``.
        listen_url: Where to LISTEN: a direct server URL when ``engine`` goes through a
            transaction-mode pooler (which would swallow the ``LISTEN``; the first wait on a
            URL that hears nothing logs one warning saying so). Default: the engine's.

    Returns:
        The finished job's :class:`pgqueue.JobResult` (``status`` ``"done"`` or ``"failed"``).

    Raises:
        JobTimeoutError: the job had not finished within ``timeout`` (a ``TimeoutError`` too);
            the job is left alone.
        JobNotFoundError: no job has this id, at once (or the job was purged while waited for).
        InvalidArgumentTypeError, InvalidArgumentError: a bad argument, before any SQL (a
            ``listen_url`` that is no PostgreSQL URL names ``listen_url``).

    .. versionadded:: 0.1.0
    """
    check_engine(engine, Engine, "sqlalchemy Engine (pgqueue.aio.wait_for takes an AsyncEngine)")
    deadline = Deadline(job_id, timeout, poll_interval)
    url = listen_target(engine, listen, listen_url)
    woken = threading.Event()
    with subscribed(engine, deadline.job_id, woken.set, url):
        while True:
            woken.clear()
            # Autocommit: one round trip per read (no BEGIN, no ROLLBACK when it goes back).
            with engine.connect().execution_options(isolation_level=AUTOCOMMIT) as conn:
                found = repository.fetch_result(conn, deadline.job_id)
            pause = deadline.after(found)
            if pause is None:
                assert found is not None
                return found
            woken.wait(pause)
