"""The operator's commands: enqueue, list, show, stats, workers, doctor, grants, reap, purge,
retry, cancel and periodic; ``pgqueue.cli`` wires them into the parser."""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from sqlalchemy import Connection

from pgqueue import admin, periodic, repository
from pgqueue._base.durations import format_duration
from pgqueue._base.text import psql_table
from pgqueue._base.validation import (
    MAX_JSON_DEPTH,
    MAX_PRIORITY,
    MIN_PRIORITY,
)
from pgqueue.cli.common import (
    UserError,
    cell,
    database_url,
    emit,
    emit_json,
    json_default,
    load_target,
    make_engine,
    note,
    note_unreadable,
    put_cwd_on_path,
    schema_arg,
    table,
    transaction,
)
from pgqueue.cli.logs import line_json, print_show_logs
from pgqueue.enqueue_options import EnqueueOptions
from pgqueue.errors import InvalidArgumentError, PgQueueError
from pgqueue.models import JobState, JobStatus
from pgqueue.tasks import Task, encode_call


def _enqueue_options(
    args: argparse.Namespace, *, queue: str | None = None, task: Task[..., Any] | None = None
) -> EnqueueOptions:
    """The command's flags as one checked value; a bad ``--priority``, ``--unique-key`` or
    ``--concurrency-key`` is one line naming the flag (the other flags' errors name the option,
    as the API's do).

    With ``--task``: ``queue`` and the task's name; an imported ``task`` gives the defaults of
    the flags not given (its priority and attempts).
    """
    given = getattr(args, "priority", None)
    try:
        priority = (
            int(given)
            if given is not None
            else (task.priority if task is not None else repository.DEFAULT_PRIORITY)
        )
    except ValueError as exc:
        raise _bad_priority(str(given)) from exc
    attempts = getattr(args, "max_attempts", None)
    if attempts is None:
        attempts = task.max_attempts if task is not None else repository.DEFAULT_MAX_ATTEMPTS
    timeout = getattr(args, "timeout", None)
    expires_in = getattr(args, "expires_in", None)
    if task is not None:
        timeout = task.timeout if timeout is None else timeout
        expires_in = task.expires_in if expires_in is None else expires_in
    try:
        return EnqueueOptions(
            queue=args.queue if queue is None else queue,
            delay=args.delay,
            max_attempts=attempts,
            priority=priority,
            unique_key=args.unique_key,
            task=getattr(args, "task", None) if task is None else task.name,
            concurrency_key=args.concurrency_key,
            timeout=timeout,
            expires_in=expires_in,
        )
    except InvalidArgumentError as exc:
        if exc.argument == "priority":
            raise _bad_priority(args.priority) from exc
        if exc.argument in ("unique_key", "concurrency_key", "timeout", "expires_in"):
            raise UserError(f"--{exc.argument.replace('_', '-')} {exc.problem}") from exc
        raise


def _bad_priority(value: str) -> UserError:
    return UserError(
        f"--priority must be an integer from {MIN_PRIORITY} to {MAX_PRIORITY} "
        f"(higher runs first), got {value!r}"
    )


def _json_argument(text: str, what: str, example: str) -> Any:
    try:
        return json.loads(text)
    except RecursionError:
        raise UserError(
            f"the {what} is nested more than {MAX_JSON_DEPTH} levels deep (the most pgqueue stores)"
        ) from None
    except ValueError as exc:
        raise UserError(f"the {what} is not valid JSON ({exc}): e.g. '{example}'") from exc


def _task_call(args: argparse.Namespace) -> tuple[Any, EnqueueOptions]:
    """``--task``: the payload of the call (``ARGS`` a JSON array, ``KWARGS`` a JSON object)
    and the options: the imported task's queue and defaults, or, with ``--by-name``, the name
    as given and ``--queue`` (the task's code need not be installed where the command runs)."""
    positional = _json_argument(args.queue, "task's arguments", "[42]")
    keywords = {} if args.payload is None else _json_argument(args.payload, "keywords", "{}")
    if not isinstance(positional, list):
        raise UserError(f"the task's arguments must be a JSON array, e.g. '[42]', got {args.queue}")
    if not isinstance(keywords, dict):
        raise UserError(f"the keywords must be a JSON object, e.g. '{{}}', got {args.payload}")
    if args.by_name:
        return encode_call(positional, keywords), _enqueue_options(
            args, queue=args.task_queue or repository.DEFAULT_QUEUE
        )
    task = load_task(args.task)
    payload = task.payload_of(positional, keywords)
    return payload, _enqueue_options(args, queue=args.task_queue or task.queue, task=task)


def load_task(spec: str) -> Task[..., Any]:
    """Import the task ``module:attr``, or the dotted ``module.attr`` (the longest importable
    module wins), and check that it is a :class:`pgqueue.Task`."""
    if ":" in spec:
        found = load_target(spec)
    else:
        put_cwd_on_path()  # before find_spec: the module may live in the current folder
        parts = spec.split(".")
        for cut in range(len(parts) - 1, 0, -1):
            module = ".".join(parts[:cut])
            try:
                located = importlib.util.find_spec(module)
            except (ImportError, ValueError):
                located = None
            if located is not None:
                found = load_target(f"{module}:{'.'.join(parts[cut:])}")
                break
        else:
            raise UserError(
                f"cannot import the task {spec!r}: give module:attr or module.attr of an "
                "importable module (or --by-name with --queue to enqueue it unimported)"
            )
    if not isinstance(found, Task):
        raise UserError(f"{spec} is a {type(found).__name__}: expected a pgqueue.Task")
    return found


