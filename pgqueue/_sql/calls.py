"""The repository functions as data: validated parameters, a statement and a row mapper.

Every public function of :mod:`pgqueue.repository` and its twin in :mod:`pgqueue.aio` builds one
:class:`Call` here and runs it, so the sync and the async function differ only by ``await``:
validation, parameter building and row mapping exist once.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Generic, TypeVar

from sqlalchemy import Executable, Result
from sqlalchemy.exc import DBAPIError, IntegrityError

from pgqueue._base.storable import storable
from pgqueue._base.tracebacks import check_traceback, trim_traceback
from pgqueue._base.validation import (
    check_bool,
    check_duration,
    check_int,
    check_job_id,
    check_name,
    check_positive_int,
    check_queue,
    check_snooze_delay,
    check_unique_key,
    check_unique_keys,
    encode_payload,
    encode_payloads,
)
from pgqueue._sql import durable_statements, log_statements, statements, workflow_statements
from pgqueue._sql.driver_errors import DriverError, classify, unique_key_error
from pgqueue.enqueue_options import EnqueueOptions
from pgqueue.errors import (
    InvalidArgumentError,
    InvalidArgumentTypeError,
    JobWaitingError,
    UniqueKeyError,
    UnknownDependencyError,
)
from pgqueue.models import JobStatus
from pgqueue.results import (
    CancelledJob,
    CancelReport,
    ClaimedJob,
    EnqueuedJob,
    FailResult,
    JobResult,
    ReapedJob,
    Settled,
)
from pgqueue.schema import CANCEL_HINT

T = TypeVar("T")


@contextmanager
def translated_errors() -> Iterator[None]:
    """Turn the database's refusal of a second live job with a key into :class:`UniqueKeyError`
    (a retry or a hand-made update; enqueue itself never conflicts)."""
    try:
        yield
    except IntegrityError as exc:
        if classify(exc) is not DriverError.UNIQUE_KEY:
            raise
        raise unique_key_error(exc) from exc


#: SQLSTATEs of a row lock not taken: ``lock_not_available`` (the lock timeout) and
#: ``deadlock_detected``.
_LOCK_REFUSED = {"55P03", "40P01"}
#: ``no_active_sql_transaction``: a SAVEPOINT outside a transaction block (autocommit).
_NO_ACTIVE_TRANSACTION = "25P01"


def lock_refused(exc: BaseException) -> bool:
    """The database gave up waiting for a row lock (a lock timeout, or a deadlock it broke).

    Raises:
        InvalidArgumentError: the savepoint itself was refused: the connection is in autocommit,
            outside any transaction (nothing was written).
    """
    orig = exc.orig if isinstance(exc, DBAPIError) else exc
    state = getattr(orig, "sqlstate", None)
    if state == _NO_ACTIVE_TRANSACTION:
        raise InvalidArgumentError(
            "conn",
            "is in autocommit: this call waits for row locks in a savepoint, which needs a "
            "transaction (use `with engine.begin() as conn:`)",
        ) from exc
    return state in _LOCK_REFUSED


@dataclass(frozen=True)
class Call(Generic[T]):
    """One statement to execute with its parameters, and how to turn its result into ``T``.

    ``statement`` is ``None`` when the answer is known without SQL (an empty batch): the runner
    then calls ``finish(None)``. ``from_rows`` is set on the calls the worker replays on the
    driver (:mod:`pgqueue._worker.replay`): the same mapping from rows with attribute access.

    With ``on_lock_refused`` the runner executes the statement in a savepoint of the caller's
    transaction: when the database gives up on a row lock (:func:`lock_refused`) it rolls back to
    the savepoint, which also undoes the statement's ``set_config``, and the call's value is
    ``on_lock_refused()``; the caller's transaction goes on unharmed.
    """

    statement: Executable | None
    params: dict[str, Any]
    finish: Callable[[Result[Any] | None], T]
    from_rows: Callable[[Iterable[Any]], T] | None = None
    on_lock_refused: Callable[[], T] | None = None


#: A repository operation of several statements: a generator that yields each :class:`Call` and is
#: sent its result; its return value is the operation's. The sync and the async runner drive the
#: same generator, so the logic between the statements exists once.
Plan = Generator[Call[Any], Any, T]

#: Rounds of "insert, else find the holder" before a unique enqueue gives up: a round fails only
#: when the holder finished between the two statements, so two rounds nearly always suffice.
_KEY_ROUNDS = 5


def enqueue(payload: Any, options: EnqueueOptions) -> Plan[int]:
    if options.unique_key is not None:
        found = yield from enqueue_unique(payload, options)
        return found.id
    params = {**options.params, "payload_json": encode_payload(payload)}
    stmt = statements.ENQUEUE
    if options.concurrency_key is not None:
        params["concurrency_key"] = options.concurrency_key
        stmt = statements.ENQUEUE_KEYED
    yield from _dependencies_exist(options)
    new_id: int = yield Call(stmt, params, _scalar_int)
    yield from _attach([new_id], options)
    return new_id


def _dependencies_exist(options: EnqueueOptions) -> Plan[None]:
    """Refuse ``options.depends_on`` naming an id no job has, before anything is written."""
    wanted = list(options.depends_on or ())
    if not wanted:
        return
    stmt = workflow_statements.DEPENDENCIES_FOUND
    found: set[int] = yield Call(stmt, {"depends_on": wanted}, _id_set)
    missing = [i for i in wanted if i not in found]
    if missing:
        raise UnknownDependencyError(missing)


def _attach(job_ids: list[int], options: EnqueueOptions) -> Plan[None]:
    """Record that the jobs just inserted wait for ``options.depends_on`` (same transaction)."""
    if not options.depends_on or not job_ids:
        return
    params = {
        "job_ids": job_ids,
        "depends_on": list(options.depends_on),
        "run_on_failure": options.run_on_failure,
    }
    yield Call(workflow_statements.ATTACH, params, _nothing)


def enqueue_job(payload: Any, options: EnqueueOptions) -> Plan[EnqueuedJob]:
    """:func:`enqueue` that says whether it inserted: always, unless ``options.unique_key`` is
    held by a live job (then that job)."""
    if options.unique_key is not None:
        return (yield from enqueue_unique(payload, options))
    new_id = yield from enqueue(payload, options)
    return EnqueuedJob(new_id, True)


def enqueue_unique(payload: Any, options: EnqueueOptions) -> Plan[EnqueuedJob]:
    """Insert unless a live job holds the key; the inserted job, or the holder."""
    key = options.unique_key
    if key is None:  # enqueue_unique(unique_key=None): refused like any key that is no str
        key = check_unique_key(key)
    params = {**options.params, "payload_json": encode_payload(payload), "key": key}
    stmt = statements.ENQUEUE_UNIQUE
    if options.concurrency_key is not None:
        params["concurrency_key"] = options.concurrency_key
        stmt = statements.ENQUEUE_UNIQUE_KEYED
    yield from _dependencies_exist(options)
    for _ in range(_KEY_ROUNDS):
        inserted: list[int] = yield Call(stmt, params, _inserted_ids)
        if inserted:
            # Only a job this call inserted gets the dependencies: a live holder keeps its own.
            yield from _attach(inserted, options)
            return EnqueuedJob(inserted[0], True)
        holders: dict[str, int] = yield _holders_call(params["queue_name"], [key])
        if key in holders:
            return EnqueuedJob(holders[key], False)
    raise UniqueKeyError(params["queue_name"], key, "kept changing hands; try again")


def enqueue_many(
    payloads: Iterable[Any],
    options: EnqueueOptions,
    unique_keys: Iterable[str | None] | None = None,
    concurrency_keys: str | Iterable[str | None] | None = None,
) -> Plan[list[int]]:
    """``options`` without a ``unique_key``: a batch's keys are ``unique_keys``, one per payload.

    ``concurrency_keys`` is one key for every job (as ``options.concurrency_key``), or one key
    or ``None`` per payload; every key is checked before the statement runs.
    """
    assert options.unique_key is None, "a batch takes one key per payload, in unique_keys"
    encoded = encode_payloads(payloads)
    flow = _concurrency_keys(options, concurrency_keys, len(encoded))
    params = {**options.params, "batch_json": _json_array(encoded)}
    if unique_keys is None:
        stmt: Executable | None = statements.ENQUEUE_MANY
        if flow is not None:
            stmt = statements.ENQUEUE_MANY_KEYED
            elements = (
                f"[{payload},{json.dumps(k)}]" for payload, k in zip(encoded, flow, strict=True)
            )
            params["batch_json"] = _json_array(elements)
        if encoded:
            yield from _dependencies_exist(options)
        new_ids: list[int] = yield Call(stmt if encoded else None, params, _sorted_ids)
        yield from _attach(new_ids, options)
        return new_ids
    keys = check_unique_keys(unique_keys, len(encoded))
    if encoded:
        yield from _dependencies_exist(options)
    inserted_ids: list[int] = []
    ids: list[int | None] = [None] * len(encoded)
    todo = list(range(len(encoded)))
    unique_stmt = statements.ENQUEUE_MANY_UNIQUE
    if flow is not None:
        unique_stmt = statements.ENQUEUE_MANY_UNIQUE_KEYED
    for _ in range(_KEY_ROUNDS):
        if not todo:
            break
        elements = (_keyed_element(encoded[i], keys[i], flow, i) for i in todo)
        batch = {"batch_json": _json_array(elements)}
        rows = yield Call(unique_stmt, {**params, **batch}, _id_key_rows)
        inserted_ids += [int(r.id) for r in rows]
        held = _assign_inserted(todo, keys, rows, ids)
        todo = held
        if not held:
            break
        holders = yield _holders_call(params["queue_name"], sorted({keys[i] or "" for i in held}))
        for i in held:
            ids[i] = holders.get(keys[i] or "")
        todo = [i for i in held if ids[i] is None]
    if todo:
        key = keys[todo[0]] or ""
        raise UniqueKeyError(params["queue_name"], key, "kept changing hands; try again")
    yield from _attach(sorted(inserted_ids), options)
    return [int(i) for i in ids if i is not None]


def _concurrency_keys(
    options: EnqueueOptions, keys: str | Iterable[str | None] | None, count: int
) -> list[str | None] | None:
    """One checked concurrency key per payload, or ``None`` when no job of the batch has one."""
    if keys is None:
        if options.concurrency_key is None:
            return None
        return [options.concurrency_key] * count
    if options.concurrency_key is not None:
        raise InvalidArgumentError(
            "concurrency_key", "given twice: in the options and for the batch"
        )
    if isinstance(keys, str):
        return [check_unique_key(keys, name="concurrency_key")] * count
    checked = check_unique_keys(keys, count, name="concurrency_keys")
    return checked if any(k is not None for k in checked) else None


def _keyed_element(payload: str, key: str | None, flow: list[str | None] | None, i: int) -> str:
    """A unique batch's element: ``[payload, unique key]``, with the concurrency key third."""
    if flow is None:
        return f"[{payload},{json.dumps(key)}]"
    return f"[{payload},{json.dumps(key)},{json.dumps(flow[i])}]"


