"""The ``pgqueue`` command: demo, migrate, worker, and the operator's commands.

Built on the standard library's :mod:`argparse`, so the core needs no extra dependency. Every
command takes ``--url`` (before or after the subcommand) or reads ``PGQUEUE_DATABASE_URL``.
Exit codes: 0 success, 1 partly done or warnings (``doctor``, ``retry``, ``cancel``), 2 errors
(bad arguments, no connection, no schema). Passwords are masked in every line printed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any, NoReturn

import psycopg
from sqlalchemy import Connection
from sqlalchemy import exc as sa_exc

import pgqueue
from pgqueue import admin, periodic, repository
from pgqueue._cli_common import (
    ENV_URL,
    UserError,
    cell,
    database_url,
    emit,
    emit_json,
    json_default,
    make_engine,
    note,
    parse_duration,
    positive_int,
    schema_arg,
    table,
    transaction,
    translate_error,
)
from pgqueue._cli_web import ENV_WEB_AUTH, cmd_web, web_port
from pgqueue._cli_worker import DEFAULT_HEALTH_HOST, cmd_worker, probe_port
from pgqueue._durations import format_duration
from pgqueue._urls import mask_url, to_sqlalchemy_url
from pgqueue._validation import MAX_PRIORITY, MIN_PRIORITY, check_priority, check_unique_key
from pgqueue.errors import InvalidArgumentError, PgQueueError
from pgqueue.models import JobStatus
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


def _priority_arg(value: str) -> int:
    try:
        return check_priority(int(value))
    except (ValueError, PgQueueError) as exc:
        raise UserError(
            f"--priority must be an integer from {MIN_PRIORITY} to {MAX_PRIORITY} "
            f"(higher runs first), got {value!r}"
        ) from exc


def _unique_key_arg(value: str | None) -> str | None:
    if value is None:
        return None
    try:
        return check_unique_key(value)
    except InvalidArgumentError as exc:
        raise UserError(f"--unique-key {exc.problem}") from exc


def cmd_enqueue(args: argparse.Namespace) -> int:
    """Insert one job and print its id (with --unique-key: that of a live job holding the key)."""
    try:
        payload = json.loads(args.payload)
    except ValueError as exc:
        raise UserError(f"the payload is not valid JSON ({exc}): e.g. '{{\"to\": 42}}'") from exc
    priority = _priority_arg(args.priority)
    key = _unique_key_arg(args.unique_key)
    options: dict[str, Any] = {
        "queue": args.queue,
        "delay": args.delay,
        "max_attempts": args.max_attempts,
        "priority": priority,
    }
    with transaction(args) as conn:
        if key is None:
            job_id, inserted = repository.enqueue(conn, payload, **options), True
        else:
            found = repository.enqueue_unique(conn, payload, unique_key=key, **options)
            job_id, inserted = found.id, found.inserted
    if not inserted:
        note(
            f"unique key {key!r} is held by live job {job_id} of queue {args.queue!r}: "
            "no job inserted, that job's id printed"
        )
    if args.json:
        emit_json({"id": job_id, "inserted": inserted})
    else:
        emit(str(job_id))
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    """List jobs, newest first."""
    status = JobStatus(args.status) if args.status else None
    with transaction(args) as conn:
        rows = admin.list_jobs(conn, queue=args.queue, status=status, limit=args.limit)
    if args.json:
        emit_json(rows)
        return 0
    table(
        ["id", "queue", "status", "prio", "attempts", "run_at", "locked_until", "last_error"],
        [
            (
                r["id"],
                r["queue"],
                r["status"],
                r["priority"],
                f"{r['attempts']}/{r['max_attempts']}",
                r["run_at"],
                r["locked_until"],
                r["last_error"],
            )
            for r in rows
        ],
    )
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    """Show one job with its payload."""
    with transaction(args) as conn:
        job = admin.get_job(conn, args.id)
    if job is None:
        raise UserError(f"no job with id {args.id}", code=1)
    if args.json:
        emit_json(job)
        return 0
    for key, value in job.items():
        if key == "payload":
            value = json.dumps(value, indent=2, default=json_default)
            value = value.replace("\n", "\n" + " " * 15)
        emit(f"{key + ':':<14} {cell(value) if key != 'payload' else value}")
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    """Per-queue counts and the jobs table's vacuum statistics."""
    with transaction(args) as conn:
        queues = admin.queue_stats(conn)
        tables = admin.table_stats(conn)
    if args.json:
        emit_json({"queues": queues, "table": tables})
        return 0
    columns = ["ready", "scheduled", "running", "expired_leases", "done", "failed"]
    table(
        ["queue", *columns, "oldest_ready_age_s"],
        [[q["queue"], *(q[c] for c in columns), q["oldest_ready_age_s"]] for q in queues],
    )
    if not queues:
        emit("(no jobs)")
    emit()
    emit(
        "jobs table: "
        + ", ".join(f"{key} {cell(value)}" for key, value in tables.items())
        + " (pg_stat_user_tables)"
    )
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    """Check the database and print findings; the exit code is the worst severity."""
    from pgqueue import doctor

    with transaction(args) as conn:
        findings = doctor.run_checks(conn, idle_threshold=args.idle_threshold)
    code = doctor.exit_code(findings)
    if args.json:
        emit_json(
            {
                "status": ("healthy", "warning", "error")[code],
                "findings": [f.as_dict() for f in findings],
            }
        )
        return code
    for finding in findings:
        emit(f"[{finding.severity.upper():<7}] {finding.check}: {finding.message}")
        if finding.fix:
            emit(f"          fix: {finding.fix}")
    emit(("healthy", "warnings found", "errors found")[code])
    return code


