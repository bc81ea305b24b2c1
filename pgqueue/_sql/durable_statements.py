"""Core statements of durable jobs: steps, sleeps and signals (``jobs.steps``, ``jobs.signals``,
``jobs.suspended_until``, ``jobs.awaiting_signal``, pgqueue_0019). Pure builders, no I/O.

Every write of a running job is guarded as the lifecycle updates are (id, ``running``, the
claimed attempts): a worker that lost its lease writes nothing. Jobs that use none of this never
run any of them: the claim and the completions are :mod:`pgqueue._sql.statements`' own, unchanged.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from sqlalchemy import (
    ARRAY,
    BigInteger,
    ColumnElement,
    Integer,
    Interval,
    Select,
    Text,
    Update,
    bindparam,
    case,
    cast,
    func,
    literal,
    literal_column,
    null,
    select,
    true,
)
from sqlalchemy.dialects.postgresql import JSONB, TIMESTAMP

from pgqueue._sql.statements import statement_lock_timeout
from pgqueue.models import JobStatus, is_live, jobs_table, status_literal

jobs = jobs_table

_EMPTY_OBJECT = literal_column("'{}'::jsonb", JSONB)


def _guard() -> ColumnElement[bool]:
    """The job is still this attempt's: the guard of every lifecycle update."""
    return (
        (jobs.c.id == bindparam("job_id", type_=BigInteger))
        & jobs.c.status.is_not_distinct_from(status_literal(JobStatus.RUNNING))
        & (jobs.c.attempts == bindparam("claimed_attempts", type_=Integer))
    )


#: What a durable job remembers, read once per attempt at its first step (``job_id``,
#: ``claimed_attempts``): ``steps``, ``signals`` and the database's ``now()``. No row: the job
#: is no longer this attempt's.
DURABLE_STATE: Select[Any] = select(jobs.c.steps, jobs.c.signals, func.now().label("now")).where(
    _guard()
)

_delay = cast(bindparam("delay", None, type_=Interval), Interval)
_name = bindparam("step_name", type_=Text)
_until = func.now() + _delay

#: Record one step, sleep or signal wait under ``step_name``: ``entry_json`` (a JSON object the
#: caller built) merged over what the name held, ``at`` the database's clock when the name is
#: new, and ``until`` = ``now() + delay`` (``until_s``: as seconds since the epoch) when
#: ``delay`` is given (a sleep's wake-up, a wait's timeout). Guarded by the attempt. Returns
#: ``until`` (NULL without a delay); no row when not ours.
RECORD_STEP: Update = (
    jobs.update()
    .where(_guard())
    .values(
        steps=func.coalesce(jobs.c.steps, _EMPTY_OBJECT).op("||")(
            func.jsonb_build_object(
                _name,
                func.jsonb_build_object(literal_column("'at'"), func.now())
                .op("||")(func.coalesce(jobs.c.steps.op("->")(_name), _EMPTY_OBJECT))
                .op("||")(cast(bindparam("entry_json", type_=Text), JSONB))
                .op("||")(
                    case(
                        (_delay.is_(None), _EMPTY_OBJECT),
                        else_=func.jsonb_build_object(
                            literal_column("'until'"),
                            _until,
                            literal_column("'until_s'"),
                            func.extract("epoch", _until),
                        ),
                    )
                ),
            )
        )
    )
    .returning(_until.label("until"))
)

_signal_name = bindparam("signal_name", type_=Text)
# The row as it was, locked first: RETURNING sees the new row, whose awaiting_signal is cleared.
_target = (
    select(
        jobs.c.id,
        (
            (jobs.c.status == status_literal(JobStatus.QUEUED))
            & jobs.c.awaiting_signal.is_not_distinct_from(_signal_name)
        ).label("wakes"),
    )
    .where(jobs.c.id == bindparam("job_id", type_=BigInteger), is_live(jobs.c.status))
    .with_for_update()
    .cte("target")
    .prefix_with("MATERIALIZED")
)
_wakes = _target.c.wakes

#: :func:`pgqueue.signal`: store ``payload_json`` under ``signal_name`` in the job's
#: ``signals`` (``job_id``) when it is live; a queued job awaiting that signal is made ready now
#: (``run_at = now()``, no longer suspended) and its queue's workers are told by ``pg_notify``
#: (``channel``; the payload is the queue, as an enqueue's). Returns ``id, woke``; no row for an
#: unknown or finished job.
SIGNAL: Update = (
    jobs.update()
    .where(jobs.c.id == _target.c.id)
    .values(
        signals=func.coalesce(jobs.c.signals, _EMPTY_OBJECT).op("||")(
            func.jsonb_build_object(
                _signal_name,
                func.jsonb_build_object(
                    literal_column("'payload'"),
                    cast(bindparam("payload_json", type_=Text), JSONB),
                    literal_column("'at'"),
                    func.now(),
                ),
            )
        ),
        run_at=case((_wakes, func.now()), else_=jobs.c.run_at),
        suspended_until=case((_wakes, null()), else_=jobs.c.suspended_until),
        awaiting_signal=case((_wakes, null()), else_=jobs.c.awaiting_signal),
    )
    .returning(
        jobs.c.id,
        _wakes.label("woke"),
        case((_wakes, func.pg_notify(bindparam("channel", type_=Text), jobs.c.queue))).label(
            "notified"
        ),
    )
)

