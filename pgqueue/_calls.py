"""The repository functions as data: validated parameters, a statement and a row mapper.

Every public function of :mod:`pgqueue.repository` and its twin in :mod:`pgqueue.aio` builds one
:class:`Call` here and runs it, so the sync and the async function differ only by ``await``:
validation, parameter building and row mapping exist once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Generic, TypeVar

from sqlalchemy import Executable, Result

from pgqueue import statements
from pgqueue._validation import (
    check_duration,
    check_int,
    check_positive_int,
    check_queue,
    check_schedule,
    encode_headers,
    encode_payload,
    encode_payloads,
)
from pgqueue.errors import InvalidArgumentError, InvalidArgumentTypeError
from pgqueue.models import JobStatus
from pgqueue.results import CancelledJob, ClaimedJob, FailResult, ReapedJob, Settled
from pgqueue.schema import CANCEL_HINT

T = TypeVar("T")


@dataclass(frozen=True)
class Call(Generic[T]):
    """One statement to execute with its parameters, and how to turn its result into ``T``.

    ``statement`` is ``None`` when the answer is known without SQL (an empty batch): the runner
    then calls ``finish(None)``.
    """

    statement: Executable | None
    params: dict[str, Any]
    finish: Callable[[Result[Any] | None], T]


def enqueue(
    payload: Any,
    queue: str,
    run_at: datetime | None,
    delay: timedelta | None,
    max_attempts: int,
    headers: Mapping[str, str] | None = None,
) -> Call[int]:
    params = _insert_params(queue, run_at, delay, max_attempts, headers)
    params["payload_json"] = encode_payload(payload)
    return Call(statements.ENQUEUE, params, _scalar_int)


def enqueue_many(
    payloads: Iterable[Any],
    queue: str,
    run_at: datetime | None,
    delay: timedelta | None,
    max_attempts: int,
    headers: Mapping[str, str] | None = None,
) -> Call[list[int]]:
    params = _insert_params(queue, run_at, delay, max_attempts, headers)
    params["payloads"] = encode_payloads(payloads)
    return Call(statements.ENQUEUE_MANY if params["payloads"] else None, params, _sorted_ids)


def _insert_params(
    queue: str,
    run_at: datetime | None,
    delay: timedelta | None,
    max_attempts: int,
    headers: Mapping[str, str] | None,
) -> dict[str, Any]:
    at, after = check_schedule(run_at, delay)
    return {
        "queue_name": check_queue(queue),
        "due_at": at,
        "delay": after,
        "attempt_budget": check_positive_int("max_attempts", max_attempts),
        "headers_json": encode_headers(headers),
    }


def claim(queue: str, limit: int, lease: timedelta) -> Call[list[ClaimedJob]]:
    stmt = statements.claim_statement(check_positive_int("limit", limit))
    params = {
        "queue_name": check_queue(queue),
        "lease": check_duration("lease", lease, allow_zero=False),
    }
    return Call(stmt, params, _claimed)


def complete(job_id: int, attempts: int) -> Call[bool]:
    return Call(statements.COMPLETE, _guard_params(job_id, attempts), _matched)


def extend_lease(job_id: int, attempts: int, lease: timedelta) -> Call[bool]:
    lease = check_duration("lease", lease, allow_zero=False)
    return Call(
        statements.EXTEND_LEASE, {**_guard_params(job_id, attempts), "lease": lease}, _matched
    )


def fail(
    job_id: int, attempts: int, error: str, retry: bool, base: timedelta, cap: timedelta
) -> Call[FailResult | None]:
    params = {
        "error": error if isinstance(error, str) else str(error),
        "retry": bool(retry),
        "base_seconds": check_duration("base", base, allow_zero=True).total_seconds(),
        "cap_seconds": check_duration("cap", cap, allow_zero=True).total_seconds(),
    }
    return Call(statements.FAIL, {**params, **_guard_params(job_id, attempts)}, _fail_result)


def reap_expired() -> Call[list[ReapedJob]]:
    return Call(statements.REAP_EXPIRED, {}, _reaped)


def purge_done(
    older_than: timedelta, batch_size: int, status: JobStatus = JobStatus.DONE
) -> Call[int]:
    if status not in (JobStatus.DONE, JobStatus.FAILED):
        raise InvalidArgumentError("status", f"only done or failed jobs are purged, got {status}")
    params = {
        "older_than": check_duration("older_than", older_than, allow_zero=True),
        "batch_size": check_positive_int("batch_size", batch_size),
    }
    return Call(statements.purge_statement(status), params, _rowcount)


def retry(job_ids: Iterable[int], attempts: int) -> Call[list[int]]:
    params = {
        "job_ids": _ids(job_ids),
        "extra_attempts": check_positive_int("attempts", attempts),
    }
    return Call(statements.retry_statement() if params["job_ids"] else None, params, _sorted_ids)


def retry_failed(queue: str | None, attempts: int) -> Call[list[int]]:
    params = {
        "queue_name": None if queue is None else check_queue(queue),
        "extra_attempts": check_positive_int("attempts", attempts),
    }
    return Call(statements.retry_statement(all_failed=True), params, _sorted_ids)


def cancel(job_ids: Iterable[int], channel: str) -> Call[list[CancelledJob]]:
    params = {"job_ids": _ids(job_ids), "channel": channel, "notify_payload": CANCEL_HINT}
    return Call(statements.CANCEL if params["job_ids"] else None, params, _cancelled)


def set_local_lock_timeout(milliseconds: int) -> Call[None]:
    ms = check_positive_int("lock_timeout", milliseconds)
    return Call(statements.SET_LOCAL_LOCK_TIMEOUT, {"lock_timeout": str(ms)}, _nothing)


# -- batched lifecycle: the worker's completer, heartbeat and shutdown ---------------------------
#
# ``held`` is a sequence of ``(job_id, claimed_attempts)``; each returns what matched. The values
# come from claims, not from users: they are not validated again on the hot path.


def complete_many(held: Sequence[tuple[int, int]]) -> Call[set[int]]:
    return _batch(statements.COMPLETE_MANY, held, {})


def extend_leases(held: Sequence[tuple[int, int]], lease: timedelta) -> Call[set[int]]:
    return _batch(statements.EXTEND_LEASE_MANY, held, {"lease": lease})


def release_many(held: Sequence[tuple[int, int]]) -> Call[set[int]]:
    return _batch(statements.RELEASE_MANY, held, {})


def settled_among(held: Sequence[tuple[int, int]]) -> Call[dict[int, Settled]]:
    params = _batch_params(held)
    return Call(statements.SETTLED_AMONG if held else None, params, _settled)


def fail_many(
    failures: Sequence[tuple[int, int, str, bool]], base: timedelta, cap: timedelta
) -> Call[dict[int, FailResult]]:
    """``failures``: ``(job_id, claimed_attempts, error, retry)``, sharing one backoff."""
    params = {
        "batch_ids": [f[0] for f in failures],
        "batch_attempts": [f[1] for f in failures],
        "batch_errors": [f[2] for f in failures],
        "batch_retry": [f[3] for f in failures],
        "base_seconds": base.total_seconds(),
        "cap_seconds": cap.total_seconds(),
    }
    return Call(statements.FAIL_MANY if failures else None, params, _fail_results)


def _batch(
    stmt: Executable, held: Sequence[tuple[int, int]], extra: dict[str, Any]
) -> Call[set[int]]:
    return Call(stmt if held else None, {**_batch_params(held), **extra}, _id_set)


def _batch_params(held: Sequence[tuple[int, int]]) -> dict[str, Any]:
    return {"batch_ids": [h[0] for h in held], "batch_attempts": [h[1] for h in held]}


def _ids(job_ids: Iterable[int]) -> list[int]:
    if isinstance(job_ids, (str, bytes)) or not isinstance(job_ids, Iterable):
        raise InvalidArgumentTypeError("job_ids", "an iterable of job ids", job_ids)
    return [check_int("job_id", i) for i in job_ids]


def _guard_params(job_id: int, attempts: int) -> dict[str, Any]:
    return {
        "job_id": check_int("job_id", job_id),
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


def _id_set(result: Result[Any] | None) -> set[int]:
    return set() if result is None else {int(row.id) for row in result}


def _nothing(result: Result[Any] | None) -> None:
    return None


def _cancelled(result: Result[Any] | None) -> list[CancelledJob]:
    if result is None:
        return []
    rows = sorted(result, key=lambda r: r.id)
    return [CancelledJob(id=int(r.id), was_running=bool(r.was_running)) for r in rows]


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
    # UPDATE ... RETURNING promises no order: restore the claim's run_at order.
    ordered = sorted(_executed(result), key=lambda r: (r.run_at, r.id))
    return [ClaimedJob(r.id, r.queue, r.payload, r.attempts, r.headers) for r in ordered]


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
