"""The options of an enqueue as one value (River's ``InsertOpts``): every option, its type and its
default, written once.

Every way in takes these options by these names: :func:`pgqueue.enqueue`,
:func:`pgqueue.enqueue_unique`, :func:`pgqueue.enqueue_many` and their :mod:`pgqueue.aio` twins
(whose keyword signatures are made from :class:`EnqueueOptions`' fields by :func:`enqueue_door`),
:meth:`pgqueue.Task.options` and the task's defaults, :class:`pgqueue.Periodic` and
``pgqueue enqueue``. A new option is a field here (and its check in ``__post_init__``), a key of
:class:`BatchKeywords` (what mypy checks a call against), its column in the statements: every door
then takes it. (:func:`enqueue_door` and :func:`batch_options` are the doors' own helpers, not
exported.)

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import dataclasses
import inspect
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Literal, TypedDict, TypeVar

from pgqueue._base.validation import (
    check_dependencies,
    check_dependency_failure,
    check_positive_int,
    check_priority,
    check_queue,
    check_schedule,
    check_task_name,
    check_unique_key,
    encode_headers,
)
from pgqueue.errors import InvalidArgumentError, InvalidArgumentTypeError

#: The queue of a job enqueued without one.
DEFAULT_QUEUE = "default"
#: The attempts of a job enqueued without ``max_attempts``.
DEFAULT_MAX_ATTEMPTS = 5
#: The priority of a job enqueued without one (the lowest).
DEFAULT_PRIORITY = 0

#: What a job does when one of its dependencies fails for good or is cancelled.
DependencyFailure = Literal["fail", "run"]

#: ``run_at`` of a job waiting for its dependencies (pgqueue_0013): far enough that no claim
#: reaches it, near enough that every reader decodes it (psycopg reads no ``infinity`` into a
#: ``datetime``). The last dependency to finish sets ``run_at = now()``.
WAITING_RUN_AT = datetime(9999, 1, 1, tzinfo=timezone.utc)


class BatchKeywords(TypedDict, total=False):
    """The enqueue options a batch takes (all but ``unique_key``), for type checkers: the
    ``**options`` of :func:`pgqueue.enqueue_many`. Their defaults are :class:`EnqueueOptions`'."""

    queue: str
    run_at: datetime | None
    delay: timedelta | float | None
    max_attempts: int
    headers: Mapping[str, str] | None
    priority: int
    concurrency_key: str | None
    depends_on: Iterable[int] | None
    on_dependency_failure: DependencyFailure


class EnqueueKeywords(BatchKeywords, total=False):
    """Every enqueue option, for type checkers: the ``**options`` of :func:`pgqueue.enqueue` and
    :meth:`pgqueue.Task.options`. Their defaults are :class:`EnqueueOptions`'."""

    unique_key: str | None


@dataclass(frozen=True, slots=True)
class EnqueueOptions:
    """Where, when and how a job (or a batch) is enqueued; checked when built, so a bad option
    raises :class:`~pgqueue.InvalidArgumentError` before any SQL.

    The fields are the keywords of :func:`pgqueue.enqueue` (and of every other door), with their
    defaults. ``unique_key`` is for a single job (a batch takes one key per payload).

    Attributes:
        queue: The job's queue. Default ``"default"``.
        run_at: Timezone-aware time before which the job is not ready. Default: now.
        delay: Alternatively a delay from the transaction's ``now()``, a ``timedelta`` or
            seconds; not with ``run_at``. Kept as a ``timedelta``. Default ``None``.
        max_attempts: Attempts before the job fails for good. Default 5.
        headers: ``{str: str}`` metadata stored beside the payload. Default ``None``.
        priority: 0 (the default, lowest) to 9 (highest).
        unique_key: While a live job of the queue holds it, no second one is inserted.
            Default ``None``.
        concurrency_key: The key a queue's ``per_key`` limit counts by. Default ``None``.
        depends_on: Ids of jobs this one waits for, kept as a sorted tuple without repeats.
            Default ``None`` (kept as ``()``).
        on_dependency_failure: ``"fail"`` (the default) or ``"run"``.
        task: The name of the task whose call the job is (``jobs.task``), set by
            :class:`pgqueue.Task` only (no enqueue function has this keyword); ``None`` for a
            queue-keyed job.

    .. versionadded:: 0.1.0
    """

    queue: str = DEFAULT_QUEUE
    run_at: datetime | None = None
    delay: timedelta | float | None = None
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    headers: Mapping[str, str] | None = None
    priority: int = DEFAULT_PRIORITY
    unique_key: str | None = None
    concurrency_key: str | None = None
    depends_on: Iterable[int] | None = None
    on_dependency_failure: DependencyFailure = "fail"
    task: str | None = None
    #: The enqueue statements' bind parameters for these options, computed once (copy it to add
    #: the payload's). A concurrency key is not among them: a job without one keeps the
    #: statement it had before the key existed.
    params: Mapping[str, Any] = field(init=False, repr=False, compare=False)
    #: ``on_dependency_failure == "run"``, checked.
    run_on_failure: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        at, after = check_schedule(self.run_at, self.delay)
        params = {
            "queue_name": check_queue(self.queue),
            "due_at": at,
            "delay": after,
            "attempt_budget": check_positive_int("max_attempts", self.max_attempts),
            "headers_json": encode_headers(self.headers),
            "priority_level": check_priority(self.priority),
            "task_name": None if self.task is None else check_task_name(self.task),
        }
        if self.unique_key is not None:
            check_unique_key(self.unique_key)
        if self.concurrency_key is not None:
            check_unique_key(self.concurrency_key, name="concurrency_key")
        run_on_failure = check_dependency_failure(self.on_dependency_failure)
        depends_on = () if self.depends_on is None else check_dependencies(self.depends_on)
        if depends_on:
            if self.run_at is not None or self.delay is not None:
                raise InvalidArgumentError(
                    "depends_on",
                    "a job with dependencies runs once they are done: give no run_at or delay",
                )
            params["due_at"] = WAITING_RUN_AT
        if self.delay is not None:
            object.__setattr__(self, "delay", after)
        object.__setattr__(self, "depends_on", depends_on)
        object.__setattr__(self, "run_on_failure", run_on_failure)
        object.__setattr__(self, "params", params)

    @classmethod
    def of(cls, keywords: Mapping[str, Any], *, task: str | None = None) -> EnqueueOptions:
        """The checked options of a door's ``**options`` (and a task's name).

        Raises:
            InvalidArgumentError: a name that is no enqueue option (the message lists them), or
                a bad option.
        """
        unknown = sorted(set(keywords) - set(OPTION_NAMES))
        if unknown:
            raise InvalidArgumentError(
                "options",
                f"unknown enqueue option {unknown[0]!r}; the options are "
                + ", ".join(OPTION_NAMES),
            )
        return cls(**keywords, task=task)

    def keywords(self) -> dict[str, Any]:
        """The options as the keywords that built them (``task`` left out), to change some:
        ``EnqueueOptions.of({**options.keywords(), "queue": "other"}, task=options.task)``."""
        return {name: getattr(self, name) for name in OPTION_NAMES}


