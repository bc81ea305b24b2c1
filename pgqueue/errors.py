"""The one error hierarchy users catch: everything pgqueue raises on purpose is a PgQueueError."""

from __future__ import annotations


class PgQueueError(Exception):
    """Base of every error pgqueue raises on purpose."""


class InvalidArgumentError(PgQueueError, ValueError):
    """An argument was rejected before any SQL ran; nothing was written.

    Attributes:
        argument: The name of the offending argument (``"payload"``, ``"queue"``, ...).
    """

    def __init__(self, argument: str, problem: str) -> None:
        super().__init__(f"{argument}: {problem}")
        self.argument = argument
        self.problem = problem


class InvalidPayloadError(InvalidArgumentError):
    """A payload cannot be stored as PostgreSQL ``jsonb``.

    Attributes:
        index: Position of the bad payload in an ``enqueue_many`` batch, else ``None``.
    """

    def __init__(self, problem: str, *, index: int | None = None) -> None:
        where = "payload" if index is None else f"payloads[{index}]"
        super().__init__(where, problem)
        self.index = index


class InvalidArgumentTypeError(PgQueueError, TypeError):
    """An argument had the wrong type; nothing was written."""

    def __init__(self, argument: str, expected: str, got: object) -> None:
        super().__init__(f"{argument}: expected {expected}, got {type(got).__name__}")
        self.argument = argument


class UniqueKeyError(PgQueueError):
    """A unique key could not be given to a job: its queue already has a live job with that key.

    Attributes:
        queue: The job's queue.
        key: The unique key.
    """

    def __init__(self, queue: str, key: str, problem: str) -> None:
        super().__init__(f"unique key {key!r} of queue {queue!r}: {problem}")
        self.queue = queue
        self.key = key


class UnknownDependencyError(PgQueueError, LookupError):
    """An enqueue's ``depends_on`` named ids no job has; nothing of that call was written.

    Attributes:
        ids: The unknown ids, in ascending order.

    .. versionadded:: 0.1.0
    """

    def __init__(self, ids: list[int]) -> None:
        shown = ", ".join(str(i) for i in ids[:10]) + (", ..." if len(ids) > 10 else "")
        super().__init__(f"depends_on: no job has id {shown}")
        self.ids = ids