def _assign_inserted(
    todo: list[int], keys: list[str | None], rows: list[Any], ids: list[int | None]
) -> list[int]:
    """Give each input row of ``todo`` its id; return those whose key an outside job holds.

    ``rows`` are the inserted ``(id, unique_key)`` in id order, which is input order: a keyless
    row always takes the next one, a key's first occurrence takes it when it was inserted, and
    later occurrences of a key in the batch share the first one's job.
    """
    inserted = iter(rows)
    upcoming = next(inserted, None)
    first: dict[str, int] = {}
    held: list[int] = []
    for i in todo:
        key = keys[i]
        if key is not None and key in first:
            ids[i] = first[key]
        elif upcoming is not None and upcoming.unique_key == key:
            ids[i] = new_id = int(upcoming.id)
            if key is not None:
                first[key] = new_id
            upcoming = next(inserted, None)
        elif key is None:
            raise AssertionError("a keyless row of the batch was not inserted")
        else:
            held.append(i)
    return held


def _json_array(encoded: Iterable[str]) -> str:
    """Elements already encoded as JSON texts, as one JSON array text."""
    return "[" + ",".join(encoded) + "]"


def _holders_call(queue: str, keys: list[str]) -> Call[dict[str, int]]:
    return Call(statements.KEY_HOLDERS, {"queue_name": queue, "keys": keys}, _holders)