_ids = bindparam("batch_ids", type_=ARRAY(BigInteger))
_attempts = bindparam("batch_attempts", type_=ARRAY(Integer))
_untils = bindparam("batch_until", type_=ARRAY(TIMESTAMP(timezone=True)))
_signals = bindparam("batch_signals", type_=ARRAY(Text))

_suspended = (
    func.unnest(_ids, _attempts, _untils, _signals)
    .table_valued("id", "attempts", "until", "signal")
    .render_derived(name="batch")
)
_mine = (
    select(jobs.c.id, jobs.c.attempts, _suspended.c.until, _suspended.c.signal)
    .select_from(
        jobs.join(
            _suspended,
            (jobs.c.id == _suspended.c.id) & (jobs.c.attempts == _suspended.c.attempts),
        )
    )
    .where(
        jobs.c.status.is_not_distinct_from(status_literal(JobStatus.RUNNING)),
        statement_lock_timeout(),
    )
    .order_by(jobs.c.id)
    .with_for_update(of=jobs)
    .cte("mine")
    .prefix_with("MATERIALIZED")
)
# The signal waited for arrived while the handler ran (after it read ``signals``): ready now.
_arrived = _mine.c.signal.is_not(None) & func.coalesce(
    jobs.c.signals.op("?")(_mine.c.signal), literal_column("false")
)

#: Give a batch of jobs back until their ``batch_until`` (a sleep's wake-up, a signal wait's
#: timeout or the far future), as a snooze does: ``queued``, no lease, one more attempt allowed,
#: ``snoozes`` + 1 (the worker slot and any concurrency slot are freed by the outcome). A job
#: waiting for ``batch_signals`` (NULL: a sleep) records it in ``awaiting_signal``, unless that
#: signal arrived meanwhile: then it is ready now. Guarded by each job's attempts, rows locked in
#: id order (``lock_timeout`` as the worker's other batches). Returns the ids that matched.
SUSPEND_MANY: Update = (
    jobs.update()
    .where(
        jobs.c.id == _mine.c.id,
        jobs.c.status.is_not_distinct_from(status_literal(JobStatus.RUNNING)),
        jobs.c.attempts == _mine.c.attempts,
    )
    .values(
        status=status_literal(JobStatus.QUEUED),
        run_at=case((_arrived, func.now()), else_=_mine.c.until),
        suspended_until=case((_arrived, null()), else_=_mine.c.until),
        awaiting_signal=case((_arrived, null()), else_=_mine.c.signal),
        locked_until=null(),
        max_attempts=jobs.c.max_attempts + 1,
        snoozes=jobs.c.snoozes + 1,
    )
    .returning(jobs.c.id)
)

#: ``reset_steps=True`` of a retry (``job_ids``): the jobs forget their steps, sleeps and waits
#: (the signals received are kept). Run in the retry's transaction, on the ids it requeued.
RESET_STEPS: Update = (
    jobs.update()
    .where(jobs.c.id == func.any(bindparam("job_ids", type_=ARRAY(BigInteger))))
    .values(steps=null(), suspended_until=null(), awaiting_signal=null())
)


@lru_cache(maxsize=8)
def suspended_depth_statement(limit: int) -> Select[Any]:
    """Sleeping and awaiting-signal jobs of each queue in ``:queue_names``, for the metrics'
    gauges: ``queue, sleeping, awaiting_signal``, in one statement. A ``LATERAL`` walk of
    ``jobs_ready_idx`` per queue over its future queued jobs, latest first (a wait without a
    timeout is due at the far future, so it comes first), stopping after ``limit`` rows: the
    counts are capped as the ready depth is, and the cost bounded however many jobs wait.
    """
    queues = (
        func.unnest(bindparam("queue_names", type_=ARRAY(Text)))
        .table_valued("queue")
        .render_derived(name="q")
    )
    future = (
        select(jobs.c.suspended_until, jobs.c.awaiting_signal)
        .where(
            jobs.c.queue == queues.c.queue,
            jobs.c.status == status_literal(JobStatus.QUEUED),
            jobs.c.run_at > func.now(),
        )
        .order_by(jobs.c.run_at.desc())
        .limit(literal(limit, Integer, literal_execute=True))
        .lateral("f")
    )
    suspended = future.c.suspended_until > func.now()
    return (
        select(
            queues.c.queue,
            func.count().filter(suspended & future.c.awaiting_signal.is_(None)).label("sleeping"),
            func.count()
            .filter(suspended & future.c.awaiting_signal.is_not(None))
            .label("awaiting_signal"),
        )
        .select_from(queues.outerjoin(future, true()))
        .group_by(queues.c.queue)
    )


__all__ = [
    "DURABLE_STATE",
    "RECORD_STEP",
    "RESET_STEPS",
    "SIGNAL",
    "SUSPEND_MANY",
    "suspended_depth_statement",
]
