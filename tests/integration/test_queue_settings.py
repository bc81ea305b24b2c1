"""Flow-control settings (#23): pause, resume, limits and their notification, on a real database.

Each API test runs four times through the contract's runner (sync ``Connection``, ``Session``,
``AsyncConnection``, ``AsyncSession``): the repository function and its asyncio twin agree.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.engine import URL
from test_contract import Runner, op
from worker_helpers import QUIET, heard

import pgqueue
from pgqueue import (
    InvalidArgumentError,
    InvalidArgumentTypeError,
    QueueSettings,
    Rate,
    use_schema,
)
from pgqueue.schema import SETTINGS_HINT


@pytest.fixture(params=["sync-connection", "sync-session", "async-connection", "async-session"])
def q(request: pytest.FixtureRequest, engine: Engine, db_url: URL) -> Iterator[Runner]:
    runner = Runner(request.param, engine, db_url)
    yield runner
    runner.close()


def _rows(engine: Engine) -> list[tuple[Any, ...]]:
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT queue, paused, concurrency, per_key, rate_limit, rate_period, "
                "window_count FROM jobs_queues ORDER BY queue"
            )
        )
        return [tuple(r) for r in rows]


def test_pause_and_resume_say_whether_the_state_changed(q: Runner) -> None:
    assert q.run("resume", "mail") is False  # never paused: nothing to do, no row written
    assert _rows(q.engine) == []
    assert q.run("pause", "mail") is True
    assert q.run("pause", "mail") is False
    assert q.run("queue_settings", "mail") == [QueueSettings("mail", paused=True)]
    assert q.run("resume", "mail") is True
    assert q.run("resume", "mail") is False
    assert _rows(q.engine) == [("mail", False, None, None, None, None, 0)]


def test_pause_joins_the_callers_transaction(q: Runner) -> None:
    assert q.tx([op("pause", "mail")], commit=False) == [True]
    assert _rows(q.engine) == []
    assert q.run("queue_settings") == []


def test_limits_round_trip_and_none_removes_them(q: Runner) -> None:
    rate = Rate(10, timedelta(seconds=1))
    got = q.run("set_queue_limits", "api", concurrency=4, per_key=2, rate=rate)
    assert got == QueueSettings("api", paused=False, concurrency=4, per_key=2, rate=rate)
    assert q.run("pause", "api") is True
    assert q.run("queue_settings", "api") == [
        QueueSettings("api", paused=True, concurrency=4, per_key=2, rate=rate)
    ]
    # All three at once: what is not given is removed; the pause stays.
    got = q.run("set_queue_limits", "api", per_key=1)
    assert got == QueueSettings("api", paused=True, per_key=1)
    assert q.run("set_queue_limits", "api") == QueueSettings("api", paused=True)
    assert _rows(q.engine) == [("api", True, None, None, None, None, 0)]


def test_queue_settings_lists_stored_queues_by_name_and_defaults_one(q: Runner) -> None:
    assert q.run("queue_settings") == []
    assert q.run("queue_settings", "never") == [QueueSettings("never")]
    q.run("set_queue_limits", "b", concurrency=1)
    q.run("pause", "a")
    assert q.run("queue_settings") == [
        QueueSettings("a", paused=True),
        QueueSettings("b", concurrency=1),
    ]
    assert q.run("queue_settings", "never") == [QueueSettings("never")]


def test_a_change_keeps_the_claims_rate_window(q: Runner) -> None:
    """The window is the claim's state: changing the limits neither resets nor opens it."""
    q.run("set_queue_limits", "api", rate=Rate(10, timedelta(seconds=1)))
    with q.engine.begin() as conn:
        conn.execute(
            text(
                "UPDATE jobs_queues SET window_start = now(), window_count = 7 WHERE queue = 'api'"
            )
        )
    q.run("set_queue_limits", "api", rate=Rate(5, timedelta(seconds=2)))
    q.run("pause", "api")
    with q.engine.connect() as conn:
        row = conn.execute(
            text("SELECT window_start IS NOT NULL, window_count FROM jobs_queues")
        ).one()
    assert tuple(row) == (True, 7)