def claim(
    queue: str,
    limit: int,
    lease: timedelta | float,
    locked_by: str | None = None,
    since: datetime | None = None,
) -> Call[list[ClaimedJob]]:
    """``since``: read each priority level's ready range from this ``run_at`` on (the worker's
    low-water mark, :mod:`pgqueue._worker.low_water`); ``None`` reads all of it."""
    stmt = statements.claim_statement(check_positive_int("limit", limit), since=since is not None)
    params: dict[str, Any] = {
        "queue_name": check_queue(queue),
        "lease": check_duration("lease", lease, allow_zero=False),
        "locked_by": None if locked_by is None else check_name("locked_by", locked_by),
    }
    if since is not None:
        params["since"] = since
    return Call(stmt, params, _claimed, from_rows=claimed_jobs)


def claim_queues(
    queues: Sequence[str],
    limit: int,
    lease: timedelta | float,
    locked_by: str | None = None,
    since: Sequence[datetime | None] | None = None,
) -> Call[list[ClaimedJob]]:
    """:func:`claim` over several queues in one statement (the worker's claim of many queues);
    ``since``: each queue's low-water mark, ``None`` (or no list) to read its whole range."""
    if not queues:
        raise InvalidArgumentError("queues", "give at least one queue")
    marks = [None] * len(queues) if since is None else list(since)
    if len(marks) != len(queues):
        raise InvalidArgumentError("since", "give one mark (or None) per queue")
    stmt = statements.claim_queues_statement(check_positive_int("limit", limit))
    wanted = [
        {"queue": check_queue(q), "since": None if m is None else m.isoformat()}
        for q, m in zip(queues, marks, strict=True)
    ]
    params = {
        "wanted": json.dumps(wanted),
        "lease": check_duration("lease", lease, allow_zero=False),
        "locked_by": None if locked_by is None else check_name("locked_by", locked_by),
    }
    return Call(stmt, params, _claimed, from_rows=claimed_jobs)


