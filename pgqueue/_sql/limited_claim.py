"""The worker's side of flow control (#23): its queues' settings, and the claim of a limited queue.

A queue without limits keeps :func:`pgqueue._sql.statements.claim_statement` untouched (one
statement, no join, no lock of ``jobs_queues``). A queue with a ``concurrency``, ``per_key`` or
``rate`` limit is claimed in one short transaction of three statements, sent in one round trip
(a psycopg pipeline, :meth:`pgqueue._worker.replay.Replay.run_locked`):

1. :data:`LOCK_QUEUE` locks the queue's ``jobs_queues`` row (``FOR UPDATE``): every limited claim
   of the queue, on any worker, waits here for the one before it to commit.
2. :func:`limited_claim_statement` counts and claims. Under READ COMMITTED a statement sees one
   snapshot, taken when it starts; this one starts after the lock was granted, so it sees every
   claim committed before (a lock taken inside the counting statement would not: its snapshot
   would predate the claims it waited for). It counts the queue's ``running`` rows (and, for
   ``per_key``, each key's), claims at most what the limits leave, and moves the rate window in
   the same statement. Nothing is counted outside the rows: a killed worker's jobs stay
   ``running``, and counted, until the reaper requeues them at lease expiry, and no longer.
3. :data:`QUEUE_STATE` reads what the claim left (still paused or limited, how many run, how
   much of the rate window is used and how long it has to go, whether ready jobs remain), so the
   worker knows whether to wait for the limit rather than for new jobs.

Between 1 and 2 the completer may write the completions of this worker's finished jobs of the
queue (:func:`pgqueue._worker.replay.limited_claim_replayed`, ``completing``): the claim, which
starts after them in the same transaction, sees their slots free. They are this worker's own
``running`` rows, so counting them free is exact, and the lock keeps every other claim of the
queue out until the commit.

The rate window is fixed: it starts at the first claim after the previous one ended
(``window_start``, on the database clock) and lasts ``rate_period``; ``window_count`` counts the
jobs claimed in it. At most ``rate_limit`` jobs start in one window; a burst at the end of one
window and another at the start of the next can start ``2 * rate_limit`` within one period.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from functools import lru_cache
from typing import Any

from sqlalchemy import (
    ARRAY,
    Integer,
    Select,
    Text,
    bindparam,
    case,
    exists,
    func,
    literal,
    literal_column,
    null,
    select,
    true,
    union_all,
)

from pgqueue._base.validation import check_positive_int
from pgqueue._sql.calls import Call, claim
from pgqueue._sql.flow_calls import settings_row
from pgqueue._sql.flow_statements import SETTINGS_COLUMNS
from pgqueue._sql.statements import (
    claim_statement,
    claim_values,
    ready_ids,
    ready_levels,
    statement_lock_timeout,
    status_literal,
)
from pgqueue.flow import QueueSettings
from pgqueue.models import JobStatus, jobs_table, queues_table
from pgqueue.results import ClaimedJob

jobs = jobs_table

queues = queues_table

#: ``int`` as the limits' stand-in for "no limit" where a comparison needs a number.
_NO_LIMIT = literal_column("2147483647", Integer)
_ZERO = literal_column("0", Integer)


def _queue() -> Any:
    return bindparam("queue_name", type_=Text)


def _running(*, keyed: bool = False) -> Any:
    """The queue's running jobs (``keyed``: those with a ``concurrency_key``)."""
    where = [jobs.c.queue == _queue(), jobs.c.status == status_literal(JobStatus.RUNNING)]
    if keyed:
        where.append(jobs.c.concurrency_key.is_not(None))
    return select(func.count()).select_from(jobs).where(*where)


def _window_end() -> Any:
    return queues.c.window_start + queues.c.rate_period


def _window_open() -> Any:
    """The rate window still runs: started, and not yet ``rate_period`` old."""
    return queues.c.window_start.is_not(None) & (_window_end() > func.now())


#: The flow settings of the worker's queues (``queue_names``): read at start and about every
#: second after. A queue without a row has no settings. Returns the settings columns
#: (:data:`pgqueue._sql.flow_statements.SETTINGS_COLUMNS`), read into the users' type.
QUEUE_SETTINGS: Select[Any] = select(*SETTINGS_COLUMNS).where(
    queues.c.queue == func.any(bindparam("queue_names", type_=ARRAY(Text)))
)


