"""Typed tasks, the producer side (#22): what ``Task.enqueue`` and its siblings write.

Every path runs against the real database, on the four kinds of connection the repository takes
(sync ``Connection`` and ``Session``, ``AsyncConnection`` and ``AsyncSession``). A bad call must
write nothing: the tests count the rows after it, in the same transaction and after a commit.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.engine import URL
from test_contract import Transactions

import pgqueue
from pgqueue import InvalidArgumentError, InvalidPayloadError
from pgqueue._worker import store
from pgqueue.tasks import Signature
from pgqueue.testing import assert_enqueued

registry = pgqueue.Registry()


@registry.task(queue="emails", max_attempts=3)
def send_email(user_id: int, *, template: str = "welcome") -> dict[str, str]:
    return {"user": str(user_id), "template": template}


@registry.task(queue="webhooks", name="hooks.call")
async def call_webhook(url: str, body: dict[str, Any]) -> int:
    return len(url) + len(body)


class Producer(Transactions):
    """Runs one body in one transaction on a sync or an async connection or session."""

    def one(self, task: pgqueue.Task[..., Any], *args: Any, commit: bool = True, **kw: Any) -> int:
        """``task.enqueue`` (or ``await task.aenqueue``) in a transaction of its own."""
        result: int = self._tx(
            lambda c: task.enqueue(c, *args, **kw),
            lambda c: task.aenqueue(c, *args, **kw),
            commit,
        )
        return result

    def many(
        self, task: pgqueue.Task[..., Any], calls: list[Any], *, commit: bool = True
    ) -> list[int]:
        result: list[int] = self._tx(
            lambda c: task.enqueue_many(c, calls), lambda c: task.aenqueue_many(c, calls), commit
        )
        return result


@pytest.fixture(params=["sync-connection", "sync-session", "async-connection", "async-session"])
def q(request: pytest.FixtureRequest, engine: Engine, db_url: URL) -> Iterator[Producer]:
    producer = Producer(request.param, engine, db_url)
    yield producer
    producer.close()


def _rows(engine: Engine) -> list[Any]:
    with engine.connect() as conn:
        return list(
            conn.execute(
                text(
                    "SELECT id, queue, task, payload, priority, max_attempts, unique_key, headers,"
                    " run_at - created_at AS wait FROM jobs ORDER BY id"
                )
            )
        )


def _count(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text("SELECT count(*) FROM jobs")).scalar_one())


def test_enqueue_stores_the_task_name_and_its_arguments(q: Producer, engine: Engine) -> None:
    job_id = q.one(send_email, 42, template="reset")
    hook_id = q.one(call_webhook, "https://example.com/h", {"a": [1, None]})
    first, second = _rows(engine)
    assert (first.id, first.queue, first.task) == (job_id, "emails", send_email.name)
    assert send_email.name == f"{__name__}.send_email"  # "<module>.<qualname>"
    assert first.payload == {"args": [42], "kwargs": {"template": "reset"}}
    assert (first.priority, first.max_attempts, first.unique_key) == (0, 3, None)
    assert (second.id, second.queue, second.task) == (hook_id, "webhooks", "hooks.call")
    assert second.payload == {"args": ["https://example.com/h", {"a": [1, None]}], "kwargs": {}}


def test_a_queue_keyed_job_keeps_a_null_task(q: Producer, engine: Engine) -> None:
    with engine.begin() as conn:
        pgqueue.enqueue(conn, {"plain": True}, queue="emails")
        pgqueue.enqueue_many(conn, [1, 2], queue="emails")
        pgqueue.enqueue_unique(conn, {}, queue="emails", unique_key="k")
    q.one(send_email, 1)
    assert [row.task for row in _rows(engine)] == [None, None, None, None, send_email.name]


def test_enqueue_joins_the_callers_transaction(q: Producer, engine: Engine) -> None:
    q.one(send_email, 1, commit=False)
    q.many(send_email, [send_email.args(2), send_email.args(3)], commit=False)
    assert _count(engine) == 0
    q.one(send_email, 1)
    assert _count(engine) == 1


def test_options_bind_enqueue_defaults_without_changing_the_task(
    q: Producer, engine: Engine
) -> None:
    soon = send_email.options(
        delay=timedelta(seconds=30), priority=5, headers={"trace": "t1"}, max_attempts=9
    )
    assert soon.name == send_email.name
    assert (soon.priority, soon.max_attempts, send_email.priority) == (5, 9, 0)
    q.one(soon, 7)
    q.one(send_email, 8)
    q.one(send_email.options(queue="urgent"), 9)
    bound, plain, moved = _rows(engine)
    assert (bound.priority, bound.max_attempts, bound.headers) == (5, 9, {"trace": "t1"})
    assert bound.wait >= timedelta(seconds=30)
    assert (plain.priority, plain.max_attempts, plain.headers) == (0, 3, None)
    assert plain.wait < timedelta(seconds=30)
    assert (moved.queue, moved.task) == ("urgent", send_email.name)
    assert [r.payload["args"] for r in (bound, plain, moved)] == [[7], [8], [9]]


def test_run_at_is_bound_too(q: Producer, engine: Engine) -> None:
    at = datetime.now(timezone.utc) + timedelta(days=2)
    q.one(send_email.options(run_at=at), 1)
    (row,) = _rows(engine)
    assert row.wait > timedelta(days=1)


def test_a_bound_unique_key_returns_the_live_holder(q: Producer, engine: Engine) -> None:
    keyed = send_email.options(unique_key="u42")
    first = q.one(keyed, 42)
    again = q.one(keyed, 43)
    assert again == first
    (row,) = _rows(engine)
    assert (row.unique_key, row.task, row.payload["args"]) == ("u42", send_email.name, [42])


def test_enqueue_many_is_one_batch_with_ids_in_order(q: Producer, engine: Engine) -> None:
    calls = [send_email.args(i, template=f"t{i}") for i in range(5)]
    ids = q.many(send_email.options(priority=2), calls)
    rows = _rows(engine)
    assert ids == [r.id for r in rows] == sorted(ids)
    assert [r.payload for r in rows] == [
        {"args": [i], "kwargs": {"template": f"t{i}"}} for i in range(5)
    ]
    assert {(r.task, r.queue, r.priority, r.max_attempts) for r in rows} == {
        (send_email.name, "emails", 2, 3)
    }
    assert q.many(send_email, []) == []


class NotJson:
    pass


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "says"),
    [
        (("x", "y"), {}, InvalidArgumentError, "too many positional"),
        ((1,), {"templat": "x"}, InvalidArgumentError, "unexpected keyword"),
        ((), {}, InvalidArgumentError, "missing a required argument"),
        ((NotJson(),), {}, InvalidPayloadError, "not storable as jsonb"),
        ((1,), {"template": math.nan}, InvalidPayloadError, "not storable"),
        ((_nested(500),), {}, InvalidPayloadError, "nested more than"),
        ((1,), {"template": "\x00"}, InvalidPayloadError, r"U\+0000"),
    ],
    ids=["extra", "keyword", "missing", "object", "nan", "deep", "nul"],
)
def test_a_bad_call_writes_nothing(
    q: Producer,
    engine: Engine,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    error: type[Exception],
    says: str,
) -> None:
    """Alone, or as the last of a batch of good calls: refused before any SQL, nothing written.

    The batch's call is packed without :meth:`Task.args` (which would refuse it first), so the
    batch's own check is what refuses it.
    """
    with pytest.raises(error, match=says) as single:
        q.one(send_email, *args, **kwargs)
    assert send_email.name in str(single.value)
    assert isinstance(single.value, pgqueue.PgQueueError)
    bad = Signature(send_email, args, kwargs)
    with pytest.raises(error, match=says) as batch:
        q.many(send_email, [send_email.args(1), send_email.args(2), bad])
    assert send_email.name in str(batch.value)
    assert "[2]" in str(batch.value)
    assert _count(engine) == 0


def test_args_refuses_a_call_that_does_not_bind() -> None:
    with pytest.raises(InvalidArgumentError, match="unexpected keyword") as caught:
        send_email.args(1, templat="x")  # type: ignore[call-arg]
    assert send_email.name in str(caught.value)


def test_a_bad_call_of_a_batch_is_named_by_its_index(q: Producer, engine: Engine) -> None:
    good = send_email.args(1)
    with pytest.raises(InvalidPayloadError, match=r"payloads\[1\]") as caught:
        q.many(send_email, [good, send_email.args(NotJson()), good])
    assert caught.value.index == 1
    assert _count(engine) == 0


def test_a_bad_call_leaves_the_callers_transaction_usable(engine: Engine) -> None:
    with engine.begin() as conn:
        first = send_email.enqueue(conn, 1)
        with pytest.raises(InvalidArgumentError):
            send_email.enqueue(conn, 1, 2)  # type: ignore[call-arg]
        with pytest.raises(InvalidPayloadError):
            send_email.enqueue_many(conn, [send_email.args(2), send_email.args({1, 2})])  # type: ignore[arg-type]
        second = send_email.enqueue(conn, 3)
    assert [r.id for r in _rows(engine)] == [first, second]


@pytest.mark.parametrize(
    ("calls", "says"),
    [
        ([call_webhook.args("u", {})], "a call of task 'hooks.call'"),
        ([("not", "packed")], "calls\\[1\\]: expected task.args"),
        (send_email.args(1), "calls: expected an iterable"),
    ],
    ids=["another-task", "not-packed", "one-call"],
)
def test_enqueue_many_refuses_what_is_not_its_own_calls(
    q: Producer, engine: Engine, calls: Any, says: str
) -> None:
    with pytest.raises(pgqueue.PgQueueError, match=says):
        q.many(send_email, [send_email.args(1), *calls] if isinstance(calls, list) else calls)
    assert _count(engine) == 0


def test_a_batch_refuses_a_bound_unique_key(q: Producer, engine: Engine) -> None:
    with pytest.raises(InvalidArgumentError, match="unique_key"):
        q.many(send_email.options(unique_key="k"), [send_email.args(1)])
    assert _count(engine) == 0


# -- periodic ticks that call a task --------------------------------------------------------------


def test_a_periodic_tick_of_a_task_carries_its_name_and_arguments(engine: Engine) -> None:
    """The tick's job is a task call: the task's queue, name, defaults, and the encoded args."""
    nightly = pgqueue.Periodic(
        "nightly-email", timedelta(hours=1), task=send_email, args=(7,), kwargs={"template": "d"}
    )
    plain = pgqueue.Periodic("plain", timedelta(hours=1), "emails", {"kind": "plain"})
    tick = datetime.now(timezone.utc).replace(minute=0, second=0, microsecond=0)
    with engine.begin() as conn:
        store.declare_periodic(conn, [nightly, plain], tick - timedelta(hours=1))
        assert store.fire_periodic(conn, nightly, None, [tick]).advanced
        assert store.fire_periodic(conn, plain, None, [tick]).advanced
    task_job, plain_job = _rows(engine)
    assert (task_job.queue, task_job.task, task_job.max_attempts) == ("emails", send_email.name, 3)
    assert task_job.payload == {"args": [7], "kwargs": {"template": "d"}}
    assert task_job.headers["periodic"] == "nightly-email"
    assert (plain_job.task, plain_job.payload) == (None, {"kind": "plain"})


# -- pgqueue.testing.assert_enqueued of a task ----------------------------------------------------


def test_assert_enqueued_checks_a_task_and_its_arguments(engine: Engine) -> None:
    with engine.begin() as conn:
        first = send_email.enqueue(conn, 42, template="reset")
        moved = send_email.options(queue="urgent").enqueue(conn, 42)
        pgqueue.enqueue(conn, {"args": [42], "kwargs": {}}, queue="emails")  # no task: no match
        assert assert_enqueued(conn, send_email) == [first, moved]
        assert assert_enqueued(conn, send_email, args=(42,), kwargs={"template": "reset"}) == [
            first
        ]
        assert assert_enqueued(conn, send_email, args=[42], count=2) == [first, moved]
        assert assert_enqueued(conn, send_email, kwargs={}, count=2) == [first, moved]
        with pytest.raises(AssertionError, match=re.escape(f"of task {send_email.name!r}")):
            assert_enqueued(conn, send_email, args=[43])
        with pytest.raises(AssertionError, match="args \\[42, 1\\]"):
            assert_enqueued(conn, send_email, args=[42, 1])  # exact, not contained
        with pytest.raises(AssertionError):
            assert_enqueued(conn, call_webhook)
        with pytest.raises(InvalidArgumentError, match="give the task"):
            assert_enqueued(conn, "emails", args=[42])
        with pytest.raises(InvalidPayloadError):
            assert_enqueued(conn, send_email, kwargs={"x": NotJson()})