def complete(job_id: int, attempts: int) -> Call[bool]:
    return Call(statements.COMPLETE, _guard_params(job_id, attempts), _matched)


def complete_with_result(
    job_id: int, attempts: int, result_json: str | None, progress_json: str | None
) -> Call[bool]:
    """``result_json``/``progress_json``: JSON texts the worker encoded (and checked) itself."""
    params = {"result_json": result_json, "progress_json": progress_json}
    return Call(
        statements.COMPLETE_WITH_RESULT, {**params, **_guard_params(job_id, attempts)}, _matched
    )


def fetch_result(job_id: int) -> Call[JobResult | None]:
    return Call(statements.JOB_RESULT, {"job_id": check_job_id(job_id)}, _job_result)


def dependency_results(job_id: int) -> Call[dict[int, JobResult]]:
    return Call(
        workflow_statements.DEPENDENCY_RESULTS, {"job_id": check_job_id(job_id)}, _job_results
    )


def extend_lease(job_id: int, attempts: int, lease: timedelta | float) -> Call[bool]:
    lease = check_duration("lease", lease, allow_zero=False)
    return Call(
        statements.EXTEND_LEASE, {**_guard_params(job_id, attempts), "lease": lease}, _matched
    )


def retake_rolled_back(
    job_id: int, attempts: int, lease: timedelta, locked_by: str | None, lock_timeout_ms: int
) -> Call[bool]:
    """The claim of attempt ``attempts`` again, after the server rolled it back (transaction
    mode's terminated handler): the worker's own values, not checked again."""
    params = {
        **_guard_params(job_id, attempts),
        "lease": lease,
        "locked_by": locked_by,
        "lock_timeout": _ms(lock_timeout_ms),
    }
    return Call(statements.RETAKE_ROLLED_BACK, params, _matched)


def fail(
    job_id: int,
    attempts: int,
    error: str,
    retry: bool,
    base: timedelta | float,
    cap: timedelta | float,
    traceback: str | None = None,
) -> Call[FailResult | None]:
    params = {
        "error": storable(error if isinstance(error, str) else str(error)),
        "traceback": check_traceback(traceback),
        "retry": bool(retry),
        "base_seconds": check_duration("base", base, allow_zero=True).total_seconds(),
        "cap_seconds": check_duration("cap", cap, allow_zero=True).total_seconds(),
    }
    return Call(statements.FAIL, {**params, **_guard_params(job_id, attempts)}, _fail_result)


def snooze(job_id: int, attempts: int, delay: timedelta | float) -> Call[bool]:
    params = {"delay_seconds": check_snooze_delay(delay).total_seconds()}
    return Call(statements.SNOOZE, {**params, **_guard_params(job_id, attempts)}, _matched)


def reap_expired() -> Call[list[ReapedJob]]:
    return Call(statements.REAP_EXPIRED, {}, _reaped)


def purge_done(
    older_than: timedelta | float,
    batch_size: int,
    status: JobStatus = JobStatus.DONE,
    queue: str | None = None,
) -> Call[int]:
    if status not in (JobStatus.DONE, JobStatus.FAILED):
        raise InvalidArgumentError("status", f"only done or failed jobs are purged, got {status}")
    params: dict[str, Any] = {
        "older_than": check_duration("older_than", older_than, allow_zero=True),
        "batch_size": check_positive_int("batch_size", batch_size),
    }
    if queue is not None:
        params["queue_name"] = check_queue(queue)
    stmt = statements.purge_statement(status, by_queue=queue is not None)
    return Call(log_statements.with_lines_deleted(stmt), params, _scalar_int)


def retry(job_ids: Iterable[int], attempts: int, reset_steps: bool = False) -> Plan[list[int]]:
    """Refuse jobs waiting for their dependencies (:class:`JobWaitingError`, before anything is
    written), then retry (and with ``reset_steps``, forget the durable steps of the jobs
    retried). The ids and attempts are checked here, before the plan runs."""
    params = {
        "job_ids": _ids(job_ids),
        "extra_attempts": check_positive_int("attempts", attempts),
    }
    retried = _retry(params)
    if check_bool("reset_steps", reset_steps):
        return _reset_steps(retried)
    return retried


