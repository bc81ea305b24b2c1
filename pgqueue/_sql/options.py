"""The options of an enqueue as one checked value, built once and passed on (as River's
``InsertOpts``).

:func:`pgqueue.enqueue`, :func:`pgqueue.enqueue_unique`, :func:`pgqueue.enqueue_many`, their
:mod:`pgqueue.aio` twins and ``pgqueue enqueue`` each build one :class:`EnqueueOptions` and hand it
to :mod:`pgqueue._sql.calls`, which never takes the options one by one. A new enqueue option is a
field here, its check and bind parameter in ``__post_init__``, its column in the statements, and
its keyword on the public functions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from pgqueue._base.validation import (
    check_positive_int,
    check_priority,
    check_queue,
    check_schedule,
    check_unique_key,
    encode_headers,
)

DEFAULT_QUEUE = "default"
DEFAULT_MAX_ATTEMPTS = 5
DEFAULT_PRIORITY = 0


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
    #: The key a queue's ``per_key`` limit counts by (a batch may instead take one per payload).
    #: Not in :attr:`params`: a job without one keeps the statement it had before the key existed.
    concurrency_key: str | None = None
    #: The enqueue statements' bind parameters for these options, computed once (copy it to add
    #: the payload's).
    params: Mapping[str, Any] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        at, after = check_schedule(self.run_at, self.delay)
        params = {
            "queue_name": check_queue(self.queue),
            "due_at": at,
            "delay": after,
            "attempt_budget": check_positive_int("max_attempts", self.max_attempts),
            "headers_json": encode_headers(self.headers),
            "priority_level": check_priority(self.priority),
        }
        if self.unique_key is not None:
            check_unique_key(self.unique_key)
        if self.concurrency_key is not None:
            check_unique_key(self.concurrency_key, name="concurrency_key")
        object.__setattr__(self, "params", params)