def cmd_enqueue(args: argparse.Namespace) -> int:
    """Insert one job and print its id (with --unique-key: that of a live job holding the key).

    With ``--task``, the positional arguments are the task's arguments and keywords (JSON).
    """
    if args.task is None:
        if args.by_name or args.task_queue is not None:
            raise UserError("--by-name and --queue go with --task (the queue is QUEUE)")
        if args.payload is None:
            raise UserError("give the job's JSON payload after the queue, e.g. '{\"to\": 42}'")
        payload = _json_argument(args.payload, "payload", '{"to": 42}')
        options = _enqueue_options(args)
    else:
        payload, options = _task_call(args)
    with transaction(args) as conn:
        found = repository.enqueue_with(conn, payload, options)
    if not found.inserted:
        note(
            f"unique key {options.unique_key!r} is held by live job {found.id} of queue "
            f"{options.queue!r}: no job inserted, that job's id printed"
        )
    if args.json:
        emit_json({"id": found.id, "inserted": found.inserted})
    else:
        emit(str(found.id))
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    """List jobs, newest first."""
    status = JobState(args.status) if args.status else None
    with transaction(args) as conn:
        rows = admin.list_jobs(
            conn,
            queue=args.queue,
            status=status,
            limit=args.limit,
            with_payload=args.json,
            task=args.task,
        )
    note_unreadable(rows)
    if args.json:
        emit_json(rows)
        return 0
    table(
        [
            "id",
            "queue",
            "status",
            "prio",
            "attempts",
            "run_at",
            "locked_until",
            "last_error",
            "task",
        ],
        [
            (
                r["id"],
                r["queue"],
                r["status"],
                r["priority"],
                f"{r['attempts']}/{r['max_attempts']}",
                _after(r) if r["status"] == JobState.WAITING.value else r["run_at"],
                r["locked_until"],
                r["last_error"],
                r["task"],
            )
            for r in rows
        ],
    )
    return 0


def _after(job: Mapping[str, Any]) -> str:
    """A waiting job's ``run_at`` cell: what it runs after (it has no time of its own)."""
    ids = ", ".join(str(i) for i in job["waiting_for"] or ())
    more = admin.waiting_more(job)
    if not ids:
        return f"after {more} missing job(s)"
    return f"after {ids}" + (f" and {more} more" if more else "")


def cmd_show(args: argparse.Namespace) -> int:
    """Show one job with its payload (a task's arguments), result and progress, its error history
    and its last traceback."""
    with transaction(args) as conn:
        job = admin.get_job(conn, args.id)
        links = admin.job_links(conn, args.id) if job is not None else {}
        lines = repository.job_logs(conn, args.id) if job is not None and args.logs else None
    if job is None:
        raise UserError(f"no job with id {args.id}", code=1)
    note_unreadable([job])
    if args.json:
        data = {**job, "waits_for": links["waits_for"], "waited_by": links["waited_by"]}
        if lines is not None:
            data["logs"] = [line_json(line) for line in lines]
        emit_json(data)
        return 0
    errors = job.pop("errors")
    for key, value in job.items():
        as_json = key in _JSON_FIELDS and not (value is None and key != "payload")
        if as_json and not isinstance(value, admin.Unreadable):
            value = json.dumps(value, indent=2, default=json_default)
            value = value.replace("\n", "\n" + " " * 15)
        elif key == "waiting_for" and value is not None:
            value = _after(job).removeprefix("after ")
        emit(f"{key + ':':<14} {value if as_json else cell(value)}")
    for side, label in (("waits_for", "waiting on:"), ("waited_by", "waited by:")):
        shown = ", ".join(f"{link['id']} ({link['status']})" for link in links[side]) or "-"
        emit(f"{label:<14} {shown}{', and more' if links['more'][side] else ''}")
    _show_errors(errors)
    if lines is not None:
        print_show_logs(lines)
    return 0


#: What ``pgqueue show`` prints as indented JSON: the arguments, the return value, the progress.
_JSON_FIELDS = ("payload", "result", "progress")


def _show_errors(errors: list[dict[str, Any]]) -> None:
    """The failed attempts (oldest first, as many as ``jobs.errors`` keeps), then the newest
    traceback."""
    if not errors:
        emit(f"{'errors:':<14} -")
        return
    emit(f"{'errors:':<14} {len(errors)} (oldest first)")
    rows = [[cell(e.get(k)) for k in ("attempt", "at", "error")] for e in errors]
    emit(psql_table(["attempt", "at", "error"], rows))
    last = next((e for e in reversed(errors) if e.get("traceback")), None)
    if last is not None:
        emit(f"traceback of attempt {last.get('attempt')}:")
        emit(str(last["traceback"]))