def _reset_steps(retry: Plan[list[int]]) -> Plan[list[int]]:
    """``retry``, then :data:`durable_statements.RESET_STEPS` of the ids it requeued."""
    retried = yield from retry
    if retried:
        stmt = durable_statements.RESET_STEPS
        yield Call(stmt, {"job_ids": retried}, _nothing)
    return retried


def _retry(params: dict[str, Any]) -> Plan[list[int]]:
    if not params["job_ids"]:
        nothing: list[int] = yield Call(None, params, _sorted_ids)
        return nothing
    among = {"job_ids": params["job_ids"]}
    waiting: dict[int, list[int]] = yield Call(
        workflow_statements.WAITING_AMONG, among, _waiting_for
    )
    if waiting:
        raise JobWaitingError(waiting)
    # No job becomes waiting after its enqueue (waiting only ever ends); the statement leaves
    # waiting jobs alone all the same.
    retried: list[int] = yield Call(statements.retry_statement(), params, _sorted_ids)
    return retried


def unblock(job_ids: Iterable[int]) -> Plan[list[int]]:
    """Lock the waiting jobs among ``job_ids``, then count again what they wait for
    (:data:`workflow_statements.UNBLOCK`, which says why in two statements). The ids are checked
    here, before the plan runs."""
    return _unblock({"job_ids": _ids(job_ids)})


def _unblock(params: dict[str, Any]) -> Plan[list[int]]:
    if not params["job_ids"]:
        nothing: list[int] = yield Call(None, params, _sorted_ids)
        return nothing
    locked: list[int] = yield Call(workflow_statements.LOCK_WAITING, params, _sorted_ids)
    if not locked:
        return []
    counted: list[int] = yield Call(workflow_statements.UNBLOCK, {"job_ids": locked}, _sorted_ids)
    return counted


def retry_failed(
    queue: str | None,
    attempts: int,
    include_cancelled: bool = False,
    include_expired: bool = False,
    reset_steps: bool = False,
) -> Plan[list[int]]:
    params = {
        "queue_name": None if queue is None else check_queue(queue),
        "extra_attempts": check_positive_int("attempts", attempts),
    }
    stmt = statements.retry_statement(
        all_failed=True,
        include_cancelled=check_bool("include_cancelled", include_cancelled),
        include_expired=check_bool("include_expired", include_expired),
    )
    retried = _one_call(Call(stmt, params, _sorted_ids))
    if check_bool("reset_steps", reset_steps):
        return _reset_steps(retried)
    return retried


def _one_call(call: Call[T]) -> Plan[T]:
    value: T = yield call
    return value


#: How long a cancel waits for each row another transaction holds (milliseconds): the worker's
#: own statements (claim, heartbeat, completion) hold a row for milliseconds; a longer hold is a
#: transaction-mode worker's open transaction, and the job is reported skipped.
CANCEL_LOCK_TIMEOUT_MS = 500


def cancel(job_ids: Iterable[int], channel: str) -> Plan[CancelReport]:
    """:data:`statements.CANCEL` of every id in a savepoint, waiting at most
    :data:`CANCEL_LOCK_TIMEOUT_MS` for each row lock; the caller's ``lock_timeout`` is put back
    after. When some row is held longer, that savepoint is rolled back (its locks let go) and the
    ids still queued or running are cancelled one at a time, in id order, each in a savepoint of
    its own: a long hold costs one wait and keeps no other id from being cancelled. The ids are
    checked here, before the plan runs.
    """
    params = {"job_ids": _ids(job_ids), "channel": channel, "notify_payload": CANCEL_HINT}
    return _cancel(params)


def _cancel(params: dict[str, Any]) -> Plan[CancelReport]:
    if not params["job_ids"]:
        yield Call(None, params, _cancelled)
        return CancelReport([], [])
    previous = yield Call(statements.CURRENT_LOCK_TIMEOUT, {}, _scalar_text)
    waiting = {**params, "lock_timeout": str(CANCEL_LOCK_TIMEOUT_MS)}
    cancelled = yield Call(statements.CANCEL, waiting, _cancelled, on_lock_refused=_refused)
    skipped: list[int] = []
    if cancelled is None:
        cancelled = []
        live = yield Call(statements.LIVE_AMONG, {"job_ids": params["job_ids"]}, _sorted_ids)
        for job_id in live:
            alone = {**waiting, "job_ids": [job_id]}
            got = yield Call(statements.CANCEL, alone, _cancelled, on_lock_refused=_refused)
            if got is None:
                skipped.append(job_id)
            else:
                cancelled.extend(got)
    # A released savepoint keeps its set_config: give the caller's transaction its own back.
    yield Call(statements.SET_LOCAL_LOCK_TIMEOUT, {"lock_timeout": previous}, _nothing)
    dependents: list[int] = []
    if cancelled:
        ids = {"job_ids": [c.id for c in cancelled]}
        dependents = yield Call(workflow_statements.CANCELLED_DEPENDENTS, ids, _sorted_ids)
    return CancelReport(sorted(cancelled, key=lambda c: c.id), skipped, dependents)


