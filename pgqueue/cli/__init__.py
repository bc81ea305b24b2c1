"""The ``pgqueue`` command: demo, migrate, worker, and the operator's commands.

Built on the standard library's :mod:`argparse`, so the core needs no extra dependency. Every
command takes ``--url`` (before or after the subcommand) or reads ``PGQUEUE_DATABASE_URL``.
Exit codes: 0 success, 1 partly done or warnings (``doctor``, ``retry``, ``cancel``), 2 errors
(bad arguments, no connection, no schema). Passwords are masked in every line printed.

This module parses and dispatches; the commands live beside it in ``ops``, ``flow`` (``queues``,
``pause``, ``resume``, ``limit``), ``retention``, ``logs`` (a job's log lines), ``worker`` (with
the process ``supervisor``), ``web`` and ``dev_db``, on the helpers of ``common``, and none of
them imports this module back.
``python -m pgqueue`` and ``python -m pgqueue.cli`` (``__main__``) run :func:`run`.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any, NoReturn

import psycopg
from sqlalchemy import exc as sa_exc

import pgqueue
from pgqueue import repository
from pgqueue._base.urls import mask_url, to_sqlalchemy_url
from pgqueue._base.validation import MAX_PRIORITY, MIN_PRIORITY
from pgqueue.cli.common import (
    ENV_URL,
    UserError,
    database_url,
    emit,
    job_id,
    make_engine,
    note,
    parse_duration,
    positive_int,
    report_cause,
    schema_arg,
    translate_error,
)
from pgqueue.cli.dev_db import cmd_dev_db
from pgqueue.cli.flow import cmd_limit, cmd_pause, cmd_queues, cmd_resume, rate_arg
from pgqueue.cli.logs import cmd_logs
from pgqueue.cli.ops import (
    cmd_cancel,
    cmd_doctor,
    cmd_enqueue,
    cmd_grants,
    cmd_list,
    cmd_periodic,
    cmd_purge,
    cmd_reap,
    cmd_retry,
    cmd_show,
    cmd_stats,
    cmd_unblock,
    cmd_workers,
)
from pgqueue.cli.retention import cmd_retention, retention_arg
from pgqueue.cli.web import ENV_WEB_AUTH, cmd_web, web_port
from pgqueue.cli.worker import DEFAULT_HEALTH_HOST, cmd_worker, probe_port
from pgqueue.errors import PgQueueError
from pgqueue.models import JobState
from pgqueue.schema import SCHEMA_ENV_VAR

# -- commands ------------------------------------------------------------------------------------


def cmd_demo(args: argparse.Namespace) -> int:
    """Run the article's demo."""
    from pgqueue.demo import CLIENTS, run_demo

    if args.jobs < 2 * CLIENTS:
        raise UserError(f"--jobs must be at least {2 * CLIENTS} (one claim per session and job)")
    return run_demo(database_url(args, required=False), jobs=args.jobs)


def cmd_migrate(args: argparse.Namespace) -> int:
    """Apply (or print) pgqueue's revisions."""
    import pgqueue.migrations

    if args.sql:
        url = database_url(args, required=False) or "postgresql+psycopg://"
        pgqueue.migrations.upgrade(to_sqlalchemy_url(url), sql=True, schema=schema_arg(args))
        return 0
    url = database_url(args) or ""
    make_engine(url).dispose()  # validates the URL with a clear message
    schema = schema_arg(args)
    pgqueue.migrations.upgrade(to_sqlalchemy_url(url), schema=schema)
    where = "" if schema is None else f" (schema {schema})"
    emit(f"migrated {mask_url(url)} to {pgqueue.migrations.HEAD}{where}")
    return 0


