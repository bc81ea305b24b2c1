"""A ``listen_url`` that is no PostgreSQL URL is refused where it is given, naming ``listen_url``.

Before, ``wait_for(listen_url="notaurl")`` raised SQLAlchemy's own ``ArgumentError`` from the
middle of the wait, and a ``Worker`` took it and failed in its LISTEN thread. The URL is parsed
before any SQL (and never printed with its password).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from sqlalchemy import Engine
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import create_async_engine

import pgqueue
import pgqueue.aio
from pgqueue import InvalidArgumentError, InvalidArgumentTypeError

BAD = [
    ("notaurl", "listen_url: not a database URL: 'notaurl'"),
    ("mysql://bob:secret@example.com/db", "listen_url: not a PostgreSQL URL: 'mysql://bob:***@"),
    ("", "listen_url: not a database URL"),
]


@pytest.mark.parametrize(("url", "says"), BAD, ids=["words", "mysql", "empty"])
def test_wait_for_refuses_a_listen_url_that_is_no_postgresql_url(
    engine: Engine, url: str, says: str
) -> None:
    with engine.begin() as conn:
        job_id = pgqueue.enqueue(conn, {})
    with pytest.raises(InvalidArgumentError) as raised:
        pgqueue.wait_for(engine, job_id, timeout=0, listen_url=url)
    assert raised.value.argument == "listen_url"
    assert str(raised.value).startswith(says)
    assert "secret" not in str(raised.value)


@pytest.mark.parametrize(("url", "says"), BAD, ids=["words", "mysql", "empty"])
def test_aio_wait_for_refuses_it_too(db_url: URL, engine: Engine, url: str, says: str) -> None:
    with engine.begin() as conn:
        job_id = pgqueue.enqueue(conn, {})

    async def wait() -> Any:
        async_engine = create_async_engine(db_url)
        try:
            return await pgqueue.aio.wait_for(async_engine, job_id, timeout=0, listen_url=url)
        finally:
            await async_engine.dispose()

    with pytest.raises(InvalidArgumentError, match=r"^listen_url: ") as raised:
        asyncio.run(wait())
    assert str(raised.value).startswith(says)


def test_wait_for_refuses_a_listen_url_of_another_type(engine: Engine) -> None:
    with pytest.raises(InvalidArgumentTypeError, match=r"^listen_url: expected str or sqlalchemy"):
        pgqueue.wait_for(engine, 1, timeout=0, listen_url=42)  # type: ignore[arg-type]


def test_a_worker_refuses_it_when_made(engine: Engine) -> None:
    with pytest.raises(InvalidArgumentError, match=r"^listen_url: not a database URL"):
        pgqueue.Worker(engine, {"q": lambda job: None}, listen_url="notaurl")


def test_a_good_listen_url_is_taken_as_a_string_or_a_url(engine: Engine, db_url: URL) -> None:
    with engine.begin() as conn:
        job_id = pgqueue.enqueue(conn, {})
    text_url = db_url.render_as_string(hide_password=False)
    for url in (text_url, db_url, text_url.replace("postgresql+psycopg://", "postgres://")):
        with pytest.raises(pgqueue.JobTimeoutError):
            pgqueue.wait_for(engine, job_id, timeout=0, listen_url=url)