def set_local_lock_timeout(milliseconds: int) -> Call[None]:
    ms = check_positive_int("lock_timeout", milliseconds)
    return Call(statements.SET_LOCAL_LOCK_TIMEOUT, {"lock_timeout": str(ms)}, _nothing)


# -- batched lifecycle: the worker's completer, heartbeat and shutdown ---------------------------
#
# ``held`` is a sequence of ``(job_id, claimed_attempts)``; each returns what matched. The values
# come from claims, not from users: they are not validated again on the hot path.


def complete_many(
    held: Sequence[tuple[int, int]], lock_timeout_ms: int | None = None
) -> Call[set[int]]:
    return _batch(statements.COMPLETE_MANY, held, {"lock_timeout": _ms(lock_timeout_ms)})


#: One completion of a batch that carries values: ``(job_id, claimed_attempts, result_json,
#: progress_json)``, the JSON texts encoded by the worker (``None``: no result; no new progress).
BatchCompletion = tuple[int, int, str | None, str | None]


def complete_many_with_results(
    completions: Sequence[BatchCompletion], lock_timeout_ms: int | None = None
) -> Call[set[int]]:
    """One JSON array text for the batch (the results are JSON texts already: joined, not
    re-encoded)."""
    elements = (
        f"[{'null' if c[2] is None else c[2]}" + ("]" if c[3] is None else f",{c[3]}]")
        for c in completions
    )
    params = {
        "lock_timeout": _ms(lock_timeout_ms),
        "batch_ids": [c[0] for c in completions],
        "batch_attempts": [c[1] for c in completions],
        "batch_json": _json_array(elements),
    }
    stmt = statements.COMPLETE_MANY_WITH_RESULTS if completions else None
    return Call(stmt, params, _id_set)


def extend_leases(held: Sequence[tuple[int, int]], lease: timedelta) -> Call[set[int]]:
    return _batch(statements.EXTEND_LEASE_MANY, held, {"lease": lease, "lock_timeout": None})


def extend_leases_with_progress(
    held: Sequence[tuple[int, int, str | None]], lease: timedelta
) -> Call[set[int]]:
    """``held``: ``(job_id, claimed_attempts, progress_json)``, ``None`` for no new progress."""
    params = {
        "lease": lease,
        "lock_timeout": None,
        "batch_ids": [h[0] for h in held],
        "batch_attempts": [h[1] for h in held],
        "batch_progress": [h[2] for h in held],
    }
    stmt = statements.EXTEND_LEASE_MANY_WITH_PROGRESS if held else None
    return Call(stmt, params, _id_set)


def extend_leases_bounded(held: Sequence[tuple[int, int, float, str | None]]) -> Call[set[int]]:
    """``held``: ``(job_id, claimed_attempts, lease_seconds, progress_json)``."""
    params = {
        "lock_timeout": None,
        "batch_ids": [h[0] for h in held],
        "batch_attempts": [h[1] for h in held],
        "batch_lease_seconds": [h[2] for h in held],
        "batch_progress": [h[3] for h in held],
    }
    stmt = statements.EXTEND_LEASE_MANY_BOUNDED if held else None
    return Call(stmt, params, _id_set)


def release_many(held: Sequence[tuple[int, int]]) -> Call[set[int]]:
    return _batch(statements.RELEASE_MANY, held, {"lock_timeout": None})


def _ms(lock_timeout_ms: int | None) -> str | None:
    """A batched statement's ``lock_timeout`` parameter: milliseconds as text, NULL to keep."""
    return None if lock_timeout_ms is None else str(check_int("lock_timeout_ms", lock_timeout_ms))


def settled_among(held: Sequence[tuple[int, int]]) -> Call[dict[int, Settled]]:
    params = _batch_params(held)
    return Call(statements.SETTLED_AMONG if held else None, params, _settled)


#: One failure of a batch: ``(job_id, claimed_attempts, error, retry[, traceback])``.
BatchFailure = tuple[int, int, str, bool] | tuple[int, int, str, bool, str | None]


