"""Typed tasks: a function registered by name, enqueued with its own arguments.

A queue-keyed handler receives a :class:`~pgqueue.JobContext` and reads a JSON payload; a task is
the function itself. ``@registry.task`` wraps it in a :class:`Task`, generic over the function's
parameters and return type, so ``send_email.enqueue(conn, "not an int")`` is a mypy error and a
call that does not bind to the signature is refused before any SQL. The queue stays where a job
waits and which workers take it; the task (its name, stored in ``jobs.task``) is which code runs.

A task's call is stored as the job's payload, ``{"args": [...], "kwargs": {...}}``
(:func:`encode_call`); the worker reads it back with :func:`decode_call` and calls
``task.func(*args, **kwargs)``.

This module stands low in the package (the worker imports it through :mod:`pgqueue.jobs`), so it
imports no SQL and no repository.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, ParamSpec, TypeVar

from pgqueue._base.validation import check_positive_int, check_priority, check_queue
from pgqueue.errors import InvalidArgumentError, InvalidArgumentTypeError, InvalidPayloadError
from pgqueue.retry_policy import RetryPolicy

P = ParamSpec("P")
R = TypeVar("R")

#: The keys of a task's payload, and nothing else.
_CALL_KEYS = frozenset({"args", "kwargs"})


def is_async_callable(func: object) -> bool:
    """A coroutine function (or an object whose ``__call__`` is one): it runs on the event loop."""
    if inspect.iscoroutinefunction(func):
        return True
    call = getattr(func, "__call__", None)  # noqa: B004 (a callable instance's method)
    return call is not None and inspect.iscoroutinefunction(call)


def default_name(func: Callable[..., object]) -> str:
    """``"<module>.<qualname>"``: what a task is called unless ``name=`` is given."""
    module = getattr(func, "__module__", None) or "__main__"
    qualname = getattr(func, "__qualname__", None) or getattr(func, "__name__", None)
    if not isinstance(qualname, str):
        raise InvalidArgumentError("name", f"{func!r} has no __qualname__: give name=")
    return f"{module}.{qualname}"


def check_task_name(name: object) -> str:
    """A task's name: a non-empty ``str`` without U+0000 or control characters (it is shown in
    logs, the CLI and the dashboard, and matched exactly by the worker)."""
    if not isinstance(name, str):
        raise InvalidArgumentTypeError("name", "str", name)
    if not name or not name.isprintable():
        raise InvalidArgumentError(
            "name", f"a task's name must be non-empty and printable, got {name!r}"
        )
    return name


def encode_call(args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """One call of a task as its job's payload: ``{"args": [...], "kwargs": {...}}``.

    The value is JSON-checked where every payload is (the enqueue's payload validation); this
    only gives it its shape.
    """
    return {"args": list(args), "kwargs": dict(kwargs)}


def decode_call(payload: object) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The ``(args, kwargs)`` a task's payload holds (the inverse of :func:`encode_call`).

    Raises:
        InvalidPayloadError: the payload is not ``{"args": [...], "kwargs": {...}}`` (a job
            enqueued by hand, or by a producer of another version); the message says what is
            wrong, so the failed attempt's ``last_error`` does.
    """
    if not isinstance(payload, dict) or payload.keys() != _CALL_KEYS:
        raise InvalidPayloadError(
            'a task\'s payload must be {"args": [...], "kwargs": {...}}, got ' + _describe(payload)
        )
    args, kwargs = payload["args"], payload["kwargs"]
    if not isinstance(args, list):
        raise InvalidPayloadError(f'a task\'s "args" must be a JSON array, got {_describe(args)}')
    if not isinstance(kwargs, dict) or not all(isinstance(k, str) for k in kwargs):
        raise InvalidPayloadError(
            f'a task\'s "kwargs" must be a JSON object, got {_describe(kwargs)}'
        )
    return tuple(args), dict(kwargs)


def _describe(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


class Task(Generic[P, R]):
    """A function registered as a task (``@registry.task``): call it, or enqueue a call of it.

    ``task(...)`` runs the function inline, as if undecorated (an ``async def`` task returns its
    coroutine). Build tasks with :meth:`pgqueue.Registry.task`, which also refuses a second task of
    the same name.

    Attributes:
        name: The name stored in ``jobs.task``, by which a worker finds the function:
            ``"<module>.<qualname>"`` unless ``name=`` was given.
        queue: The queue its jobs wait in (default ``"default"``).
        priority: Its jobs' default priority, 0-9 (default 0).
        max_attempts: Its jobs' default attempt budget (default 5).
        retry: How a failed attempt is retried, or ``None`` for the worker's policy.
        func: The wrapped function.
        is_async: Whether ``func`` is a coroutine function (it then runs on the worker's event
            loop, a sync one in a thread).

    .. versionadded:: 0.1.0
    """

    name: str
    queue: str
    priority: int
    max_attempts: int
    retry: RetryPolicy | None
    func: Callable[P, R]
    is_async: bool

    def __init__(
        self,
        func: Callable[P, R],
        *,
        name: str | None = None,
        queue: str = "default",
        priority: int = 0,
        max_attempts: int = 5,
        retry: RetryPolicy | None = None,
    ) -> None:
        if not callable(func):
            raise InvalidArgumentTypeError("task", "a callable", func)
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise InvalidArgumentTypeError("retry", "a pgqueue.RetryPolicy or None", retry)
        self.func = func
        self.name = check_task_name(default_name(func) if name is None else name)
        self.queue = check_queue(queue)
        self.priority = check_priority(priority)
        self.max_attempts = check_positive_int("max_attempts", max_attempts)
        self.retry = retry
        self.is_async = is_async_callable(func)
        try:
            self._signature: inspect.Signature | None = inspect.signature(func)
        except (TypeError, ValueError):  # a builtin without one: calls are not checked
            self._signature = None
        functools.update_wrapper(self, func, updated=())

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Run the function inline, in this thread, with no job (``current_job()`` has none)."""
        return self.func(*args, **kwargs)

    def __repr__(self) -> str:
        return f"Task({self.name!r}, queue={self.queue!r})"

    def bind_call(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
        """Refuse a call that does not bind to the function's signature, before any SQL.

        Raises:
            InvalidArgumentError: naming the task and what Python would say of the call.
        """
        if self._signature is None:
            return
        try:
            self._signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise InvalidArgumentError(
                f"task {self.name!r}", f"arguments do not bind: {exc}"
            ) from None


__all__ = [
    "Task",
    "check_task_name",
    "decode_call",
    "default_name",
    "encode_call",
    "is_async_callable",
]
