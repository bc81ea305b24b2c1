"""Typed tasks without a database (#22): registration, binding, the payload's shape, and typing.

The typing test runs ``mypy --strict`` (the project's settings) on two small files: one of the
calls the issue shows, which must pass, and one of mistakes, which must fail on exactly the
lines its ``# E: <codes>`` comments mark, with those error codes.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import pgqueue
from pgqueue import InvalidArgumentError, InvalidArgumentTypeError, InvalidPayloadError
from pgqueue.tasks import Signature, decode_call, encode_call

ROOT = Path(__file__).resolve().parents[2]
CASES = Path(__file__).parent / "typing_cases"


def _registry_with_send() -> tuple[pgqueue.Registry, pgqueue.Task[..., Any]]:
    registry = pgqueue.Registry()

    @registry.task(queue="emails", max_attempts=3)
    def send(user_id: int, *, template: str = "welcome") -> str:
        return f"{user_id}:{template}"

    return registry, send


def test_a_task_is_named_after_its_module_and_qualname_and_runs_inline() -> None:
    registry, send = _registry_with_send()
    assert send.name == f"{__name__}._registry_with_send.<locals>.send"
    assert (send.queue, send.priority, send.max_attempts, send.retry) == ("emails", 0, 3, None)
    assert send(7, template="x") == "7:x"  # a plain call runs the function
    assert send.__name__ == "send"
    assert registry.tasks == {send.name: send}
    assert len(registry) == 0  # the mapping of queue handlers is unchanged
    assert not send.is_async


def test_bare_and_called_decorators_and_async_functions() -> None:
    registry = pgqueue.Registry()

    @registry.task
    async def ping() -> None:
        return None

    @registry.task(name="custom.name", priority=4, retry=pgqueue.RetryPolicy())
    def other() -> int:
        return 1

    assert ping.is_async
    assert not other.is_async
    assert (other.name, other.priority) == ("custom.name", 4)
    assert isinstance(other.retry, pgqueue.RetryPolicy)
    assert set(registry.tasks) == {ping.name, "custom.name"}


def test_a_second_task_of_the_same_name_is_refused() -> None:
    registry = pgqueue.Registry()
    registry.task(name="dup")(lambda: 1)
    with pytest.raises(InvalidArgumentError, match="a task named 'dup' is already registered"):
        registry.task(name="dup")(lambda: 2)
    assert len(registry.tasks) == 1


def test_handlers_and_tasks_mix_in_one_registry() -> None:
    registry = pgqueue.Registry()
    registry.handler("emails")(lambda job: None)
    registry.task(name="emails", queue="emails")(lambda: None)  # another namespace
    assert list(registry) == ["emails"]
    assert list(registry.tasks) == ["emails"]


def test_the_tasks_mapping_is_read_only() -> None:
    registry, _ = _registry_with_send()
    with pytest.raises(TypeError):
        registry.tasks["x"] = None  # type: ignore[index]


@pytest.mark.parametrize(
    ("options", "error", "argument"),
    [
        ({"queue": ""}, InvalidArgumentError, "queue"),
        ({"priority": 10}, InvalidArgumentError, "priority"),
        ({"max_attempts": 0}, InvalidArgumentError, "max_attempts"),
        ({"name": ""}, InvalidArgumentError, "name"),
        ({"name": "a\nb"}, InvalidArgumentError, "name"),
        ({"name": 3}, InvalidArgumentTypeError, "name"),
        ({"retry": 3}, InvalidArgumentTypeError, "retry"),
    ],
)
def test_bad_task_options_are_refused_at_registration(
    options: dict[str, Any], error: type[Exception], argument: str
) -> None:
    registry = pgqueue.Registry()
    with pytest.raises(error) as raised:
        registry.task(**options)(lambda: None)
    assert raised.value.argument == argument  # type: ignore[attr-defined]
    assert not registry.tasks


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"priority": 11}, "priority"),
        ({"run_at": None, "unique_key": ""}, "unique_key"),
        ({"dely": 5}, "unknown enqueue option 'dely'"),
        ({"task": "x"}, "a task's name is not an enqueue option"),
        ({"headers": {"a": 1}}, "headers"),
    ],
)
def test_bound_options_are_checked_when_bound(options: dict[str, Any], says: str) -> None:
    _, send = _registry_with_send()
    with pytest.raises(InvalidArgumentError, match=says):
        send.options(**options)


def test_options_return_a_copy_and_stack() -> None:
    _, send = _registry_with_send()
    high = send.options(priority=7)
    keyed = high.options(unique_key="k", queue="other")
    assert (send.priority, high.priority, keyed.priority) == (0, 7, 7)
    assert (send.queue, keyed.queue) == ("emails", "other")
    assert keyed.name == send.name
    assert keyed.func is send.func


@pytest.mark.parametrize(
    ("args", "kwargs", "says"),
    [
        ((1, 2), {}, "too many positional arguments"),
        ((), {}, "missing a required argument: 'user_id'"),
        ((1,), {"nope": 1}, "unexpected keyword argument 'nope'"),
        ((), {"user_id": 1, "template": "t", "x": 2}, "unexpected keyword argument 'x'"),
    ],
)
def test_a_call_that_does_not_bind_names_the_task(
    args: tuple[Any, ...], kwargs: dict[str, Any], says: str
) -> None:
    _, send = _registry_with_send()
    with pytest.raises(InvalidArgumentError, match=re.escape(says)) as raised:
        send.args(*args, **kwargs)
    assert raised.value.argument == f"task {send.name!r}"


def test_args_packs_a_call_and_its_payload() -> None:
    _, send = _registry_with_send()
    call = send.args(1, template="x")
    assert isinstance(call, Signature)
    assert (call.task, call.args, call.kwargs) == (send, (1,), {"template": "x"})
    assert call.payload == {"args": [1], "kwargs": {"template": "x"}}
    assert send.payload_of((user := 2,), {}) == {"args": [user], "kwargs": {}}


def test_encode_and_decode_are_inverse() -> None:
    payload = encode_call((1, [2, 3], {"a": None}), {"k": "v"})
    assert payload == {"args": [1, [2, 3], {"a": None}], "kwargs": {"k": "v"}}
    assert decode_call(payload) == ((1, [2, 3], {"a": None}), {"k": "v"})
    assert decode_call({"args": [], "kwargs": {}}) == ((), {})


@pytest.mark.parametrize(
    ("payload", "says"),
    [
        ([1, 2], "must be"),
        ({"args": []}, "must be"),
        ({"args": [], "kwargs": {}, "extra": 1}, "must be"),
        ({"args": {}, "kwargs": {}}, '"args" must be a JSON array'),
        ({"args": [], "kwargs": []}, '"kwargs" must be a JSON object'),
        (None, "must be"),
    ],
)
def test_decode_refuses_a_payload_that_is_no_call(payload: object, says: str) -> None:
    with pytest.raises(InvalidPayloadError, match=re.escape(says)):
        decode_call(payload)


def test_task_is_public() -> None:
    assert "Task" in pgqueue.__all__
    assert pgqueue.Task is pgqueue.tasks.Task


def _mypy(*paths: Path) -> subprocess.CompletedProcess[str]:
    """One ``mypy --strict`` run over ``paths``, on the project's own cache: ``.ci/run`` types
    the package first, so this run reads pgqueue's and its dependencies' types, not redoes them."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--show-error-codes",
            "--no-error-summary",
            *map(str, paths),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )


def _marked(path: Path) -> set[tuple[int, str]]:
    """The ``(line, code)`` pairs the file's ``# E: code code`` comments expect."""
    expected = set()
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        marked = re.search(r"\)  # E: ([a-z -]+)$", line)
        if marked:
            expected |= {(number, code) for code in marked.group(1).split()}
    return expected


def test_mypy_types_a_tasks_calls_as_its_functions() -> None:
    """``send_email.enqueue(conn, "not an int")``, a wrong keyword, a wrong return use: each is a
    mypy error on its line; the calls the issue shows are not. Both files in one run: every error
    names its file, so the good file's silence and the bad file's errors are read apart."""
    good_file, bad_file = CASES / "tasks_ok.py", CASES / "tasks_bad.py"
    run = _mypy(good_file, bad_file)
    assert run.returncode == 1, run.stdout + run.stderr
    assert run.stderr == "", run.stderr
    errors = re.findall(r"^([^\s:]+\.py):(\d+): error: .*\[([a-z-]+)\]$", run.stdout, re.M)
    assert errors, run.stdout
    assert {Path(name).name for name, _, _ in errors} == {"tasks_bad.py"}, run.stdout
    found = {(int(line), code) for _, line, code in errors}
    expected = _marked(bad_file)
    assert len(expected) >= 8
    assert found == expected, run.stdout
    assert 'incompatible type "str"; expected "int"' in run.stdout
    assert 'Unexpected keyword argument "templat"' in run.stdout


def test_a_periodic_definition_may_call_a_task() -> None:
    _, send = _registry_with_send()
    every = pgqueue.Periodic("p", "@daily", task=send, args=[1], kwargs={"template": "t"})
    assert (every.queue, every.task, every.max_attempts, every.priority) == (
        "emails",
        send.name,
        3,
        0,
    )
    assert every.payload == {"args": [1], "kwargs": {"template": "t"}}
    assert pgqueue.Periodic("p", "@daily", task=send, args=[1], max_attempts=9).max_attempts == 9
    plain = pgqueue.Periodic("q", "@daily", "reports")
    assert (plain.task, plain.payload, plain.max_attempts) == (None, {}, 5)


@pytest.mark.parametrize(
    ("arguments", "error", "says"),
    [
        ({"queue": "q"}, InvalidArgumentError, "not both"),
        ({"payload": {}}, InvalidArgumentError, "not both"),
        ({"args": ["x", "y"]}, InvalidArgumentError, "too many positional"),
        ({"args": [object()]}, InvalidPayloadError, "not storable"),
        ({"args": "1"}, InvalidArgumentTypeError, "args"),
    ],
)
def test_a_periodic_task_definition_is_checked(
    arguments: dict[str, Any], error: type[Exception], says: str
) -> None:
    _, send = _registry_with_send()
    with pytest.raises(error, match=says):
        pgqueue.Periodic("p", "@daily", task=send, **arguments)


def test_a_periodic_definition_needs_a_queue_or_a_task() -> None:
    with pytest.raises(InvalidArgumentError, match="give a queue"):
        pgqueue.Periodic("p", "@daily")
    with pytest.raises(InvalidArgumentError, match="task="):
        pgqueue.Periodic("p", "@daily", "q", args=[1])
    with pytest.raises(InvalidArgumentTypeError, match=r"a pgqueue\.Task"):
        pgqueue.Periodic("p", "@daily", task=len)  # type: ignore[arg-type]


def test_the_registry_adds_a_periodic_task_by_its_arguments() -> None:
    registry, send = _registry_with_send()
    added = registry.periodic("p", "@daily", task=send, args=(1,))
    assert added.task == send.name
    assert registry.periodic_definitions == (added,)