def fail_many(
    failures: Sequence[BatchFailure],
    base: timedelta,
    cap: timedelta,
    lock_timeout_ms: int | None = None,
) -> Call[dict[int, FailResult]]:
    """``failures`` share one backoff; a traceback (trimmed to the bound) is optional."""
    params = {
        "lock_timeout": _ms(lock_timeout_ms),
        "batch_ids": [f[0] for f in failures],
        "batch_attempts": [f[1] for f in failures],
        "batch_errors": [storable(f[2]) for f in failures],
        "batch_retry": [f[3] for f in failures],
        "batch_tracebacks": [_batch_traceback(f) for f in failures],
        "base_seconds": base.total_seconds(),
        "cap_seconds": cap.total_seconds(),
    }
    return Call(statements.FAIL_MANY if failures else None, params, _fail_results)


def snooze_many(
    snoozes: Sequence[tuple[int, int, timedelta]], lock_timeout_ms: int | None = None
) -> Call[set[int]]:
    """``snoozes``: ``(job_id, claimed_attempts, delay)``, the delays already checked by
    :class:`pgqueue.Snooze`."""
    params = {
        "lock_timeout": _ms(lock_timeout_ms),
        "batch_ids": [s[0] for s in snoozes],
        "batch_attempts": [s[1] for s in snoozes],
        "batch_delays": [s[2].total_seconds() for s in snoozes],
    }
    return Call(statements.SNOOZE_MANY if snoozes else None, params, _id_set)


def _batch_traceback(failure: BatchFailure) -> str | None:
    if len(failure) == 5 and failure[4] is not None:
        return trim_traceback(storable(failure[4]))
    return None


def _batch(
    stmt: Executable, held: Sequence[tuple[int, int]], extra: dict[str, Any]
) -> Call[set[int]]:
    params = {**_batch_params(held), **extra}
    return Call(stmt if held else None, params, _id_set, from_rows=_row_ids)


def _batch_params(held: Sequence[tuple[int, int]]) -> dict[str, Any]:
    return {"batch_ids": [h[0] for h in held], "batch_attempts": [h[1] for h in held]}


def _ids(job_ids: Iterable[int]) -> list[int]:
    if isinstance(job_ids, (str, bytes)) or not isinstance(job_ids, Iterable):
        raise InvalidArgumentTypeError("job_ids", "an iterable of job ids", job_ids)
    return [check_job_id(i) for i in job_ids]


def _guard_params(job_id: int, attempts: int) -> dict[str, Any]:
    return {
        "job_id": check_job_id(job_id),
        "claimed_attempts": check_int("attempts", attempts),
    }


def _executed(result: Result[Any] | None) -> Result[Any]:
    assert result is not None, "only enqueue_many skips the statement"
    return result


def _scalar_int(result: Result[Any] | None) -> int:
    return int(_executed(result).scalar_one())


def _sorted_ids(result: Result[Any] | None) -> list[int]:
    if result is None:
        return []
    # Identity values are drawn in the SELECT's ORDER BY ord, so sorting them restores input order.
    return sorted(result.scalars())


def _inserted_ids(result: Result[Any] | None) -> list[int]:
    return [int(i) for i in _executed(result).scalars()]


def _id_key_rows(result: Result[Any] | None) -> list[Any]:
    return sorted(_executed(result).all(), key=lambda r: r.id)


def _holders(result: Result[Any] | None) -> dict[str, int]:
    return {str(r.unique_key): int(r.id) for r in _executed(result)}


def _id_set(result: Result[Any] | None) -> set[int]:
    return set() if result is None else _row_ids(result)


def _row_ids(rows: Iterable[Any]) -> set[int]:
    return {int(row.id) for row in rows}


def _waiting_for(result: Result[Any] | None) -> dict[int, list[int]]:
    if result is None:
        return {}
    return {int(row.id): [int(i) for i in row.waiting_for or ()] for row in result}


def _nothing(result: Result[Any] | None) -> None:
    return None


def _cancelled(result: Result[Any] | None) -> list[CancelledJob]:
    if result is None:
        return []
    rows = sorted(result, key=lambda r: r.id)
    return [CancelledJob(id=int(r.id), was_running=bool(r.was_running)) for r in rows]


def _refused() -> list[CancelledJob] | None:
    """A waiting cancel whose row stayed locked: ``None``, told apart from "nothing to cancel"."""
    return None


def _scalar_text(result: Result[Any] | None) -> str:
    return str(_executed(result).scalar_one())


def _settled(result: Result[Any] | None) -> dict[int, Settled]:
    if result is None:
        return {}
    return {
        int(r.id): Settled.CANCELLED if r.cancelled else Settled.DONE_BY_HANDLER for r in result
    }


