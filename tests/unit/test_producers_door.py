"""The producers' door (#30): one options value, one duration rule, no module-global wiring.

Every way in takes the options :class:`pgqueue.EnqueueOptions` defines, by its names, with its
defaults; every duration the API takes is a ``timedelta`` or seconds, checked by one function
before any SQL; a task writes its jobs through the runners it imports, not through a producer
set at import time, and nothing in the package runs a greenlet bridge.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import re
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine

import pgqueue
import pgqueue.aio
from pgqueue import (
    EnqueueOptions,
    InvalidArgumentError,
    InvalidArgumentTypeError,
    Periodic,
    Rate,
    RetryPolicy,
    Snooze,
    repository,
    tasks,
)
from pgqueue._base.validation import MAX_DURATION
from pgqueue._sql import calls
from pgqueue.enqueue_options import (
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_PRIORITY,
    DEFAULT_QUEUE,
    OPTION_NAMES,
    BatchKeywords,
    EnqueueKeywords,
    enqueue_door,
)
from pgqueue.waiting import Deadline

PACKAGE_DIR = Path(pgqueue.__file__).parent
#: Never connected: the worker checks its options when built.
_ENGINE = create_engine("postgresql+psycopg://nobody@localhost/none")
_HANDLERS = {"q": lambda job: None}


def _defaults() -> dict[str, Any]:
    return {
        f.name: f.default
        for f in dataclasses.fields(EnqueueOptions)
        if f.init and f.name in OPTION_NAMES
    }


def _keyword_parameters(function: Callable[..., Any]) -> dict[str, inspect.Parameter]:
    return {
        p.name: p
        for p in inspect.signature(function).parameters.values()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    }


# -- one options value -------------------------------------------------------------------------


def test_the_value_is_public_and_its_defaults_are_the_documented_ones() -> None:
    assert "EnqueueOptions" in pgqueue.__all__
    assert pgqueue.EnqueueOptions is EnqueueOptions
    assert (DEFAULT_QUEUE, DEFAULT_PRIORITY, DEFAULT_MAX_ATTEMPTS) == ("default", 0, 5)
    defaults = _defaults()
    assert defaults["queue"] == DEFAULT_QUEUE
    assert defaults["priority"] == DEFAULT_PRIORITY
    assert defaults["max_attempts"] == DEFAULT_MAX_ATTEMPTS
    assert defaults["on_dependency_failure"] == "fail"
    assert tuple(defaults) == OPTION_NAMES


@pytest.mark.parametrize(
    "door",
    [
        repository.enqueue,
        repository.enqueue_unique,
        repository.enqueue_many,
        pgqueue.aio.enqueue,
        pgqueue.aio.enqueue_unique,
        pgqueue.aio.enqueue_many,
    ],
    ids=lambda f: f"{f.__module__}.{f.__name__}",
)
def test_each_function_door_takes_the_options_by_name_type_and_default(door: Any) -> None:
    """``inspect.signature`` shows every option with :class:`EnqueueOptions`' type and
    default: the signature is made from the fields, so it cannot drift from them."""
    keywords = _keyword_parameters(door)
    fields = {f.name: f for f in dataclasses.fields(EnqueueOptions)}
    for name in OPTION_NAMES:
        if name == "unique_key" and door.__name__ != "enqueue":
            continue  # required in enqueue_unique, one per payload in enqueue_many
        assert keywords[name].annotation == fields[name].type, name
        assert keywords[name].default == fields[name].default, name
    assert "task" not in keywords


def test_the_typed_keywords_are_the_options() -> None:
    """What mypy checks a call against (``**options: Unpack[...]``) names every option."""
    assert tuple(EnqueueKeywords.__annotations__) == (*BatchKeywords.__annotations__, "unique_key")
    assert set(EnqueueKeywords.__annotations__) == set(OPTION_NAMES)


def test_tasks_registries_and_periodic_definitions_share_the_defaults() -> None:
    registry = pgqueue.Registry()

    @registry.task
    def plain() -> None: ...

    assert (plain.queue, plain.priority, plain.max_attempts) == (
        DEFAULT_QUEUE,
        DEFAULT_PRIORITY,
        DEFAULT_MAX_ATTEMPTS,
    )
    assert plain.bound_options == EnqueueOptions(task=plain.name)
    task_defaults = inspect.signature(pgqueue.Task).parameters
    assert task_defaults["queue"].default == DEFAULT_QUEUE
    assert task_defaults["priority"].default == DEFAULT_PRIORITY
    assert task_defaults["max_attempts"].default == DEFAULT_MAX_ATTEMPTS
    every = Periodic("tick", timedelta(minutes=1), "reports")
    assert (every.priority, every.max_attempts) == (DEFAULT_PRIORITY, DEFAULT_MAX_ATTEMPTS)


def test_task_options_bind_one_checked_value() -> None:
    registry = pgqueue.Registry()

    @registry.task(queue="mail", priority=3)
    def send(user_id: int) -> None: ...

    later = send.options(concurrency_key="tenant-1", depends_on=iter([4, 2, 4]))
    assert later.bound_options == EnqueueOptions(
        queue="mail", priority=3, concurrency_key="tenant-1", depends_on=(2, 4), task=send.name
    )
    assert send.options(delay=30).bound_options.delay == timedelta(seconds=30)
    assert send.bound_options == EnqueueOptions(queue="mail", priority=3, task=send.name)


def test_an_unknown_option_is_refused_by_name_before_any_sql() -> None:
    """No connection is touched: the value refuses the keyword first."""
    with pytest.raises(InvalidArgumentError, match="unknown enqueue option 'dely'"):
        repository.enqueue(None, {}, dely=5)  # type: ignore[arg-type,call-arg]
    with pytest.raises(InvalidArgumentError, match="unknown enqueue option 'task'"):
        EnqueueOptions.of({"task": "x"})


def test_the_door_decorator_keeps_the_functions_own_parameters_first() -> None:
    @enqueue_door(leave_out=["unique_key", "depends_on"])
    def door(conn: object, payload: object, *, mine: int = 1, **options: Any) -> None: ...

    names = list(inspect.signature(door).parameters)
    assert names[:3] == ["conn", "payload", "mine"]
    assert set(names[3:]) == set(OPTION_NAMES) - {"unique_key", "depends_on"}


def test_a_batchs_concurrency_keys_must_be_one_per_payload() -> None:
    with pytest.raises(InvalidArgumentTypeError, match="concurrency_keys: expected a sequence"):
        repository.enqueue_many(None, [1], concurrency_keys="tenant")  # type: ignore[arg-type]


def test_the_deprecated_batch_key_warns_and_still_means_what_it_meant() -> None:
    from pgqueue.enqueue_options import batch_options

    with pytest.warns(DeprecationWarning, match=r"concurrency_keys=\[\.\.\.\]"):
        options, keys = batch_options({"queue": "q", "concurrency_key": "t"}, None)
    assert (options, keys) == (EnqueueOptions(queue="q"), "t")
    with pytest.warns(DeprecationWarning, match="concurrency_key"):
        _, keys = batch_options({"concurrency_key": ["a", None]}, None)
    assert keys == ["a", None]
    with (
        pytest.warns(DeprecationWarning, match="concurrency_key"),
        pytest.raises(InvalidArgumentError, match="twice"),
    ):
        batch_options({"concurrency_key": "t"}, ["a"])
    assert batch_options({"concurrency_key": None}, ["a"]) == (EnqueueOptions(), ["a"])


# -- one duration rule -------------------------------------------------------------------------


#: Each duration the API takes, as a function of the value, and the argument its error names.
DURATIONS: dict[str, tuple[Callable[[Any], object], str]] = {
    "enqueue delay": (lambda v: EnqueueOptions(delay=v), "delay"),
    "claim lease": (lambda v: calls.claim("q", 1, v), "lease"),
    "extend_lease": (lambda v: repository.extend_lease(None, 1, 1, v), "lease"),  # type: ignore[arg-type]
    "snooze": (lambda v: Snooze(v), "delay"),
    "wait_for timeout": (lambda v: Deadline(1, v, 1), "timeout"),
    "wait_for poll_interval": (lambda v: Deadline(1, 1, v), "poll_interval"),
    "rate period": (lambda v: Rate(1, v), "rate.period"),
    "retry base": (lambda v: RetryPolicy(base=v), "base"),
    "purge older_than": (lambda v: repository.purge_done(None, older_than=v), "older_than"),  # type: ignore[arg-type]
    "worker lease": (lambda v: pgqueue.Worker(_ENGINE, _HANDLERS, lease=v), "lease"),
    "worker poll_interval": (
        lambda v: pgqueue.Worker(_ENGINE, _HANDLERS, poll_interval=v),
        "poll_interval",
    ),
}


@pytest.mark.parametrize(
    ("bad", "error", "says"),
    [
        (-1, InvalidArgumentError, "must not be"),
        (timedelta(seconds=-1), InvalidArgumentError, "must not be"),
        (math.nan, InvalidArgumentError, "finite"),
        (math.inf, InvalidArgumentError, "finite"),
        (MAX_DURATION.total_seconds() * 2, InvalidArgumentError, "at most"),
        (True, InvalidArgumentTypeError, "timedelta or seconds"),
        ("30", InvalidArgumentTypeError, "timedelta or seconds"),
    ],
)
@pytest.mark.parametrize("where", sorted(DURATIONS))
def test_every_duration_refuses_the_same_bad_values_naming_its_argument(
    where: str, bad: object, error: type[Exception], says: str
) -> None:
    """Before any SQL (the repository functions are given no connection at all)."""
    build, argument = DURATIONS[where]
    with pytest.raises(error, match=re.escape(says)) as raised:
        build(bad)
    assert raised.value.argument == argument  # type: ignore[attr-defined]


def test_seconds_and_timedeltas_mean_the_same_duration() -> None:
    assert EnqueueOptions(delay=90) == EnqueueOptions(delay=timedelta(seconds=90))
    assert EnqueueOptions(delay=1.5).params["delay"] == timedelta(seconds=1.5)
    assert Rate(10, 2) == Rate(10, timedelta(seconds=2))
    assert Rate(10, 2).period == timedelta(seconds=2)
    assert RetryPolicy(base=1, cap=60) == RetryPolicy(timedelta(seconds=1), timedelta(minutes=1))
    assert calls.claim("q", 1, 30).params["lease"] == timedelta(seconds=30)
    assert Snooze(2).delay == timedelta(seconds=2)
    assert Deadline(1, timedelta(seconds=3), 1).timeout == 3.0


# -- no module-global wiring, no greenlet bridge -----------------------------------------------


def test_the_seam_is_gone_from_tasks() -> None:
    for name in ("produce_with", "the_producer", "_the_producer", "Producer", "_producer"):
        assert not hasattr(tasks, name), name
    assert not hasattr(tasks, "TaskCall")
    assert not hasattr(repository, "TaskProducer")
    assert not {"produce_with", "the_producer", "Producer", "TaskCall"} & set(tasks.__all__)
    assert all(hasattr(tasks, name) for name in tasks.__all__)


def test_args_and_s_return_one_type() -> None:
    registry = pgqueue.Registry()

    @registry.task
    def add(a: int, b: int) -> int:
        return a + b

    packed, signed = add.args(1, 2), add.s(1, 2)
    assert type(packed) is type(signed) is pgqueue.Signature
    assert (packed.task, packed.args, packed.kwargs) == (signed.task, signed.args, signed.kwargs)


def test_aio_exports_only_twins_of_what_the_package_exports() -> None:
    """``AsyncExecutor`` is the one name of its own: the type its functions take."""
    assert set(pgqueue.aio.__all__) - {"AsyncExecutor"} <= set(pgqueue.__all__)


def test_nothing_in_the_package_calls_run_sync() -> None:
    """Async enqueues run on the async runner; a greenlet bridge would be a third transport."""
    found = [
        f"{path.relative_to(PACKAGE_DIR)}:{number}"
        for path in sorted(PACKAGE_DIR.rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if "run_sync" in line
    ]
    assert found == []


def test_the_grep_would_see_a_call(tmp_path: Path) -> None:
    """The check above reads every module's text, so one call anywhere fails it."""
    (tmp_path / "m.py").write_text("async def f(c):\n    await c.run_sync(g)\n", encoding="utf-8")
    lines = (tmp_path / "m.py").read_text(encoding="utf-8").splitlines()
    assert [n for n, line in enumerate(lines, start=1) if "run_sync" in line] == [2]