def cmd_grants(args: argparse.Namespace) -> int:
    """Print the GRANT statements of least-privilege roles; run them as the objects' owner."""
    from pgqueue.grants import grants_sql

    if not (args.role_worker or args.role_producer or args.role_monitor):
        raise UserError("name at least one of --role-worker, --role-producer, --role-monitor")
    try:
        text = grants_sql(
            worker=args.role_worker,
            producer=args.role_producer,
            monitor=args.role_monitor,
            schema=schema_arg(args),
        )
    except PgQueueError as exc:
        raise UserError(str(exc)) from exc
    sys.stdout.write(text)
    return 0


def cmd_reap(args: argparse.Namespace) -> int:
    """Requeue (or fail) running jobs whose lease expired."""
    with transaction(args) as conn:
        reaped = repository.reap_expired(conn)
    failed = sum(1 for job in reaped if job.status == JobStatus.FAILED.value)
    emit(
        f"reaped {len(reaped)} job(s) with an expired lease: "
        f"{len(reaped) - failed} requeued, {failed} failed"
    )
    return 0


def cmd_purge(args: argparse.Namespace) -> int:
    """Delete finished jobs in batches, one short transaction per batch."""
    status = JobStatus(args.status)
    engine = make_engine(database_url(args) or "", schema=schema_arg(args))
    total = 0
    try:
        while True:
            with engine.begin() as conn:
                deleted = repository.purge(
                    conn, status=status, older_than=args.older_than, batch_size=args.batch_size
                )
            total += deleted
            if deleted:
                note(f"  purged {total} {status} job(s) so far")
            if deleted < args.batch_size:
                break
    finally:
        engine.dispose()
    emit(f"purged {total} {status} job(s) created more than {format_duration(args.older_than)} ago")
    return 0


def _report_untouched(
    conn: Connection,
    asked: list[int],
    changed: list[int],
    verb: str,
    why: Mapping[str, str],
    explain: Callable[[list[int]], Mapping[int, str]] | None = None,
) -> int:
    """Name on stderr each id asked for but left alone, with the reason for its status (``why``),
    or the reason ``explain`` gives for that id; 1 when there is one, else 0."""
    untouched = [i for i in dict.fromkeys(asked) if i not in set(changed)]
    statuses = admin.job_statuses(conn, untouched) if untouched else {}
    reasons = explain(untouched) if explain is not None and untouched else {}
    for job_id in untouched:
        status = statuses.get(job_id)
        reason = why.get(status or "", f"it is {status}") if status else "no such job"
        note(f"job {job_id} not {verb}: {reasons.get(job_id, reason)}")
    return 1 if untouched else 0


