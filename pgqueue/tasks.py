"""Typed tasks: a function registered by name, enqueued with its own arguments.

A queue-keyed handler receives a :class:`~pgqueue.JobContext` and reads a JSON payload; a task is
the function itself. ``@registry.task`` wraps it in a :class:`Task`, generic over the function's
parameters and return type, so ``send_email.enqueue(conn, "not an int")`` is a mypy error and a
call that does not bind to the signature is refused before any SQL. The queue stays where a job
waits and which workers take it; the task (its name, stored in ``jobs.task``) is which code runs.

A task's call is stored as the job's payload, ``{"args": [...], "kwargs": {...}}``
(:func:`encode_call`); the worker reads it back with :func:`decode_call` and calls
``task.func(*args, **kwargs)``.

A task writes its jobs as every other door does: it holds its checked
:class:`~pgqueue.EnqueueOptions` and runs the enqueue plans of :mod:`pgqueue._sql.calls` on the
runners of :mod:`pgqueue._sql.runners` (the blocking one for :meth:`Task.enqueue`, the awaiting
one, as :mod:`pgqueue.aio`'s, for :meth:`Task.aenqueue`). The checks that need no database, the
binding of a call to the signature and the payload's shape, happen here, before any SQL.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import copy
import functools
import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar

from pgqueue._base.validation import check_task_name, encode_payload
from pgqueue._sql import calls
from pgqueue._sql.runners import adrive, drive
from pgqueue.enqueue_options import (
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_PRIORITY,
    DEFAULT_QUEUE,
    EnqueueOptions,
)
from pgqueue.errors import InvalidArgumentError, InvalidArgumentTypeError, InvalidPayloadError
from pgqueue.retry_policy import RetryPolicy

if TYPE_CHECKING:
    from sqlalchemy import Connection
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
    from sqlalchemy.orm import Session
    from typing_extensions import Unpack

    from pgqueue.enqueue_options import EnqueueKeywords

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
    # The worker decodes every task job's payload: the well-formed case costs two lookups and
    # three type checks (JSON object keys are strings already); the checks below only word
    # the error.
    if type(payload) is dict and len(payload) == 2:
        args, kwargs = payload.get("args"), payload.get("kwargs")
        if (
            type(args) is list
            and type(kwargs) is dict
            and (not kwargs or all(type(k) is str for k in kwargs))
        ):
            return tuple(args), dict(kwargs)
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


@dataclass(frozen=True, eq=False)
class Signature:
    """A task call not yet enqueued (:meth:`Task.s`, :meth:`Task.args`): the task with its bound
    options, and the checked arguments. :func:`pgqueue.chain` and :func:`pgqueue.group` enqueue
    signatures; :meth:`Task.enqueue_many` takes a batch of them.

    Attributes:
        task: The task called, with the options bound when the signature was made (or by
            :meth:`options`).
        args: The positional arguments.
        kwargs: The keyword arguments.

    .. versionadded:: 0.1.0
    """

    task: Task[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]

    def options(self, **options: Unpack[EnqueueKeywords]) -> Signature:
        """This call with enqueue options bound, as :meth:`Task.options` binds them (a new
        signature; this one is unchanged). A chain or group adds its own ``depends_on`` to the
        ids given here.

        Raises:
            InvalidArgumentError: a bad option, or one :func:`pgqueue.enqueue` does not have.

        .. versionadded:: 0.1.0
        """
        return Signature(self.task.options(**options), self.args, self.kwargs)

    @property
    def payload(self) -> dict[str, Any]:
        """The job's payload for this call (:func:`encode_call`)."""
        return encode_call(self.args, self.kwargs)

    @property
    def settings(self) -> Mapping[str, Any]:
        """The enqueue options bound to the task (and its name), as checked."""
        return {**self.task.bound_options.keywords(), "task": self.task.name}

    def __repr__(self) -> str:
        return f"Signature({self.task.name!r}, args={self.args!r}, kwargs={self.kwargs!r})"