#: The names of the enqueue options, the keywords of every door, in their order.
OPTION_NAMES: tuple[str, ...] = tuple(
    f.name for f in dataclasses.fields(EnqueueOptions) if f.init and f.name != "task"
)

F = TypeVar("F", bound=Callable[..., Any])


def batch_options(
    keywords: Mapping[str, Any], concurrency_keys: Iterable[str | None] | None
) -> tuple[EnqueueOptions, str | Iterable[str | None] | None]:
    """The checked options of :func:`pgqueue.enqueue_many` and the batch's concurrency keys.

    ``concurrency_keys`` is one key (or ``None``) per payload. The batch's ``concurrency_key=``
    (one key for every job, or one per payload) is deprecated: it still works, with a
    :class:`DeprecationWarning`, for one release.

    Raises:
        InvalidArgumentError: both given, or a bad option.
        InvalidArgumentTypeError: ``concurrency_keys`` is a single ``str``.
    """
    if isinstance(concurrency_keys, (str, bytes)):
        raise InvalidArgumentTypeError(
            "concurrency_keys",
            "a sequence of keys (str or None), one per payload",
            concurrency_keys,
        )
    if "concurrency_key" not in keywords:
        return EnqueueOptions.of(keywords), concurrency_keys
    given = keywords["concurrency_key"]
    rest = {name: value for name, value in keywords.items() if name != "concurrency_key"}
    if given is None:
        return EnqueueOptions.of(rest), concurrency_keys
    warnings.warn(
        "enqueue_many(concurrency_key=...) is deprecated: give concurrency_keys=[...], one key "
        "(or None) per payload",
        DeprecationWarning,
        stacklevel=3,
    )
    if concurrency_keys is not None:
        raise InvalidArgumentError(
            "concurrency_key", "given twice: give concurrency_keys alone, one per payload"
        )
    return EnqueueOptions.of(rest), given


def enqueue_door(*, leave_out: Iterable[str] = ()) -> Callable[[F], F]:
    """Give a function whose options arrive as ``**options`` the signature that lists them.

    ``inspect.signature`` (and ``help()``) then shows each option as a keyword with its type and
    default, read from :class:`EnqueueOptions`' fields: the function's own parameters first, then
    every option it does not declare itself or ``leave_out`` (a batch leaves out ``unique_key``).
    """
    left_out = set(leave_out)

    def door(function: F) -> F:
        own = [
            p
            for p in inspect.signature(function).parameters.values()
            if p.kind is not inspect.Parameter.VAR_KEYWORD
        ]
        declared = {p.name for p in own} | left_out
        fields = {f.name: f for f in dataclasses.fields(EnqueueOptions)}
        options = [
            inspect.Parameter(
                name,
                inspect.Parameter.KEYWORD_ONLY,
                default=fields[name].default,
                annotation=fields[name].type,
            )
            for name in OPTION_NAMES
            if name not in declared
        ]
        function.__signature__ = inspect.Signature([*own, *options])  # type: ignore[attr-defined]
        return function

    return door


__all__ = [
    "DEFAULT_MAX_ATTEMPTS",
    "DEFAULT_PRIORITY",
    "DEFAULT_QUEUE",
    "OPTION_NAMES",
    "WAITING_RUN_AT",
    "BatchKeywords",
    "DependencyFailure",
    "EnqueueKeywords",
    "EnqueueOptions",
]