def _generic_plans() -> Any:
    """``(SELECT set_config('plan_cache_mode', 'force_generic_plan', true)) IS NOT NULL``: true,
    and the statements after it in this transaction run their prepared statements' generic plans.

    For the completions written in the claim's transaction: their batch, a few ids, was planned
    anew at every call (the planner estimates a small array's custom plan cheaper than the
    generic one, whose array size it cannot know), 0.14 ms of a 1.2 ms transaction at
    ``concurrency=4``, for the same plan every time (a probe of ``jobs_pkey`` per id). The
    claim and the read after it ran their generic plans already."""
    name = literal_column("'plan_cache_mode'", Text)
    mode = literal_column("'force_generic_plan'", Text)
    return (
        select(func.set_config(name, mode, literal_column("true"))).scalar_subquery().is_not(None)
    )


#: Step 1: the queue's row, locked until the claim's transaction ends. ``lock_timeout``
#: (milliseconds as text) bounds the wait, set before the lock is taken (a one-time filter);
#: the statements after it run generic plans (:func:`_generic_plans`).
LOCK_QUEUE: Select[Any] = (
    select(queues.c.queue)
    .where(queues.c.queue == _queue(), statement_lock_timeout(), _generic_plans())
    .with_for_update()
)


def _ready_exists() -> Any:
    """A ready job remains: the first of each priority level's range of ``jobs_ready_idx`` (up
    to ``run_at <= now()``), highest level first, read as the claim reads them, not locked.

    A plain ``EXISTS`` over the queue's queued jobs was planned as a sequential scan of ``jobs``
    (the statistics of a full queue say a queued row is found at once) and read every row the
    drain had finished before the first queued one: 0.1 ms at the start of a 20,000-job drain at
    ``concurrency=4``, 1.0 ms at its end, the largest statement of the transaction."""
    levels = ready_levels()
    first = (
        select(jobs.c.id)
        .where(
            jobs.c.queue == _queue(),
            jobs.c.priority == levels.c.level,
            jobs.c.status == status_literal(JobStatus.QUEUED),
            jobs.c.run_at <= func.now(),
        )
        .correlate_except(jobs)
        .order_by(jobs.c.run_at)
        .limit(literal_column("1"))
        .lateral("first_ready")
    )
    return exists(select(first.c.id).select_from(levels.join(first, true())))


#: Step 3: what the claim left. Returns the settings columns, ``running, window_count`` (of the
#: window still open, else 0), ``window_left`` (its seconds to go, NULL when none is open) and
#: ``ready`` (a ready job remains: :func:`_ready_exists`). No row: the queue has no settings.
QUEUE_STATE: Select[Any] = select(
    *SETTINGS_COLUMNS,
    _running().scalar_subquery().label("running"),
    case((_window_open(), queues.c.window_count), else_=0).label("window_count"),
    case(
        (_window_open(), func.extract("epoch", _window_end() - func.now())),
        else_=null(),
    ).label("window_left"),
    _ready_exists().label("ready"),
).where(queues.c.queue == _queue())


def statement_size(limit: int) -> int:
    """The size a limited claim of ``limit`` jobs is compiled for: the next power of two, at
    least 8. The claim takes ``asked`` (a parameter) of them at most, so one compiled statement
    serves every size up to it.

    A limited claim asks for what the worker's window has room for, a different number at
    almost every call (1 to 104 in a ``concurrency=100`` drain), and a statement whose limit is
    written in its text is compiled anew for each: 10-12 compilations of this statement through
    SQLAlchemy per 20,000-job drain, 10-20 ms each on the completer's thread, while the
    queue's claims wait. With sizes rounded up, at most five (8 to 128)."""
    return max(8, 1 << (limit - 1).bit_length())