@pytest.mark.parametrize(
    ("call", "error", "argument"),
    [
        (op("pause", ""), InvalidArgumentError, "queue"),
        (op("pause", "a,b"), InvalidArgumentError, "queue"),
        (op("resume", "a\nb"), InvalidArgumentError, "queue"),
        (op("pause", "x" * 8000), InvalidArgumentError, "queue"),
        (op("pause", 7), InvalidArgumentTypeError, "queue"),
        (op("queue_settings", "a,b"), InvalidArgumentError, "queue"),
        (op("set_queue_limits", "", concurrency=1), InvalidArgumentError, "queue"),
        (op("set_queue_limits", "q", concurrency=0), InvalidArgumentError, "concurrency"),
        (op("set_queue_limits", "q", concurrency=-3), InvalidArgumentError, "concurrency"),
        (op("set_queue_limits", "q", concurrency=True), InvalidArgumentTypeError, "concurrency"),
        (op("set_queue_limits", "q", concurrency=2.0), InvalidArgumentTypeError, "concurrency"),
        (op("set_queue_limits", "q", concurrency=2**31), InvalidArgumentError, "concurrency"),
        (op("set_queue_limits", "q", per_key=0), InvalidArgumentError, "per_key"),
        (op("set_queue_limits", "q", per_key="2"), InvalidArgumentTypeError, "per_key"),
        (op("set_queue_limits", "q", rate=(10, 1)), InvalidArgumentTypeError, "rate"),
        (op("set_queue_limits", "q", rate="10/1s"), InvalidArgumentTypeError, "rate"),
    ],
)
def test_bad_input_raises_before_sql_and_writes_nothing(
    q: Runner, listener: Any, call: Any, error: type[Exception], argument: str
) -> None:
    with pytest.raises(error) as raised:
        q.tx([op("pause", "first"), call])
    assert raised.value.argument == argument  # type: ignore[attr-defined]
    assert _rows(q.engine) == []
    assert heard(listener, 0.2) == []


def test_a_change_notifies_listeners_on_commit_only(engine: Engine, listener: Any) -> None:
    with engine.connect() as conn:
        assert pgqueue.pause(conn, "mail") is True
        assert heard(listener, QUIET) == []  # not before the commit
        conn.commit()
    assert heard(listener, 10, expect=1) == [("jobs", SETTINGS_HINT)]
    with engine.connect() as conn:
        pgqueue.set_queue_limits(conn, "mail", concurrency=2)
        assert pgqueue.resume(conn, "mail") is True
        conn.rollback()
    assert heard(listener, QUIET) == []
    with engine.begin() as conn:
        pgqueue.set_queue_limits(conn, "mail", rate=Rate(1, timedelta(minutes=1)))
    assert heard(listener, 10, expect=1) == [("jobs", SETTINGS_HINT)]
    with engine.begin() as conn:
        assert pgqueue.resume(conn, "mail") is True
        assert pgqueue.resume(conn, "mail") is False
    assert heard(listener, 10, expect=1) == [("jobs", SETTINGS_HINT)]


def test_no_change_notifies_nobody(engine: Engine, listener: Any) -> None:
    with engine.begin() as conn:
        pgqueue.pause(conn, "mail")
    assert heard(listener, 10, expect=1) == [("jobs", SETTINGS_HINT)]
    with engine.begin() as conn:
        assert pgqueue.pause(conn, "mail") is False
        assert pgqueue.resume(conn, "other") is False
    assert heard(listener, QUIET) == []


def test_a_schema_of_its_own_notifies_its_channel(engine: Engine, db_url: URL) -> None:
    """In ``use_schema(engine, "flow")`` the settings live in ``flow.jobs_queues`` and the change
    is announced on ``flow.jobs``."""
    pgqueue.migrations.upgrade(db_url, schema="flow")
    raw = engine.raw_connection()
    try:
        dbapi = raw.driver_connection
        assert dbapi is not None
        dbapi.autocommit = True
        dbapi.execute('LISTEN "flow.jobs"')
        dbapi.execute("LISTEN jobs")
        with use_schema(engine, "flow").begin() as conn:
            assert pgqueue.pause(conn, "mail") is True
            assert pgqueue.queue_settings(conn) == [QueueSettings("mail", paused=True)]
        assert heard(dbapi, 10, expect=1) == [("flow.jobs", SETTINGS_HINT)]
    finally:
        raw.close()
    assert _rows(engine) == []


# -- concurrency_key on every enqueue path ------------------------------------------------------


def _keys(engine: Engine) -> list[tuple[Any, ...]]:
    with engine.connect() as conn:
        rows = conn.execute(
            text("SELECT payload, unique_key, concurrency_key FROM jobs ORDER BY id")
        )
        return [tuple(r) for r in rows]