def cmd_stats(args: argparse.Namespace) -> int:
    """Per-queue counts and the jobs table's vacuum statistics."""
    with transaction(args) as conn:
        queues = admin.queue_stats(conn)
        tables = admin.table_stats(conn)
    if args.json:
        emit_json({"queues": queues, "table": tables})
        return 0
    # ``waiting`` (#24), then ``expired`` (#31) last, so the columns before them keep their
    # places for scripts.
    columns = [
        "ready",
        "scheduled",
        "running",
        "expired_leases",
        "done",
        "failed",
        "cancelled",
        "waiting",
        "expired",
    ]
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


def cmd_workers(args: argparse.Namespace) -> int:
    """The worker processes connected now: host, pid, queues, since when, the jobs they hold.

    Read from ``pg_stat_activity`` (sessions named ``pgqueue-worker:<host>:<pid>``) and each
    worker's ``jobs_workers`` row; a worker without a row shows its queues as ``?``.
    """
    with transaction(args) as conn:
        rows = admin.connected_workers(conn)
    if args.json:
        emit_json(rows)
        return 0
    table(
        ["name", "host", "pid", "queues", "since", "jobs held", "connections", "stuck"],
        [
            (
                r["name"],
                r["host"],
                r["pid"],
                "?" if r["queues"] is None else ",".join(r["queues"]),
                r["since"],
                r["jobs_held"],
                r["connections"],
                r["stuck"],
            )
            for r in rows
        ],
    )
    if not rows:
        emit("(no worker connected)")
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    """Check the database and print findings; the exit code is the worst severity."""
    from pgqueue import doctor

    with transaction(args) as conn:
        findings = doctor.run_checks(
            conn,
            idle_threshold=args.idle_threshold,
            backlog_age=args.backlog_age or doctor.DEFAULT_BACKLOG_AGE,
        )
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
            dependencies=args.producer_dependencies,
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
    if args.include_cancelled and not args.failed:
        raise UserError("--include-cancelled goes with --failed (ids given are retried anyway)")
    if args.include_expired and not args.failed:
        raise UserError("--include-expired goes with --failed (ids given are retried anyway)")
    with transaction(args) as conn:
        if args.failed:
            done = repository.retry_failed(
                conn,
                queue=args.queue,
                attempts=args.attempts,
                include_cancelled=args.include_cancelled,
                include_expired=args.include_expired,
            )
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
                    "cancelled": "its unique key was held by another live job; try again",
                },
                lambda untouched: _held_keys(conn, untouched),
            )
    emit(f"requeued {len(done)} job(s) with {args.attempts} more attempt(s): {_ids(done)}")
    return code


def cmd_cancel(args: argparse.Namespace) -> int:
    """Fail queued and running jobs for good, marked cancelled; say which were running and which
    were skipped (their row held by another transaction for longer than the cancel waits)."""
    held_for = f"{repository.CANCEL_LOCK_TIMEOUT_MS} ms"
    with transaction(args) as conn:
        report = repository.cancel_report(conn, args.ids)
        done = [c.id for c in report.cancelled]
        code = _report_untouched(
            conn,
            args.ids,
            done,
            "cancelled",
            {
                "running": "its row was locked (mid-claim or mid-update); try again",
                "queued": "its row was locked (mid-claim); try again",
                "waiting": "its row was locked (mid-unblock); try again",
                "done": "it is already done",
                "failed": "it has already failed",
                "cancelled": "it was already cancelled",
            },
            lambda untouched: {
                job_id: f"skipped: another transaction held its row for over {held_for} (a "
                "transaction-mode worker running it); try again once that transaction ends"
                for job_id in report.skipped
            },
        )
    emit(f"cancelled {len(done)} job(s): {_ids(done)}")
    running = [c.id for c in report.cancelled if c.was_running]
    if running:
        emit(f"of which running (their workers stop them): {_ids(running)}")
    if report.skipped:
        emit(f"skipped, their rows held by another transaction: {_ids(report.skipped)}")
    if report.dependents:
        emit(f"and the jobs waiting for them (depends_on): {_ids(report.dependents)}")
    return code


def cmd_unblock(args: argparse.Namespace) -> int:
    """Free waiting jobs from dependencies that no longer exist (their rows deleted by hand):
    each waits only for the dependencies that exist and have not finished; say which are ready
    now, and why the others were left alone."""
    with transaction(args) as conn:
        unblocked = repository.unblock(conn, args.ids)
        states = admin.job_statuses(conn, unblocked) if unblocked else {}
        code = _report_untouched(
            conn,
            args.ids,
            unblocked,
            "unblocked",
            {
                JobState.WAITING.value: "its dependencies all exist (it runs once they are done)",
                **{
                    s.value: f"it is {s.value}, not waiting for a dependency"
                    for s in JobState
                    if s is not JobState.WAITING
                },
            },
        )
    emit(f"unblocked {len(unblocked)} job(s): {_ids(unblocked)}")
    ready = [i for i in unblocked if states.get(i) == JobState.QUEUED.value]
    if unblocked:
        emit(f"of which ready now: {_ids(ready)} (the others wait for dependencies that exist)")
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