@lru_cache(maxsize=64)
def limited_claim_statement(limit: int, *, per_key: bool) -> Select[Any]:
    """Step 2: claim up to ``asked`` ready jobs of a limited queue, within its limits; ``limit``
    (:func:`statement_size`) bounds ``asked`` and is written in the text.

    Parameters as :func:`pgqueue._sql.statements.claim_statement` (``queue_name``, ``lease``,
    ``locked_by``), ``asked`` (at most ``limit``), ``free_slots`` (the worker's idle handler
    slots) and ``lane_slots`` (all of them); returns the same columns. The budget is
    ``least(asked, concurrency - running,
    rate_limit - window_count, greatest(free_slots, room / 2, room - lane_slots))`` with ``room =
    concurrency - running`` (a missing limit drops out of ``least``; the last term:
    :func:`_prefetch_bound`), 0 when the queue is paused or has no settings row. ``per_key``
    (the variant for a queue with that limit): each key's ready jobs are
    ranked after its running ones, and only ranks up to ``per_key`` are candidates, so a key
    with a long backlog takes its share and the next keys' first jobs come in the same claim
    (no head-of-line blocking); jobs without a key are not limited by it. That variant probes
    ``jobs_ready_key_idx`` once per key with queued jobs (:func:`_per_key_ids`), never the
    whole backlog; the plain variant walks ``jobs_ready_idx``
    as the unlimited claim does.
    """
    q = queues
    fresh = q.c.rate_limit.is_not(None) & ~_window_open()
    settings = (
        select(
            q.c.concurrency,
            q.c.per_key,
            q.c.rate_limit,
            fresh.label("fresh"),
            q.c.window_count,
            _running().scalar_subquery().label("running"),
        )
        .where(q.c.queue == _queue(), ~q.c.paused)
        .cte("settings")
        .prefix_with("MATERIALIZED")
    )
    limit_literal = literal(limit, Integer, literal_execute=True)
    asked = func.least(bindparam("asked", type_=Integer), limit_literal)
    used = case((settings.c.fresh, _ZERO), else_=settings.c.window_count)
    running = settings.c.running
    budget = func.greatest(
        _ZERO,
        func.least(
            asked,
            settings.c.concurrency - running,
            settings.c.rate_limit - used,
            _prefetch_bound(settings.c.concurrency, running),
        ),
    )
    take = func.coalesce(select(budget).select_from(settings).scalar_subquery(), _ZERO)
    if per_key:
        picked_ids = _per_key_ids(settings, take)
    else:
        picked_ids = select(ready_ids(limit, skip_locked=True, take=take).subquery().c.id)
    picked = picked_ids.cte("picked").prefix_with("MATERIALIZED")
    claimed = (
        jobs.update()
        # = ANY(ARRAY(...)): probes jobs_pkey per id; a join on the CTE, whose row count the
        # planner cannot know (the budget is computed), hash-joined a seq scan of jobs.
        .where(jobs.c.id == func.any(func.array(select(picked.c.id).scalar_subquery())))
        .values(claim_values())
        .returning(*claim_statement(limit).exported_columns)
        .cte("claimed")
    )
    count = select(func.count()).select_from(claimed).scalar_subquery()
    fresh_now = settings_value(settings.c.fresh)
    window = (
        q.update()
        .where(
            q.c.queue == _queue(),
            settings_value(settings.c.rate_limit).is_not(None),
            exists().select_from(claimed),
        )
        .values(
            window_start=case((fresh_now, func.now()), else_=q.c.window_start),
            window_count=case((fresh_now, _ZERO), else_=q.c.window_count) + count,
        )
        .cte("window")
    )
    return select(*claimed.c).add_cte(window)


def _prefetch_bound(concurrency: Any, running: Any) -> Any:
    """What a claim may take of a ``concurrency``-limited queue: the worker's free handler slots
    (``free_slots``: jobs that start at once), and beyond them prefetch into the room the limit
    leaves, as long as the claim leaves behind either half that room or ``lane_slots`` (the
    claiming worker's handler slots: room for another worker like it), whichever is less.

    A prefetched job is ``running`` to every count, so it holds a slot another worker could start
    a job in. Near the limit (room under twice the slots) each claim leaves at least as much room
    as its prefetch took, and none is taken once the room is no more than the idle slots (2
    workers of 4 threads on a limit of 6 run 4 and 2, neither prefetching). Far from it a worker
    keeps only one worker's slots free: a lone worker of 4 on ``concurrency=100`` claims 96, as
    deep as on an unlimited queue, where halving the room made every claim half as big (0.56x
    the unlimited drain). NULL (no bound) for a queue without a ``concurrency`` limit."""
    free = bindparam("free_slots", type_=Integer)
    slots = bindparam("lane_slots", type_=Integer)
    room = concurrency - running
    half_room = room // literal_column("2", Integer)
    return case((concurrency.is_(None), null()), else_=func.greatest(free, half_room, room - slots))


def settings_value(column: Any) -> Any:
    """``(SELECT column FROM settings)``: one value of the one-row CTE, without a join."""
    return select(column).scalar_subquery()


#: How many ready jobs of a ``per_key`` queue, in claim order, a claim looks through for jobs
#: without a key (the keyed ones are found per key, through ``jobs_ready_key_idx``).
UNKEYED_LOOKAHEAD = 1000