def _held_keys(conn: Connection, job_ids: list[int]) -> dict[int, str]:
    return {
        job_id: f"its unique key {key!r} is held by live job {holder}"
        for job_id, (key, holder) in admin.key_holders(conn, job_ids).items()
    }


def cmd_retry(args: argparse.Namespace) -> int:
    """Requeue jobs with a fresh budget of attempts."""
    if bool(args.ids) == bool(args.failed):
        raise UserError("give job ids or --failed (not both)")
    if args.queue and not args.failed:
        raise UserError("--queue goes with --failed")
    with transaction(args) as conn:
        if args.failed:
            done = repository.retry_failed(conn, queue=args.queue, attempts=args.attempts)
            code = 0
        else:
            done = repository.retry(conn, args.ids, attempts=args.attempts)
            code = _report_untouched(
                conn,
                args.ids,
                done,
                "retried",
                {
                    "running": "it is running (its worker holds it)",
                    "done": "it is done",
                    # Left alone for its key, whose holder has finished since: the key is free.
                    "failed": "its unique key was held by another live job; try again",
                },
                lambda untouched: _held_keys(conn, untouched),
            )
    emit(f"requeued {len(done)} job(s) with {args.attempts} more attempt(s): {_ids(done)}")
    return code


def cmd_cancel(args: argparse.Namespace) -> int:
    """Fail queued and running jobs with ``last_error = 'cancelled'``; say which were running."""
    with transaction(args) as conn:
        cancelled = repository.cancel_jobs(conn, args.ids)
        done = [c.id for c in cancelled]
        code = _report_untouched(
            conn,
            args.ids,
            done,
            "cancelled",
            {
                "running": "its row is locked right now (held inside a transaction-mode worker's "
                "transaction, or mid-claim); try again",
                "queued": "its row is locked right now (mid-claim); try again",
                "done": "it is already done",
                "failed": "it has already failed",
            },
        )
    emit(f"cancelled {len(done)} job(s): {_ids(done)}")
    running = [c.id for c in cancelled if c.was_running]
    if running:
        emit(f"of which running (their workers stop them): {_ids(running)}")
    return code


def cmd_periodic(args: argparse.Namespace) -> int:
    """List the periodic definitions stored in the database, or remove a stale one.

    A definition is stale when no worker has declared it for an hour, or two of its periods if
    longer. ``--remove`` refuses a definition that is not stale unless ``--force``: a worker that
    still declares it would bring it back at its next start.
    """
    now = datetime.now(timezone.utc)
    if args.remove is not None:
        with transaction(args) as conn:
            rows = repository.periodic_states(conn, [args.remove])
            if not rows:
                raise UserError(f"no periodic definition named {args.remove!r}", code=1)
            if not periodic.is_stale(rows[0], now) and not args.force:
                raise UserError(
                    f"periodic {args.remove!r} is not stale: a worker declared it at "
                    f"{cell(rows[0].declared_at)}; stop those workers first, or pass --force",
                    code=1,
                )
            repository.remove_periodic(conn, args.remove)
        emit(f"removed periodic definition {args.remove!r} (its jobs stay)")
        return 0
    with transaction(args) as conn:
        rows = repository.periodic_states(conn)
    described = [
        {
            **dataclasses.asdict(row),
            "next_tick": periodic.next_tick(row, now),
            "stale": periodic.is_stale(row, now),
            "overdue_s": _seconds_or_none(periodic.overdue(row, now)),
        }
        for row in rows
    ]
    if args.json:
        emit_json(described)
        return 0
    table(
        ["name", "schedule", "timezone", "queue", "last_tick", "next_tick", "declared", "state"],
        [
            (
                d["name"],
                d["schedule"],
                d["timezone"],
                d["queue"],
                d["last_tick"],
                d["next_tick"],
                d["declared_at"],
                "stale" if d["stale"] else ("overdue" if d["overdue_s"] else "ok"),
            )
            for d in described
        ],
    )
    if not rows:
        emit("(no periodic definitions)")
    return 0


def _seconds_or_none(value: timedelta | None) -> float | None:
    return None if value is None else value.total_seconds()


