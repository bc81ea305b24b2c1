"""One options value for enqueue (#21): built once, checked when built, the public keywords' twin.

``pgqueue.enqueue`` and its siblings keep their keyword signatures; each builds one
:class:`EnqueueOptions` and hands it to :mod:`pgqueue._sql.calls`. These tests pin the value's
shape to the public keywords, so an option cannot be added to one and forgotten in the other.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

import pgqueue.aio
from pgqueue import InvalidArgumentError, InvalidArgumentTypeError, repository, statements
from pgqueue._sql import calls
from pgqueue.cli.common import UserError
from pgqueue.cli.ops import _enqueue_options
from pgqueue.enqueue_options import BatchKeywords, EnqueueKeywords, EnqueueOptions

AWARE = datetime(2030, 1, 1, tzinfo=timezone.utc)


#: Fields no public enqueue function takes as a keyword: a task's name is set by pgqueue.Task
#: (``send_email.enqueue(conn, ...)``), never by a caller of ``pgqueue.enqueue``.
NOT_KEYWORDS = {"task"}


def _fields() -> dict[str, Any]:
    return {
        f.name: f.default
        for f in dataclasses.fields(EnqueueOptions)
        if f.init and f.name not in NOT_KEYWORDS
    }


def _keywords(function: Any) -> dict[str, Any]:
    return {
        p.name: p.default
        for p in inspect.signature(function).parameters.values()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    }


@pytest.mark.parametrize("module", [repository, pgqueue.aio], ids=["repository", "aio"])
def test_the_fields_are_the_public_keywords_with_their_defaults(module: Any) -> None:
    """A new option is a field and a keyword; the defaults are the documented ones."""
    fields = _fields()
    assert _keywords(module.enqueue) == fields
    unique = _keywords(module.enqueue_unique)
    assert unique.pop("unique_key") is inspect.Parameter.empty  # required there
    assert unique == {k: v for k, v in fields.items() if k != "unique_key"}
    many = _keywords(module.enqueue_many)
    assert many.pop("unique_keys") is None  # one key per payload instead
    assert many.pop("concurrency_keys") is None  # likewise
    assert many == {k: v for k, v in fields.items() if k != "unique_key"}


def test_the_value_is_frozen_and_has_slots() -> None:
    options = EnqueueOptions(queue="mail")
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.queue = "other"  # type: ignore[misc]
    assert not hasattr(options, "__dict__")
    assert options == EnqueueOptions(queue="mail")


def test_building_computes_the_bind_parameters_once() -> None:
    options = EnqueueOptions(
        queue="mail", run_at=AWARE, max_attempts=3, headers={"trace": "t1"}, priority=7
    )
    assert options.params == {
        "queue_name": "mail",
        "due_at": AWARE,
        "delay": timedelta(0),
        "attempt_budget": 3,
        "headers_json": '{"trace":"t1"}',
        "priority_level": 7,
        "task_name": None,
    }
    later = EnqueueOptions(delay=timedelta(minutes=5))
    assert (later.params["due_at"], later.params["delay"]) == (None, timedelta(minutes=5))


def test_a_tasks_name_is_one_more_parameter_and_a_queue_keyed_job_binds_null() -> None:
    assert EnqueueOptions(task="app.send").params["task_name"] == "app.send"
    assert EnqueueOptions().params["task_name"] is None


def test_task_options_types_every_public_keyword() -> None:
    """``Task.options(**EnqueueKeywords)``: the typed keywords are those of ``pgqueue.enqueue``
    (an option added to the enqueue functions is added there too, or mypy refuses it)."""
    assert set(EnqueueKeywords.__annotations__) == set(_fields())
    assert set(EnqueueKeywords.__annotations__) == set(_keywords(repository.enqueue))
    assert set(BatchKeywords.__annotations__) == set(_fields()) - {"unique_key"}


@pytest.mark.parametrize(
    ("options", "argument"),
    [
        ({"queue": ""}, "queue"),
        ({"queue": "a,b"}, "queue"),
        ({"run_at": AWARE, "delay": timedelta(1)}, "run_at"),
        ({"run_at": datetime(2030, 1, 1)}, "run_at"),
        ({"delay": timedelta(seconds=-1)}, "delay"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"headers": {"a": 1}}, "headers"),
        ({"priority": 10}, "priority"),
        ({"unique_key": ""}, "unique_key"),
        ({"unique_key": "k" * 1001}, "unique_key"),
        ({"concurrency_key": ""}, "concurrency_key"),
        ({"concurrency_key": "k" * 1001}, "concurrency_key"),
        ({"concurrency_key": "é" * 501}, "concurrency_key"),  # 1,002 bytes
        ({"concurrency_key": "a\x00b"}, "concurrency_key"),
    ],
)
def test_a_bad_option_is_refused_when_the_value_is_built(
    options: dict[str, Any], argument: str
) -> None:
    with pytest.raises(InvalidArgumentError) as raised:
        EnqueueOptions(**options)
    assert raised.value.argument == argument


@pytest.mark.parametrize(
    ("options", "argument"),
    [
        ({"queue": 1}, "queue"),
        ({"max_attempts": "5"}, "max_attempts"),
        ({"priority": True}, "priority"),
        ({"task": 1}, "task"),
        ({"concurrency_key": 42}, "concurrency_key"),
        ({"concurrency_key": b"tenant"}, "concurrency_key"),
    ],
)
def test_a_mistyped_option_is_refused_when_the_value_is_built(
    options: dict[str, Any], argument: str
) -> None:
    with pytest.raises(InvalidArgumentTypeError) as raised:
        EnqueueOptions(**options)
    assert raised.value.argument == argument


def test_the_calls_take_the_value_and_add_only_the_payload() -> None:
    options = EnqueueOptions(queue="mail", priority=2)
    call = next(calls.enqueue({"to": 1}, options))
    assert call.params == {**options.params, "payload_json": '{"to":1}'}
    unique = next(calls.enqueue({"to": 1}, EnqueueOptions(queue="mail", unique_key="k")))
    assert unique.params["key"] == "k"
    many = next(calls.enqueue_many([1, 2], options))
    assert many.params == {**options.params, "batch_json": "[1,2]"}
    assert "payload_json" not in options.params  # the value's own parameters stay as built


def test_a_concurrency_key_chooses_the_keyed_statements_and_no_key_keeps_the_old_ones() -> None:
    """A job without a key runs the statement (and prepared plan) it ran before the key."""
    plain = EnqueueOptions(queue="mail")
    keyed = EnqueueOptions(queue="mail", concurrency_key="tenant-1")
    assert "concurrency_key" not in keyed.params
    assert next(calls.enqueue(1, plain)).statement is statements.ENQUEUE
    call = next(calls.enqueue(1, keyed))
    assert call.statement is statements.ENQUEUE_KEYED
    assert call.params["concurrency_key"] == "tenant-1"
    unique = EnqueueOptions(queue="mail", unique_key="u", concurrency_key="tenant-1")
    call = next(calls.enqueue_unique(1, unique))
    assert call.statement is statements.ENQUEUE_UNIQUE_KEYED
    assert (call.params["key"], call.params["concurrency_key"]) == ("u", "tenant-1")
    assert next(calls.enqueue_many([1], plain)).statement is statements.ENQUEUE_MANY
    many = next(calls.enqueue_many([1, 2], keyed))
    assert many.statement is statements.ENQUEUE_MANY_KEYED
    assert many.params["batch_json"] == '[[1,"tenant-1"],[2,"tenant-1"]]'
    aligned = next(calls.enqueue_many([1, 2], plain, concurrency_keys=["a", None]))
    assert aligned.params["batch_json"] == '[[1,"a"],[2,null]]'
    none = next(calls.enqueue_many([1, 2], plain, concurrency_keys=[None, None]))
    assert none.statement is statements.ENQUEUE_MANY  # no key at all: the plain batch
    both = next(calls.enqueue_many([1, 2], plain, ["u1", None], concurrency_keys=["a", "b"]))
    assert both.statement is statements.ENQUEUE_MANY_UNIQUE_KEYED
    assert both.params["batch_json"] == '[[1,"u1","a"],[2,null,"b"]]'


@pytest.mark.parametrize(
    ("keys", "error", "match"),
    [
        (["a"], InvalidArgumentError, "concurrency_keys: 1 keys for 2 payloads"),
        (["a", "b", "c"], InvalidArgumentError, "concurrency_keys: 3 keys for 2 payloads"),
        (["a", ""], InvalidArgumentError, r"concurrency_keys\[1\]: must not be empty"),
        (["a", 7], InvalidArgumentTypeError, r"concurrency_keys\[1\]: expected str"),
        (["a", "k" * 1001], InvalidArgumentError, r"concurrency_keys\[1\]: 1001 bytes"),
        ("", InvalidArgumentError, "concurrency_key: must not be empty"),
        (7, InvalidArgumentTypeError, "concurrency_keys: expected a sequence"),
        ({"a": 1, "b": 2}, InvalidArgumentTypeError, "concurrency_keys: expected a sequence"),
    ],
)
def test_a_batchs_concurrency_keys_are_checked_before_the_statement(
    keys: Any, error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        next(calls.enqueue_many([1, 2], EnqueueOptions(), concurrency_keys=keys))
    with pytest.raises(error, match=match):
        next(calls.enqueue_many([1, 2], EnqueueOptions(), ["u", "v"], concurrency_keys=keys))


def test_a_batchs_key_given_twice_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="concurrency_key: given twice"):
        next(calls.enqueue_many([1], EnqueueOptions(concurrency_key="a"), concurrency_keys="b"))


def test_enqueue_unique_without_a_key_is_refused_as_before() -> None:
    with pytest.raises(InvalidArgumentTypeError, match="unique_key: expected str, got NoneType"):
        next(calls.enqueue_unique({}, EnqueueOptions()))


def _args(**flags: Any) -> argparse.Namespace:
    defaults = {"queue": "mail", "delay": None, "max_attempts": 5, "priority": "0"}
    return argparse.Namespace(**{**defaults, "unique_key": None, "concurrency_key": None, **flags})


def test_the_command_line_builds_one_value_from_its_flags() -> None:
    built = _enqueue_options(_args(priority="7", unique_key="u:1", delay=timedelta(seconds=9)))
    assert built == EnqueueOptions(
        queue="mail", delay=timedelta(seconds=9), priority=7, unique_key="u:1"
    )
    keyed = _enqueue_options(_args(concurrency_key="tenant-42"))
    assert keyed == EnqueueOptions(queue="mail", concurrency_key="tenant-42")


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"priority": "high"}, "--priority must be an integer from 0 to 9 (higher runs first)"),
        ({"priority": "10"}, "--priority must be an integer from 0 to 9 (higher runs first)"),
        ({"unique_key": ""}, "--unique-key must not be empty"),
        ({"concurrency_key": ""}, "--concurrency-key must not be empty"),
        ({"concurrency_key": "k" * 1001}, "--concurrency-key 1001 bytes, more than 1000"),
    ],
)
def test_the_command_line_names_its_flag_when_the_value_refuses_it(
    flags: dict[str, Any], message: str
) -> None:
    with pytest.raises(UserError) as raised:
        _enqueue_options(_args(**flags))
    assert str(raised.value).startswith(message)


def test_depends_on_is_a_sorted_tuple_without_repeats_and_waits_far_ahead() -> None:
    """A waiting job's ``run_at`` is the far time the claim never reaches (pgqueue_0013)."""
    from pgqueue.enqueue_options import WAITING_RUN_AT

    options = EnqueueOptions(depends_on=iter([9, 3, 9]), on_dependency_failure="run")
    assert options.depends_on == (3, 9)
    assert options.run_on_failure is True
    assert options.params["due_at"] == WAITING_RUN_AT
    plain = EnqueueOptions(depends_on=[])
    assert plain.depends_on == ()
    assert plain.params["due_at"] is None


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"depends_on": "12"}, InvalidArgumentTypeError),
        ({"depends_on": 12}, InvalidArgumentTypeError),
        ({"depends_on": [True]}, InvalidArgumentTypeError),
        ({"depends_on": [2**63]}, InvalidArgumentError),
        ({"depends_on": [1], "delay": timedelta(seconds=1)}, InvalidArgumentError),
        (
            {"depends_on": [1], "run_at": datetime(2030, 1, 1, tzinfo=timezone.utc)},
            InvalidArgumentError,
        ),
        ({"on_dependency_failure": "skip"}, InvalidArgumentError),
    ],
)
def test_bad_dependency_options_name_their_argument(
    kwargs: dict[str, Any], error: type[Exception]
) -> None:
    with pytest.raises(error) as raised:
        EnqueueOptions(**kwargs)
    assert "depend" in str(raised.value)