# -- parser ----------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every command."""
    url_help = f"database URL (default: ${ENV_URL}); postgresql:// uses psycopg 3"
    parser = argparse.ArgumentParser(
        prog="pgqueue",
        description="A PostgreSQL job queue: one table, SKIP LOCKED claims, leases.",
        epilog="Exit codes: 0 success, 1 partly done or warnings, 2 errors. "
        "Start with `pgqueue demo`.",
    )
    parser.add_argument("--version", action="version", version=f"pgqueue {pgqueue.__version__}")
    schema_help = (
        f"schema holding pgqueue's table (default: ${SCHEMA_ENV_VAR}, else public); "
        "its NOTIFY channel is <schema>.jobs"
    )
    verbose_help = "on an error, also print the traceback behind its one line"
    parser.add_argument("--url", help=url_help)
    parser.add_argument("--schema", help=schema_help)
    parser.add_argument("--verbose", action="store_true", help=verbose_help)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--url", default=argparse.SUPPRESS, help=url_help)
    common.add_argument("--schema", default=argparse.SUPPRESS, help=schema_help)
    common.add_argument(
        "--verbose", action="store_true", default=argparse.SUPPRESS, help=verbose_help
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def add(name: str, func: Callable[[argparse.Namespace], int], text: str) -> Any:
        doc = (func.__doc__ or "").strip()
        p = sub.add_parser(name, parents=[common], help=text, description=doc or text)
        p.set_defaults(func=func)
        return p

    p = add("demo", cmd_demo, "reproduce the article on an embedded or given server")
    p.add_argument(
        "--jobs", type=positive_int, default=10_000, help="jobs for steps 1-2 (default 10000)"
    )

    add(
        "dev-db",
        cmd_dev_db,
        "a throwaway embedded PostgreSQL for your app, migrated; prints its URL, Ctrl-C stops it",
    )

    p = add("migrate", cmd_migrate, "apply pgqueue's revisions (alembic upgrade pgqueue@head)")
    p.add_argument("--sql", action="store_true", help="print the SQL instead (offline mode)")

    p = add("worker", cmd_worker, "run a worker for module:attr (Worker, mapping or Registry)")
    p.add_argument("target", metavar="module:attr", help="e.g. myapp.jobs:registry")
    p.add_argument("--queues", help="comma-separated subset of the handlers' queues")
    p.add_argument(
        "--concurrency",
        type=positive_int,
        help="handler threads (default 4; at most 1000 unless --force-bounds)",
    )
    p.add_argument("--burst", action="store_true", help="drain the ready jobs and exit")
    p.add_argument(
        "--lease",
        type=parse_duration,
        help="lease per claim, extended by the heartbeat (default 30s)",
    )
    p.add_argument(
        "--poll-interval", type=parse_duration, help="fallback poll interval (default 5s)"
    )
    p.add_argument(
        "--default-timeout",
        type=parse_duration,
        help="timeout of jobs enqueued without their own (default: none)",
    )
    p.add_argument(
        "--timeout-grace",
        type=parse_duration,
        help="how long past its timeout a handler may take before its failure is written "
        "(default 5s; 0 allowed)",
    )
    p.add_argument("--listen-url", help="direct URL for LISTEN when --url is a pooler")
    p.add_argument(
        "--log-tracebacks",
        action=argparse.BooleanOptionalAction,
        help="log each failed attempt's traceback with its line (default: yes)",
    )
    p.add_argument(
        "--capture-logs",
        action=argparse.BooleanOptionalAction,
        help="record each job's logging records (INFO and above, from its handler) as its log "
        "lines, shown by pgqueue logs ID (default: yes)",
    )
    p.add_argument(
        "--prune",
        action=argparse.BooleanOptionalAction,
        help="delete finished jobs past their queue's retention, at most once a minute per "
        "queue (default: yes; see pgqueue retention)",
    )
    p.add_argument(
        "--processes",
        type=positive_int,
        default=1,
        help="worker processes under one supervisor, each with its own engine (default 1; at "
        "most 4 per CPU unless --force-bounds)",
    )
    p.add_argument(
        "--force-bounds",
        action="store_true",
        help="take --processes above 4 per CPU and --concurrency above 1000",
    )
    p.add_argument(
        "--health-port",
        type=probe_port,
        help="serve GET /livez and /readyz on this port (with --processes: for all of them)",
    )
    p.add_argument(
        "--health-host",
        default=DEFAULT_HEALTH_HOST,
        help=f"address of the health probes (default {DEFAULT_HEALTH_HOST}; 0.0.0.0 in a pod)",
    )

    p = add("enqueue", cmd_enqueue, "insert one job and print its id")
    p.add_argument(
        "queue", help="queue name (the job kind); with --task: the task's arguments, a JSON array"
    )
    p.add_argument(
        "payload",
        nargs="?",
        help="JSON payload, e.g. '{\"to\": 42}'; with --task: its keywords, a JSON object",
    )
    p.add_argument(
        "--task",
        metavar="TASK",
        help="enqueue a call of this pgqueue.Task: module:attr or module.attr, imported "
        "(its queue, defaults and signature apply)",
    )
    p.add_argument(
        "--by-name",
        action="store_true",
        help="with --task: store TASK as the task's name without importing it",
    )
    p.add_argument(
        "--queue",
        dest="task_queue",
        metavar="QUEUE",
        help="with --task: the queue (default: the task's; with --by-name: 'default')",
    )
    p.add_argument("--delay", type=parse_duration, help="not ready before this delay (e.g. 5m)")
    p.add_argument(
        "--timeout",
        type=parse_duration,
        help="an attempt's handler may run this long (e.g. 30s); default: the worker's "
        "default_timeout (a task's: its own)",
    )
    p.add_argument(
        "--expires-in",
        type=parse_duration,
        help="never run the job if no worker started it within this long of its run_at "
        "(e.g. 10m); default: no deadline (a task's: its own)",
    )
    p.add_argument(
        "--max-attempts",
        type=positive_int,
        help=f"default {repository.DEFAULT_MAX_ATTEMPTS} (a task's: its own)",
    )
    p.add_argument(
        "--priority",
        metavar="N",
        help=f"{MIN_PRIORITY} (default, lowest) to {MAX_PRIORITY} (claimed first); a task's "
        "default: its own",
    )
    p.add_argument(
        "--unique-key",
        metavar="KEY",
        help="insert nothing while a queued or running job of the queue has this key: "
        "print that job's id instead",
    )
    p.add_argument(
        "--concurrency-key",
        metavar="KEY",
        help="the key the queue's per-key limit counts by (e.g. a tenant id)",
    )
    p.add_argument("--json", action="store_true", help='print {"id": N, "inserted": true|false}')

    p = add("list", cmd_list, "list jobs, newest first")
    p.add_argument("--queue")
    p.add_argument(
        "--status",
        choices=[s.value for s in JobState],
        help="only the jobs in this state (waiting: for their dependencies; cancelled and "
        "expired: apart from failed)",
    )
    p.add_argument("--task", help="only the jobs of the task of this name")
    p.add_argument("--limit", type=positive_int, default=50, help="default 50")
    p.add_argument("--json", action="store_true")

    p = add("show", cmd_show, "show one job with its payload")
    p.add_argument("id", type=job_id)
    p.add_argument("--json", action="store_true")
    p.add_argument("--logs", action="store_true", help="also print the job's log lines")

    p = add("logs", cmd_logs, "print one job's log lines (job.log and captured logging)")
    p.add_argument("id", type=job_id)
    p.add_argument("--attempt", type=positive_int, help="only this attempt's lines")
    p.add_argument(
        "--follow",
        action="store_true",
        help="keep printing new lines until the job is finished (a running job's lines arrive "
        "with the worker's heartbeats)",
    )
    p.add_argument(
        "--interval",
        type=parse_duration,
        default=timedelta(seconds=1),
        help="how often --follow reads again (default 1s)",
    )
    p.add_argument("--json", action="store_true", help="one JSON object per line")

    p = add("stats", cmd_stats, "per-queue counts and the jobs table's vacuum statistics")
    p.add_argument("--json", action="store_true")

    p = add("workers", cmd_workers, "the worker processes connected now and the jobs they hold")
    p.add_argument("--json", action="store_true")

    p = add("doctor", cmd_doctor, "check the database; exit 0 healthy, 1 warnings, 2 errors")
    p.add_argument("--json", action="store_true")
    p.add_argument(
        "--idle-threshold",
        type=parse_duration,
        default=timedelta(seconds=5),
        help="report transactions open longer than this (default 5s)",
    )
    p.add_argument(
        "--backlog-age",
        type=parse_duration,
        help="warn when the oldest ready job of a queue waited longer than this (default 5m)",
    )

    p = add("grants", cmd_grants, "print the GRANTs of least-privilege roles (no connection)")
    p.add_argument(
        "--role-worker",
        help="role of the workers: SELECT, INSERT, UPDATE on jobs and jobs_periodic",
    )
    p.add_argument(
        "--role-producer",
        help="role of the producers: INSERT, and SELECT of id, queue, unique_key and status",
    )
    p.add_argument("--role-monitor", help="role of doctor and stats: SELECT and pg_monitor")
    p.add_argument(
        "--producer-dependencies",
        action="store_true",
        help="the producer also enqueues with depends_on: UPDATE of the columns that writes",
    )

    p = add("periodic", cmd_periodic, "list periodic definitions, or remove a stale one")
    p.add_argument("--remove", metavar="NAME", help="delete a stale definition's row")
    p.add_argument("--force", action="store_true", help="with --remove: even if not stale")
    p.add_argument("--json", action="store_true")

    add("reap", cmd_reap, "requeue running jobs whose lease expired")

    p = add("purge", cmd_purge, "delete finished jobs in batches")
    p.add_argument("--status", choices=["done", "failed"], default="done", help="default done")
    p.add_argument(
        "--older-than", type=parse_duration, default=repository.DEFAULT_PURGE_AGE, help="default 7d"
    )
    p.add_argument(
        "--batch-size",
        type=positive_int,
        default=repository.DEFAULT_PURGE_BATCH,
        help="default 10000",
    )

    p = add("retry", cmd_retry, "requeue failed jobs with a fresh budget of attempts")
    p.add_argument("ids", type=job_id, nargs="*", metavar="ID")
    p.add_argument("--failed", action="store_true", help="every failed job (not cancelled ones)")
    p.add_argument("--queue", help="with --failed: only this queue")
    p.add_argument(
        "--include-cancelled",
        action="store_true",
        help="with --failed: cancelled jobs too (ids given are retried, cancelled or not)",
    )
    p.add_argument(
        "--include-expired",
        action="store_true",
        help="with --failed: expired jobs too (ids given are retried, expired or not)",
    )
    p.add_argument(
        "--attempts",
        type=positive_int,
        default=repository.DEFAULT_MAX_ATTEMPTS,
        help="attempts added to the budget (default 5)",
    )

    p = add("cancel", cmd_cancel, "fail queued or running jobs for good, marked cancelled")
    p.add_argument("ids", type=job_id, nargs="+", metavar="ID")

    p = add(
        "unblock",
        cmd_unblock,
        "free waiting jobs from dependencies that no longer exist (deleted by hand)",
    )
    p.add_argument("ids", type=job_id, nargs="+", metavar="ID")

    p = add("queues", cmd_queues, "each queue's pause, limits, ready and running jobs")
    p.add_argument("--json", action="store_true")

    p = add("pause", cmd_pause, "stop the workers claiming a queue's jobs (until resume)")
    p.add_argument("queue")

    p = add("resume", cmd_resume, "let the workers claim a paused queue's jobs again")
    p.add_argument("queue")

    p = add("limit", cmd_limit, "set a queue's concurrency, per-key and rate limits")
    p.add_argument("queue")
    p.add_argument(
        "--concurrency",
        type=positive_int,
        metavar="N",
        help="at most N of the queue's jobs running at once, over every worker",
    )
    p.add_argument(
        "--per-key",
        type=positive_int,
        metavar="N",
        help="at most N running jobs with the same --concurrency-key",
    )
    p.add_argument(
        "--rate",
        type=rate_arg,
        metavar="LIMIT/PERIOD",
        help="at most LIMIT jobs started per PERIOD, e.g. 10/1s or 100/5m",
    )
    p.add_argument("--clear", action="store_true", help="remove every limit (then set those given)")
    p.add_argument(
        "--forget",
        action="store_true",
        help="drop the queue's settings row: unpaused, no limits (given alone)",
    )

    p = add("retention", cmd_retention, "how long finished jobs are kept: list or set")
    p.add_argument("queue", nargs="?", help="the queue (default: the default of every queue)")
    for kind, what in (("done", "done"), ("failed", "failed, cancelled and expired")):
        p.add_argument(
            f"--{kind}",
            type=retention_arg,
            default=...,
            metavar="D|never",
            help=f"keep {what} jobs this long (e.g. 7d, 12h) or for ever (never)",
        )
    p.add_argument("--json", action="store_true")

    p = add("web", cmd_web, "serve the operator dashboard in the browser (pgqueue-sa[web])")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=web_port, default=8080, help="TCP port (default 8080)")
    p.add_argument(
        "--read-only", action="store_true", help="show no action; every POST answers 403"
    )
    p.add_argument(
        "--auth",
        metavar="USER:PASSWORD",
        help=f"HTTP basic auth on every page (default: ${ENV_WEB_AUTH}, else none)",
    )
    p.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME",
        help="another Host name the dashboard answers to, e.g. the public name behind a proxy "
        "(repeatable; always: --host, localhost, 127.0.0.1, [::1])",
    )
    p.add_argument(
        "--show-raw-values",
        action="store_true",
        help="show payloads, errors and every other value as stored, passwords included "
        "(default: masked as the command line masks them)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``pgqueue`` console script; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    args.argv = argv  # a supervisor's children run the same command line
    url = getattr(args, "url", None) or os.environ.get(ENV_URL)
    try:
        return int(args.func(args))
    except UserError as exc:
        report_cause(exc, verbose=args.verbose)
        note(f"pgqueue: error: {exc}")
        return exc.code
    except PgQueueError as exc:
        report_cause(exc, verbose=args.verbose)
        note(f"pgqueue: error: {exc}")
        return 2
    except (sa_exc.DBAPIError, psycopg.Error) as exc:
        message = translate_error(exc, url)
        if message is None:
            raise
        report_cause(exc, verbose=args.verbose)
        note(f"pgqueue: error: {message}")
        return 2
    except KeyboardInterrupt:
        note("pgqueue: interrupted")
        return 130
    except BrokenPipeError:
        # The reader went away (``pgqueue list | head``): silence the flush at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def run() -> NoReturn:
    """``python -m pgqueue.cli``: exit with :func:`main`'s code."""
    sys.exit(main())