def test_every_enqueue_path_stores_the_concurrency_key(q: Runner) -> None:
    q.run("enqueue", "plain")
    q.run("enqueue", "one", concurrency_key="tenant-1")
    q.run("enqueue", "unique", unique_key="u1", concurrency_key="tenant-2")
    found = q.run("enqueue_unique", "again", unique_key="u1", concurrency_key="tenant-3")
    assert found.inserted is False  # the key's holder keeps its own concurrency key
    q.run("enqueue_unique", "u2", unique_key="u2", concurrency_key="tenant-3")
    q.run("enqueue_many", ["m1", "m2"], concurrency_keys=["tenant-4", "tenant-4"])
    q.run("enqueue_many", ["a1", "a2", "a3"], concurrency_keys=["t-a", None, "t-b"])
    q.run(
        "enqueue_many",
        ["k1", "k2"],
        unique_keys=["uk1", None],
        concurrency_keys=["t-c", "t-d"],
    )
    q.run("enqueue_many", ["s1"], unique_keys=["uk2"], concurrency_keys=["t-e"])
    assert _keys(q.engine) == [
        ("plain", None, None),
        ("one", None, "tenant-1"),
        ("unique", "u1", "tenant-2"),
        ("u2", "u2", "tenant-3"),
        ("m1", None, "tenant-4"),
        ("m2", None, "tenant-4"),
        ("a1", None, "t-a"),
        ("a2", None, None),
        ("a3", None, "t-b"),
        ("k1", "uk1", "t-c"),
        ("k2", None, "t-d"),
        ("s1", "uk2", "t-e"),
    ]


def test_a_held_unique_key_in_a_keyed_batch_returns_its_holder(q: Runner) -> None:
    (holder,) = q.run("enqueue_many", ["first"], unique_keys=["u"], concurrency_keys=["t1"])
    ids = q.run(
        "enqueue_many", ["dup", "new"], unique_keys=["u", "v"], concurrency_keys=["t2", "t3"]
    )
    assert ids[0] == holder
    assert _keys(q.engine) == [("first", "u", "t1"), ("new", "v", "t3")]


def test_a_batchs_concurrency_key_still_works_with_a_deprecation_warning(q: Runner) -> None:
    """For one release: one key for every job, or one per payload, as before #30."""
    with pytest.warns(DeprecationWarning, match=r"give concurrency_keys=\[\.\.\.\]"):
        q.run("enqueue_many", ["m1", "m2"], concurrency_key="tenant-4")
    with pytest.warns(DeprecationWarning, match=r"give concurrency_keys=\[\.\.\.\]"):
        q.run("enqueue_many", ["a1", "a2"], unique_keys=["u", None], concurrency_key=["t", None])
    assert _keys(q.engine) == [
        ("m1", None, "tenant-4"),
        ("m2", None, "tenant-4"),
        ("a1", "u", "t"),
        ("a2", None, None),
    ]


def test_the_batch_takes_its_keys_once(q: Runner) -> None:
    twice = op("enqueue_many", [1], concurrency_key="a", concurrency_keys=["b"])
    deprecated = pytest.warns(DeprecationWarning, match="concurrency_key")
    with deprecated, pytest.raises(InvalidArgumentError, match="twice"):
        q.tx([op("enqueue", {"first": True}), twice])
    assert _keys(q.engine) == []


@pytest.mark.parametrize(
    ("call", "error", "argument"),
    [
        (op("enqueue", {}, concurrency_key=""), InvalidArgumentError, "concurrency_key"),
        (op("enqueue", {}, concurrency_key=7), InvalidArgumentTypeError, "concurrency_key"),
        (op("enqueue", {}, concurrency_key="k" * 1001), InvalidArgumentError, "concurrency_key"),
        (
            op("enqueue_unique", {}, unique_key="u", concurrency_key=""),
            InvalidArgumentError,
            "concurrency_key",
        ),
        (
            op("enqueue_many", [1, 2], concurrency_keys=["a"]),
            InvalidArgumentError,
            "concurrency_keys",
        ),
        (
            op("enqueue_many", [1, 2], concurrency_keys=["a", "b", "c"]),
            InvalidArgumentError,
            "concurrency_keys",
        ),
        (
            op("enqueue_many", [1, 2], concurrency_keys=["a", ""]),
            InvalidArgumentError,
            "concurrency_keys[1]",
        ),
        (
            op("enqueue_many", [1, 2], unique_keys=["u", "v"], concurrency_keys=["a", 3]),
            InvalidArgumentTypeError,
            "concurrency_keys[1]",
        ),
        (
            op("enqueue_many", [1], concurrency_keys=b"a"),
            InvalidArgumentTypeError,
            "concurrency_keys",
        ),
    ],
)
def test_a_bad_concurrency_key_writes_nothing(
    q: Runner, call: Any, error: type[Exception], argument: str
) -> None:
    with pytest.raises(error) as raised:
        q.tx([op("enqueue", {"first": True}), call])
    assert raised.value.argument == argument  # type: ignore[attr-defined]
    assert _keys(q.engine) == []
