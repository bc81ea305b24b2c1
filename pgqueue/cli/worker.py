"""``pgqueue worker``: run the Worker a ``module:attr`` names, or supervise N processes of it.

A supervised child runs this same command (``--processes`` ignored) and reports to its parent
through :class:`pgqueue.cli.supervisor.ChildLink`.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
from collections.abc import Mapping
from typing import Any

from sqlalchemy import Engine, text
from sqlalchemy import exc as sa_exc

from pgqueue._base.urls import error_line, mask_url
from pgqueue._base.validation import check_processes, check_threads
from pgqueue.cli.common import (
    UserError,
    database_url,
    load_target,
    make_engine,
    note,
    postgres_url,
    report_cause,
    schema_arg,
    split_target,
    tcp_port,
)
from pgqueue.errors import PgQueueError, WorkerFailedError, WorkerStuckError
from pgqueue.jobs import Registry
from pgqueue.schema import schema_of

#: Where ``pgqueue worker --health-port`` serves unless ``--health-host`` says otherwise.
DEFAULT_HEALTH_HOST = "127.0.0.1"


#: ``pgqueue worker``'s exit code when every handler thread was stuck in a handler past its
#: timeout (:class:`pgqueue.WorkerStuckError`): the process must be replaced.
STUCK_EXIT_CODE = 3


def probe_port(value: str) -> int:
    """A probe's port: 0 lets the system choose one (the probe says which)."""
    return tcp_port(value, lowest=0)


def cmd_worker(args: argparse.Namespace) -> int:
    """Run a worker from ``module:attr`` (``--processes N``: N worker processes)."""
    from pgqueue.cli.supervisor import ChildLink

    link = ChildLink.from_env()  # set when a supervisor started this process
    if link is None:
        check_options(args)  # before a supervisor starts anything: one line, exit 2
        if args.processes > 1:
            return _supervise(args)
    _configure_logging(f"worker-{link.id} pid {os.getpid()}" if link is not None else None)
    try:
        worker = _build_worker(args)
        host, port = (
            (DEFAULT_HEALTH_HOST, 0 if link.health else None)
            if link is not None
            else (args.health_host, args.health_port)
        )
        if port is not None and worker.health_port is not None:
            raise UserError(
                f"{args.target} sets health_port={worker.health_port} in code: drop it or "
                "--health-port (the command serves the probes)"
            )
        _check_schema(worker.engine)
        server = None if port is None else _health_server(worker, host, port)
    except Exception as exc:  # every start-up error is one line; the traceback with --verbose
        error = exc if isinstance(exc, UserError) else UserError(_one_line(exc))
        if link is None:
            if error is exc:
                raise
            raise error from exc
        link.error(str(error))  # the supervisor prints it, once for every process
        link.close()
        report_cause(error if error is exc else exc, verbose=getattr(args, "verbose", False))
        return error.code
    try:
        if link is not None:
            link.started(
                health_port=None if server is None else server.port,
                shutdown_timeout=worker.shutdown_timeout,
            )
            link.watch_parent(worker.stop)
        # A process of its own: what start-up made (the application and its imports, the
        # engine) lives as long as it does, so the full collections the jobs' objects trigger
        # need not walk it each time (one took 40-200 ms with the GIL held in a drain of 20,000
        # jobs; frozen, 2-6 ms: docs/operations.md). Thawed when the run ends, for a caller
        # that goes on in the same process.
        gc.freeze()
        worker.run(until_empty=args.burst)
    except WorkerStuckError as exc:  # every thread stuck in a handler: replace the process
        note(f"pgqueue: error: {exc}")
        return STUCK_EXIT_CODE
    except WorkerFailedError as exc:  # logged with its tracebacks: one line, exit 1
        note(f"pgqueue: error: {exc}")
        return 1
    finally:
        gc.unfreeze()
        if server is not None:
            server.stop()
        if link is not None:
            link.close()
    return 0


def check_options(args: argparse.Namespace) -> None:
    """What can be checked without importing the target: the bounds of ``--processes`` and
    ``--concurrency`` (first: a refusal prints its one line before anything else happens), the
    target's form, the URLs, the schema."""
    force = args.force_bounds
    try:
        check_processes("--processes", args.processes, force=force, forced_by="--force-bounds")
        if args.concurrency is not None:
            check_threads(
                "--concurrency", args.concurrency, force=force, forced_by="--force-bounds"
            )
    except PgQueueError as exc:
        raise UserError(str(exc)) from None
    split_target(args.target)
    if args.listen_url is not None:
        postgres_url(args.listen_url, what="--listen-url")
    url = database_url(args, required=False)
    if url is not None:
        postgres_url(url)
    schema_arg(args)


def _check_schema(engine: Engine) -> None:
    """No pgqueue table is a start-up error; a server out of reach is not (the worker waits)."""
    schema = schema_of(engine)
    name = "jobs" if schema is None else f"{schema}.jobs"
    try:
        with engine.connect() as conn:
            present = conn.execute(
                text("SELECT to_regclass(CAST(:name AS text)) IS NOT NULL"), {"name": name}
            ).scalar_one()
    except sa_exc.DBAPIError:
        return  # an outage at start-up is like any other: the worker logs it and retries
    if not present:
        raise UserError(
            f"the database ({mask_url(engine.url)}) has no pgqueue schema (no table {name}): "
            "run `pgqueue migrate` first"
        )