def _ready_key_heads() -> Any:
    """Every key with a queued job in the queue and that key's first queued job in claim order:
    ``ready_keys(value, id, priority, run_at)``, each row found by one probe of
    ``jobs_ready_key_idx`` (a loose index scan whose step reads the next key's first entry whole):
    the claim's cost follows the keys, not the backlog, and a key whose first job is all it may
    take needs no probe of its own (:func:`_per_key_ids`)."""
    where = (
        jobs.c.queue == _queue(),
        jobs.c.status == status_literal(JobStatus.QUEUED),
        jobs.c.concurrency_key.is_not(None),
    )
    order = (jobs.c.concurrency_key, jobs.c.priority.desc(), jobs.c.run_at, jobs.c.id)
    one: Any = literal_column("1")

    def head(*after: Any) -> Select[Any]:
        return (
            select(jobs.c.concurrency_key.label("value"), jobs.c.id, jobs.c.priority, jobs.c.run_at)
            .where(*where, *after)
            .order_by(*order)
            .limit(one)
        )

    heads = head().cte("ready_keys", recursive=True)
    following = head(jobs.c.concurrency_key > heads.c.value).lateral("next_key")
    return heads.union_all(
        select(
            following.c.value, following.c.id, following.c.priority, following.c.run_at
        ).select_from(heads.join(following, true()))
    )


def _ahead() -> Any:
    """The first :data:`UNKEYED_LOOKAHEAD` ready jobs of the queue in claim order, read as the
    plain claim reads them (a range of ``jobs_ready_idx`` per priority level, under one
    limit), not locked: where a ``per_key`` claim looks for jobs without a key."""
    lookahead: Any = literal_column(str(UNKEYED_LOOKAHEAD))
    levels = ready_levels()
    level = (
        select(jobs.c.id, jobs.c.priority, jobs.c.run_at, jobs.c.concurrency_key)
        .where(
            jobs.c.queue == _queue(),
            jobs.c.priority == levels.c.level,
            jobs.c.status == status_literal(JobStatus.QUEUED),
            jobs.c.run_at <= func.now(),
        )
        .order_by(jobs.c.run_at)
        .limit(lookahead)
        .lateral("level_ahead")
    )
    return (
        select(level.c.id, level.c.priority, level.c.run_at, level.c.concurrency_key)
        .select_from(levels.join(level, true()))
        .limit(lookahead)
        .subquery("ahead")
    )


def _per_key_ids(settings: Any, take: Any) -> Select[Any]:
    """Ready ids within ``per_key``, in claim order, at most ``take``, locked (SKIP LOCKED).

    Per key with queued jobs (:func:`_ready_key_heads`), its first ``per_key - running`` ready
    jobs (a range of ``jobs_ready_key_idx``; with room for one, the key's first job when it is
    ready, read by the loose scan: ``per_key=1`` over 100 keys, 2.0 ms against 2.5-3.7 ms per
    claim of 100 with a probe per key), so a key with a long backlog takes its share and the
    next keys' first jobs come in the same claim; jobs without a key from the first
    :data:`UNKEYED_LOOKAHEAD` ready jobs of the queue (``jobs_ready_idx``). No claim reads
    the whole backlog."""
    per_key = func.coalesce(settings_value(settings.c.per_key), _NO_LIMIT)
    held = (
        select(jobs.c.concurrency_key, func.count().label("running"))
        .where(
            jobs.c.queue == _queue(),
            jobs.c.status == status_literal(JobStatus.RUNNING),
            jobs.c.concurrency_key.is_not(None),
        )
        .group_by(jobs.c.concurrency_key)
        .cte("held")
        .prefix_with("MATERIALIZED")
    )
    keys = _ready_key_heads()
    # At most the claim's budget per key too: a key's backlog is never read past it.
    room = func.least(take, func.greatest(_ZERO, per_key - func.coalesce(held.c.running, _ZERO)))
    ready = (jobs.c.status == status_literal(JobStatus.QUEUED), jobs.c.run_at <= func.now())
    order = (jobs.c.priority.desc(), jobs.c.run_at, jobs.c.id)
    of_key = (
        select(jobs.c.id, jobs.c.priority, jobs.c.run_at)
        .where(jobs.c.queue == _queue(), jobs.c.concurrency_key == keys.c.value, *ready)
        .order_by(*order)
        .limit(room)
        .lateral("of_key")
    )
    with_held = keys.outerjoin(held, held.c.concurrency_key == keys.c.value)
    # Room for one, and the key's first job is ready: that job is the key's share, found by the
    # loose scan already (per_key=1 probes no key twice).
    head_only = (room == literal_column("1", Integer)) & (keys.c.run_at <= func.now())
    heads = (
        select(keys.c.id, keys.c.priority, keys.c.run_at)
        .select_from(with_held)
        .where(keys.c.value.is_not(None), head_only)
    )
    probed = (
        select(of_key.c.id, of_key.c.priority, of_key.c.run_at)
        .select_from(with_held.join(of_key, true()))
        .where(keys.c.value.is_not(None), ~head_only)
    )
    keyed = union_all(heads, probed)
    ahead = _ahead()
    unkeyed = select(ahead.c.id, ahead.c.priority, ahead.c.run_at).where(
        ahead.c.concurrency_key.is_(None)
    )
    candidates = union_all(keyed, unkeyed).cte("candidates").prefix_with("MATERIALIZED")
    chosen = (
        select(candidates.c.id)
        .order_by(candidates.c.priority.desc(), candidates.c.run_at, candidates.c.id)
        .limit(take)
    )
    return (
        select(jobs.c.id)
        .where(
            jobs.c.id == func.any(func.array(chosen.scalar_subquery())),
            jobs.c.status == status_literal(JobStatus.QUEUED),
        )
        .with_for_update(skip_locked=True)
    )


