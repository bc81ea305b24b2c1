"""Queue names on a real database: a blank one is refused by every function before any SQL;
pausing or limiting a queue nothing knows warns (and still happens); and a queue's settings row
can be dropped again (``forget_queue_settings``).

Each API test runs four times through the contract's runner (sync ``Connection``, ``Session``,
``AsyncConnection``, ``AsyncSession``): the repository function and its asyncio twin agree.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.engine import URL
from test_contract import Runner, op
from worker_helpers import heard

import pgqueue
from pgqueue import InvalidArgumentError, QueueSettings, Rate
from pgqueue.schema import SETTINGS_HINT

BLANK = " \u3000 "


@pytest.fixture(params=["sync-connection", "sync-session", "async-connection", "async-session"])
def q(request: pytest.FixtureRequest, engine: Engine, db_url: URL) -> Iterator[Runner]:
    runner = Runner(request.param, engine, db_url)
    yield runner
    runner.close()


def _count(engine: Engine, table: str) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text(f"SELECT count(*) FROM {table}")).scalar_one())


@pytest.mark.parametrize(
    ("name", "args", "kwargs"),
    [
        ("enqueue", ({"n": 1},), {"queue": BLANK}),
        ("enqueue_many", ([{"n": 1}, {"n": 2}],), {"queue": BLANK}),
        ("pause", (BLANK,), {}),
        ("resume", (BLANK,), {}),
        ("set_queue_limits", (BLANK,), {"concurrency": 2}),
        ("queue_settings", (BLANK,), {}),
        ("forget_queue_settings", (BLANK,), {}),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_a_blank_queue_is_refused_before_any_sql(
    q: Runner, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    with pytest.raises(InvalidArgumentError, match="queue: must not be blank"):
        q.run(name, *args, **kwargs)
    assert _count(q.engine, "jobs") == 0
    assert _count(q.engine, "jobs_queues") == 0


def test_a_task_with_a_blank_queue_writes_nothing(engine: Engine) -> None:
    registry = pgqueue.Registry()

    @registry.task(queue="mail")
    def send(n: int) -> None: ...

    with engine.begin() as conn, pytest.raises(InvalidArgumentError, match="must not be blank"):
        send.options(queue=" ").enqueue(conn, 1)
    assert _count(engine, "jobs") == 0


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "pgqueue.flow" and r.levelno == logging.WARNING
    ]


@pytest.mark.parametrize(
    ("name", "kwargs", "verb"),
    [("pause", {}, "paused"), ("set_queue_limits", {"concurrency": 3}, "limited")],
)
def test_pausing_or_limiting_a_queue_nothing_knows_warns_and_still_does_it(
    q: Runner, caplog: pytest.LogCaptureFixture, name: str, kwargs: dict[str, Any], verb: str
) -> None:
    caplog.set_level(logging.WARNING, logger="pgqueue.flow")
    q.run(name, "mial", **kwargs)
    assert _warnings(caplog) == [
        f"queue 'mial' has no queued or running job and no settings: {verb} all the same "
        "(is the name right? `pgqueue queues` lists the queues)"
    ]
    assert _count(q.engine, "jobs_queues") == 1  # still allowed


def test_a_queue_with_jobs_or_settings_is_paused_and_limited_without_a_warning(
    q: Runner, caplog: pytest.LogCaptureFixture
) -> None:
    q.run("enqueue", {"n": 1}, queue="mail")
    q.run("set_queue_limits", "api", rate=Rate(10, pgqueue.MAX_DURATION))
    caplog.set_level(logging.WARNING, logger="pgqueue.flow")
    caplog.clear()
    assert q.run("pause", "mail") is True
    assert q.run("pause", "api") is True
    q.run("set_queue_limits", "mail", concurrency=2)
    assert _warnings(caplog) == []


def test_forget_queue_settings_drops_the_row_and_notifies(q: Runner, listener: Any) -> None:
    assert q.run("forget_queue_settings", "mail") is False  # nothing stored: nothing to drop
    q.tx([op("pause", "mail"), op("set_queue_limits", "mail", concurrency=2)])
    assert _count(q.engine, "jobs_queues") == 1
    heard(listener, 0.5)
    assert q.run("forget_queue_settings", "mail") is True
    assert _count(q.engine, "jobs_queues") == 0
    assert q.run("queue_settings", "mail") == [QueueSettings("mail")]  # unpaused, unlimited
    assert heard(listener, 1.0) == [("jobs", SETTINGS_HINT)]


def test_forget_joins_the_callers_transaction(q: Runner) -> None:
    q.run("pause", "mail")
    assert q.tx([op("forget_queue_settings", "mail")], commit=False) == [True]
    assert q.run("queue_settings") == [QueueSettings("mail", paused=True)]
