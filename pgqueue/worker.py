"""The worker: runs handlers for claimed jobs, keeps their leases, and finishes them in batches.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from types import FrameType
from typing import Any, Literal

from sqlalchemy import Connection, Engine
from sqlalchemy.engine import URL

from pgqueue import _batcher, pooler, repository, statements
from pgqueue._urls import mask_text, mask_url
from pgqueue._validation import check_positive_int, check_queue
from pgqueue.errors import InvalidArgumentError, InvalidArgumentTypeError
from pgqueue.hooks import HookDispatcher, WorkerHooks, check_hooks
from pgqueue.listener import Listener
from pgqueue.retry import RetryPolicy, describe_error
from pgqueue.schema import channel_for, schema_of

log = logging.getLogger("pgqueue.worker")

#: What a handler is: called with the job, its return value ignored, an exception fails the job.
Handler = Callable[["JobContext"], object]

_PENDING = "pending"  # claimed, waiting for a handler thread
_RUNNING = "running"  # its handler is running
_FINISHING = "finishing"  # its outcome waits for the completer
_SELF_DONE = "self-done"  # its handler completed it in its own transaction
_BUSY = frozenset((_PENDING, _RUNNING))  # the states that take a slot of the claim window


@dataclass(eq=False)
class JobContext:
    """What a handler receives: one claimed job.

    Attributes:
        id: The job's id.
        queue: Its queue (the job kind that chose the handler).
        payload: The decoded JSON payload.
        attempts: This attempt's number, the token of every guarded update: a handler that
            writes to the same database can finish the job in its own transaction with
            ``pgqueue.complete(conn, job.id, job.attempts)`` (exactly-once effects).
        stopping: Set when the lease was lost (the job is no longer ours) or when shutdown asks
            handlers to stop; long loops should check ``job.stopping.is_set()``.
        lease_lost: True once a heartbeat found the job no longer ours; its outcome is dropped.
        connection: In ``mode="transaction"`` only, the connection whose open transaction
            holds the job: write through it and your writes commit together with the completion.
        headers: What the producer passed as ``enqueue(..., headers=...)`` (for example a trace
            context), or ``None``.
        claimed_at: ``time.monotonic()`` when it was claimed; kept only when the worker has
            hooks (0.0 otherwise), like ``started_at`` and ``handler_seconds``.

    .. versionadded:: 0.1.0
    """

    id: int
    queue: str
    payload: Any
    attempts: int
    stopping: threading.Event = field(default_factory=threading.Event)
    lease_lost: bool = False
    connection: Connection | None = None
    headers: Mapping[str, str] | None = None
    claimed_at: float = field(default=0.0, repr=False)
    started_at: float = field(default=0.0, repr=False)
    handler_seconds: float | None = field(default=None, repr=False)

    def __repr__(self) -> str:
        return f"JobContext(id={self.id}, queue={self.queue!r}, attempts={self.attempts})"


class Registry(Mapping[str, Handler]):
    """A decorator-style way to build the ``{queue: handler}`` mapping a :class:`Worker` takes.

    Example::

        registry = pgqueue.Registry()

        @registry.handler("emails")
        def send_email(job: pgqueue.JobContext) -> None: ...

        pgqueue.Worker(engine, registry).run()

    .. versionadded:: 0.1.0
    """

    def __init__(self) -> None:
        self._handlers: dict[str, Handler] = {}

    def handler(self, queue: str) -> Callable[[Handler], Handler]:
        """Register the decorated function for ``queue``; it is returned unchanged."""
        check_queue(queue)
        if queue in self._handlers:
            raise InvalidArgumentError("queue", f"a handler for {queue!r} is already registered")

        def register(func: Handler) -> Handler:
            self._handlers[queue] = func
            return func

        return register

    def __getitem__(self, queue: str) -> Handler:
        return self._handlers[queue]

    def __iter__(self) -> Iterator[str]:
        return iter(self._handlers)

    def __len__(self) -> int:
        return len(self._handlers)


@dataclass
class WorkerStats:
    """Counters of one worker since it was created (read them after ``run()`` returns).

    .. versionadded:: 0.1.0
    """

    claimed: int = 0
    done: int = 0
    done_by_handler: int = 0
    retried: int = 0
    failed: int = 0
    lost: int = 0
    released: int = 0


def _seconds(name: str, value: object, *, allow_zero: bool = False) -> float:
    """Durations are a ``timedelta`` or a number of seconds."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    else:
        raise InvalidArgumentTypeError(name, "datetime.timedelta or seconds", value)
    if seconds < 0 or (seconds == 0 and not allow_zero):
        raise InvalidArgumentError(name, f"must be positive, got {value}")
    return seconds