def _one_line(exc: BaseException) -> str:
    """A start-up error that is not a :class:`UserError`: its type unless pgqueue raised it."""
    if isinstance(exc, PgQueueError):
        return error_line(exc)
    return f"cannot start the worker: {type(exc).__name__}: {error_line(exc)}"


def _configure_logging(who: str | None) -> None:
    """One line per record; a supervised worker process names itself (``worker-2 pid 123``)."""
    prefix = f"[{who}] " if who else ""
    logging.basicConfig(
        level=logging.INFO, format=f"%(asctime)s %(levelname)s {prefix}%(name)s: %(message)s"
    )


def _health_server(probe: Any, host: str, port: int) -> Any:
    from pgqueue.health import HealthServer

    try:
        return HealthServer(probe, host=host, port=port).start()
    except OSError as exc:
        raise UserError(
            f"cannot serve health probes on {host}:{port}: {exc.strerror or exc}"
        ) from exc


def _supervise(args: argparse.Namespace) -> int:
    """``--processes N``: a supervisor of N worker processes with the same arguments."""
    from pgqueue.cli.supervisor import Supervisor, SupervisorOptions, child_command

    _configure_logging(f"supervisor pid {os.getpid()}")
    supervisor = Supervisor(
        child_command(args.argv),
        SupervisorOptions(
            processes=args.processes, burst=args.burst, force_bounds=args.force_bounds
        ),
        health=args.health_port is not None,
    )
    server = (
        None
        if args.health_port is None
        else _health_server(supervisor, args.health_host, args.health_port)
    )
    try:
        result = supervisor.run()
    finally:
        if server is not None:
            server.stop()
    if result.code:
        raise UserError(result.reason, code=result.code)
    return 0


def _build_worker(args: argparse.Namespace) -> Any:
    """The Worker ``args.target`` names, or one built from its handler mapping or Registry."""
    from pgqueue import worker as worker_module
    from pgqueue._base.connections import worker_name

    target = load_target(args.target)
    options = {
        "--queues": args.queues,
        "--concurrency": args.concurrency,
        "--lease": args.lease,
        "--poll-interval": args.poll_interval,
        "--default-timeout": args.default_timeout,
        "--timeout-grace": args.timeout_grace,
        "--listen-url": args.listen_url,
        "--[no-]log-tracebacks": args.log_tracebacks,
        "--[no-]capture-logs": args.capture_logs,
        "--[no-]prune": args.prune,
        "--url": getattr(args, "url", None),
    }
    if isinstance(target, worker_module.Worker):
        given = [name for name, value in options.items() if value is not None]
        if given:
            raise UserError(
                f"{args.target} is a ready Worker: {', '.join(given)} would be ignored; "
                "configure the Worker in code, or point at a handler mapping or Registry instead"
            )
        if isinstance(target.listen_url, str):  # a URL object was parsed already
            postgres_url(target.listen_url, what=f"the listen_url of {args.target}")
        return target
    if isinstance(target, Mapping):
        # A Registry is passed as it is: the Worker takes its tasks and periodic definitions.
        handlers: Mapping[str, Any] = target if isinstance(target, Registry) else dict(target)
        if args.queues:
            wanted = [q.strip() for q in args.queues.split(",") if q.strip()]
            served = [*target, *_task_queues(target)]
            unknown = [q for q in wanted if q not in served]
            if unknown:
                raise UserError(
                    f"no handler for queue(s) {', '.join(unknown)} in {args.target} "
                    f"(it has: {', '.join(dict.fromkeys(served))})"
                )
            if isinstance(target, Registry):
                handlers = target.only(wanted)
            else:
                handlers = {q: target[q] for q in wanted}
        kwargs: dict[str, Any] = {}
        for key, value in (
            ("concurrency", args.concurrency),
            ("lease", args.lease),
            ("poll_interval", args.poll_interval),
            ("default_timeout", args.default_timeout),
            ("timeout_grace", args.timeout_grace),
            ("listen_url", args.listen_url),
            ("log_tracebacks", args.log_tracebacks),
            ("capture_logs", args.capture_logs),
            ("prune", args.prune),
        ):
            if value is not None:
                kwargs[key] = value
        kwargs["force_bounds"] = args.force_bounds
        url = database_url(args) or ""
        concurrency = kwargs.get("concurrency", 4)
        engine = make_engine(
            url,
            schema=schema_arg(args),
            application_name=worker_name(),
            pool_size=concurrency + 4,
            max_overflow=concurrency,
        )
        return worker_module.Worker(engine, handlers, **kwargs)
    raise UserError(
        f"{args.target} is a {type(target).__name__}: expected a pgqueue.Worker, "
        "a {queue: handler} mapping or a pgqueue Registry"
    )


def _task_queues(target: Mapping[str, Any]) -> list[str]:
    """The queues of a Registry's tasks (none for a plain mapping)."""
    if not isinstance(target, Registry):
        return []
    return [task.queue for task in target.tasks.values()]