class Task(Generic[P, R]):
    """A function registered as a task (``@registry.task``): call it, or enqueue a call of it.

    ``task(...)`` runs the function inline, as if undecorated (an ``async def`` task returns its
    coroutine). :meth:`enqueue` inserts a job in the caller's transaction whose payload is the
    call's arguments and whose ``task`` column is :attr:`name`; a worker whose registry holds the
    task runs ``func(*args, **kwargs)``. Example::

        registry = pgqueue.Registry()

        @registry.task(queue="emails", max_attempts=3)
        def send_email(user_id: int, *, template: str = "welcome") -> dict[str, str]: ...

        with engine.begin() as conn:
            job_id = send_email.enqueue(conn, 42, template="reset")
            send_email.options(delay=timedelta(seconds=30), unique_key="u42").enqueue(conn, 7)
            ids = send_email.enqueue_many(conn, [send_email.args(1), send_email.args(2)])

    The type checker sees the function's parameters: ``send_email.enqueue(conn, "42")`` and
    an unknown keyword are errors. At run time a call that does not bind to the signature raises
    :class:`~pgqueue.InvalidArgumentError` and arguments that are not JSON raise
    :class:`~pgqueue.InvalidPayloadError`, before any SQL (nothing is written, not even the good
    calls of an ``enqueue_many`` batch). Arguments travel as JSON: a tuple arrives as a list, a
    ``datetime`` must be sent as text.

    Build tasks with :meth:`pgqueue.Registry.task`, which also refuses a second task of the same
    name.

    Attributes:
        name: The name stored in ``jobs.task``, by which a worker finds the function:
            ``"<module>.<qualname>"`` unless ``name=`` was given.
        queue: The queue its jobs wait in (default ``"default"``).
        priority: Its jobs' default priority, 0-9 (default 0).
        max_attempts: Its jobs' default attempt budget (default 5).
        retry: How a failed attempt is retried, or ``None`` for the worker's policy.
        timeout: Its jobs' default execution timeout (``timeout=`` of :func:`pgqueue.enqueue`),
            a ``timedelta``, or ``None`` (default) for the worker's ``default_timeout``.
        expires_in: Its jobs' default not-started deadline (``expires_in=``), a ``timedelta``,
            or ``None`` (default) for none.
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
    timeout: timedelta | None
    expires_in: timedelta | None
    func: Callable[P, R]
    is_async: bool

    def __init__(
        self,
        func: Callable[P, R],
        *,
        name: str | None = None,
        queue: str = DEFAULT_QUEUE,
        priority: int = DEFAULT_PRIORITY,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        retry: RetryPolicy | None = None,
        timeout: timedelta | float | None = None,
        expires_in: timedelta | float | None = None,
    ) -> None:
        if not callable(func):
            raise InvalidArgumentTypeError("task", "a callable", func)
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise InvalidArgumentTypeError("retry", "a pgqueue.RetryPolicy or None", retry)
        self.func = func
        self.name = check_task_name(default_name(func) if name is None else name, name="name")
        self._options = EnqueueOptions(
            queue=queue,
            priority=priority,
            max_attempts=max_attempts,
            timeout=timeout,
            expires_in=expires_in,
            task=self.name,
        )
        self.queue = self._options.queue
        self.priority = self._options.priority
        self.max_attempts = self._options.max_attempts
        self.timeout = self._bound(self._options.timeout)
        self.expires_in = self._bound(self._options.expires_in)
        self.retry = retry
        self.is_async = is_async_callable(func)
        try:
            self._signature: inspect.Signature | None = inspect.signature(func)
        except (TypeError, ValueError):  # a builtin without one: calls are not checked
            self._signature = None
        functools.update_wrapper(self, func, updated=())

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Run the function inline, in this thread, as a plain call (no job, no database)."""
        return self.func(*args, **kwargs)

    def __repr__(self) -> str:
        return f"Task({self.name!r}, queue={self.queue!r})"

    def options(self, **options: Unpack[EnqueueKeywords]) -> Task[P, R]:
        """This task with enqueue options bound: the defaults of its :meth:`enqueue` and
        :meth:`enqueue_many` calls (``run_at``, ``delay``, ``priority``, ``unique_key``,
        ``headers``, ``max_attempts``, ``queue``: the keywords of :func:`pgqueue.enqueue`).

        The task itself is unchanged (``options`` returns a copy, bound again by a further
        ``options``); the options are checked here. ``unique_key`` is for :meth:`enqueue` only
        (a batch refuses it).

        Raises:
            InvalidArgumentError: a bad option, or one :func:`pgqueue.enqueue` does not have.
        """
        if "task" in options:
            raise InvalidArgumentError("task", "a task's name is not an enqueue option")
        checked = EnqueueOptions.of({**self._options.keywords(), **options}, task=self.name)
        bound = copy.copy(self)
        bound._options = checked
        bound.queue = checked.queue
        bound.priority = checked.priority
        bound.max_attempts = checked.max_attempts
        bound.timeout = self._bound(checked.timeout)
        bound.expires_in = self._bound(checked.expires_in)
        return bound

    @staticmethod
    def _bound(value: timedelta | float | None) -> timedelta | None:
        """A checked option's bound (``EnqueueOptions`` keeps it as a ``timedelta``)."""
        assert value is None or isinstance(value, timedelta)
        return value

    @property
    def bound_options(self) -> EnqueueOptions:
        """The checked enqueue options of this task's jobs (its name in ``task``)."""
        return self._options

    def args(self, *args: P.args, **kwargs: P.kwargs) -> Signature:
        """Pack one call for :meth:`enqueue_many`; a call that does not bind is refused here
        (its JSON is checked by the batch, which names the call's index).

        Raises:
            InvalidArgumentError: the arguments do not bind to the function's signature.
        """
        self.check_call(args, kwargs)
        return Signature(self, args, kwargs)

    def s(self, *args: P.args, **kwargs: P.kwargs) -> Signature:
        """A signature: this call of the task with its bound options, not yet enqueued, for
        :func:`pgqueue.chain` and :func:`pgqueue.group` (Celery's ``task.s(...)``).

        The call is checked here, against the signature and as JSON, so a bad one raises before
        the chain or group runs any SQL. The task is the one this object is: a :class:`Task` is
        registered by the :meth:`pgqueue.Registry.task` that made it, so a signature always
        names a registered task (a worker whose registry lacks it fails the job's attempt,
        saying so, as for :meth:`enqueue`).

        Raises:
            InvalidArgumentError: the arguments do not bind to the function's signature.
            InvalidPayloadError: an argument is not JSON.

        .. versionadded:: 0.1.0
        """
        payload = self.payload_of(args, kwargs)
        with self._named_payload_errors():
            encode_payload(payload)
        return Signature(self, args, kwargs)

    def enqueue(self, conn: Connection | Session, /, *args: P.args, **kwargs: P.kwargs) -> int:
        """Enqueue one call in the caller's transaction (``Connection`` or ``Session``); its id.

        With a bound ``unique_key`` (:meth:`options`), the id of the live job holding the key
        when there is one, as :func:`pgqueue.enqueue` does.

        Raises:
            InvalidArgumentError: the arguments do not bind to the signature (nothing written).
            InvalidPayloadError: an argument is not JSON (nothing written).
        """
        payload = self.payload_of(args, kwargs)
        with self._named_payload_errors():
            return drive(conn, calls.enqueue(payload, self._options))

    async def aenqueue(
        self, conn: AsyncConnection | AsyncSession, /, *args: P.args, **kwargs: P.kwargs
    ) -> int:
        """:meth:`enqueue` on an ``AsyncConnection`` or ``AsyncSession`` (its transaction): the
        same plan, on the runner of :mod:`pgqueue.aio`."""
        payload = self.payload_of(args, kwargs)
        with self._named_payload_errors():
            return await adrive(conn, calls.enqueue(payload, self._options))

    def enqueue_many(self, conn: Connection | Session, batch: Iterable[Signature], /) -> list[int]:
        """Enqueue a batch of calls (:meth:`args`) in one round trip; their ids in input order.

        Every call is checked first: one that does not bind, is not JSON or is another task's
        rejects the whole batch before any SQL.

        Raises:
            InvalidArgumentError: a bad call (its index says which), or a bound ``unique_key``.
            InvalidPayloadError: a call's arguments are not JSON.
        """
        payloads = self._batch(batch)
        with self._named_payload_errors():
            return drive(conn, calls.enqueue_many(payloads, self._options))

    async def aenqueue_many(
        self, conn: AsyncConnection | AsyncSession, batch: Iterable[Signature], /
    ) -> list[int]:
        """:meth:`enqueue_many` on an ``AsyncConnection`` or ``AsyncSession``."""
        payloads = self._batch(batch)
        with self._named_payload_errors():
            return await adrive(conn, calls.enqueue_many(payloads, self._options))

    def check_call(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
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

    def payload_of(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """The payload of a call of this task, once it binds (:func:`encode_call`); its JSON is
        checked by the enqueue, before any SQL (a :class:`pgqueue.Periodic` checks it at once).

        Raises:
            InvalidArgumentError: the call does not bind to the function's signature.
        """
        self.check_call(args, kwargs)
        return encode_call(args, kwargs)

    def _batch(self, batch: Iterable[Signature]) -> list[dict[str, Any]]:
        if self._options.unique_key is not None:
            raise InvalidArgumentError(
                "unique_key", "a batch takes no unique_key: enqueue keyed calls one by one"
            )
        if isinstance(batch, (str, bytes, Mapping, Signature)):
            raise InvalidArgumentTypeError("calls", "an iterable of task.args(...)", batch)
        payloads = []
        for index, call in enumerate(batch):
            if not isinstance(call, Signature):
                raise InvalidArgumentTypeError(f"calls[{index}]", "task.args(...)", call)
            if call.task.name != self.name:
                raise InvalidArgumentError(
                    f"calls[{index}]",
                    f"a call of task {call.task.name!r}, not of {self.name!r}",
                )
            try:
                payloads.append(self.payload_of(call.args, call.kwargs))
            except InvalidArgumentError as exc:
                raise InvalidArgumentError(f"calls[{index}]", str(exc)) from None
        return payloads

    def _named_payload_errors(self) -> _NamedPayloadErrors:
        return _NamedPayloadErrors(self.name)


class _NamedPayloadErrors:
    """Add the task's name to an :class:`InvalidPayloadError` (raised before any SQL)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        if isinstance(exc, InvalidPayloadError) and "(task " not in exc.problem:
            raise InvalidPayloadError(
                f"{exc.problem} (task {self.name!r})", index=exc.index
            ) from None


__all__ = [
    "Signature",
    "Task",
    "decode_call",
    "default_name",
    "encode_call",
    "is_async_callable",
]