class Worker:
    """Runs handlers for the jobs of one or more queues, N at a time, in threads.

    In the default lease mode (R9) a job is claimed and committed at once, its handler runs
    outside any transaction, and its outcome is written in a second short transaction, batched
    with other jobs'. A heartbeat extends the leases of running jobs every ``lease / 3``; the
    reaper requeues jobs whose lease expired (crashed workers). One extra direct connection
    listens for ``NOTIFY jobs`` so a new job starts within milliseconds; a fallback poll catches
    anything missed and jobs whose ``run_at`` came due.

    Args:
        engine: Used for short transactions (claims, batched completions, heartbeats, reaping):
            lease mode needs 3 connections (claimer, completer, heartbeat/reaper), transaction
            mode ``concurrency + 2``; add what the handlers themselves take from the same engine.
        handlers: ``{queue: handler}`` (or a :class:`Registry`); the worker claims from these
            queues only. A handler takes one :class:`JobContext`.
        concurrency: Handler threads. Default 4.
        lease: How long a claim holds a job before the reaper may hand it to another worker.
            ``timedelta`` or seconds; default 5 minutes.
        poll_interval: Seconds between fallback polls of every queue. Default 5.
        batch_size: Most jobs per claim. Default 50 (completions are batched separately, up to
            500 outcomes per statement).
        prefetch: Jobs claimed beyond the free handler threads, so a thread finds its next job
            waiting and one claim serves many jobs. Default None: ``concurrency``, i.e. at most
            one waiting job per handler thread, so a claimed job waits for at most about one
            handler run; 0 claims only for idle threads. Transaction mode never prefetches.
        listen: Run ``LISTEN jobs`` on a dedicated connection. Default True; False polls only.
            An engine given a schema with :func:`pgqueue.use_schema` listens on that schema's
            channel, ``<schema>.jobs``.
        listen_url: Where to LISTEN when the engine goes through a transaction-mode pooler:
            a ``postgresql[+driver]://`` string or SQLAlchemy URL. Default: the engine's URL.
        mode: ``"lease"`` (default) or ``"transaction"`` (R8: claim, handle and complete in one
            transaction, for jobs of a few milliseconds; the handler gets ``job.connection``).
        shutdown_timeout: Seconds that running handlers get to finish after a stop. Default 30.
        retry: The retry policy of every queue without its own. Default :class:`RetryPolicy()`
            (10 s base, 1 h cap, every exception retryable).
        queue_retry: ``{queue: RetryPolicy}`` overrides. Default none.
        reap_interval: Seconds between two runs of the reaper. Default: the lease.
        lock_timeout: ``SET LOCAL lock_timeout`` of the batched statements, in seconds. Default 5.
        idle_poll_interval: Scale-to-zero (R18): when set, a worker that found no work for
            ``idle_after`` seconds doubles its poll interval up to this (e.g. 900 s), and reaping
            and LISTEN reconnects wait as long; an idle worker sends no other query. Default None
            (always poll every ``poll_interval``).
        idle_after: Seconds without work before the idle backoff starts. Default 60.
        install_signal_handlers: Stop on SIGTERM/SIGINT (only when ``run()`` is on the main
            thread; a second signal exits at once). Default True.
        hooks: :class:`pgqueue.WorkerHooks` told of every job's claim, start, outcome, lease
            extension and reaping (metrics, tracing; see :mod:`pgqueue.hooks`). Default none.

    .. versionadded:: 0.1.0
    """

    def __init__(
        self,
        engine: Engine,
        handlers: Mapping[str, Handler],
        *,
        concurrency: int = 4,
        lease: timedelta | float = repository.DEFAULT_LEASE,
        poll_interval: timedelta | float = 5.0,
        batch_size: int = 50,
        prefetch: int | None = None,
        listen: bool = True,
        listen_url: str | URL | None = None,
        mode: Literal["lease", "transaction"] = "lease",
        shutdown_timeout: timedelta | float = 30.0,
        retry: RetryPolicy | None = None,
        queue_retry: Mapping[str, RetryPolicy] | None = None,
        reap_interval: timedelta | float | None = None,
        lock_timeout: timedelta | float = 5.0,
        idle_poll_interval: timedelta | float | None = None,
        idle_after: timedelta | float = 60.0,
        install_signal_handlers: bool = True,
        hooks: Sequence[WorkerHooks] | None = None,
    ) -> None:
        if not isinstance(handlers, Mapping) or not handlers:
            raise InvalidArgumentError("handlers", "give a non-empty {queue: handler} mapping")
        for queue, func in handlers.items():
            check_queue(queue)
            if not callable(func):
                raise InvalidArgumentTypeError(f"handlers[{queue!r}]", "a callable", func)
        if mode not in ("lease", "transaction"):
            raise InvalidArgumentError("mode", f"must be 'lease' or 'transaction', got {mode!r}")
        if prefetch is not None and (
            isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 0
        ):
            raise InvalidArgumentError("prefetch", f"must be an int >= 0, got {prefetch!r}")
        self.engine = engine
        self.handlers = dict(handlers)
        self.concurrency = check_positive_int("concurrency", concurrency)
        self.lease = timedelta(seconds=_seconds("lease", lease))
        self.poll_interval = _seconds("poll_interval", poll_interval)
        self.batch_size = check_positive_int("batch_size", batch_size)
        if mode == "transaction":
            self.prefetch = 0
        else:
            self.prefetch = self.concurrency if prefetch is None else prefetch
        # Claim when this many slots are free (or the handlers run dry): half the claim window,
        # so one round trip serves many jobs while the other half keeps the handlers busy.
        self._claim_at = max(1, min(self.batch_size, (self.concurrency + self.prefetch) // 2))
        self.listen = bool(listen)
        self.listen_url: str | URL = listen_url if listen_url is not None else engine.url
        self.mode = mode
        self.shutdown_timeout = _seconds("shutdown_timeout", shutdown_timeout, allow_zero=True)
        self.retry = retry if retry is not None else RetryPolicy()
        self.queue_retry = dict(queue_retry or {})
        self.reap_interval = (
            self.lease.total_seconds()
            if reap_interval is None
            else _seconds("reap_interval", reap_interval)
        )
        self.lock_timeout = _seconds("lock_timeout", lock_timeout)
        self.idle_poll_interval = (
            None
            if idle_poll_interval is None
            else max(_seconds("idle_poll_interval", idle_poll_interval), self.poll_interval)
        )
        self.idle_after = _seconds("idle_after", idle_after, allow_zero=True)
        self.install_signal_handlers = install_signal_handlers
        self.stats = WorkerStats()
        self.hooks = check_hooks(hooks)
        self._hooks = HookDispatcher(self.hooks) if self.hooks else None

        lock = threading.RLock()
        self._cond = threading.Condition(lock)  # wakes the claiming loop (and run's callers)
        self._work = threading.Condition(lock)  # wakes handler threads, one per new job
        self._stop = threading.Event()
        self._queues = list(self.handlers)
        self._jobs: dict[int, JobContext] = {}  # claimed by this worker, not yet written back
        self._state: dict[int, str] = {}
        self._busy = 0  # jobs of _state that are _PENDING or _RUNNING, kept by _set_state
        self._pending: deque[JobContext] = deque()
        self._tickets: deque[str] = deque()  # transaction mode: "claim one job of this queue"
        self._tx_running = 0
        self._ready: dict[str, None] = {}  # queues worth a claim, in round-robin order
        self._notified: dict[str, None] = {}
        self._poll_requested = False
        self._claimed_since_poll = 0
        self._last_work = time.monotonic()
        self._idle_polls = 0
        self._running = False

    # -- public ---------------------------------------------------------------------------------

    def run(self, *, until_empty: bool = False) -> WorkerStats:
        """Work until :meth:`stop` or SIGTERM/SIGINT; with ``until_empty``, until no job is ready.

        ``until_empty=True`` drains what is ready now (batched claims), waits for the handlers,
        and returns: for cron-started or application-triggered runs (R19). Returns the stats.
        """
        with self._cond:
            if self._running:
                raise RuntimeError("this worker is already running")
            self._running = True
            self._stop.clear()
        restore = self._install_signals()
        completer = _batcher.Completer(
            self.engine,
            self._report,
            batch_size=_batcher.FLUSH_SIZE,
            lock_timeout_ms=int(self.lock_timeout * 1000),
        )
        self._completer = completer
        completer.start()
        threads = [
            threading.Thread(target=self._handler_loop, name=f"pgqueue-handler-{i}", daemon=True)
            for i in range(self.concurrency)
        ]
        heartbeat = threading.Thread(target=self._heartbeat_loop, name="pgqueue-heartbeat")
        heartbeat.daemon = True
        listener: Listener | None = None
        log.info(
            "worker started: queues=%s mode=%s concurrency=%d lease=%s url=%s",
            ",".join(self._queues),
            self.mode,
            self.concurrency,
            self.lease,
            mask_url(self.engine.url),
        )
        if self._hooks is not None:
            self._hooks.worker_started(self)
        try:
            for t in threads:
                t.start()
            heartbeat.start()
            if self.listen and not until_empty:
                listener = Listener(
                    self.listen_url,
                    self._on_notify,
                    self._on_listen_connected,
                    min_reconnect_interval=self._idle_interval,
                    channel=channel_for(schema_of(self.engine)),
                )
                listener.start()
                # LISTEN through a transaction-mode pooler hears nothing: warn, never block.
                pooler.start_listen_check(self.listen_url, self.engine, self._stop)
            self._main_loop(until_empty)
        finally:
            self._shutdown(threads, completer)
            self._stop.set()
            if listener is not None:
                listener.stop()
            heartbeat.join(5.0)
            restore()
            if self._hooks is not None:
                self._hooks.worker_stopped(self)
            with self._cond:
                self._running = False
            log.info("worker stopped: %s", self.stats)
        return self.stats

    def stop(self) -> None:
        """Ask :meth:`run` to stop claiming and shut down gracefully; callable from any thread."""
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
            self._work.notify_all()

    @property
    def idle(self) -> bool:
        """True while scale-to-zero backs off (``idle_poll_interval`` set, no work for a while).

        Periodic observers (the Prometheus gauges) skip their queries then, so an idle worker
        sends nothing and a serverless database can suspend.

        .. versionadded:: 0.1.0
        """
        with self._cond:
            return self._idle()

    # -- signals ----------------------------------------------------------------------------------

    def _install_signals(self) -> Callable[[], None]:
        if not self.install_signal_handlers or threading.current_thread() is not (
            threading.main_thread()
        ):
            return lambda: None
        previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}

        def on_signal(signum: int, frame: FrameType | None) -> None:
            if self._stop.is_set():
                log.warning("second signal %d: exiting now", signum)
                for handler in logging.getLogger().handlers:
                    handler.flush()
                os._exit(128 + signum)
            log.info("signal %d: stopping (handlers get %ss)", signum, self.shutdown_timeout)
            self.stop()

        for sig in previous:
            signal.signal(sig, on_signal)

        def restore() -> None:
            for sig, old in previous.items():
                signal.signal(sig, old)

        return restore

    # -- the claiming loop ------------------------------------------------------------------------

    def _idle(self) -> bool:
        return (
            self.idle_poll_interval is not None
            and not self._jobs
            and time.monotonic() - self._last_work > self.idle_after
        )

    def _idle_interval(self) -> float:
        return self.idle_poll_interval if self.idle_poll_interval and self._idle() else 0.0

    def _next_poll_interval(self) -> float:
        if self.idle_poll_interval is None or not self._idle():
            self._idle_polls = 0
            return self.poll_interval
        self._idle_polls += 1
        return min(self.idle_poll_interval, self.poll_interval * 2.0 ** min(self._idle_polls, 30))

    def _main_loop(self, until_empty: bool) -> None:
        next_poll = 0.0
        next_reap = time.monotonic() + (0.0 if until_empty else self.reap_interval)
        while not self._stop.is_set():
            now = time.monotonic()
            polling = now >= next_poll or self._poll_requested
            if polling:
                self._poll_requested = False
                if now >= next_reap:
                    self._reap()
                    next_reap = now + max(self.reap_interval, self._idle_interval())
                with self._cond:
                    for q in self._queues:
                        self._ready[q] = None
                    self._claimed_since_poll = 0
                next_poll = time.monotonic() + self._next_poll_interval()
            elif now >= next_reap and not self._idle():
                self._reap()
                next_reap = now + self.reap_interval
            self._claim_round()
            with self._cond:
                if self._stop.is_set():
                    break
                if until_empty and not self._ready and self._in_flight() == 0:
                    # Everything claimed is finished: stop once a whole poll found nothing.
                    if self._claimed_since_poll == 0:
                        return
                    self._poll_requested = True
                    continue
                if self._can_claim():
                    continue
                timeout = max(0.0, min(next_poll, next_reap) - time.monotonic())
                self._cond.wait(timeout)

    def _can_claim(self) -> bool:
        return bool(self._ready or self._notified or self._poll_requested) and self._worth_claim()

    def _worth_claim(self) -> bool:
        """Room for a claim that is worth its round trip: a full batch fits, or handlers starve."""
        capacity = self._capacity()
        return capacity > 0 and (capacity >= self._claim_at or not self._pending)

    def _wake_claimer(self) -> None:
        if self._worth_claim() or not self._jobs:
            self._cond.notify()

    def _in_flight(self) -> int:
        return len(self._jobs) + len(self._tickets) + self._tx_running

    def _capacity(self) -> int:
        if self.mode == "transaction":
            return self.concurrency - len(self._tickets) - self._tx_running
        window = self.concurrency + self.prefetch
        # Finished jobs waiting for the completer still hold their rows (and memory): when it
        # lags, claims wait for it rather than pile up more.
        return min(window - self._busy, window + _batcher.FLUSH_SIZE - len(self._jobs))

    def _set_state(self, job_id: int, state: str) -> None:
        old = self._state.get(job_id)
        self._state[job_id] = state
        self._busy += (state in _BUSY) - (old in _BUSY)

    def _claim_round(self) -> None:
        """Visit ready queues round-robin while there is capacity: one claim per visit."""
        while not self._stop.is_set():
            with self._cond:
                for q in self._notified:
                    self._ready.setdefault(q, None)
                self._notified.clear()
                if not self._ready or not self._worth_claim():
                    return
                capacity = self._capacity()
                queue = next(iter(self._ready))
                del self._ready[queue]
                if self.mode == "transaction":
                    self._tickets.append(queue)
                    self._work.notify()
                    continue
            limit = min(self.batch_size, capacity)
            try:
                # One statement in autocommit: committed before it returns, without the BEGIN
                # and COMMIT round trips, and no session state for a transaction-mode pooler.
                with self.engine.connect() as conn:
                    conn.execution_options(isolation_level="AUTOCOMMIT")
                    claimed = repository.claim(conn, queue=queue, limit=limit, lease=self.lease)
            except Exception as exc:
                if not _batcher.is_transient(exc):
                    raise
                log.warning("claim on queue %s failed: %s", queue, _first_line(exc))
                with self._cond:
                    self._ready.setdefault(queue, None)
                self._stop.wait(1.0)
                return
            with self._cond:
                if len(claimed) == limit:
                    self._ready[queue] = None  # more may be waiting: back of the line
                self._accept(queue, claimed)

    def _accept(self, queue: str, claimed: list[Any]) -> None:
        if not claimed:
            return
        self._last_work = time.monotonic()
        self._claimed_since_poll += len(claimed)
        self.stats.claimed += len(claimed)
        for c in claimed:
            job = JobContext(c.id, c.queue, c.payload, c.attempts, headers=c.headers)
            if self._hooks is not None:
                self._hooks.claimed(job)
            self._jobs[job.id] = job
            self._set_state(job.id, _PENDING)
            self._pending.append(job)
            log.debug("job %d queue=%s attempt=%d: claimed", job.id, queue, job.attempts)
        self._work.notify(len(claimed))

    def _on_notify(self, queue: str) -> None:
        if queue in self.handlers:
            with self._cond:
                self._notified[queue] = None
                self._cond.notify_all()

    def _on_listen_connected(self) -> None:
        with self._cond:
            self._poll_requested = True  # whatever was sent while we were away is gone
            self._cond.notify_all()

    def _reap(self) -> None:
        try:
            with self.engine.begin() as conn:
                conn.execute(
                    statements.SET_LOCAL_LOCK_TIMEOUT,
                    {"lock_timeout": str(int(self.lock_timeout * 1000))},
                )
                reaped = repository.reap_expired(conn)
        except Exception as exc:
            if not _batcher.is_transient(exc):
                raise
            log.warning("reaper failed: %s", _first_line(exc))
            return
        for job in reaped:
            log.warning(
                "job %d attempt=%d: lease expired, now %s", job.id, job.attempts, job.status
            )
        if reaped and self._hooks is not None:
            self._hooks.reaped(reaped)
        if reaped:
            with self._cond:
                for q in self._queues:
                    self._ready[q] = None

    # -- handler threads --------------------------------------------------------------------------

    def _handler_loop(self) -> None:
        while True:
            with self._cond:
                while not (self._stop.is_set() or self._pending or self._tickets):
                    self._work.wait()
                if self._stop.is_set():
                    return
                if self.mode == "transaction":
                    queue = self._tickets.popleft()
                    self._tx_running += 1
                else:
                    job = self._pending.popleft()
                    self._set_state(job.id, _RUNNING)
                    if not self._pending:
                        self._wake_claimer()
            if self.mode == "transaction":
                try:
                    self._run_in_transaction(queue)
                finally:
                    with self._cond:
                        self._tx_running -= 1
                        self._cond.notify()
            else:
                self._run_leased(job)

    def _policy(self, queue: str) -> RetryPolicy:
        return self.queue_retry.get(queue, self.retry)

    def _run_leased(self, job: JobContext) -> None:
        log.debug("job %d queue=%s attempt=%d: start payload=%r", *_ids(job), job.payload)
        error: BaseException | None = None
        if self._hooks is not None:
            self._hooks.started(job)
        try:
            self.handlers[job.queue](job)
        except Exception as exc:
            error = exc
        if self._hooks is not None:
            self._hooks.handled(job, error)
        with self._cond:
            if job.lease_lost:
                self._forget(job)
                self.stats.lost += 1
                log.warning("job %d queue=%s attempt=%d: lost (lease); outcome dropped", *_ids(job))
                if self._hooks is not None:
                    self._hooks.lost(job, "lease lost")
                return
            if self._state.get(job.id) != _SELF_DONE:
                self._set_state(job.id, _FINISHING)
            self._wake_claimer()
        if error is None:
            self._completer.complete(job)
        else:
            policy = self._policy(job.queue)
            retry = policy.should_retry(error)
            self._completer.fail(job, describe_error(error), retry=retry, policy=policy)

    def _run_in_transaction(self, queue: str) -> None:
        outcome = ""
        job: JobContext | None = None
        try:
            with self.engine.begin() as conn:
                claimed = repository.claim(conn, queue=queue, limit=1, lease=self.lease)
                if not claimed:
                    return
                c = claimed[0]
                job = JobContext(
                    c.id, c.queue, c.payload, c.attempts, connection=conn, headers=c.headers
                )
                with self._cond:
                    self._accept_tx(queue)
                if self._hooks is not None:
                    self._hooks.claimed(job)
                    self._hooks.started(job)
                savepoint = conn.begin_nested()
                try:
                    self.handlers[queue](job)
                except Exception as exc:
                    if self._hooks is not None:
                        self._hooks.handled(job, exc)
                    savepoint.rollback()
                    policy = self._policy(queue)
                    result = repository.fail(
                        conn,
                        job.id,
                        job.attempts,
                        describe_error(exc),
                        retry=policy.should_retry(exc),
                        base=policy.base,
                        cap=policy.cap,
                    )
                    outcome = _batcher.LOST if result is None else _fail_outcome(result.status)
                    detail = describe_error(exc)
                else:
                    if self._hooks is not None:
                        self._hooks.handled(job, None)
                    savepoint.commit()
                    done = repository.complete(conn, job.id, job.attempts)
                    outcome, detail = (_batcher.DONE, "") if done else (_batcher.LOST, "")
        except Exception as exc:
            if job is None and _batcher.is_transient(exc):
                log.warning("claim on queue %s failed: %s", queue, _first_line(exc))
                self._stop.wait(1.0)
                return
            if job is None:
                raise
            outcome, detail = _batcher.LOST, f"transaction rolled back: {_first_line(exc)}"
        finally:
            job_connection_cleared = job
            if job_connection_cleared is not None:
                job_connection_cleared.connection = None
        if job is not None:
            self._count(job, outcome, detail)

    def _accept_tx(self, queue: str) -> None:
        self._last_work = time.monotonic()
        self._claimed_since_poll += 1
        self.stats.claimed += 1
        self._ready.setdefault(queue, None)  # it had a job: more may be waiting
        self._cond.notify()

    # -- heartbeat --------------------------------------------------------------------------------

    def _heartbeat_loop(self) -> None:
        period = self.lease.total_seconds() / 3
        while not self._stop.wait(period):
            with self._cond:
                jobs = [j for j in self._jobs.values() if self._state.get(j.id) != _SELF_DONE]
            if jobs:
                self._extend(jobs, deadline=time.monotonic() + period)

    def _extend(self, jobs: list[JobContext], deadline: float) -> None:
        params = _batcher.batch_params(jobs)
        params["lease"] = self.lease

        def work(conn: Connection) -> tuple[set[int], set[int]]:
            kept = _batcher.matched_ids(conn, statements.EXTEND_LEASE_MANY, params)
            missed = [j for j in jobs if j.id not in kept]
            if not missed:
                return kept, set()
            done = _batcher.matched_ids(conn, statements.DONE_AMONG, _batcher.batch_params(missed))
            return kept, done

        result = _batcher.run_batch(
            self.engine,
            work,
            lock_timeout_ms=int(self.lock_timeout * 1000),
            keep_trying=lambda: not self._stop.is_set() and time.monotonic() < deadline,
            what="heartbeat",
        )
        if result is None:
            return
        kept, self_done = result
        if self._hooks is not None:
            self._hooks.lease_extended([j for j in jobs if j.id in kept])
        with self._cond:
            for job in jobs:
                if job.id in kept:
                    continue
                state = self._state.get(job.id)
                if job.id in self_done:
                    if state in _BUSY:
                        self._set_state(job.id, _SELF_DONE)
                elif state in _BUSY:
                    job.lease_lost = True
                    job.stopping.set()
                    log.warning("job %d queue=%s attempt=%d: lease lost, stopping", *_ids(job))
                    if state == _PENDING:
                        self._pending.remove(job)
                        self._forget(job)
                        self.stats.lost += 1
                        if self._hooks is not None:
                            self._hooks.lost(job, "lease lost before it started")
            self._cond.notify_all()

    # -- outcomes ---------------------------------------------------------------------------------

    def _forget(self, job: JobContext) -> None:
        self._jobs.pop(job.id, None)
        if self._state.pop(job.id, None) in _BUSY:
            self._busy -= 1

    def _report(self, outcomes: list[tuple[JobContext, str, str]]) -> None:
        """Called by the completer once a batch's outcomes are written (or known to be lost)."""
        with self._cond:
            for job, outcome, detail in outcomes:
                self._forget(job)
                self._count(job, outcome, detail)
            self._wake_claimer()

    def _count(self, job: JobContext, outcome: str, detail: str) -> None:
        with self._cond:
            if outcome == _batcher.DONE:
                self.stats.done += 1
                log.info("job %d queue=%s attempt=%d: done", *_ids(job))
            elif outcome == _batcher.DONE_BY_HANDLER:
                self.stats.done_by_handler += 1
                log.info("job %d queue=%s attempt=%d: done by its handler", *_ids(job))
            elif outcome == _batcher.RETRY:
                self.stats.retried += 1
                log.warning("job %d queue=%s attempt=%d: %s", *_ids(job), mask_text(detail))
            elif outcome == _batcher.FAILED:
                self.stats.failed += 1
                log.error("job %d queue=%s attempt=%d: failed: %s", *_ids(job), mask_text(detail))
            elif outcome == _batcher.RELEASED:
                self.stats.released += 1
                log.info("job %d queue=%s attempt=%d: released to the queue", *_ids(job))
            else:
                self.stats.lost += 1
                log.warning("job %d queue=%s attempt=%d: lost (%s)", *_ids(job), detail or "?")
            if self._hooks is not None:
                self._hooks.outcome(job, outcome, detail)

    # -- shutdown ---------------------------------------------------------------------------------

    def _shutdown(self, threads: list[threading.Thread], completer: _batcher.Completer) -> None:
        deadline = time.monotonic() + self.shutdown_timeout
        self._stop.set()
        with self._cond:
            unstarted = list(self._pending)
            self._pending.clear()
            self._tickets.clear()
            for job in unstarted:
                self._forget(job)  # out of the heartbeat before the release
            running = list(self._jobs.values())
            self._cond.notify_all()
            self._work.notify_all()
        for job in running:
            job.stopping.set()
        if unstarted:
            self._release(unstarted, deadline)
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        completer.close(deadline)
        with self._cond:
            left = [j for j in self._jobs.values() if self._state.get(j.id) == _RUNNING]
        for job in left:
            log.warning(
                "job %d queue=%s attempt=%d: still running at shutdown; left to its lease",
                *_ids(job),
            )

    def _release(self, jobs: list[JobContext], deadline: float) -> None:
        released = _batcher.run_batch(
            self.engine,
            lambda conn: _batcher.matched_ids(
                conn, statements.RELEASE_MANY, _batcher.batch_params(jobs)
            ),
            lock_timeout_ms=int(self.lock_timeout * 1000),
            keep_trying=lambda: time.monotonic() < deadline,
            what="release",
        )
        for job in jobs:
            if released is not None and job.id in released:
                self._count(job, _batcher.RELEASED, "")
            else:
                log.warning(
                    "job %d queue=%s attempt=%d: not released; left to its lease", *_ids(job)
                )


def _ids(job: JobContext) -> tuple[int, str, int]:
    return job.id, job.queue, job.attempts


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return mask_text(text.splitlines()[0] if text else type(exc).__name__)


def _fail_outcome(status: str) -> str:
    return _batcher.FAILED if status == "failed" else _batcher.RETRY
