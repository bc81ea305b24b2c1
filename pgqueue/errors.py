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


class JobNotFoundError(PgQueueError, LookupError):
    """No job has this id: it never existed, or ``purge`` removed it (and its result with it).

    Raised by :func:`pgqueue.wait_for`, which cannot wait for a job that is not there
    (:func:`pgqueue.fetch_result` returns ``None`` instead).

    Attributes:
        job_id: The id asked for.

    .. versionadded:: 0.1.0
    """

    def __init__(self, job_id: int) -> None:
        super().__init__(f"job {job_id}: no such job (never enqueued, or purged)")
        self.job_id = job_id


class JobTimeoutError(PgQueueError, TimeoutError):
    """:func:`pgqueue.wait_for` gave up: the job had not finished within ``timeout``.

    The job is left alone (it may still finish); wait again or read it with
    :func:`pgqueue.fetch_result`. A ``TimeoutError`` too, so ``except TimeoutError`` catches it.

    Attributes:
        job_id: The job waited for.
        timeout: How long the wait lasted, in seconds.
        last: What the last read found (status ``queued`` or ``running``).

    .. versionadded:: 0.1.0
    """

    def __init__(self, job_id: int, timeout: float, last: object = None) -> None:
        status = getattr(last, "status", None)
        state = "" if status is None else f" (still {status})"
        super().__init__(f"job {job_id} did not finish within {timeout:g} s{state}")
        self.job_id = job_id
        self.timeout = timeout
        self.last = last
