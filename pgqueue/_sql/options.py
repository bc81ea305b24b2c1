"""The options of an enqueue as one checked value, built once and passed on (as River's
``InsertOpts``).

:func:`pgqueue.enqueue`, :func:`pgqueue.enqueue_unique`, :func:`pgqueue.enqueue_many`, their
:mod:`pgqueue.aio` twins and ``pgqueue enqueue`` each build one :class:`EnqueueOptions` and hand it
to :mod:`pgqueue._sql.calls`, which never takes the options one by one. A new enqueue option is a
field here, its check and bind parameter in ``__post_init__``, its column in the statements, and
its keyword on the public functions.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Literal

from pgqueue._base.validation import (
    check_dependencies,
    check_dependency_failure,
    check_positive_int,
    check_priority,
    check_queue,
    check_schedule,
    check_task_name,
    check_time_bound,
    check_unique_key,
    encode_headers,
)
from pgqueue.errors import InvalidArgumentError

DEFAULT_QUEUE = "default"
DEFAULT_MAX_ATTEMPTS = 5
DEFAULT_PRIORITY = 0

#: What a job does when one of its dependencies fails for good or is cancelled.
DependencyFailure = Literal["fail", "run"]

#: ``run_at`` of a job waiting for its dependencies (pgqueue_0013): far enough that no claim
#: reaches it, near enough that every reader decodes it (psycopg reads no ``infinity`` into a
#: ``datetime``). The last dependency to finish sets ``run_at = now()``.
WAITING_RUN_AT = datetime(9999, 1, 1, tzinfo=timezone.utc)


@dataclass(frozen=True, slots=True)
class EnqueueOptions:
    """Where, when and how a job (or a batch) is enqueued; checked when built, so a bad option
    raises :class:`~pgqueue.errors.InvalidArgumentError` before any SQL.

    The fields and their defaults are the keywords of :func:`pgqueue.repository.enqueue`.
    ``unique_key`` is for a single job (a batch takes one key per payload); ``concurrency_key``
    for a single job or, the same for every job, for a batch.
    """

    queue: str = DEFAULT_QUEUE
    run_at: datetime | None = None
    delay: timedelta | None = None
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    headers: Mapping[str, str] | None = None
    priority: int = DEFAULT_PRIORITY
    unique_key: str | None = None
    #: The name of the task whose call the job is (``jobs.task``), set by :class:`pgqueue.Task`
    #: only (no public enqueue function has this keyword); ``None`` for a queue-keyed job.
    task: str | None = None
    #: The key a queue's ``per_key`` limit counts by (a batch may instead take one per payload).
    #: Not in :attr:`params`: a job without one keeps the statement it had before the key existed.
    concurrency_key: str | None = None
    #: Ids of the jobs this one waits for (pgqueue_0013); normalised to a sorted tuple without
    #: repeats. Empty: no dependencies, and no cost.
    depends_on: Iterable[int] | None = None
    #: ``"fail"`` (the job fails when a dependency fails for good or is cancelled) or ``"run"``.
    on_dependency_failure: str = "fail"
    #: How long one attempt's handler may run (pgqueue_0015): a ``timedelta`` or seconds,
    #: positive; ``None`` (default): the worker's ``default_timeout``, if any.
    timeout: timedelta | float | None = None
    #: A job not started within this long of its ``run_at`` is never run (pgqueue_0015): a
    #: ``timedelta`` or seconds, positive; ``None`` (default): no deadline.
    expires_in: timedelta | float | None = None
    #: The enqueue statements' bind parameters for these options, computed once (copy it to add
    #: the payload's).
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
        # Only when set: a job without bounds binds what it bound before they existed (the
        # statements' parameters default to NULL).
        for name, value in (("timeout", self.timeout), ("expires_in", self.expires_in)):
            bound = check_time_bound(name, value)
            if bound is not None:
                params[name] = bound
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
        object.__setattr__(self, "depends_on", depends_on)
        object.__setattr__(self, "run_on_failure", run_on_failure)
        object.__setattr__(self, "params", params)
