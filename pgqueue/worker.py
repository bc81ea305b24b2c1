"""The worker: a facade over the components that claim, run, heartbeat, reap and complete jobs.

Options and wiring live here; each concern is a private module of its own in
:mod:`pgqueue._worker`: the claim window (``window``), the claiming loop (``claimer``, with its
claim replayed on the driver by ``replay``, its queues' pauses and limits followed by
``flow`` and where each queue's claim starts kept by ``low_water``), the handler lanes
(``threads``, ``event_loop``) running handlers through ``executors`` (which code runs a job:
``dispatch``), the completer (``completer``, which
``culprits`` helps when one row breaks a batch), the heartbeat (``heartbeat``), the reaper
(``reaper``), the periodic scheduler (``scheduler``), the pruner of finished jobs past their
retention (``pruner``), the handler timeouts (``deadlines``, enforced by the ``watchdog``;
in transaction mode a stuck handler's session ended by ``abandon``),
the retried short transaction
(``transient``), what a loop does with an unexpected error (``faults``), the liveness pulses
(``pulse``), the stop signals (``signals``), the worker's row (``registration``), the jobs' log
lines (``capture``) and the outcome table (``outcomes``), meeting in ``runtime``. Every
statement the components send goes through the worker's door, ``store``, or the users'
functions it shares with them (claim, complete, fail, snooze, reap).

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from types import FrameType
from typing import Literal

from sqlalchemy import Engine
from sqlalchemy.engine import URL

from pgqueue import pooler
from pgqueue._base.connections import worker_name
from pgqueue._base.urls import mask_url
from pgqueue._base.validation import (
    MAX_INT32,
    check_bool,
    check_coroutines,
    check_database_url,
    check_port,
    check_positive_int,
    check_seconds,
    check_threads,
)
from pgqueue._worker import capture, store
from pgqueue._worker.claimer import Claimer, ClaimerOptions, Intake
from pgqueue._worker.completer import FLUSH_SIZE, Completer
from pgqueue._worker.deadlines import Deadlines
from pgqueue._worker.dispatch import Dispatch, registry_finder, registry_tasks
from pgqueue._worker.event_loop import AsyncLane
from pgqueue._worker.executors import DEFAULT_MAX_RESULT_BYTES
from pgqueue._worker.heartbeat import Heartbeat
from pgqueue._worker.pruner import Pruner
from pgqueue._worker.pulse import Pulse
from pgqueue._worker.registration import Registration
from pgqueue._worker.runtime import Runtime
from pgqueue._worker.scheduler import Scheduler
from pgqueue._worker.signals import handle_stop_signals
from pgqueue._worker.threads import ThreadLane, TransactionLane
from pgqueue._worker.transient import short_transaction
from pgqueue._worker.watchdog import Watchdog
from pgqueue._worker.window import ClaimWindow, Held, Lane, State, keys
from pgqueue.errors import (
    InvalidArgumentError,
    InvalidArgumentTypeError,
    WorkerFailedError,
    WorkerStuckError,
)
from pgqueue.health import DEFAULT_HOST, OK, Health, HealthServer, check_database
from pgqueue.hooks import HookDispatcher, WorkerHooks, check_hooks
from pgqueue.jobs import (
    Handler,
    JobContext,
    Outcome,
    Registry,
    WorkerStats,
    check_handlers,
)
from pgqueue.listener import Listener
from pgqueue.periodic import Periodic, check_definitions
from pgqueue.retry_policy import RetryPolicy
from pgqueue.schema import CANCEL_HINT, SETTINGS_HINT, channel_for, schema_of

log = logging.getLogger("pgqueue.worker")

__all__ = ["Handler", "JobContext", "Registry", "Worker", "WorkerStats"]

#: Default of ``Worker(async_concurrency=...)``.
DEFAULT_ASYNC_CONCURRENCY = 100
#: Default of ``Worker(lease=...)``: short, so a killed worker's jobs run again within a minute
#: (lease expiry, then at most half a lease until another worker's reaper runs). The heartbeat
#: extends held leases every ``lease / 3``, one batched statement for all of them. The
#: repository's own ``claim(lease=...)`` default stays the article's 5 minutes (R7).
DEFAULT_LEASE = timedelta(seconds=30)
#: Default of ``Worker(timeout_grace=...)``: a handler asked to stop at its timeout has this long
#: to return before its failure is written without it.
DEFAULT_TIMEOUT_GRACE = 5.0
#: Default of ``Worker(stuck_after=...)``: far above any one step of a healthy loop (a claim, a
#: flush, a heartbeat are milliseconds; their retries count as progress).
DEFAULT_STUCK_AFTER = 60.0


class Worker:
    """Runs handlers for the jobs of one or more queues: sync ones in threads, ``async def`` ones
    as tasks on an event loop of its own.

    In the default lease mode (R9) a job is claimed and committed at once, its handler runs
    outside any transaction, and its outcome is written in a second short transaction, batched
    with other jobs'. A heartbeat extends the leases of running jobs every ``lease / 3``; the
    reaper requeues jobs whose lease expired (crashed workers). One extra direct connection
    listens for ``NOTIFY jobs`` so a new job starts within milliseconds; a fallback poll catches
    anything missed and jobs whose ``run_at`` came due.

    Args:
        engine: Used for short transactions (claims, batched completions, heartbeats, reaping):
            lease mode needs 3 connections (claimer, completer, heartbeat/reaper), transaction
            mode ``concurrency + 2``; add what the handlers themselves take from the same engine,
            and one the pruner takes for a moment once a minute (``prune``).
        handlers: ``{queue: handler}``, or a :class:`Registry` of handlers and tasks; the
            worker claims from these queues (and those of the registry's tasks) only. A handler
            takes one :class:`JobContext`; a task its arguments. Sync and ``async def`` ones mix
            freely. A job is run by the task its ``jobs.task`` names, else by its queue's
            handler; a job naming a task this worker does not know (a rolling deploy) fails the
            attempt with ``last_error`` naming the task, and is retried as usual.
        concurrency: Handler threads, for sync handlers. Default 4; at most
            :data:`~pgqueue._base.validation.MAX_THREADS` (1,000) unless ``force_bounds``.
        async_concurrency: Coroutines that may run at once on the worker's event loop (one
            thread), for ``async def`` handlers; the loop starts only when there is one.
            Default 100; at most 10,000 unless ``force_bounds``.
        lease: How long a claim holds a job before the reaper may hand it to another worker.
            ``timedelta`` or seconds; default 30 seconds, extended every ``lease / 3`` while the
            job runs, so the jobs of a killed worker run again within a minute.
        poll_interval: Seconds between fallback polls of every queue. Default 5.
        batch_size: Most jobs per claim, and the most an adaptive prefetch claims ahead.
            Default 100 (completions are batched separately, up to
            500 outcomes per statement).
        prefetch: Jobs claimed beyond the free handler threads, so a thread finds its next job
            waiting and one claim serves many jobs. Default None: adaptive, from
            ``concurrency`` (one waiting job per handler thread, so a claimed job waits for at
            most about one handler run) up to ``batch_size`` while the recent handler runs say
            the jobs claimed ahead amount to under 50 ms of work per thread: short jobs are
            claimed by the batch, long ones are left for other workers. An int fixes it; 0
            claims only for idle threads. Transaction mode never prefetches.
            Async handlers prefetch ``min(prefetch, async_concurrency)`` (default:
            ``min(async_concurrency, batch_size)``).
        listen: Run ``LISTEN jobs`` on a dedicated connection. Default True; False polls only.
            An engine given a schema with :func:`pgqueue.use_schema` listens on that schema's
            channel, ``<schema>.jobs``.
        listen_url: Where to LISTEN when the engine goes through a transaction-mode pooler:
            a ``postgresql[+driver]://`` string or SQLAlchemy URL (another is refused here,
            naming ``listen_url``). Default: the engine's URL.
        mode: ``"lease"`` (default) or ``"transaction"`` (R8: claim, handle and complete in one
            transaction, for jobs of a few milliseconds; the handler gets ``job.connection``).
            Transaction mode takes sync handlers only.
        shutdown_timeout: Seconds that running handlers get to finish after a stop (their
            leases keep being extended meanwhile); async handlers still running then are
            cancelled (a failed, retryable attempt), sync ones are left to their lease.
            Default 30.
        retry: The retry policy of every queue without its own. Default :class:`RetryPolicy()`
            (10 s base, 1 h cap, every exception retryable).
        queue_retry: ``{queue: RetryPolicy}`` overrides. Default none.
        reap_interval: Seconds between two runs of the reaper. Default: half the lease.
        lock_timeout: How long the batched statements (completions, failures, lease
            extensions) and the reaper wait for a row lock, in seconds. Default 5.
        idle_poll_interval: Scale-to-zero (R18): when set, a worker that found no work for
            ``idle_after`` seconds doubles its poll interval up to this (e.g. 900 s), and reaping
            and LISTEN reconnects wait as long; an idle worker sends no other query. Default None
            (always poll every ``poll_interval``).
        idle_after: Seconds without work before the idle backoff starts. Default 60.
        install_signal_handlers: Stop on SIGTERM/SIGINT (only when ``run()`` is on the main
            thread; a second signal exits at once). Default True.
        hooks: :class:`pgqueue.WorkerHooks` told of every job's claim, start, outcome, lease
            extension and reaping (metrics, tracing; see :mod:`pgqueue.hooks`). Default none.
        periodic: :class:`pgqueue.Periodic` definitions this worker enqueues at each tick (any
            number of workers may declare the same ones: each tick is enqueued once), beside
            those of a :class:`Registry` given as ``handlers``. Their queues need no handler
            here. A thread of its own fires them (one more connection from the engine). With
            ``run(until_empty=True)``, the ticks due at start are enqueued, then the run drains.
            Default none.
        health_port: Serve ``GET /livez`` and ``GET /readyz`` on this TCP port while
            :meth:`run` runs (:class:`pgqueue.health.HealthServer`; 0 picks a free port). Default
            None: no server (:meth:`liveness` and :meth:`readiness` still answer in code).
        health_host: The address the health server binds. Default ``127.0.0.1``.
        stuck_after: Seconds one loop (claimer, completer, heartbeat) may spend in a single step
            before :meth:`liveness` reports it stuck. Default 60.
        max_result_bytes: The largest JSON text a result may be (``jobs.result``). A task
            whose return value is not JSON, or larger, fails for good (no retry: the same code
            returns the same kind of value) with ``last_error`` saying so; a queue handler's
            such value is not stored (logged once per handler), the job is done. Default
            1,000,000.
        log_tracebacks: Write a failed attempt's traceback (masked, trimmed like the one stored
            in the job's ``errors``) on the lines after its log line: the retry's at WARNING,
            the final failure's at ERROR. Default True; False logs the one-line error only (the
            traceback is stored either way).
        capture_logs: Record every ``logging`` record at INFO or above that a handler's own
            thread or task emits while it runs as a line of the job's log (with its level and
            logger name; it still reaches the normal handlers), beside the lines of
            :meth:`pgqueue.JobContext.log`. A record must pass its logger's level first: one
            below the effective level (WARNING for the root logger unless configured) is never
            made. Default True; ``pgqueue worker --no-capture-logs``.
        default_timeout: The execution timeout of a job without its own (``timeout=`` of
            :func:`pgqueue.enqueue`), a ``timedelta`` or seconds. Default None: such a job may
            run for ever. The clock starts when the attempt starts; at the timeout an async
            handler's task is cancelled and a sync handler gets ``job.stopping`` set (in
            transaction mode its running statement is cancelled too, rolling back its work);
            the attempt fails with :class:`pgqueue.HandlerTimeoutError` and is retried by its
            policy (docs/worker.md, "Timeouts").
        timeout_grace: How long after a timeout the failure is written even if the handler has
            not returned (a handler that returns later changes nothing); the heartbeat never
            extends a lease past timeout + grace. A sync handler that has not returned by then
            leaves its thread stuck (:attr:`WorkerStats.stuck`, logged with its stack, shown by
            ``/livez`` and ``pgqueue workers``); once every thread has been stuck for longer
            than the lease the worker gives back what it holds and :meth:`run` raises
            :class:`pgqueue.WorkerStuckError` (``pgqueue worker`` exits 3). A ``timedelta`` or
            seconds, 0 allowed. Default 5 seconds.
        prune: Delete the finished jobs of this worker's queues that are past their retention
            (:func:`pgqueue.set_retention`; by default done jobs after 7 days, failed ones after
            30), in batches of at most 1,000 rows, at most once a minute per queue over every
            worker, on a thread of its own (one more connection from the engine, briefly, once
            a minute). ``run(until_empty=True)`` prunes once, after its drain. Default True;
            False for who prunes otherwise (``pgqueue purge`` from cron).
        force_bounds: Take a ``concurrency`` above 1,000 threads or an ``async_concurrency``
            above 10,000 coroutines: bounds that keep one mistyped number from taking the host
            down. Default False (such a value raises ``InvalidArgumentError``).

    Raises:
        InvalidArgumentError: for a bad option (a ``concurrency`` or ``async_concurrency`` over
            its bound without ``force_bounds``), or an ``async def`` handler with
            ``mode="transaction"`` (before anything runs).

    .. versionadded:: 0.1.0
    """

    def __init__(
        self,
        engine: Engine,
        handlers: Mapping[str, Handler],
        *,
        concurrency: int = 4,
        async_concurrency: int = DEFAULT_ASYNC_CONCURRENCY,
        lease: timedelta | float = DEFAULT_LEASE,
        poll_interval: timedelta | float = 5.0,
        batch_size: int = 100,
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
        periodic: Sequence[Periodic] | None = None,
        health_port: int | None = None,
        health_host: str = DEFAULT_HOST,
        stuck_after: timedelta | float = DEFAULT_STUCK_AFTER,
        log_tracebacks: bool = True,
        capture_logs: bool = True,
        max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
        prune: bool = True,
        force_bounds: bool = False,
        default_timeout: timedelta | float | None = None,
        timeout_grace: timedelta | float = DEFAULT_TIMEOUT_GRACE,
    ) -> None:
        tasks = registry_tasks(handlers)
        self.handlers = check_handlers(handlers, allow_empty=bool(tasks))
        self.max_result_bytes = check_positive_int("max_result_bytes", max_result_bytes)
        self._dispatch = Dispatch(
            self.handlers,
            tasks,
            max_result_bytes=self.max_result_bytes,
            find_task=registry_finder(handlers),
        )
        self.periodic = check_definitions(
            [
                *(periodic if periodic is not None else ()),
                *(handlers.periodic_definitions if isinstance(handlers, Registry) else ()),
            ]
        )
        if mode not in ("lease", "transaction"):
            raise InvalidArgumentError("mode", f"must be 'lease' or 'transaction', got {mode!r}")
        #: The lane each queue is claimed for (a mixed queue's jobs go to their own lanes).
        self._lanes = self._dispatch.queue_lanes
        async_names = self._dispatch.async_names()
        if mode == "transaction" and async_names:
            raise InvalidArgumentError(
                "mode",
                "transaction mode runs sync handlers and tasks only; async ones for "
                + ", ".join(async_names),
            )
        if prefetch is not None and (
            isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 0
        ):
            raise InvalidArgumentError("prefetch", f"must be an int >= 0, got {prefetch!r}")
        self.engine = engine
        force = check_bool("force_bounds", force_bounds)
        self.concurrency = check_threads(
            "concurrency",
            check_positive_int("concurrency", concurrency),
            force=force,
            forced_by="force_bounds=True",
        )
        self.async_concurrency = check_coroutines(
            "async_concurrency",
            check_positive_int("async_concurrency", async_concurrency),
            force=force,
            forced_by="force_bounds=True",
        )
        self.lease = timedelta(seconds=check_seconds("lease", lease))
        self.poll_interval = check_seconds("poll_interval", poll_interval)
        self.batch_size = check_positive_int("batch_size", batch_size)
        if mode == "transaction":
            self.prefetch = 0
        else:
            self.prefetch = self.concurrency if prefetch is None else prefetch
        self._adaptive_prefetch = prefetch is None and mode == "lease"
        self._async_prefetch = min(
            self.async_concurrency, self.batch_size if prefetch is None else prefetch
        )
        self.listen = bool(listen)
        self.listen_url: URL = (
            engine.url if listen_url is None else check_database_url("listen_url", listen_url)
        )
        self.mode = mode
        self.shutdown_timeout = check_seconds("shutdown_timeout", shutdown_timeout, allow_zero=True)
        self.retry = retry if retry is not None else RetryPolicy()
        self.queue_retry = dict(queue_retry or {})
        self.reap_interval = (
            self.lease.total_seconds() / 2
            if reap_interval is None
            else check_seconds("reap_interval", reap_interval)
        )
        self.lock_timeout = check_seconds("lock_timeout", lock_timeout)
        if self.lock_timeout * 1000 > MAX_INT32:
            # PostgreSQL's lock_timeout is an int of milliseconds.
            raise InvalidArgumentError(
                "lock_timeout", f"must be at most {MAX_INT32 / 1000:.0f} s, got {lock_timeout}"
            )
        self.idle_poll_interval = (
            None
            if idle_poll_interval is None
            else max(check_seconds("idle_poll_interval", idle_poll_interval), self.poll_interval)
        )
        self.idle_after = check_seconds("idle_after", idle_after, allow_zero=True)
        self.install_signal_handlers = install_signal_handlers
        self.health_port = None if health_port is None else check_port("health_port", health_port)
        self.health_host = health_host
        self.stuck_after = check_seconds("stuck_after", stuck_after)
        if not isinstance(log_tracebacks, bool):
            raise InvalidArgumentTypeError("log_tracebacks", "a bool", log_tracebacks)
        self.log_tracebacks = log_tracebacks
        if not isinstance(capture_logs, bool):
            raise InvalidArgumentTypeError("capture_logs", "a bool", capture_logs)
        self.capture_logs = capture_logs
        self.default_timeout = (
            None if default_timeout is None else check_seconds("default_timeout", default_timeout)
        )
        self.timeout_grace = check_seconds("timeout_grace", timeout_grace, allow_zero=True)
        self.prune = check_bool("prune", prune)
        #: The health server of the current run, when ``health_port`` is set.
        self.health_server: HealthServer | None = None
        self.stats = WorkerStats()
        self.hooks = check_hooks(hooks)
        self._hooks = HookDispatcher(self.hooks) if self.hooks else None
        self._stop = threading.Event()
        self._state_lock = threading.Lock()
        self._running = False
        self._claimer: Claimer | None = None
        self._pulses: list[Pulse] = []
        self._listener: Listener | None = None
        self._until_empty = False

    # -- public ---------------------------------------------------------------------------------

    def run(self, *, until_empty: bool = False) -> WorkerStats:
        """Work until :meth:`stop` or SIGTERM/SIGINT; with ``until_empty``, until no job is ready.

        ``until_empty=True`` drains what is ready now (batched claims), waits for the handlers,
        and returns: for cron-started or application-triggered runs (R19). Returns the stats.

        Each loop (claimer, completer, heartbeat, scheduler, listener) logs an error it did not
        expect with its traceback and goes on. When the claimer, the completer or the heartbeat
        cannot (5 steps in a row failed, or the heartbeat's for a whole ``lease / 3``, before
        the leases it holds expire), the worker stops as for :meth:`stop` (no more claims,
        unstarted jobs given back, running handlers given ``shutdown_timeout``) and this raises.

        Raises:
            WorkerFailedError: a loop could not go on (the last error is its ``__cause__``).
        """
        with self._state_lock:
            if self._running:
                raise RuntimeError("this worker is already running")
            self._running = True
        try:
            self.health_server = (
                None
                if self.health_port is None
                else HealthServer(self, host=self.health_host, port=self.health_port).start()
            )
        except BaseException:
            with self._state_lock:
                self._stop.clear()
                self._running = False
            raise
        self._until_empty = until_empty
        lanes = self._dispatch.lanes
        lock_timeout_ms = int(self.lock_timeout * 1000)
        # Computed per run: the pid of the process that runs it (a spawned child has its own).
        name = worker_name()
        # The runtime calls the completer and the async lane, which call it back: each is given
        # its callbacks when built, and those reach what the next lines build (nothing calls
        # them before the components start).
        completer = Completer(
            self.engine,
            lambda outcomes: runtime.report(outcomes),
            lock_timeout_ms=lock_timeout_ms,
            fatal=lambda loop, error: runtime.fail(loop, error),
            # A limited queue's completions carry the claim of the slots they free.
            refill=lambda replay, queue, held, beside: claimer.complete_and_claim(
                replay, queue, held, beside
            ),
            urgent=lambda done: claimer.waits_for_finish(done),
            # Two rides on the wire at once: the next one's completions run beside the claim.
            overlap=True,
        )
        coroutines: AsyncLane | None = None

        def wake_async() -> None:
            if coroutines is not None:
                coroutines.wake()

        runtime = self._runtime(completer, wake_async)
        if Lane.ASYNC in lanes:
            coroutines = AsyncLane(runtime, self._dispatch, self.async_concurrency)
        restore = self._install_signals()
        threads: ThreadLane | TransactionLane
        intake: Intake
        if self.mode == "transaction":  # the one place the mode is chosen: its lane
            threads = intake = TransactionLane(
                runtime,
                self._dispatch,
                self.concurrency,
                engine=self.engine,
                lease=self.lease,
                on_job=lambda queue: claimer.queue_had_job(queue),
                locked_by=name,
            )
        else:
            threads = ThreadLane(
                runtime, self._dispatch, self.concurrency if Lane.THREADS in lanes else 0
            )
            intake = runtime.window
        claimer = Claimer(runtime, self.engine, self._lanes, self._claimer_options(name), intake)
        self._claimer = claimer
        heartbeat = Heartbeat(runtime, self.engine, self.lease, lock_timeout_ms=lock_timeout_ms)
        registration = Registration(self.engine, name, list(self._lanes))
        watchdog = Watchdog(
            runtime,
            threads=self.concurrency if Lane.THREADS in lanes or self.mode == "transaction" else 0,
            lease=self.lease.total_seconds(),
            on_stuck=registration.set_stuck,
        )
        self._pulses = [claimer.pulse, completer.pulse, heartbeat.pulse]
        if completer.ride_pulse is not None:
            self._pulses.append(completer.ride_pulse)
        scheduler = (
            Scheduler(
                self.engine,
                self.periodic,
                stop=runtime.stop,
                idle=lambda: self.idle,
                on_enqueued=claimer.on_notify,
            )
            if self.periodic
            else None
        )
        pruner = (
            Pruner(
                self.engine,
                list(self._lanes),
                worker=name,
                stop=runtime.stop,
                idle=lambda: self.idle,
                lock_timeout_ms=lock_timeout_ms,
            )
            if self.prune
            else None
        )
        listener: Listener | None = None
        listen_check: threading.Thread | None = None
        log.info(
            "worker started: queues=%s mode=%s concurrency=%s async_concurrency=%s lease=%s url=%s",
            ",".join(self._lanes),
            self.mode,
            self.concurrency if Lane.THREADS in lanes else "-",
            self.async_concurrency if coroutines is not None else "-",
            self.lease,
            mask_url(self.engine.url),
        )
        if self._hooks is not None:
            self._hooks.worker_started(self)
        if self.capture_logs:
            capture.install()
        try:
            registration.add()
            watchdog.start()
            completer.start()
            threads.start()
            if coroutines is not None:
                coroutines.start()
            heartbeat.start()
            if scheduler is not None:
                if until_empty:
                    scheduler.fire_due_once()
                else:
                    scheduler.start()
            if pruner is not None and not until_empty:
                pruner.start()
            if self.listen and not until_empty:

                def on_notify(payload: str) -> None:
                    if payload == CANCEL_HINT:
                        heartbeat.poke()
                    elif payload == SETTINGS_HINT:
                        claimer.on_settings_changed()
                    else:
                        claimer.on_notify(payload)

                def on_connected() -> None:
                    # Whatever was sent while not listening is gone: poll, and check the held
                    # leases for a cancel that was missed.
                    claimer.on_listen_connected()
                    heartbeat.poke()

                listener = Listener(
                    self.listen_url,
                    on_notify,
                    on_connected,
                    min_reconnect_interval=claimer.idle_interval,
                    channel=channel_for(schema_of(self.engine)),
                    application_name=name,
                )
                self._listener = listener
                listener.start()
                # LISTEN through a transaction-mode pooler hears nothing: warn, never block.
                # The check sends its notification through the engine: joined below, so that
                # it never takes a connection of the engine after run() returned.
                listen_check = pooler.start_listen_check(
                    self.listen_url, self.engine, runtime.stop, application_name=name
                )
            claimer.run(until_empty)
            if pruner is not None and until_empty and runtime.failure is None:
                pruner.prune_once()
        finally:
            self._shutdown(runtime, threads, coroutines, completer, heartbeat)
            watchdog.close()
            if listener is not None:
                listener.stop()
            if listen_check is not None:
                listen_check.join(5.0)  # connected, it ends within a quarter second of the stop
            heartbeat.join(5.0)
            if scheduler is not None:
                scheduler.join(5.0)
            if pruner is not None:
                pruner.join(5.0)
            registration.remove()
            if self.capture_logs:
                capture.uninstall()
            restore()
            if self._hooks is not None:
                self._hooks.worker_stopped(self)
            if self.health_server is not None:
                self.health_server.stop()
            self._listener = None
            with self._state_lock:
                self._stop.clear()  # the stop this run obeyed is spent: the worker may run again
                self._running = False
            log.info("worker stopped: %s", self.stats)
        if runtime.failure is not None:
            loop, error = runtime.failure
            if isinstance(error, WorkerStuckError):
                raise error
            raise WorkerFailedError(loop, error) from error
        return self.stats

    def stop(self) -> None:
        """Ask :meth:`run` to stop claiming and shut down gracefully; callable from any thread.

        A stop is never lost: one asked while :meth:`run` starts up (before its health server,
        listener or threads are up) makes it shut down as soon as it got that far, and return
        within ``shutdown_timeout`` + 1 second. One asked while the worker is not running is
        kept for the next :meth:`run`, which then returns at once: a thread that calls ``run()``
        and a ``stop()`` right after it cannot race. ``run()`` resets the stop when it returns,
        so the worker can run again.
        """
        self._stop.set()
        runtime = self._current
        if runtime is not None:
            runtime.stop.set()
            with runtime.lock:
                runtime.claimer_wakeup.notify_all()
                runtime.work_ready.notify_all()

    @property
    def queues(self) -> tuple[str, ...]:
        """The queues this worker claims from: its handlers' and its registry's tasks'.

        .. versionadded:: 0.1.0
        """
        return tuple(self._lanes)

    @property
    def idle(self) -> bool:
        """True while scale-to-zero backs off (``idle_poll_interval`` set, no work for a while).

        Periodic observers (the Prometheus gauges) skip their queries then, so an idle worker
        sends nothing and a serverless database can suspend.

        .. versionadded:: 0.1.0
        """
        runtime, claimer = self._current, self._claimer
        if runtime is None or claimer is None:
            return False
        with runtime.lock:
            return claimer.idle()

    def liveness(self) -> Health:
        """``GET /livez``: healthy while each loop (claimer, completer, heartbeat) waits or made
        progress within ``stuck_after`` seconds; unhealthy when one is stuck in a step, when its
        thread died, or when the worker does not run. A stopping worker is alive.

        Handler threads stuck in a handler past its timeout (:attr:`WorkerStats.stuck`) are
        shown as the check ``handler_threads`` (``"2 of 4 stuck: jobs 17, 18"``); the worker
        stays alive while one thread can still run jobs (when none can, it stops by itself
        once they have been stuck for a lease).

        .. versionadded:: 0.1.0
        """
        runtime = self._current
        if not self._running or runtime is None or not self._pulses:
            return Health.of({"worker": "not running"})
        if runtime.stop.is_set():
            return Health(True, {"worker": "stopping"})  # alive: it finishes its handlers
        now = time.monotonic()
        health = Health.of({p.name: p.problem(self.stuck_after, now) or OK for p in self._pulses})
        with runtime.lock:
            stuck = sorted(h.job.id for h in runtime.stuck.values())
        if not stuck:
            return health
        checks = dict(health.checks)
        checks["handler_threads"] = (
            f"{len(stuck)} of {self.concurrency} stuck: jobs {', '.join(map(str, stuck))}"
        )
        return Health(health.ok and len(stuck) < self.concurrency, checks)

    def readiness(self) -> Health:
        """``GET /readyz``: healthy when the worker runs, ``SELECT 1`` answers within 2 seconds
        and, with LISTEN on, the listener is connected.

        .. versionadded:: 0.1.0
        """
        runtime = self._current
        if not self._running or runtime is None:
            return Health.of({"worker": "not running"})
        if runtime.stop.is_set():
            return Health.of({"worker": "stopping"})
        checks = {"database": check_database(self.engine)}
        if self.listen and not self._until_empty:
            listener = self._listener
            connected = listener is not None and listener.connected.is_set()
            checks["listener"] = OK if connected else "not connected (reconnecting)"
        return Health.of(checks)

    # -- wiring -----------------------------------------------------------------------------------

    _current: Runtime | None = None

    def _runtime(self, completer: Completer, wake_async: Callable[[], None]) -> Runtime:
        lanes = self._dispatch.lanes
        slots = {Lane.THREADS: self.concurrency, Lane.ASYNC: self.async_concurrency}
        prefetch = {Lane.THREADS: self.prefetch, Lane.ASYNC: self._async_prefetch}
        window = ClaimWindow(
            {lane: slots[lane] for lane in Lane if lane in lanes},
            prefetch,
            batch_size=self.batch_size,
            backlog=FLUSH_SIZE,
            # prefetch=None: short sync jobs are claimed up to a batch ahead, long ones not.
            adaptive={Lane.THREADS: self.batch_size} if self._adaptive_prefetch else None,
        )
        runtime = Runtime(
            window,
            self.stats,
            self._hooks,
            lambda q: self.queue_retry.get(q, self.retry),
            completer=completer,
            wake_async=wake_async,
            log_tracebacks=self.log_tracebacks,
            capture_logs=self.capture_logs,
            split=self._dispatch.split,
            engine=self.engine,
            deadlines=Deadlines(self.default_timeout, self.timeout_grace),
        )
        self._current = runtime
        # A stop asked before this run was published (while the health server started, or
        # before run() was called) is the worker's: the run obeys it from its first step.
        if self._stop.is_set():
            runtime.stop.set()
        return runtime

    def _claimer_options(self, name: str) -> ClaimerOptions:
        return ClaimerOptions(
            lease=self.lease,
            poll_interval=self.poll_interval,
            reap_interval=self.reap_interval,
            idle_poll_interval=self.idle_poll_interval,
            idle_after=self.idle_after,
            lock_timeout_ms=int(self.lock_timeout * 1000),
            worker_name=name,
        )

    # -- signals ----------------------------------------------------------------------------------

    def _install_signals(self) -> Callable[[], None]:
        if not self.install_signal_handlers:
            return lambda: None

        def on_signal(signum: int, frame: FrameType | None) -> None:
            if self._stop.is_set():
                log.warning("second signal %d: exiting now", signum)
                for handler in logging.getLogger().handlers:
                    handler.flush()
                os._exit(128 + signum)
            log.info("signal %d: stopping (handlers get %ss)", signum, self.shutdown_timeout)
            self.stop()

        return handle_stop_signals(on_signal)

    # -- shutdown ---------------------------------------------------------------------------------

    def _shutdown(
        self,
        runtime: Runtime,
        threads: ThreadLane | TransactionLane,
        coroutines: AsyncLane | None,
        completer: Completer,
        heartbeat: Heartbeat,
    ) -> None:
        """Stop claiming, give back unstarted jobs, give running handlers until the deadline.

        The heartbeat keeps extending the leases of running jobs meanwhile (another worker's
        reaper would otherwise requeue a job still running here), and stops once every handler
        finished and its outcome was written, or was abandoned at the deadline: such a job is
        left to its lease, so another worker runs it again after the lease.
        """
        deadline = time.monotonic() + self.shutdown_timeout
        runtime.stop.set()
        with runtime.lock:
            unstarted = runtime.window.take_all_pending()  # out of the heartbeat first
            running = runtime.window.in_state(State.RUNNING)
            runtime.claimer_wakeup.notify_all()
            runtime.work_ready.notify_all()
        for held in running:
            held.job.stopping.set()
        if unstarted:
            self._release(runtime, unstarted, deadline)
        threads.join(deadline)
        if coroutines is not None:
            coroutines.shutdown(deadline)
        completer.close(deadline)
        heartbeat.stop()
        with runtime.lock:
            left = runtime.window.in_state(State.RUNNING)
        for held in left:
            log.warning(
                "job %d queue=%s attempt=%d: still running at shutdown; left to its lease",
                held.job.id,
                held.job.queue,
                held.job.attempts,
            )

    def _release(self, runtime: Runtime, held: list[Held], deadline: float) -> None:
        released = short_transaction(
            self.engine,
            lambda conn: store.release_many(conn, keys(held)),
            what="release",
            keep_trying=lambda: time.monotonic() < deadline,
            lock_timeout_ms=int(self.lock_timeout * 1000),
        )
        with runtime.lock:
            for h in held:
                if released is not None and h.job.id in released:
                    runtime.record(h, Outcome.RELEASED, "")
                else:
                    log.warning(
                        "job %d queue=%s attempt=%d: not released; left to its lease",
                        h.job.id,
                        h.job.queue,
                        h.job.attempts,
                    )
