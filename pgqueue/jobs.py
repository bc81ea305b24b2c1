"""What handlers and the worker's components share: the job a handler gets, handlers, outcomes.

Nothing here imports the worker, so the worker's components, the hooks and the test helpers all
take their types from this module (``pgqueue.JobContext``, ``pgqueue.Registry``,
``pgqueue.Snooze`` and ``pgqueue.WorkerStats`` are the public names).

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import asyncio
import enum
import json
import threading
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from types import MappingProxyType
from typing import Any, ParamSpec, Protocol, TypeVar, cast, overload

from sqlalchemy import Connection, Engine

from pgqueue import repository
from pgqueue._base.events import stopping_event
from pgqueue._base.joblog import LogBuffer
from pgqueue._base.validation import check_queue, check_snooze_delay, encode_payload
from pgqueue.durable import DEFAULT_MAX_STEP_BYTES, NOT_FOUND, DurableAttempt, Suspension
from pgqueue.enqueue_options import DEFAULT_MAX_ATTEMPTS, DEFAULT_PRIORITY, DEFAULT_QUEUE
from pgqueue.errors import (
    InvalidArgumentError,
    InvalidArgumentTypeError,
    NoCurrentJobError,
    PgQueueError,
)
from pgqueue.periodic import Periodic
from pgqueue.results import ClaimedJob, JobResult
from pgqueue.retry_policy import RetryPolicy
from pgqueue.tasks import Task, is_async_callable

P = ParamSpec("P")
R = TypeVar("R")

#: What a handler is: called with the job; an exception fails the job. Its return value is stored
#: in ``jobs.result`` when it is JSON (any other is ignored, with a log line). An ``async def``
#: handler (a coroutine function) runs on the worker's event loop instead of a thread.
Handler = Callable[["JobContext"], object]


class JobMarks:
    """The worker's bookkeeping of one job it holds, beside the :class:`JobContext` its handler
    gets (reached with :func:`marks_of`; not public API).

    Who writes what: the runtime, under its lock, marks a job ``lease_lost`` or ``cancelled``
    (the handler reads both through the context's read-only properties); the heartbeat, the
    completer and the executors each record the progress they wrote (:meth:`written`), from
    their own threads. The progress the handler set is kept here too, one tuple assigned at
    once, so another thread reads a number and its text together.
    """

    __slots__ = (
        "cancelled",
        "capture",
        "durable",
        "lease_lost",
        "logs",
        "max_step_bytes",
        "progress",
        "progress_written",
    )

    def __init__(self) -> None:
        self.lease_lost = False
        self.cancelled = False
        #: Whether the ``logging`` records of the handler's thread or task are recorded as the
        #: job's lines (``Worker(capture_logs=True)``: set by the runtime when it holds the job).
        self.capture = False
        #: The attempt's lines (:class:`~pgqueue._base.joblog.LogBuffer`), made by the first.
        self.logs: LogBuffer | None = None
        #: The attempt's steps, sleeps and signal waits, made at its first use (else ``None``).
        self.durable: DurableAttempt | None = None
        #: The bound of a step's JSON value: the worker's ``max_result_bytes`` (set at start).
        self.max_step_bytes = DEFAULT_MAX_STEP_BYTES
        #: ``(number, JSON text)`` of the last :meth:`JobContext.set_progress`, ``None`` before.
        self.progress: tuple[int, str] | None = None
        #: The number of the last progress written to the row (by a heartbeat or the completion).
        self.progress_written = 0

    def lines(self) -> LogBuffer:
        """The attempt's line buffer, made on first use (jobs that log nothing have none)."""
        logs = self.logs
        if logs is None:
            with _LOGS_MADE:
                logs = self.logs
                if logs is None:
                    logs = self.logs = LogBuffer()
        return logs

    def pending_progress(self) -> tuple[int, str] | None:
        """The last progress set and not yet written, as ``(number, JSON text)``, else ``None``."""
        progress = self.progress
        if progress is None or progress[0] <= self.progress_written:
            return None
        return progress

    def written(self, number: int) -> None:
        """The progress numbered ``number`` (from :meth:`pending_progress`) is on the row now."""
        if number > self.progress_written:
            self.progress_written = number


#: Guards the first line of a job: its handler's thread and a task it started may both log.
_LOGS_MADE = threading.Lock()

#: Guards the first read of a payload still encoded: two threads reading it at once get the one
#: value the job keeps.
_PAYLOAD_DECODED = threading.Lock()
#: Where a job the worker claimed keeps its payload's JSON text until the first read.
_TEXT = "_payload_text"
_ABSENT = object()


class _Payload:
    """:attr:`JobContext.payload` of a job that holds its JSON text instead (the worker's claim
    fetched it so, :mod:`pgqueue._sql.deferred_json`): decoded at the first read and kept as the
    instance's own attribute, which every later read finds first (this is a non-data
    descriptor), so the handler's changes stay and a read costs what an attribute's does. A job
    given its payload (``__init__``, an assignment) holds it as a plain attribute from the start.
    Set on the class after ``@dataclass`` made ``payload`` a field without a default."""

    def __get__(self, job: JobContext | None, owner: type | None = None) -> Any:
        if job is None:
            raise AttributeError("payload")
        with _PAYLOAD_DECODED:
            text = getattr(job, _TEXT, None)
            if text is None:  # another thread decoded it meanwhile (or it was deleted since)
                value = vars(job).get("payload", _ABSENT)  # not getattr: it would come back here
                if value is _ABSENT:
                    raise AttributeError("payload")
                return value
            value = json.loads(text)
            job.payload = value
            setattr(job, _TEXT, None)
            return value


@dataclass(eq=False)
class JobContext:
    """What a handler receives: one claimed job.

    Attributes:
        id: The job's id.
        queue: Its queue (the job kind that chose the handler).
        payload: The decoded JSON payload.
        attempts: This attempt's number, the token of every guarded update: a handler that
            writes to the same database can finish the job in its own transaction with
            ``pgqueue.complete(conn, job.id, job.attempts)`` (or ``await pgqueue.aio.complete``)
            for exactly-once effects.
        stopping: Set when the job is no longer worth running: its lease was lost, it was
            cancelled (:func:`pgqueue.cancel`), or shutdown asks handlers to stop. Long loops
            should check ``job.stopping.is_set()`` and then ``raise pgqueue.Snooze(0)``, which
            gives the job back (returning would record the unfinished job as done); an async
            handler's task is also cancelled (``asyncio.CancelledError``) on a lost lease or a
            cancel.
        lease_lost: True once a heartbeat found the job no longer ours; its outcome is dropped
            (read-only: the worker sets it).
        cancelled: True once the worker learnt that the job was cancelled while it held it; its
            outcome is dropped (the row already says ``failed`` / ``'cancelled'``; read-only).
        connection: In ``mode="transaction"`` only, the connection whose open transaction
            holds the job: write through it and your writes commit together with the completion.
        headers: What the producer passed as ``enqueue(..., headers=...)`` (for example a trace
            context), or ``None``.
        priority: The job's priority, 0-9 (higher runs first).
        task: The name of the task the job runs (``jobs.task``), ``None`` for a queue-keyed job.
        engine: The engine of the worker (or :func:`pgqueue.testing.drain`) that runs the job,
            which :meth:`dependency_results` reads through outside transaction mode; ``None``
            for a context built by hand.
        timeout: The job's own execution timeout in seconds (``timeout=``), ``None`` when it has
            none (the worker's ``default_timeout`` then applies, if set). At the timeout the
            worker sets :attr:`stopping` (and cancels an async handler's task); the attempt
            fails with :class:`pgqueue.HandlerTimeoutError`.

    Inside a running handler or task, :func:`pgqueue.current_job` returns this object.

    .. versionadded:: 0.1.0
    """

    id: int
    queue: str
    payload: Any
    attempts: int
    stopping: threading.Event = field(default_factory=stopping_event)
    connection: Connection | None = None
    headers: Mapping[str, str] | None = None
    priority: int = DEFAULT_PRIORITY
    task: str | None = None
    engine: Engine | None = None
    timeout: float | None = None
    #: The worker's bookkeeping of this job (:class:`JobMarks`), beside what the handler uses.
    _marks: JobMarks = field(default_factory=JobMarks, init=False, repr=False)

    @property
    def lease_lost(self) -> bool:
        """True once a heartbeat found the job no longer ours; its outcome is dropped."""
        return self._marks.lease_lost

    @property
    def cancelled(self) -> bool:
        """True once the worker learnt that the job was cancelled while it held it; its outcome
        is dropped (the row already says ``failed`` / ``'cancelled'``)."""
        return self._marks.cancelled

    def __repr__(self) -> str:
        task = "" if self.task is None else f", task={self.task!r}"
        return f"JobContext(id={self.id}, queue={self.queue!r}{task}, attempts={self.attempts})"

    def set_progress(self, value: Any) -> None:
        """Record how far the job got: any JSON value, stored in ``jobs.progress``.

        The value is encoded here (so a bad one raises at the call) and written by the worker's
        next heartbeat (every ``lease / 3``, 10 s by default), in the statement that extends the
        leases anyway: many calls between two beats cost one write of the last value, and a call
        costs the caller only the JSON encoding. A job that ends first has its last progress
        written by its completion (a failed or snoozed attempt keeps what the heartbeat wrote).
        In ``mode="transaction"`` and in :func:`pgqueue.testing.drain` on a connection, the
        job's row is its own transaction's until it commits: the progress is written with the
        completion, and readers see the last value once the job is done.

        Raises:
            InvalidPayloadError: the value cannot be stored as ``jsonb`` (``progress: ...``).

        .. versionadded:: 0.1.0
        """
        text = encode_payload(value, argument="progress")
        marks = self._marks
        previous = marks.progress
        marks.progress = (1 if previous is None else previous[0] + 1, text)

    def log(self, message: str, **fields: Any) -> None:
        """Record a line in the job's log, for this attempt: level ``info``, ``message``, and
        ``fields`` stored as JSON (``pgqueue show ID --logs``, :func:`pgqueue.job_logs`, the
        dashboard's job page).

        The line is buffered in the worker and written with the job's outcome, or by the
        heartbeat while the job runs on (no statement of its own). An attempt keeps its last
        1,000 lines / 256 KiB (the oldest are dropped and counted); passwords in URLs are masked;
        a message or fields no client could read (bad UTF-8, a cyclic or unencodable field) are
        stored as their ``repr``: a line never fails the job. The fields are encoded when the
        line is written, not when it is recorded (a line costs the handler about a
        microsecond): pass values, not objects the handler goes on changing.

        .. versionadded:: 0.1.0
        """
        logs = self._marks.logs
        if logs is None:
            logs = self._marks.lines()
        logs.add("info", message, fields, None)

    def dependency_results(self) -> dict[int, JobResult]:
        """``{job_id: JobResult}`` of every job this one depends on (``depends_on``, or the
        previous job of a :func:`pgqueue.chain`, the members of a :func:`pgqueue.group`'s
        ``then``), in one query; empty for a job without dependencies. A task reads what its
        dependencies returned from :attr:`pgqueue.JobResult.value`::

            @registry.task()
            def album(album_id: int) -> int:
                done = pgqueue.current_job().dependency_results()
                return sum(r.value["bytes"] for r in done.values())

        A job released normally sees every dependency ``done``; one enqueued with
        ``on_dependency_failure="run"`` sees which failed (``status``, ``error``).

        The read is synchronous (also from an ``async def`` task: one short primary-key
        query): through :attr:`connection` in transaction mode (the job's own transaction),
        else on :attr:`engine`, in a transaction of its own.

        Raises:
            PgQueueError: the context has neither a connection nor an engine (built by hand).

        .. versionadded:: 0.1.0
        """
        source: Engine | Connection | None = (
            self.connection if self.connection is not None else self.engine
        )
        if source is None:
            raise PgQueueError(
                f"job {self.id} has no database to read its dependencies from "
                "(a JobContext built without connection= or engine=)"
            )
        if isinstance(source, Connection):
            return repository.dependency_results(source, self.id)
        with source.connect() as conn:  # the engine: a read in its own short transaction
            return repository.dependency_results(conn, self.id)

    # -- durable steps, sleeps and signals (docs/durable.md) -------------------------------------

    def step(self, name: str, fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
        """Run ``fn(*args, **kwargs)`` once for this job, whatever its attempts: its return value
        is stored under ``name`` before ``step`` returns, and every later attempt that reaches
        the step gets the stored value back without calling ``fn``::

            @registry.task(queue="orders")
            def fulfil(order_id: int) -> str:
                job = pgqueue.current_job()
                charge = job.step("charge", payments.charge, order_id)
                return job.step("ship", warehouse.ship, order_id, charge["id"])

        The value is JSON, with the bound and errors of a task's result (a tuple comes back as
        a list; too large or not JSON fails the job for good with
        :class:`pgqueue.InvalidResultError`). It is written in its own short statement guarded
        by the attempt (a worker that lost its lease writes nothing and the call raises
        :class:`pgqueue.StepNotStoredError`); in ``mode="transaction"`` on :attr:`connection`,
        so it commits, or rolls back, with the job's transaction. A step whose ``fn`` raises
        stores nothing: the attempt fails as usual and the next one calls ``fn`` again. The
        first step of an attempt reads the job's stored steps once (one short query).

        Raises:
            PgQueueError: ``name`` was already used in this attempt, or names a sleep or a
                signal wait; or the context has neither a connection nor an engine.

        .. versionadded:: 0.1.0
        """
        attempt = self._durable()
        stored = attempt.stored_step(name)
        if stored is not NOT_FOUND:
            return stored  # type: ignore[no-any-return]
        value = fn(*args, **kwargs)
        attempt.store_step(name, value)
        return value

    async def astep(
        self, name: str, fn: Callable[P, Awaitable[R]], /, *args: P.args, **kwargs: P.kwargs
    ) -> R:
        """:meth:`step` for an ``async def`` ``fn``, awaited. Outside transaction mode the
        read and the write run on a thread (``asyncio.to_thread``), off the event loop.

        .. versionadded:: 0.1.0
        """
        attempt = self._durable()
        stored = await self._off_loop(attempt.stored_step, name)
        if stored is not NOT_FOUND:
            return stored  # type: ignore[no-any-return]
        value = await fn(*args, **kwargs)
        await self._off_loop(attempt.store_step, name, value)
        return value

    def sleep(self, name: str, delay: timedelta | float) -> None:
        """A durable sleep: the first time, record the wake-up (now + ``delay``, a
        ``timedelta`` or seconds) under ``name`` and give the job back until then, as
        :class:`Snooze` does (not charged to ``max_attempts``; the worker slot and any
        concurrency slot are freed at once); the code after it does not run in this attempt.
        The job is shown ``sleeping`` meanwhile. When it runs again after the wake-up,
        ``sleep(name, ...)`` returns at once (the stored wake-up counts, not a new ``delay``).

        It gives the job back by raising an exception (a :class:`Snooze`): do not catch it.

        .. versionadded:: 0.1.0
        """
        suspension = self._durable().sleep(name, delay)
        if suspension is not None:
            raise Suspended(suspension)

    async def asleep(self, name: str, delay: timedelta | float) -> None:
        """:meth:`sleep` for coroutines.

        .. versionadded:: 0.1.0
        """
        suspension = await self._off_loop(self._durable().sleep, name, delay)
        if suspension is not None:
            raise Suspended(suspension)

    def wait_for_signal(self, name: str, *, timeout: timedelta | float | None = None) -> Any:
        """The payload of the signal ``name`` (:func:`pgqueue.signal`), once it is there.

        When it is (it may have arrived before the job asked), the payload is returned and
        remembered like a step: later attempts get the same payload. When it is not, the job
        is given back, shown ``awaiting signal``: not claimable and holding no slot, until the
        signal arrives (which makes it ready at once and wakes a worker) or ``timeout`` (a
        ``timedelta`` or seconds; ``None``: no timeout) passes, measured from the first wait.
        Then the next attempt's call raises :class:`pgqueue.SignalTimeoutError`, which the
        handler may catch. Like :meth:`sleep`, the give-back is an exception: do not catch it.

        Raises:
            SignalTimeoutError: the timeout passed before the signal arrived.

        .. versionadded:: 0.1.0
        """
        payload, suspension = self._durable().wait_for_signal(name, timeout)
        if suspension is not None:
            raise Suspended(suspension)
        return payload

    async def await_signal(self, name: str, *, timeout: timedelta | float | None = None) -> Any:
        """:meth:`wait_for_signal` for coroutines.

        .. versionadded:: 0.1.0
        """
        attempt = self._durable()
        payload, suspension = await self._off_loop(attempt.wait_for_signal, name, timeout)
        if suspension is not None:
            raise Suspended(suspension)
        return payload

    def _durable(self) -> DurableAttempt:
        marks = self._marks
        if marks.durable is None:
            source: Engine | Connection | None = (
                self.connection if self.connection is not None else self.engine
            )
            if source is None:
                raise PgQueueError(
                    f"job {self.id} has no database to keep its steps in "
                    "(a JobContext built without connection= or engine=)"
                )
            marks.durable = DurableAttempt(self.id, self.attempts, source, marks.max_step_bytes)
        return marks.durable

    async def _off_loop(self, call: Callable[..., R], *args: Any) -> R:
        """``call(*args)`` on a thread when it writes through the engine (a round trip), on the
        loop when it runs on transaction mode's connection."""
        if self.connection is not None:
            return call(*args)
        return await asyncio.to_thread(call, *args)

    @classmethod
    def of(
        cls,
        claimed: ClaimedJob,
        connection: Connection | None = None,
        engine: Engine | None = None,
    ) -> JobContext:
        """The handler's view of a job just claimed (``connection``: transaction mode's;
        ``engine``: what :meth:`dependency_results` reads through otherwise)."""
        # A replayed claim's jsonb may be its text (pgqueue._sql.deferred_json).
        payload, headers = claimed.payload, cast(Any, claimed.headers)
        text = payload if type(payload) is bytes else None  # JSON decodes to no bytes
        job = cls(
            claimed.id,
            claimed.queue,
            None if text is not None else payload,
            claimed.attempts,
            connection=connection,
            headers=json.loads(headers) if type(headers) is bytes else headers,
            priority=claimed.priority,
            task=claimed.task,
            engine=engine,
            timeout=claimed.timeout,
        )
        if text is not None:  # read through the class's _Payload until its first read
            del job.payload
            setattr(job, _TEXT, text)
        return job


#: Decoded at the first read when the worker's claim left it as text (see _Payload).
JobContext.payload = _Payload()


def marks_of(job: JobContext) -> JobMarks:
    """The worker's bookkeeping of ``job``: for the worker's components, never for handlers."""
    return job._marks


def fresh_payload(job: JobContext) -> Any:
    """``job``'s payload for one use (a task's call): decoded anew when the job holds its text,
    not kept, so the arguments live as long as the call (:mod:`pgqueue._sql.deferred_json`)."""
    text = getattr(job, _TEXT, None)
    return job.payload if text is None else json.loads(text)


def end_transaction(job: JobContext) -> None:
    """Transaction mode: the transaction that held ``job`` ended, so :attr:`JobContext.connection`
    is no longer the handler's to write through (the lane that ran it calls this)."""
    job.connection = None


#: The job whose handler or task runs in this thread or coroutine: set around each call by the
#: worker's executors (a thread pool's thread, or the job's own asyncio task, which copies the
#: context it was created in, so concurrent coroutines each see their own job).
current_job_var: ContextVar[JobContext | None] = ContextVar("pgqueue.current_job", default=None)


def current_job() -> JobContext:
    """The :class:`JobContext` of the job running here, from inside its task or handler.

    Works in sync handlers (each runs on a worker thread that sets it around the call) and in
    ``async def`` ones (each job's coroutine runs in its own asyncio task and context), and in
    :func:`pgqueue.testing.drain`. It is what a task, which receives its arguments rather than the
    job, reads the job's id, attempts, ``stopping``, headers or :meth:`JobContext.set_progress`
    from::

        @registry.task(queue="reports")
        def build_report(month: str) -> dict[str, int]:
            job = pgqueue.current_job()
            for i, part in enumerate(parts(month)):
                job.set_progress({"done": i})
                ...

    A thread or task the handler starts itself sees the job only if it copies the context
    (``contextvars.copy_context().run``, ``asyncio.create_task`` does).

    Raises:
        NoCurrentJobError: no job is running here (a :class:`pgqueue.PgQueueError`).

    .. versionadded:: 0.1.0
    """
    job = current_job_var.get()
    if job is None:
        raise NoCurrentJobError()
    return job


class Snooze(Exception):
    """Raised by a handler (sync or ``async def``): put the job back, to run again after ``delay``.

    The worker writes it like a completion: guarded by the claimed attempt, batched with the
    other outcomes in lease mode, inside the job's transaction in transaction mode (where the
    handler's own writes are rolled back, as for any exception). The job's ``attempts`` counts
    the snoozed run; its ``max_attempts`` grows by one and ``snoozes`` by one, so a job may be
    snoozed any number of times and still gets all its attempts. It is counted in
    :attr:`pgqueue.WorkerStats.snoozed` and told to hooks as ``on_snoozed``. A job whose lease
    was lost or that was cancelled meanwhile is not requeued (the outcome is dropped, as for
    any other).

    The way to stop on ``job.stopping`` (shutdown, a lost supervisor) without the unfinished job
    being recorded ``done``::

        def handler(job: pgqueue.JobContext) -> None:
            for chunk in chunks(job.payload):
                if job.stopping.is_set():
                    raise pgqueue.Snooze(0)  # back to the queue, no attempt used up
                process(chunk)

    Args:
        delay: How long until the job is ready again: a ``timedelta`` or seconds (int or
            float), from 0 to 365 days. Default 0.

    Raises:
        InvalidArgumentError: for a negative, infinite or NaN delay, or one longer than a year.
        InvalidArgumentTypeError: for a delay that is neither a ``timedelta`` nor a number.

    Attributes:
        delay: The delay as a ``timedelta``.

    .. versionadded:: 0.1.0
    """

    def __init__(self, delay: timedelta | float = 0) -> None:
        self.delay = check_snooze_delay(delay)
        super().__init__(f"snoozed for {self.delay}")

    def __repr__(self) -> str:
        return f"Snooze({self.delay!r})"

    def __reduce__(self) -> tuple[type[Snooze], tuple[timedelta]]:
        return Snooze, (self.delay,)  # pickles by its delay, not by its message


class Suspended(Snooze):
    """A durable sleep or signal wait gives its job back (:meth:`JobContext.sleep`,
    :meth:`JobContext.wait_for_signal`): a :class:`Snooze` that the worker writes with the
    wake-up time and the signal awaited, so the job is shown ``sleeping`` or ``awaiting signal``
    and a signal finds it. Raised by pgqueue, never by handlers.

    Attributes:
        suspension: Until when, and for which signal (``None``: a sleep).

    .. versionadded:: 0.1.0
    """

    def __init__(self, suspension: Suspension) -> None:
        self.suspension = suspension
        self.delay = max(suspension.until - datetime.now(timezone.utc), timedelta(0))
        what = "sleeping" if suspension.signal is None else f"awaiting signal {suspension.signal!r}"
        Exception.__init__(self, f"{what} until {suspension.until.isoformat()}")

    def __repr__(self) -> str:
        return f"Suspended({self.suspension!r})"

    def __reduce__(self) -> tuple[type[Suspended], tuple[Suspension]]:  # type: ignore[override]
        return Suspended, (self.suspension,)


def is_async_handler(handler: object) -> bool:
    """A coroutine function (or an object whose ``__call__`` is one): runs on the event loop."""
    return is_async_callable(handler)


def check_handlers(handlers: object, *, allow_empty: bool = False) -> dict[str, Handler]:
    """The worker's ``handlers`` argument: a non-empty ``{queue: callable}`` mapping (empty
    too with ``allow_empty``: a :class:`Registry` of tasks only)."""
    if not isinstance(handlers, Mapping) or not (handlers or allow_empty):
        raise InvalidArgumentError(
            "handlers", "give a non-empty {queue: handler} mapping, or a Registry with tasks"
        )
    checked: dict[str, Handler] = {}
    for queue, func in handlers.items():
        check_queue(queue)
        if not callable(func):
            raise InvalidArgumentTypeError(f"handlers[{queue!r}]", "a callable", func)
        checked[queue] = func
    return checked


class Registry(Mapping[str, Handler]):
    """A decorator-style way to build the ``{queue: handler}`` mapping a :class:`Worker` takes,
    and the typed tasks it runs by name.

    Sync and ``async def`` handlers and tasks mix freely. Example::

        registry = pgqueue.Registry()

        @registry.handler("emails")
        def send_email(job: pgqueue.JobContext) -> None: ...

        @registry.handler("webhooks")
        async def call_webhook(job: pgqueue.JobContext) -> None: ...

        @registry.task(queue="reports", max_attempts=3)
        def build_report(account_id: int, *, month: str) -> dict[str, str]: ...

        registry.periodic("nightly-report", "0 3 * * *", "reports", timezone="Europe/Paris")

        pgqueue.Worker(engine, registry).run()

    A worker given a registry also fires its periodic definitions (``pgqueue worker
    myapp.jobs:registry`` too).

    .. versionadded:: 0.1.0
    """

    def __init__(self, *, find_task: Callable[[str], Task[..., Any] | None] | None = None) -> None:
        self._handlers: dict[str, Handler] = {}
        self._periodic: dict[str, Periodic] = {}
        self._tasks: dict[str, Task[..., Any]] = {}
        self._find_task = find_task

    def find_task(self, name: str) -> Task[..., Any] | None:
        """The task of ``name`` when this registry has none: what ``find_task`` (given to the
        constructor) answers, ``None`` without one. A worker asks it once per name, when a job
        first names a task it lacks (a module the worker did not import at start-up), and runs
        the answer on the thread or the event loop that claimed the job; ``None`` fails the
        attempt with :class:`~pgqueue.errors.UnknownTaskError` as before. Default: no finder.

        .. versionadded:: 0.1.0
        """
        return None if self._find_task is None else self._find_task(name)

    def periodic(
        self,
        definition: Periodic | str,
        schedule: str | timedelta | None = None,
        queue: str | None = None,
        payload: Any = None,
        **options: Any,
    ) -> Periodic:
        """Add a periodic definition: a :class:`pgqueue.Periodic`, or the arguments of one.

        Returns the definition. A second definition with the same name is refused.
        """
        if not isinstance(definition, Periodic):
            if schedule is None or (queue is None and options.get("task") is None):
                raise InvalidArgumentError(
                    "periodic",
                    "give a pgqueue.Periodic, or a name, a schedule and a queue (or task=)",
                )
            definition = Periodic(definition, schedule, queue, payload, **options)
        elif schedule is not None or queue is not None or payload is not None or options:
            raise InvalidArgumentError(
                "periodic", "give a pgqueue.Periodic alone, or the arguments of one"
            )
        if definition.name in self._periodic:
            raise InvalidArgumentError(
                "periodic", f"a definition named {definition.name!r} is already registered"
            )
        self._periodic[definition.name] = definition
        return definition

    @property
    def periodic_definitions(self) -> tuple[Periodic, ...]:
        """The definitions added with :meth:`periodic`, in order."""
        return tuple(self._periodic.values())

    def handler(self, queue: str) -> Callable[[Handler], Handler]:
        """Register the decorated function for ``queue``; it is returned unchanged."""
        check_queue(queue)
        if queue in self._handlers:
            raise InvalidArgumentError("queue", f"a handler for {queue!r} is already registered")

        def register(func: Handler) -> Handler:
            self._handlers[queue] = func
            return func

        return register

    @overload
    def task(self, name: Callable[P, R], /) -> Task[P, R]: ...

    @overload
    def task(
        self,
        name: str | None = None,
        *,
        queue: str = ...,
        priority: int = ...,
        max_attempts: int = ...,
        retry: RetryPolicy | None = ...,
        timeout: timedelta | float | None = ...,
        expires_in: timedelta | float | None = ...,
    ) -> Callable[[Callable[P, R]], Task[P, R]]: ...

    def task(
        self,
        name: str | Callable[..., Any] | None = None,
        *,
        queue: str = DEFAULT_QUEUE,
        priority: int = DEFAULT_PRIORITY,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        retry: RetryPolicy | None = None,
        timeout: timedelta | float | None = None,
        expires_in: timedelta | float | None = None,
    ) -> Task[..., Any] | Callable[[Callable[..., Any]], Task[..., Any]]:
        """Register the decorated function (sync or ``async def``) as a :class:`pgqueue.Task`.

        Use it bare (``@registry.task``) or with options (``@registry.task(queue="emails")``).
        The options are checked here, at import time, not at the first enqueue.

        Args:
            name: The task's name, stored in ``jobs.task`` and matched by the worker; default
                ``"<module>.<qualname>"`` of the function. Keep it stable across deploys: a
                worker that does not know a job's name fails the attempt.
            queue: The queue its jobs wait in. Default ``"default"``.
            priority: Its jobs' default priority, 0-9. Default 0.
            max_attempts: Its jobs' default attempt budget. Default 5.
            retry: Its retry policy, or ``None`` for the worker's. Default ``None``.
            timeout: Its jobs' execution timeout (a ``timedelta`` or seconds), as
                ``timeout=`` of :func:`pgqueue.enqueue`. Default ``None``: the worker's
                ``default_timeout``.
            expires_in: Its jobs' not-started deadline (a ``timedelta`` or seconds), as
                ``expires_in=`` of :func:`pgqueue.enqueue`. Default ``None``: none.

        Returns:
            The task (bare use), or the decorator that makes it.

        Raises:
            InvalidArgumentError: a task of that name is already registered here, or a bad
                option.

        .. versionadded:: 0.1.0
        """
        if callable(name):
            return self._add_task(Task(name))

        def register(func: Callable[..., Any]) -> Task[..., Any]:
            made = Task(
                func,
                name=name,
                queue=queue,
                priority=priority,
                max_attempts=max_attempts,
                retry=retry,
                timeout=timeout,
                expires_in=expires_in,
            )
            return self._add_task(made)

        return register

    def _check_free(self, name: str) -> None:
        if name in self._tasks:
            raise InvalidArgumentError("name", f"a task named {name!r} is already registered")

    def _add_task(self, task: Task[P, R]) -> Task[P, R]:
        self._check_free(task.name)
        self._tasks[task.name] = task
        return task

    @property
    def tasks(self) -> Mapping[str, Task[..., Any]]:
        """The tasks registered with :meth:`task`, by name (read-only)."""
        return MappingProxyType(self._tasks)

    def only(self, queues: Iterable[str]) -> Registry:
        """A registry of this one's handlers and tasks of ``queues`` alone (every periodic
        definition kept): what ``pgqueue worker --queues`` runs.

        .. versionadded:: 0.1.0
        """
        wanted = set(queues)
        subset = Registry()
        subset._handlers = {q: h for q, h in self._handlers.items() if q in wanted}
        subset._tasks = {n: t for n, t in self._tasks.items() if t.queue in wanted}
        subset._periodic = dict(self._periodic)
        subset._find_task = self._find_task
        return subset

    def __getitem__(self, queue: str) -> Handler:
        return self._handlers[queue]

    def __iter__(self) -> Iterator[str]:
        return iter(self._handlers)

    def __len__(self) -> int:
        return len(self._handlers)


class Outcome(enum.Enum):
    """How one claimed job ended for the worker that held it.

    .. versionadded:: 0.1.0
    """

    DONE = "done"
    #: Completed by its handler's own transaction (``pgqueue.complete`` beside its writes).
    DONE_BY_HANDLER = "done by handler"
    RETRY = "retry"
    FAILED = "failed"
    #: No longer ours (lease lost, guard matched nothing): nothing was written.
    LOST = "lost"
    #: Claimed, never started, given back at shutdown without charging the attempt.
    RELEASED = "released"
    #: Cancelled by :func:`pgqueue.cancel` while this worker held it: nothing was written.
    CANCELLED = "cancelled"
    #: Its handler raised :class:`Snooze`: queued again after the delay, no attempt used up.
    SNOOZED = "snoozed"


@dataclass
class WorkerStats:
    """Counters of one worker since it was created (read them after ``run()`` returns).

    ``cancelled`` counts jobs cancelled (:func:`pgqueue.cancel`) while this worker held them;
    ``snoozed`` the jobs whose handler raised :class:`Snooze` (each snooze once); ``stuck`` is
    not a count of events but the handler threads stuck now: in a handler that outlived its
    timeout plus ``Worker(timeout_grace)`` (its failure was written; the thread is not reused
    until it returns). ``timed_out`` counts attempts that failed by their timeout; ``expired``
    the jobs this worker's claims failed as past their ``expires_in`` deadline (never run).

    .. versionadded:: 0.1.0
    """

    claimed: int = 0
    done: int = 0
    done_by_handler: int = 0
    retried: int = 0
    failed: int = 0
    lost: int = 0
    released: int = 0
    cancelled: int = 0
    snoozed: int = 0
    timed_out: int = 0
    expired: int = 0
    stuck: int = 0


class WorkerView(Protocol):
    """What hooks may read of the worker that calls them (``on_worker_started``/``_stopped``)."""

    @property
    def engine(self) -> Engine: ...

    @property
    def handlers(self) -> Mapping[str, Handler]: ...

    @property
    def stats(self) -> WorkerStats: ...

    @property
    def idle(self) -> bool: ...


__all__ = [
    "Handler",
    "JobContext",
    "JobMarks",
    "Outcome",
    "Registry",
    "Snooze",
    "Suspended",
    "WorkerStats",
    "WorkerView",
    "check_handlers",
    "current_job",
    "end_transaction",
    "is_async_handler",
    "marks_of",
]
