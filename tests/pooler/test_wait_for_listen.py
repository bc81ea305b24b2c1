"""``wait_for`` through a transaction-mode PgBouncer says when its LISTEN cannot hear anything.

With the default ``listen=True`` and no ``listen_url``, the wait's LISTEN goes through the pooler,
which hands its server connection to other clients: no notification ever comes back, and the wait
silently polls. The first wait on such a URL now checks it in the background, as the worker does
at start-up (:func:`pgqueue.pooler.check_listen`), and logs one warning naming ``listen_url=``
and ``listen=False``; a wait that listens on the direct server URL is not warned about.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import create_async_engine

import pgqueue
import pgqueue.aio
from tests.integration.worker_helpers import until


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "pgqueue.pooler" and r.levelno == logging.WARNING
    ]


def finish_later(engine: Engine, queue: str, seconds: float) -> tuple[list[int], threading.Thread]:
    """Two jobs of ``queue``, each completed ``seconds`` after the previous one (or the start)."""
    with engine.begin() as conn:
        ids = pgqueue.enqueue_many(conn, [{"n": 1}, {"n": 2}], queue=queue)
        claimed = pgqueue.claim(conn, queue=queue, limit=2)

    def complete() -> None:
        for job in claimed:
            time.sleep(seconds)
            with engine.begin() as conn:
                conn.execute(text("UPDATE jobs SET result = '\"ok\"' WHERE id = :i"), {"i": job.id})
                assert pgqueue.complete(conn, job.id, job.attempts)

    thread = threading.Thread(target=complete, daemon=True)
    thread.start()
    return ids, thread


def test_wait_for_through_the_pooler_warns_once_naming_what_to_pass(
    pooled_engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    """Two waits, one after the other (the second after the check's 2 s): one warning, and both
    still return (by polling)."""
    caplog.set_level(logging.WARNING, logger="pgqueue")
    ids, thread = finish_later(pooled_engine, "waited", 3.0)
    for job_id in ids:
        got = pgqueue.wait_for(pooled_engine, job_id, timeout=60, poll_interval=0.2)
        assert got.status == "done"
    thread.join(10)
    (warning,) = warnings(caplog)
    assert "received no notification" in warning
    assert "listen_url=" in warning
    assert "listen=False" in warning


def test_aio_wait_for_through_the_pooler_warns_once_too(
    pooled_engine: Engine, pooled_url: URL, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="pgqueue")
    ids, thread = finish_later(pooled_engine, "waited", 3.0)

    async def wait_both() -> list[Any]:
        engine = create_async_engine(pooled_url, **pgqueue.pooled_engine_options())
        try:
            return [
                await pgqueue.aio.wait_for(engine, job_id, timeout=60, poll_interval=0.2)
                for job_id in ids
            ]
        finally:
            await engine.dispose()

    assert [r.status for r in asyncio.run(wait_both())] == ["done", "done"]
    thread.join(10)
    (warning,) = warnings(caplog)
    assert "listen_url=" in warning
    assert "listen=False" in warning


def test_wait_for_listening_on_the_direct_url_is_not_warned_about(
    pooled_engine: Engine, db_url: URL, caplog: pytest.LogCaptureFixture
) -> None:
    """The check itself is right: LISTEN on the server, NOTIFY through the pooler, heard."""
    caplog.set_level(logging.DEBUG, logger="pgqueue.pooler")
    ids, thread = finish_later(pooled_engine, "waited", 2.5)
    got = pgqueue.wait_for(pooled_engine, ids[0], timeout=60, poll_interval=600, listen_url=db_url)
    assert got.status == "done"  # woken by its notification: the poll is ten minutes away
    thread.join(10)
    until(lambda: not any(t.name == "pgqueue-listen-check" for t in threading.enumerate()), 15, "")
    assert warnings(caplog) == []