# -- as calls --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClaimState:
    """What a limited claim left: the queue's settings then, and whether it is at a limit."""

    flow: QueueSettings
    #: The claim stopped at a limit while ready jobs remain: wait for a job to finish (or
    #: ``wait`` seconds, for a spent rate window) rather than for a new job.
    at_limit: bool
    #: Seconds until the rate window ends, when the window's budget is spent; else ``None``.
    wait: float | None = None
    #: Ready jobs remain after the claim.
    ready: bool = False


def queue_settings(queues_of_worker: Sequence[str]) -> Call[dict[str, QueueSettings]]:
    """The settings of ``queues_of_worker`` (a queue without a row is absent: unlimited)."""
    return Call(
        QUEUE_SETTINGS,
        {"queue_names": list(queues_of_worker)},
        lambda result: _settings(result.all() if result is not None else []),
        from_rows=_settings,
    )


def _settings(rows: Iterable[Any]) -> dict[str, QueueSettings]:
    return {r.queue: settings_row(r) for r in rows}


def lock_queue(queue: str, lock_timeout_ms: int) -> Call[None]:
    return Call(
        LOCK_QUEUE,
        {"queue_name": queue, "lock_timeout": str(lock_timeout_ms)},
        lambda result: None,
        from_rows=lambda rows: None,
    )


def limited_claim(
    queue: str,
    limit: int,
    lease: timedelta,
    locked_by: str | None,
    *,
    per_key: bool,
    free_slots: int,
    lane_slots: int,
) -> Call[list[ClaimedJob]]:
    """:func:`pgqueue._sql.calls.claim`'s parameters (validated there), the limited statement;
    ``free_slots`` and ``lane_slots``: the worker's idle handler slots and all of them, of the
    lane it claims for (:func:`_prefetch_bound`)."""
    size = statement_size(check_positive_int("limit", limit))
    plain = claim(queue, size, lease, locked_by)
    return Call(
        limited_claim_statement(size, per_key=per_key),
        {**plain.params, "asked": limit, "free_slots": free_slots, "lane_slots": lane_slots},
        plain.finish,
        from_rows=plain.from_rows,
    )


def queue_state(queue: str) -> Call[ClaimState]:
    def state(rows: Iterable[Any]) -> ClaimState:
        return _state(queue, rows)

    return Call(
        QUEUE_STATE,
        {"queue_name": queue},
        lambda result: state(result.all() if result is not None else []),
        from_rows=state,
    )


def _state(queue: str, rows: Iterable[Any]) -> ClaimState:
    row = next(iter(rows), None)
    if row is None:
        return ClaimState(QueueSettings(queue), at_limit=False)
    flow = settings_row(row)
    rate_spent = row.rate_limit is not None and row.window_count >= row.rate_limit
    full = row.concurrency is not None and row.running >= row.concurrency
    # per_key: ready jobs left after a claim that took fewer than asked are of keys at their limit.
    at_limit = bool(row.ready) and (rate_spent or full or row.per_key is not None)
    wait = float(row.window_left) if rate_spent and row.window_left is not None else None
    return ClaimState(flow, at_limit=at_limit and not flow.paused, wait=wait, ready=bool(row.ready))