def _ids(ids: Sequence[int]) -> str:
    shown = ", ".join(str(i) for i in ids[:20])
    return (shown + (f", ... ({len(ids)} in all)" if len(ids) > 20 else "")) or "none"


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
    parser.add_argument("--url", help=url_help)
    parser.add_argument("--schema", help=schema_help)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--url", default=argparse.SUPPRESS, help=url_help)
    common.add_argument("--schema", default=argparse.SUPPRESS, help=schema_help)
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

    p = add("migrate", cmd_migrate, "apply pgqueue's revisions (alembic upgrade pgqueue@head)")
    p.add_argument("--sql", action="store_true", help="print the SQL instead (offline mode)")

    p = add("worker", cmd_worker, "run a worker for module:attr (Worker, mapping or Registry)")
    p.add_argument("target", metavar="module:attr", help="e.g. myapp.jobs:registry")
    p.add_argument("--queues", help="comma-separated subset of the handlers' queues")
    p.add_argument("--concurrency", type=positive_int, help="handler threads (default 4)")
    p.add_argument("--burst", action="store_true", help="drain the ready jobs and exit")
    p.add_argument(
        "--lease",
        type=parse_duration,
        help="lease per claim, extended by the heartbeat (default 30s)",
    )
    p.add_argument(
        "--poll-interval", type=parse_duration, help="fallback poll interval (default 5s)"
    )
    p.add_argument("--listen-url", help="direct URL for LISTEN when --url is a pooler")
    p.add_argument(
        "--processes",
        type=positive_int,
        default=1,
        help="worker processes under one supervisor, each with its own engine (default 1)",
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
    p.add_argument("queue", help="queue name (the job kind)")
    p.add_argument("payload", help="JSON payload, e.g. '{\"to\": 42}'")
    p.add_argument("--delay", type=parse_duration, help="not ready before this delay (e.g. 5m)")
    p.add_argument("--max-attempts", type=positive_int, default=repository.DEFAULT_MAX_ATTEMPTS)
    p.add_argument(
        "--priority",
        metavar="N",
        default=str(repository.DEFAULT_PRIORITY),
        help=f"{MIN_PRIORITY} (default, lowest) to {MAX_PRIORITY} (claimed first)",
    )
    p.add_argument(
        "--unique-key",
        metavar="KEY",
        help="insert nothing while a queued or running job of the queue has this key: "
        "print that job's id instead",
    )
    p.add_argument("--json", action="store_true", help='print {"id": N, "inserted": true|false}')

    statuses = [s.value for s in JobStatus]
    p = add("list", cmd_list, "list jobs, newest first")
    p.add_argument("--queue")
    p.add_argument("--status", choices=statuses)
    p.add_argument("--limit", type=positive_int, default=50, help="default 50")
    p.add_argument("--json", action="store_true")

    p = add("show", cmd_show, "show one job with its payload")
    p.add_argument("id", type=int)
    p.add_argument("--json", action="store_true")

    p = add("stats", cmd_stats, "per-queue counts and the jobs table's vacuum statistics")
    p.add_argument("--json", action="store_true")

    p = add("doctor", cmd_doctor, "check the database; exit 0 healthy, 1 warnings, 2 errors")
    p.add_argument("--json", action="store_true")
    p.add_argument(
        "--idle-threshold",
        type=parse_duration,
        default=timedelta(seconds=5),
        help="report transactions open longer than this (default 5s)",
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
    p.add_argument("ids", type=int, nargs="*", metavar="ID")
    p.add_argument("--failed", action="store_true", help="every failed job")
    p.add_argument("--queue", help="with --failed: only this queue")
    p.add_argument(
        "--attempts",
        type=positive_int,
        default=repository.DEFAULT_MAX_ATTEMPTS,
        help="attempts added to the budget (default 5)",
    )

    p = add("cancel", cmd_cancel, "fail queued or running jobs with last_error 'cancelled'")
    p.add_argument("ids", type=int, nargs="+", metavar="ID")

    p = add("web", cmd_web, "serve the operator dashboard in the browser (pgqueue[web])")
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
        note(f"pgqueue: error: {exc}")
        return exc.code
    except PgQueueError as exc:
        note(f"pgqueue: error: {exc}")
        return 2
    except (sa_exc.DBAPIError, psycopg.Error) as exc:
        message = translate_error(exc, url)
        if message is None:
            raise
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


if __name__ == "__main__":
    run()