def _fail_results(result: Result[Any] | None) -> dict[int, FailResult]:
    if result is None:
        return {}
    return {int(row.id): _fail_row(row) for row in result}


def _claimed(result: Result[Any] | None) -> list[ClaimedJob]:
    return claimed_jobs(_executed(result))


class ClaimedBatch(list[ClaimedJob]):
    """The jobs one claim leased, and how many more rows it took and failed as expired
    (``expires_in``): a claim that took ``limit`` rows came back full, however many expired."""

    expired: int = 0
    #: :attr:`expired` by queue (a claim over several queues).
    expired_in: dict[str, int] | None = None
    #: The queues it took rows of (leased or expired), each with the earliest ``run_at`` among
    #: them: where the worker's low-water marks start (:mod:`pgqueue._worker.low_water`).
    oldest_run_at_in: dict[str, datetime] | None = None


def rows_taken(claimed: list[ClaimedJob]) -> int:
    """The rows a claim took: its jobs and those it failed as expired."""
    return len(claimed) + getattr(claimed, "expired", 0)


def oldest_run_at_by_queue(claimed: list[ClaimedJob]) -> dict[str, datetime]:
    """:attr:`ClaimedBatch.oldest_run_at_in` (empty for a plain list: a test's claim seam)."""
    return getattr(claimed, "oldest_run_at_in", None) or {}


def claimed_jobs(rows: Iterable[Any]) -> list[ClaimedJob]:
    """The jobs a claim leased, in the claim's order; those it found past their deadline (and
    failed, ``status`` ``failed``) are left out, nobody runs them, and counted in
    :attr:`ClaimedBatch.expired`."""
    # UPDATE ... RETURNING promises no order: restore the claim's order.
    ordered = sorted(rows, key=lambda r: (-r.priority, r.run_at, r.id))
    batch = ClaimedBatch(
        ClaimedJob(
            r.id,
            r.queue,
            r.payload,
            r.attempts,
            r.headers,
            r.priority,
            r.task,
            None if r.timeout is None else r.timeout.total_seconds(),
        )
        for r in ordered
        if r.status != _FAILED
    )
    batch.expired = len(ordered) - len(batch)
    if batch.expired:
        batch.expired_in = {}
        for r in ordered:
            if r.status == _FAILED:
                batch.expired_in[r.queue] = batch.expired_in.get(r.queue, 0) + 1
    oldest: dict[str, datetime] = {}
    for r in ordered:
        seen = oldest.get(r.queue)
        if seen is None or r.run_at < seen:
            oldest[r.queue] = r.run_at
    batch.oldest_run_at_in = oldest
    return batch


_FAILED = JobStatus.FAILED.value


def _matched(result: Result[Any] | None) -> bool:
    return _executed(result).first() is not None


def _fail_result(result: Result[Any] | None) -> FailResult | None:
    row = _executed(result).first()
    return None if row is None else _fail_row(row)


def _fail_row(row: Any) -> FailResult:
    failed = row.status == JobStatus.FAILED.value
    return FailResult(
        id=row.id,
        status=row.status,
        attempts=row.attempts,
        retry_in=None if failed else row.retry_in,
    )


def _reaped(result: Result[Any] | None) -> list[ReapedJob]:
    return [ReapedJob(id=r.id, status=r.status, attempts=r.attempts) for r in _executed(result)]


def _rowcount(result: Result[Any] | None) -> int:
    return int(_executed(result).rowcount)  # type: ignore[attr-defined]


def _job_result(result: Result[Any] | None) -> JobResult | None:
    row = _executed(result).first()
    return None if row is None else _result_of(row)


def _job_results(result: Result[Any] | None) -> dict[int, JobResult]:
    return {int(row.id): _result_of(row) for row in _executed(result)}


def _result_of(row: Any) -> JobResult:
    return JobResult(
        id=int(row.id),
        status=str(row.status),
        value=row.result,
        error=row.last_error,
        progress=row.progress,
        finished_at=row.finished_at,
        task=row.task,
        attempts=int(row.attempts),
        cancelled=bool(row.cancelled),
        expired=bool(row.expired),
        steps=step_values(row.steps),
    )


def step_values(steps: dict[str, Any] | None) -> dict[str, Any]:
    """``jobs.steps`` as :attr:`pgqueue.JobResult.steps` reads it: each step's value and each
    received signal's payload by name, in the order the job reached them (sleeps, and signal
    waits still waiting, have no value)."""
    if not steps:
        return {}
    ordered = sorted(steps.items(), key=lambda item: int(item[1].get("n", 0)))
    return {name: entry.get("value") for name, entry in ordered if "value" in entry}
