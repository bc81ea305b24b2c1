"""Helpers for your own test suite, on the real database.

``assert_enqueued`` checks that your code enqueued a job (by queue and payload subset, and by
priority or unique key when given) in the transaction your test can see; ``drain`` runs the ready
jobs of some queues inline with your handlers through the real ``claim``/``complete``/``fail``,
and reports what ran and what failed::

    def test_signup_sends_a_welcome_email(engine):
        with engine.begin() as conn:
            create_user(conn, "ada@example.com")
            pgqueue.testing.assert_enqueued(conn, "welcome_email", {"email": "ada@example.com"})
        result = pgqueue.testing.drain(engine, {"welcome_email": send_welcome_email})
        assert result.failed == []

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from sqlalchemy import Connection, Engine
from sqlalchemy.orm import Session

from pgqueue import repository
from pgqueue._base.readable import decoded
from pgqueue._base.validation import (
    check_positive_int,
    check_priority,
    check_queue,
    check_unique_key,
    encode_payload,
)
from pgqueue._sql import reads
from pgqueue._sql.calls import rows_taken
from pgqueue._worker.dispatch import Dispatch, registry_finder, registry_tasks
from pgqueue._worker.executors import run_in_savepoint, run_inline, settle
from pgqueue._worker.window import Held, Lane
from pgqueue.errors import InvalidArgumentError
from pgqueue.jobs import Handler, JobContext, Outcome, Snooze
from pgqueue.repository import Executor
from pgqueue.results import ClaimedJob
from pgqueue.retry_policy import RetryPolicy
from pgqueue.tasks import Task

__all__ = ["DrainResult", "DrainedJob", "assert_enqueued", "drain"]

#: How many jobs ``drain`` runs at most unless told otherwise (a guard against handlers that
#: enqueue follow-up jobs forever).
DEFAULT_MAX_JOBS = 1000
_LISTED = 20


def assert_enqueued(
    conn: Executor,
    queue: str | Task[..., Any],
    payload_subset: Any = None,
    *,
    count: int | None = None,
    priority: int | None = None,
    unique_key: str | None = None,
    args: Sequence[Any] | None = None,
    kwargs: Mapping[str, Any] | None = None,
) -> list[int]:
    """Assert that jobs of ``queue`` whose payload contains ``payload_subset`` are visible; or,
    given a :class:`pgqueue.Task` instead of a queue, calls of that task::

        pgqueue.testing.assert_enqueued(conn, send_email, args=[42], kwargs={"template": "reset"})

    Runs in the caller's transaction, so it sees jobs enqueued but not yet committed. Jobs of any
    status count (a job already run by a worker was enqueued too).

    Args:
        conn: A connection or session; its transaction is left open and unchanged.
        queue: The queue the job must be on.
        payload_subset: A JSON value the payload must contain, in the sense of jsonb ``@>``
            (``{"user_id": 7}`` matches ``{"user_id": 7, "email": "..."}``). Default ``None``:
            any payload.
        count: The exact number of matching jobs expected. Default: at least one.
        priority: The priority the jobs must have (0-9, checked as ``enqueue`` checks it).
            Default ``None``: any priority.
        unique_key: The unique key the jobs must have (checked as ``enqueue`` checks it). Jobs
            of any status count here too, so a finished job that held the key matches as well
            as the live one. Default ``None``: with or without a key.
        args: With a task: the call's positional arguments, exactly as stored (a JSON array;
            a tuple compares as a list). Default ``None``: any. (``.. versionadded:: 0.1.0``)
        kwargs: With a task: keyword arguments the call must contain (jsonb ``@>``, as
            ``payload_subset``). Default ``None``: any.

    Returns:
        The matching job ids, oldest first.

    Raises:
        AssertionError: listing the jobs of that queue, with their status, priority, key and
            payload (and the other queues' counts), when the expectation is not met.
        InvalidArgumentError: for a bad queue, payload subset, priority or key, before any SQL.
    """
    shape: list[str] = []
    task_name: str | None = None
    args_json: str | None = None
    if isinstance(queue, Task):
        task_name, queue = queue.name, queue.queue  # its jobs in any queue; listed: its own
        if args is not None:
            if isinstance(args, (str, bytes, Mapping)):
                raise InvalidArgumentError("args", "give the positional arguments as a list")
            args_json = encode_payload(list(args))
            shape.append(f"args {list(args)!r}")
        if kwargs is not None:
            encode_payload(kwargs)
            shape.append(f"kwargs containing {kwargs!r}")
    elif args is not None or kwargs is not None:
        raise InvalidArgumentError("args", "args and kwargs are a task's: give the task")
    queue = check_queue(queue)
    if payload_subset is not None:
        encode_payload(payload_subset)  # the same checks, and error, as enqueue
        shape.append(f"payload containing {payload_subset!r}")
    if priority is not None:
        priority = check_priority(priority)
        shape.append(f"priority {priority}")
    if unique_key is not None:
        unique_key = check_unique_key(unique_key)
        shape.append(f"unique key {unique_key!r}")
    stmt = reads.enqueued_ids_statement(
        None if task_name is not None else queue,
        payload_subset=payload_subset,
        priority=priority,
        unique_key=unique_key,
        task=task_name,
        args_json=args_json,
        kwargs_subset=kwargs,
    )
    ids = list(conn.execute(stmt).scalars())
    if (len(ids) == count) if count is not None else bool(ids):
        return ids
    wanted = "at least one job" if count is None else f"{count} job(s)"
    with_shape = f" with {' and '.join(shape)}" if shape else ""
    where = f"of task {task_name!r}" if task_name is not None else f"on queue {queue!r}"
    raise AssertionError(
        f"expected {wanted} {where}{with_shape}, found {len(ids)}.\n"
        + _describe_enqueued(conn, queue)
    )


def _describe_enqueued(conn: Executor, queue: str) -> str:
    rows = [
        decoded(r)  # a payload written by SQL that Python cannot load is shown as its text
        for r in conn.execute(reads.queue_jobs_statement(queue, _LISTED + 1))
    ]
    lines = [f"jobs on {queue!r} visible in this transaction:"]
    lines += [
        f"  #{r['id']} {r['status']} priority {r['priority']}"
        + ("" if r["unique_key"] is None else f" key {r['unique_key']!r}")
        + f" {r['payload']!r}"
        for r in rows[:_LISTED]
    ] or ["  (none)"]
    if len(rows) > _LISTED:
        lines.append("  ...")
    others = conn.execute(reads.other_queues_statement(queue)).all()
    if others:
        lines.append("other queues: " + ", ".join(f"{q!r}: {n}" for q, n in others))
    return "\n".join(lines)


@dataclass(frozen=True)
class DrainedJob:
    """One job ``drain`` ran.

    Attributes:
        error: The exception its handler raised; ``None`` when it succeeded.
        status: Where the job went: ``"done"`` (also when its handler completed it),
            ``"queued"`` (a retry is scheduled, or its handler raised :class:`pgqueue.Snooze`),
            ``"failed"`` (attempts spent, or cancelled
            meanwhile) or ``"lost"`` (no longer this drain's: reaped and taken elsewhere).
        task: The name of the task it ran, ``None`` for a queue-keyed job.
        result: What its task or handler returned, as stored in ``jobs.result`` (decoded from
            the JSON the worker wrote: a tuple comes back a list); ``None`` when it returned
            ``None``, a handler's value was not JSON, or it did not succeed.

    .. versionadded:: 0.1.0
    """

    id: int
    queue: str
    payload: Any
    attempts: int
    status: str
    error: BaseException | None = None
    task: str | None = None
    result: Any = None


@dataclass(frozen=True)
class DrainResult:
    """What ``drain`` ran, in the order it ran them.

    Attributes:
        ran: Every job whose handler was called.
        succeeded: The jobs whose handler returned (now ``done``).
        failed: The jobs whose handler raised, with the exception in ``error``.
        snoozed: The jobs whose handler raised :class:`pgqueue.Snooze` (queued again; not in
            ``failed``).
    """

    ran: list[DrainedJob] = field(default_factory=list)

    @property
    def succeeded(self) -> list[DrainedJob]:
        """Jobs whose handler returned."""
        return [j for j in self.ran if j.error is None]

    @property
    def failed(self) -> list[DrainedJob]:
        """Jobs whose handler raised (a :class:`pgqueue.Snooze` is not a failure)."""
        return [j for j in self.ran if j.error is not None and not isinstance(j.error, Snooze)]

    @property
    def snoozed(self) -> list[DrainedJob]:
        """Jobs whose handler raised :class:`pgqueue.Snooze`."""
        return [j for j in self.ran if isinstance(j.error, Snooze)]

    @property
    def results(self) -> dict[int, Any]:
        """``{job id: result}`` of the jobs that succeeded, in the order they ran: what each
        task (or handler) returned, as ``jobs.result`` holds it.

        .. versionadded:: 0.1.0
        """
        return {j.id: j.result for j in self.ran if j.error is None}


def drain(
    conn_or_engine: Engine | Connection | Session,
    handlers: Mapping[str, Handler],
    *,
    queues: Iterable[str] | None = None,
    max_jobs: int = DEFAULT_MAX_JOBS,
) -> DrainResult:
    """Run the ready jobs of some queues inline, one at a time, with the real claim and updates.

    A failing handler's job goes through :func:`pgqueue.fail` with the default backoff, so it is
    not ready again during the drain: every ready job runs at most once. Jobs its handlers
    enqueue run too when they are ready at once, and so does a job whose handler raised
    ``pgqueue.Snooze(0)`` (queued again at once; ``max_jobs`` bounds a handler that always
    snoozes).

    Tasks run as the worker runs them: give a :class:`pgqueue.Registry` as ``handlers`` and each
    job runs the task its ``jobs.task`` names (its result stored in ``jobs.result`` by the
    completion, as the worker stores it, and returned in :attr:`DrainedJob.result` and
    :attr:`DrainResult.results`), the queue's handler a queue-keyed job; a job of a task the
    registry lacks fails its attempt as in a worker::

        result = pgqueue.testing.drain(engine, registry)
        assert result.results == {job_id: {"sent": "reset"}}

    Time bounds: a job past its ``expires_in`` is expired by the claim here as in a worker (it
    never runs). A job's ``timeout`` is not enforced: handlers run inline in the caller's thread,
    with no watchdog to stop them; test timeouts with a :class:`pgqueue.Worker`.

    Args:
        conn_or_engine: An ``Engine`` runs in lease mode, like the worker: claim and commit, call
            the handler, then complete or fail and commit. A ``Connection`` or ``Session``
            runs everything in the caller's open transaction without committing; each handler
            runs in a savepoint that is rolled back when it raises.
        handlers: ``{queue: handler}``, the same handlers a :class:`pgqueue.Worker` takes (they
            receive a :class:`pgqueue.JobContext`; ``connection`` is set in transaction mode),
            or a :class:`pgqueue.Registry` of handlers and tasks.
            They run through the worker's own executor: ``async def`` handlers too (each in
            ``asyncio.run``, so call ``drain`` outside a running event loop), the same
            ``last_error`` text and ``errors`` entry (with the traceback), the same results
            (``max_result_bytes`` at its default), and a handler that completed its own job
            counts as done. :func:`pgqueue.current_job` answers inside them.
        queues: The queues to drain. Default: every queue of ``handlers`` (and of its tasks).
        max_jobs: Stop after this many jobs. Default 1000.

    Raises:
        InvalidArgumentError: for a queue without a handler or task, before any SQL.
    """
    dispatch = Dispatch(handlers, registry_tasks(handlers), find_task=registry_finder(handlers))
    served = dispatch.queue_lanes
    names = [check_queue(q) for q in (served if queues is None else queues)]
    missing = [q for q in names if q not in served]
    if missing:
        names_text = ", ".join(map(repr, missing))
        raise InvalidArgumentError("queues", f"no handler for {names_text} (nor a task's queue)")
    check_positive_int("max_jobs", max_jobs)
    result = DrainResult()
    progress = True
    while progress and len(result.ran) < max_jobs:
        progress = False
        for queue in names:
            if len(result.ran) >= max_jobs:
                break
            if isinstance(conn_or_engine, Engine):
                drained = _run_leased(conn_or_engine, queue, dispatch)
            else:
                drained = _run_in_transaction(conn_or_engine, queue, dispatch)
            if drained is not None:
                result.ran.append(drained)
                progress = True
    return result


def _claim_one(conn: Connection | Session, queue: str) -> ClaimedJob | None:
    """The next job of ``queue``, or ``None`` when none is ready. A claim that took only a job
    past its deadline (failed it as expired: nobody runs it) is followed by another, as the
    worker's claimer does: more may be waiting behind it."""
    while True:
        claimed = repository.claim(conn, queue=queue, limit=1)
        if claimed:
            return claimed[0]
        if not rows_taken(claimed):
            return None


def _run_leased(engine: Engine, queue: str, dispatch: Dispatch) -> DrainedJob | None:
    with engine.begin() as conn:
        claimed = _claim_one(conn, queue)
    if claimed is None:
        return None
    held = _held(claimed, None, engine)
    target = dispatch.target(held.job)
    error = run_inline(target, held)
    with engine.begin() as conn:
        outcome, _ = settle(conn, held, error, target.retry or RetryPolicy())
    return _drained(claimed, outcome, error, held)


def _run_in_transaction(
    conn: Connection | Session, queue: str, dispatch: Dispatch
) -> DrainedJob | None:
    claimed = _claim_one(conn, queue)
    if claimed is None:
        return None
    held = _held(claimed, conn.connection() if isinstance(conn, Session) else conn)
    target = dispatch.target(held.job)
    run = partial(run_inline, target, held)
    error, outcome, _ = run_in_savepoint(conn, held, run, target.retry or RetryPolicy())
    return _drained(claimed, outcome, error, held)


def _held(job: ClaimedJob, connection: Connection | None, engine: Engine | None = None) -> Held:
    return Held(JobContext.of(job, connection, engine), Lane.THREADS, time.monotonic())


#: What ``DrainedJob.status`` says of each outcome.
_STATUS = {
    Outcome.DONE: "done",
    Outcome.DONE_BY_HANDLER: "done",
    Outcome.RETRY: "queued",
    Outcome.FAILED: "failed",
    Outcome.CANCELLED: "failed",
    Outcome.LOST: "lost",
    Outcome.SNOOZED: "queued",
}


def _drained(
    job: ClaimedJob, outcome: Outcome, error: BaseException | None, held: Held
) -> DrainedJob:
    stored = None if error is not None or held.result is None else json.loads(held.result)
    return DrainedJob(
        job.id, job.queue, job.payload, job.attempts, _STATUS[outcome], error, job.task, stored
    )
