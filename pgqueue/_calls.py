"""The repository functions as data: validated parameters, a statement and a row mapper.

Every public function of :mod:`pgqueue.repository` and its twin in :mod:`pgqueue.aio` builds one
:class:`Call` here and runs it, so the sync and the async function differ only by ``await``:
validation, parameter building and row mapping exist once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
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
from pgqueue.models import JobStatus
from pgqueue.results import ClaimedJob, FailResult, ReapedJob

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
    params = {
        "older_than": check_duration("older_than", older_than, allow_zero=True),
        "batch_size": check_positive_int("batch_size", batch_size),
    }
    return Call(statements.purge_statement(status), params, _rowcount)


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


def _claimed(result: Result[Any] | None) -> list[ClaimedJob]:
    # UPDATE ... RETURNING promises no order: restore the claim's run_at order.
    ordered = sorted(_executed(result), key=lambda r: (r.run_at, r.id))
    return [ClaimedJob(r.id, r.queue, r.payload, r.attempts, r.headers) for r in ordered]


def _matched(result: Result[Any] | None) -> bool:
    return _executed(result).first() is not None


def _fail_result(result: Result[Any] | None) -> FailResult | None:
    row = _executed(result).first()
    if row is None:
        return None
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
