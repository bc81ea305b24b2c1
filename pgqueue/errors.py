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

    Also raised for the other JSON values pgqueue stores (``argument`` names which: a job's
    progress, a task's result).

    Attributes:
        index: Position of the bad payload in an ``enqueue_many`` batch, else ``None``.
    """

    def __init__(
        self, problem: str, *, index: int | None = None, argument: str = "payload"
    ) -> None:
        where = argument if index is None else f"{argument}s[{index}]"
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


class NoCurrentJobError(PgQueueError, LookupError):
    """:func:`pgqueue.current_job` was called outside a running job's handler or task.

    .. versionadded:: 0.1.0
    """

    def __init__(self) -> None:
        super().__init__(
            "current_job(): no job is running here (call it from inside a task or handler "
            "that a pgqueue worker or pgqueue.testing.drain runs, on its own thread or task)"
        )


class UnknownTaskError(PgQueueError):
    """A claimed job names a task the worker's registry does not have (a rolling deploy: an
    older worker took a job of a newer task). Never raised to callers: the attempt fails with this
    as its ``last_error`` and is retried as usual, so a worker that knows the task runs it.

    Attributes:
        task: The unknown task's name.

    .. versionadded:: 0.1.0
    """

    def __init__(self, task: str, queue: str) -> None:
        super().__init__(
            f"unknown task {task!r} (queue {queue!r}): this worker's registry has no task of "
            "that name; the attempt fails and is retried"
        )
        self.task = task


class NoHandlerError(PgQueueError):
    """A claimed queue-keyed job (no task) is on a queue for which the worker runs tasks only.
    Never raised to callers: the attempt fails with this as its ``last_error`` and is retried as
    usual (a worker with a handler for the queue may take it).

    .. versionadded:: 0.1.0
    """

    def __init__(self, queue: str) -> None:
        super().__init__(
            f"no handler for queue {queue!r}: this worker runs tasks of that queue only, and the "
            "job names no task; the attempt fails and is retried"
        )
        self.queue = queue


class InvalidResultError(PgQueueError):
    """A task returned a value that is not JSON, or whose JSON is larger than
    ``Worker(max_result_bytes=...)``. Never raised to callers: the job fails for good (no retry:
    the same code returns the same kind of value) with this as its ``last_error``.

    .. versionadded:: 0.1.0
    """


class WorkerFailedError(PgQueueError):
    """A worker's loop could not go on: the claimer, the completer or the heartbeat failed
    step after step with errors it did not expect (each logged with its traceback). Raised by
    :meth:`pgqueue.Worker.run` once the worker stopped as for a stop: no more claims, unstarted
    jobs given back, running ones given the shutdown grace, finished ones written.
    ``pgqueue worker`` exits 1 (a supervisor restarts the process). The last error is the
    exception's ``__cause__``.

    Attributes:
        loop: The loop that gave up: ``"claimer"``, ``"completer"`` or ``"heartbeat"``.

    .. versionadded:: 0.1.0
    """

    def __init__(self, loop: str, error: BaseException) -> None:
        lines = str(error).strip().splitlines()
        said = f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__
        super().__init__(f"the worker's {loop} could not go on ({said}); the worker stopped")
        self.loop = loop


class HandlerTimeoutError(PgQueueError, TimeoutError):
    """An attempt's handler ran past the job's ``timeout`` (or the worker's
    ``default_timeout``): an async handler's task was cancelled, a sync one was asked to stop
    (``job.stopping``). The attempt fails with this error in ``last_error`` and the error
    history, and is retried by its retry policy like any failure. A ``TimeoutError`` too.

    Attributes:
        timeout: The timeout that passed, in seconds.

    .. versionadded:: 0.1.0
    """

    def __init__(self, timeout: float) -> None:
        super().__init__(f"timed out after {timeout:g} s")
        self.timeout = timeout


class WorkerStuckError(WorkerFailedError):
    """Every handler thread of a worker has been stuck in a handler past its timeout for longer
    than the lease: the worker stopped claiming, gave back the jobs it held and stopped, so that
    a supervisor (``--processes``) or the orchestrator replaces the process (a Python thread
    cannot be killed). ``pgqueue worker`` exits 3.

    Attributes:
        job_ids: The jobs whose handlers were stuck.

    .. versionadded:: 0.1.0
    """

    def __init__(self, job_ids: list[int]) -> None:
        PgQueueError.__init__(
            self,
            f"every handler thread is stuck in a handler past its timeout (jobs "
            f"{', '.join(map(str, job_ids))}); the worker stopped",
        )
        self.loop = "handler threads"
        self.job_ids = job_ids


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


class JobWaitingError(PgQueueError):
    """A retry named jobs that wait for their dependencies (``depends_on``); nothing of that call
    was written.

    Such a job is ``queued`` (shown ``waiting``) and runs once its dependencies are done: a retry
    cannot run it sooner. Cancel it (:func:`pgqueue.cancel`) to drop it; one that waits for a
    dependency deleted by hand is freed by :func:`pgqueue.unblock`.

    Attributes:
        waiting: ``{job_id: [ids of the unfinished dependencies it waits for, by id]}``; an
            empty list when they no longer exist.

    .. versionadded:: 0.1.0
    """

    def __init__(self, waiting: dict[int, list[int]]) -> None:
        said = [_waits(job_id, ids) for job_id, ids in list(waiting.items())[:5]]
        if len(waiting) > 5:
            said.append(f"and {len(waiting) - 5} more waiting job(s)")
        named = " ".join(str(i) for i in waiting)
        them = "it" if len(waiting) == 1 else "them"
        super().__init__(
            "; ".join(said) + f"; nothing was retried (cancel {them}: `pgqueue cancel {named}`)"
        )
        self.waiting = waiting


class SignalTimeoutError(PgQueueError, TimeoutError):
    """:meth:`pgqueue.JobContext.wait_for_signal` gave the job back for a signal that did not
    arrive within its ``timeout``: raised by the call in the job's next attempt (and every later
    one: the timeout is remembered like a step). A handler may catch it and go on (refund,
    escalate); uncaught, the attempt fails as for any error.

    Attributes:
        job_id: The job.
        name: The signal waited for.

    .. versionadded:: 0.1.0
    """

    def __init__(self, job_id: int, name: str) -> None:
        super().__init__(f"job {job_id}: signal {name!r} did not arrive within its timeout")
        self.job_id = job_id
        self.name = name


class StepNotStoredError(PgQueueError):
    """A durable step, sleep or signal wait could not be recorded because the job is no longer
    this attempt's (its lease was lost, or it was cancelled): nothing was written, and the
    attempt's outcome is dropped as for any lost job. Raised inside the handler.

    .. versionadded:: 0.1.0
    """

    def __init__(self, job_id: int, attempts: int, name: str) -> None:
        super().__init__(
            f"job {job_id} attempt {attempts}: {name!r} not stored, the job is no longer this "
            "attempt's (lease lost or cancelled)"
        )
        self.job_id = job_id
        self.name = name


def _waits(job_id: int, ids: list[int]) -> str:
    if not ids:
        return (
            f"job {job_id} waits for a dependency that no longer exists (deleted by hand): "
            f"`pgqueue unblock {job_id}` frees it"
        )
    what = f"job {ids[0]}" if len(ids) == 1 else "jobs " + ", ".join(str(i) for i in ids)
    return (
        f"job {job_id} waits for {what} (depends_on): it runs once "
        f"{'it is' if len(ids) == 1 else 'they are'} done, a retry cannot run it sooner"
    )
