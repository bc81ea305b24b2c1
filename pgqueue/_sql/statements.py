"""Core statements of the queue: pure builders, no I/O.

Each shape is built once (module constants, or cached per batch size) so SQLAlchemy's compiled
cache and the driver's prepared statements are reused. Status comparisons are rendered as SQL
literals, not bound parameters: under a generic plan the planner can only use a partial index
(``WHERE status = 'queued'``) when it sees the same literal in the query.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from sqlalchemy import (
    ARRAY,
    JSON,
    BigInteger,
    Boolean,
    ColumnElement,
    Delete,
    Float,
    Insert,
    Integer,
    Interval,
    Select,
    SmallInteger,
    Text,
    Update,
    any_,
    bindparam,
    case,
    cast,
    delete,
    func,
    insert,
    literal,
    literal_column,
    null,
    select,
    text,
    true,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.sql.expression import column

from pgqueue._base.validation import MAX_INT32, MAX_PRIORITY, MIN_PRIORITY
from pgqueue.models import (
    JOB_RESULT_COLUMNS,
    LIVE_KEY_SQL,
    JobStatus,
    is_live,
    jobs_table,
    status_literal,
)

jobs = jobs_table

#: ``last_error`` of a cancelled job (:data:`CANCEL`). What tells a cancelled job is
#: ``cancelled_at IS NOT NULL`` (pgqueue_0010), never this text: a handler may fail with it too.
CANCELLED_ERROR = "cancelled"

#: Largest exponent of the backoff: keeps ``base * 2^attempts`` finite for any attempt count.
_MAX_BACKOFF_EXPONENT = 60


def _still_running() -> ColumnElement[bool]:
    """``status IS NOT DISTINCT FROM 'running'``: the same test as ``= 'running'`` (``status`` is
    NOT NULL), spelled so that it does not imply the predicate of the partial ``jobs_lease_idx``.
    Statistics taken while the jobs were ``queued`` make that index look empty, and a guarded
    update then scanned every running job instead of probing ``jobs_pkey`` by id.
    """
    return jobs.c.status.is_not_distinct_from(status_literal(JobStatus.RUNNING))


def _guard() -> ColumnElement[bool]:
    """The guard of every lifecycle update: the job is still ours (R10-R14)."""
    return (
        (jobs.c.id == bindparam("job_id", type_=BigInteger))
        & _still_running()
        & (jobs.c.attempts == bindparam("claimed_attempts", type_=Integer))
    )


def _schedule() -> ColumnElement[Any]:
    """``coalesce(:run_at, now() + :delay)``: one statement shape for "now", a delay or a time."""
    return func.coalesce(
        bindparam("due_at", type_=jobs.c.run_at.type),
        func.now() + bindparam("delay", type_=Interval),
    )


def _lease_end() -> ColumnElement[Any]:
    return func.now() + bindparam("lease", type_=Interval)


# -- enqueue -------------------------------------------------------------------------------------


def _headers() -> ColumnElement[Any]:
    """``:headers_json::jsonb``: the job's headers as JSON text, ``NULL`` for none."""
    return cast(bindparam("headers_json", type_=Text), JSONB)


def _priority() -> ColumnElement[Any]:
    return bindparam("priority_level", type_=SmallInteger)


def _task() -> ColumnElement[Any]:
    """``:task_name``: the task whose call the job is (:class:`pgqueue.Task`), ``NULL`` (the
    default when the parameter is not given) for a queue-keyed job."""
    return bindparam("task_name", None, type_=Text)


def _time_bounds() -> dict[str, ColumnElement[Any]]:
    """``:timeout`` and ``:expires_in`` (pgqueue_0015), intervals, ``NULL`` (the default when
    the parameter is not given) for no bound."""
    return {
        "timeout": bindparam("timeout", None, type_=Interval),
        "expires_in": bindparam("expires_in", None, type_=Interval),
    }


def _one_job() -> dict[str, ColumnElement[Any]]:
    """The VALUES of a single enqueue, shared by the plain and the unique one."""
    return {
        "queue": bindparam("queue_name", type_=Text),
        "payload": cast(bindparam("payload_json", type_=Text), JSONB),
        "run_at": _schedule(),
        "max_attempts": bindparam("attempt_budget", type_=Integer),
        "headers": _headers(),
        "priority": _priority(),
        "task": _task(),
        **_time_bounds(),
    }


ENQUEUE: Insert = insert(jobs).values(_one_job()).returning(jobs.c.id)


def _concurrency_key() -> ColumnElement[Any]:
    return bindparam("concurrency_key", type_=Text)


#: ENQUEUE of a job with a ``concurrency_key`` (parameter ``concurrency_key``): a job without one
#: keeps ENQUEUE's statement and its prepared plan.
ENQUEUE_KEYED: Insert = (
    insert(jobs).values({**_one_job(), "concurrency_key": _concurrency_key()}).returning(jobs.c.id)
)

#: The predicate of ``jobs_unique_key_idx`` (:data:`pgqueue.models.LIVE_KEY_SQL`), as the index
#: spells it: the arbiter of ``ON CONFLICT`` and the key lookups must match it for the planner.
LIVE_KEY = text(LIVE_KEY_SQL)

#: ENQUEUE with ``unique_key``: inserts nothing while a live job of the queue holds the key
#: (a concurrent enqueue of the same key waits for the first transaction to end). Returns ``id``
#: of an inserted job, else no row.
ENQUEUE_UNIQUE: Insert = (
    pg_insert(jobs)
    .values({**_one_job(), "unique_key": bindparam("key", type_=Text)})
    .on_conflict_do_nothing(index_elements=["queue", "unique_key"], index_where=LIVE_KEY)
    .returning(jobs.c.id)
)

#: ENQUEUE_UNIQUE with a ``concurrency_key``.
ENQUEUE_UNIQUE_KEYED: Insert = (
    pg_insert(jobs)
    .values(
        {
            **_one_job(),
            "unique_key": bindparam("key", type_=Text),
            "concurrency_key": _concurrency_key(),
        }
    )
    .on_conflict_do_nothing(index_elements=["queue", "unique_key"], index_where=LIVE_KEY)
    .returning(jobs.c.id)
)


def _batch_insert(*keys: str) -> Any:
    """``INSERT ... SELECT`` over ``jsonb_array_elements(:batch_json) WITH ORDINALITY``; ``ORDER BY
    ord`` draws the identity values in input order.

    The whole batch travels as one JSON array text, parsed by the server in one go: a ``text[]``
    of 1,000 payloads cost a third of ``enqueue_many``'s time in the driver's escaping of each
    element (profiled), and the JSON text is ~30% faster end to end. Each element is a payload;
    with ``keys`` (the ``unique_key`` column) it is a ``[payload, key]`` pair, the key a string or
    ``null``; with ``unique_key`` and ``concurrency_key`` it is ``[payload, unique key,
    concurrency key]``, in the order of ``keys``.
    """
    batch = (
        func.jsonb_array_elements(cast(bindparam("batch_json", type_=Text), JSONB))
        .table_valued(column("element", JSONB), with_ordinality="ord")
        .render_derived(name="batch")
    )
    element = batch.c.element
    payload = element.op("->")(literal_column("0")) if keys else element
    bounds = _time_bounds()
    columns = [
        "queue",
        "payload",
        "run_at",
        "max_attempts",
        "headers",
        "priority",
        "task",
        *bounds,
        *keys,
    ]
    rows = select(
        bindparam("queue_name", type_=Text),
        payload,
        _schedule(),
        bindparam("attempt_budget", type_=Integer),
        _headers(),
        _priority(),
        _task(),
        *bounds.values(),
        *(element.op("->>")(literal_column(str(place))) for place in range(1, len(keys) + 1)),
    ).order_by(batch.c.ord)
    return (pg_insert(jobs) if keys else insert(jobs)).from_select(columns, rows)


#: One round trip for a whole batch, ids in input order.
ENQUEUE_MANY: Insert = _batch_insert().returning(jobs.c.id)

#: ENQUEUE_MANY with one key (or NULL) per payload: a row whose key a live job holds, or an
#: earlier row of the same batch, is skipped. Returns ``id, unique_key`` of the inserted rows
#: (ids in input order, as ENQUEUE_MANY).
ENQUEUE_MANY_UNIQUE: Insert = (
    _batch_insert("unique_key")
    .on_conflict_do_nothing(index_elements=["queue", "unique_key"], index_where=LIVE_KEY)
    .returning(jobs.c.id, jobs.c.unique_key)
)

#: ENQUEUE_MANY with one ``concurrency_key`` (or NULL) per payload: each element is ``[payload,
#: key]``.
ENQUEUE_MANY_KEYED: Insert = _batch_insert("concurrency_key").returning(jobs.c.id)

#: ENQUEUE_MANY_UNIQUE with a ``concurrency_key`` per payload: each element is ``[payload,
#: unique key, concurrency key]``.
ENQUEUE_MANY_UNIQUE_KEYED: Insert = (
    _batch_insert("unique_key", "concurrency_key")
    .on_conflict_do_nothing(index_elements=["queue", "unique_key"], index_where=LIVE_KEY)
    .returning(jobs.c.id, jobs.c.unique_key)
)

#: The live job holding each of ``keys`` in the queue. Returns ``id, unique_key``.
KEY_HOLDERS: Select[Any] = select(jobs.c.id, jobs.c.unique_key).where(
    jobs.c.queue == bindparam("queue_name", type_=Text),
    jobs.c.unique_key == func.any(bindparam("keys", type_=ARRAY(Text))),
    LIVE_KEY,
)


# -- claim -----------------------------------------------------------------------------------------


def loose_index_scan(column: Any, *where: ColumnElement[bool], name: str) -> Any:
    """A recursive CTE ``name(value)`` of the distinct non-NULL values of ``column`` among the
    rows matching ``where``, each found by one probe of an index that leads with ``column``
    (PostgreSQL before 18 cannot skip-scan one): the cost follows the values, not the rows."""
    one: Any = literal_column("1")
    first = select(column).where(*where).order_by(column).limit(one)
    found = select(first.scalar_subquery().label("value")).cte(name, recursive=True)
    following = (
        select(column)
        .where(*where, column > found.c.value)
        .order_by(column)
        .limit(one)
        .scalar_subquery()
    )
    return found.union_all(select(following.label("value")).where(found.c.value.is_not(None)))


def _queue_name() -> ColumnElement[Any]:
    return bindparam("queue_name", type_=Text)


def ready_levels(
    queue: ColumnElement[Any] | None = None, since: ColumnElement[Any] | None = None
) -> Any:
    """The priority levels of queue ``:queue_name`` (or of the column ``queue``: one queue of
    a claim over several) to read, highest first (``levels.level``).

    From the queue's highest queued priority (any run_at) down: one backward probe of the
    index's first entries, so a queue whose jobs all have the default priority scans one level.
    With ``since`` (a claim over several queues, each with its low-water mark or NULL), a queue
    with a mark reads every level instead, as :func:`ready_ids` explains; the probe runs only
    for the queues without one.
    """
    queue = _queue_name() if queue is None else queue
    top: ColumnElement[Any] = (
        select(func.coalesce(func.max(jobs.c.priority), literal_column(str(MIN_PRIORITY))))
        .where(
            jobs.c.queue == queue,
            jobs.c.status == status_literal(JobStatus.QUEUED),
        )
        .correlate_except(jobs)
        .scalar_subquery()
    )
    if since is not None:
        top = case((since.is_(None), top), else_=literal_column(str(MAX_PRIORITY)))
    return (
        func.generate_series(top, literal_column(str(MIN_PRIORITY)), literal_column("-1"))
        .table_valued("level")
        .render_derived(name="levels")
    )


def _every_level() -> Any:
    """All priority levels, highest first (``levels.level``): no probe of the index."""
    return (
        func.generate_series(
            literal_column(str(MAX_PRIORITY)),
            literal_column(str(MIN_PRIORITY)),
            literal_column("-1"),
        )
        .table_valued("level")
        .render_derived(name="levels")
    )


def ready_ids(
    limit: int,
    *,
    skip_locked: bool,
    take: ColumnElement[Any] | None = None,
    since: bool | ColumnElement[Any] = False,
    queue: ColumnElement[Any] | None = None,
) -> Any:
    """Up to ``limit`` ready ids, highest priority first, oldest ``run_at`` first within one.

    ``take`` (an expression) cuts the outer limit below ``limit``: the limited claim of a queue
    with flow limits (:mod:`pgqueue._sql.limited_claim`) passes its budget, computed in the
    statement. Only the rows taken are locked (each level's LockRows runs as the outer Limit pulls).

    One bounded range scan of ``jobs_ready_idx`` per priority level, from the queue's highest
    queued priority down to 0 (a ``LATERAL`` subquery per level, each Limit over LockRows over an
    index scan, under one outer Limit that stops once it has ``limit`` rows): a level's future
    jobs (``run_at > now()``) end its scan, so a backlog of retries or delayed jobs at a high
    priority is never walked, as a single scan of ``(queue, priority, run_at)`` would walk it.

    ``since`` (parameter ``since``, the worker's low-water mark, :mod:`pgqueue._worker.low_water`)
    starts each level's range at ``run_at >= :since``, past the entries of jobs claimed before
    it, which a pinned xmin horizon keeps in the index. It reads every level, 9 down to 0, each
    one index descent, instead of probing for the highest: that probe reads the queue's range
    backwards from its newest entry, and when no job is queued it walks every such entry. A
    column for ``since`` (with ``queue``, a claim over several queues): each queue's own mark,
    NULL for a full read.
    """
    queue = _queue_name() if queue is None else queue
    mark: ColumnElement[Any] | None = None
    if isinstance(since, ColumnElement):
        levels = ready_levels(queue, since)
        mark = func.coalesce(since, literal_column("'-infinity'::timestamptz"))
    elif since:
        levels = _every_level()
        mark = bindparam("since", type_=jobs.c.run_at.type)
    else:
        levels = ready_levels(queue)
    limit_literal = literal(limit, Integer, literal_execute=True)
    ready = [
        jobs.c.queue == queue,
        jobs.c.priority == levels.c.level,
        jobs.c.status == status_literal(JobStatus.QUEUED),
        jobs.c.run_at <= func.now(),
    ]
    if mark is not None:
        ready.append(jobs.c.run_at >= mark)
    level = (
        select(jobs.c.id)
        .where(*ready)
        .correlate_except(jobs)
        .order_by(jobs.c.run_at)
        # Inline LIMIT: with a bound one the generic plan hash-joins over a seq scan of jobs.
        .limit(limit_literal)
        .with_for_update(skip_locked=skip_locked)
        .lateral("ready")
    )
    outer = limit_literal if take is None else take
    return select(level.c.id).select_from(levels.join(level, true())).limit(outer)


def _claimant() -> ColumnElement[Any]:
    """``coalesce(:locked_by, nullif(current_setting('application_name'), ''))``: the worker's
    name, bound once per worker (one statement shape, so the replay keeps one text per queue);
    a claim outside a worker records the connection's ``application_name``, else NULL."""
    application_name = func.current_setting(literal_column("'application_name'", Text))
    return func.coalesce(
        bindparam("locked_by", None, type_=Text),
        func.nullif(application_name, literal_column("''", Text)),
    )


#: ``last_error`` of a job a claim found past its deadline (``expires_in``, pgqueue_0015) begins
#: with this; what tells an expired job is ``expired_at IS NOT NULL``.
EXPIRED_ERROR = "expired"


def _expired() -> ColumnElement[bool]:
    """The claimed job was never started (``attempts = 0``: a job given back unstarted at
    shutdown is again) and is not within its ``expires_in`` of its ``run_at``: one NULL test
    for a job without a deadline. A job that started once (a retry, a reaped or snoozed job) is
    past its deadline's concern: it runs whenever it is due."""
    return (
        jobs.c.expires_in.is_not(None)
        & (jobs.c.attempts == literal_column("0"))
        & (jobs.c.run_at + jobs.c.expires_in < func.now())
    )


def claim_values() -> dict[str, Any]:
    """SET clause of every claim (the plain and the limited one): running, leased, recorded.

    A job past its deadline (:func:`_expired`) is failed by the same statement instead: status
    ``failed``, ``expired_at`` and ``finished_at`` now, ``last_error`` saying so, its attempts
    untouched (it never ran), no lease. So it never reaches a handler, whichever batch claimed
    it, and its dependents are settled as for a failure by ``jobs_release`` in this statement.
    The scan (which rows are locked) is the same as without deadlines: the test is on the rows
    locked, and costs one NULL test on a job without one.
    """
    expired = _expired()
    seconds = cast(func.extract("epoch", jobs.c.expires_in), Float)
    return {
        "status": case(
            (expired, status_literal(JobStatus.FAILED)), else_=status_literal(JobStatus.RUNNING)
        ),
        "attempts": case((expired, jobs.c.attempts), else_=jobs.c.attempts + 1),
        "locked_until": case((expired, null()), else_=_lease_end()),
        "locked_by": _claimant(),
        "locked_at": func.now(),
        "expired_at": case((expired, func.now())),
        "finished_at": case((expired, func.now())),
        "last_error": case(
            (
                expired,
                literal_column(f"'{EXPIRED_ERROR}: not started within '", Text)
                + cast(seconds, Text)
                + literal_column("' s of its run_at'", Text),
            ),
            else_=jobs.c.last_error,
        ),
    }


#: The columns every claim returns (the plain and the limited one); ``status`` is ``failed`` for
#: a job the claim found expired (:func:`claim_values`), which no caller runs.
def claim_returning() -> tuple[ColumnElement[Any], ...]:
    return (
        jobs.c.id,
        jobs.c.queue,
        jobs.c.payload,
        jobs.c.attempts,
        jobs.c.run_at,
        jobs.c.headers,
        jobs.c.priority,
        jobs.c.task,
        jobs.c.status,
        jobs.c.timeout,
    )


@lru_cache(maxsize=64)
def claim_statement(limit: int, *, skip_locked: bool = True, since: bool = False) -> Update:
    """The article's claim (R7) with priorities: lock up to ``limit`` ready jobs, lease them.

    Parameters: ``queue_name``, ``lease``, ``locked_by`` (the claiming worker's name, or NULL for
    the connection's ``application_name``; also sets ``locked_at``). Returns ``id, queue,
    payload, attempts, run_at, headers, priority, task, status, timeout`` (``task``: the name of
    the task the job runs, NULL for a queue-keyed job; ``status``: ``failed`` for a job found
    past its deadline, which the claim failed instead of leasing).
    The CTE is ``MATERIALIZED`` so the planner keeps LockRows inside it (per priority level:
    Limit over LockRows over an index scan of ``jobs_ready_idx``). ``skip_locked=False`` is the
    serialising variant of R5, kept for the demo and the tests. ``since``: one more parameter,
    ``since``, where each level's range starts (:func:`ready_ids`).
    """
    nxt = (
        ready_ids(limit, skip_locked=skip_locked, since=since)
        .cte("next")
        .prefix_with("MATERIALIZED")
    )
    return (
        jobs.update()
        .where(jobs.c.id == nxt.c.id)
        .values(claim_values())
        .returning(*claim_returning())
    )


@lru_cache(maxsize=64)
def claim_queues_statement(limit: int) -> Update:
    """:func:`claim_statement` over several queues at once: up to ``limit`` ready jobs of the
    first queues that have them, in the order given.

    For a worker of many small queues: one round trip claims what a claim per queue would (1,000
    queues of 20 jobs each drained at 0.3x one queue, the claims and the flushes a fifth of the
    size). Each queue is read as the one-queue claim reads it (its own levels, one bounded range
    of ``jobs_ready_idx`` each, from its own low-water mark when it has one), in a ``LATERAL``
    per queue under the outer Limit, so the queues past the one that fills the claim are not read
    at all. Parameters and rows: the one-queue claim's, with ``wanted`` for ``queue_name`` and
    ``since``: the text of a JSON array of ``{"queue": ..., "since": ...}`` (``since`` an
    ISO 8601 time or null), a plain text parameter, so the worker's replay sends one statement
    text for every set of queues and marks.
    """
    wanted = (
        func.json_to_recordset(cast(bindparam("wanted", type_=Text), JSON))
        .table_valued(column("queue", Text), column("since", jobs.c.run_at.type))
        .render_derived(name="wanted", with_types=True)
    )
    picked = ready_ids(limit, skip_locked=True, queue=wanted.c.queue, since=wanted.c.since).lateral(
        "picked"
    )
    limit_literal = literal(limit, Integer, literal_execute=True)
    ids = select(picked.c.id).select_from(wanted.join(picked, true())).limit(limit_literal)
    nxt = ids.cte("next").prefix_with("MATERIALIZED")
    return (
        jobs.update()
        .where(jobs.c.id == nxt.c.id)
        .values(claim_values())
        .returning(*claim_returning())
    )


# -- lifecycle (each guarded by id, status = 'running' and the claimed attempts) ---------------
#
# Every transition to ``done`` or ``failed`` sets ``finished_at = now()`` in the same UPDATE
# (pgqueue_0009); every way back to ``queued`` leaves it, or sets it, NULL.


def _done_values() -> dict[str, Any]:
    """SET clause of a completion (R10), shared by the single and the batched complete."""
    return {
        "status": status_literal(JobStatus.DONE),
        "locked_until": null(),
        "finished_at": func.now(),
    }


COMPLETE: Update = jobs.update().where(_guard()).values(_done_values()).returning(jobs.c.id)


def _result_values(result: ColumnElement[Any], progress: ColumnElement[Any]) -> dict[str, Any]:
    """``result`` and ``progress`` of a completion that carries them: both JSON texts (NULL:
    no result; no progress since the last one written, which stays)."""
    return {
        "result": cast(result, JSONB),
        "progress": func.coalesce(cast(progress, JSONB), jobs.c.progress),
    }


#: COMPLETE that also writes what the handler or task returned (``result_json``, JSON text or
#: NULL) and the progress it set last (``progress_json``, NULL keeps the stored one): the same
#: one statement, so a result costs no round trip of its own (#22). Returns the id when it matched.
COMPLETE_WITH_RESULT: Update = (
    jobs.update()
    .where(_guard())
    .values(
        {
            **_done_values(),
            **_result_values(
                bindparam("result_json", type_=Text), bindparam("progress_json", type_=Text)
            ),
        }
    )
    .returning(jobs.c.id)
)

#: R11: ``least(cap, base * 2^attempts)`` seconds; 20 s, 40 s, 80 s, 160 s with the defaults.
_backoff_seconds = func.least(
    bindparam("cap_seconds", type_=Float),
    bindparam("base_seconds", type_=Float)
    * func.power(literal(2.0, Float), func.least(jobs.c.attempts, _MAX_BACKOFF_EXPONENT)),
)


#: ``jobs.errors`` keeps the last this many failed attempts, oldest first (older ones drop out).
MAX_ERRORS_KEPT = 10


def _with_error(error: ColumnElement[Any], traceback: ColumnElement[Any]) -> ColumnElement[Any]:
    """``jobs.errors`` with this attempt's entry appended, cut to the last :data:`MAX_ERRORS_KEPT`.

    ``{"attempt", "at" (now(), ISO text), "error", "traceback"}``, built in the statement that
    records the failure: no round trip of its own, and the database's clock. The jsonpath slice
    keeps the array's end (lax mode clips ``last - 9`` to the first element of a shorter one).
    """
    entry = func.jsonb_build_object(
        literal_column("'attempt'"),
        jobs.c.attempts,
        literal_column("'at'"),
        func.now(),
        literal_column("'error'"),
        error,
        literal_column("'traceback'"),
        traceback,
    )
    history = func.coalesce(jobs.c.errors, literal_column("'[]'::jsonb", JSONB)).op("||")(
        func.jsonb_build_array(entry)
    )
    kept = literal_column(f"'$[last - {MAX_ERRORS_KEPT - 1} to last]'", Text)
    return func.jsonb_path_query_array(history, kept, type_=JSONB)


def _failure_values(
    retry: ColumnElement[Any], error: ColumnElement[Any], traceback: ColumnElement[Any]
) -> dict[str, Any]:
    """SET clause of a failed attempt (R11), shared by the single and the batched fail."""
    requeue = retry & (jobs.c.attempts < jobs.c.max_attempts)
    return {
        "status": case(
            (requeue, status_literal(JobStatus.QUEUED)),
            else_=status_literal(JobStatus.FAILED),
        ),
        # A final failure keeps run_at (when its last attempt was due): no retry is coming.
        "run_at": case(
            (
                requeue,
                func.now() + _backoff_seconds * literal_column("interval '1 second'", Interval),
            ),
            else_=jobs.c.run_at,
        ),
        "locked_until": null(),
        "last_error": error,
        "errors": _with_error(error, traceback),
        "finished_at": case((requeue, null()), else_=func.now()),
    }


_FAIL_RETURNING = (
    jobs.c.id,
    jobs.c.status,
    jobs.c.attempts,
    (jobs.c.run_at - func.now()).label("retry_in"),
)

FAIL: Update = (
    jobs.update()
    .where(_guard())
    .values(
        _failure_values(
            bindparam("retry", type_=Boolean),
            bindparam("error", type_=Text),
            bindparam("traceback", type_=Text),
        )
    )
    .returning(*_FAIL_RETURNING)
)


def _snooze_values(delay_seconds: ColumnElement[Any]) -> dict[str, Any]:
    """SET clause of a snooze, shared by the single and the batched one: back to ``queued`` after
    the delay, with one more attempt allowed (the claim counted one; ``attempts`` itself never
    goes back, so every guard stays unique to one claim). ``last_error`` and ``finished_at``
    (NULL while running) are left alone."""
    return {
        "status": status_literal(JobStatus.QUEUED),
        "run_at": func.now() + delay_seconds * literal_column("interval '1 second'", Interval),
        "locked_until": null(),
        "max_attempts": jobs.c.max_attempts + 1,
        "snoozes": jobs.c.snoozes + 1,
    }


#: A handler raised ``pgqueue.Snooze(delay)`` (``delay_seconds``). Returns the id when it matched.
SNOOZE: Update = (
    jobs.update()
    .where(_guard())
    .values(_snooze_values(bindparam("delay_seconds", type_=Float)))
    .returning(jobs.c.id)
)

EXTEND_LEASE: Update = (
    jobs.update().where(_guard()).values(locked_until=_lease_end()).returning(jobs.c.id)
)

#: The ``error`` of the history entry a reaped attempt gets (it has no traceback).
LEASE_EXPIRED_ERROR = "lease expired"

#: R12: expired leases go back to the queue, or fail once their attempts are spent; each reaped
#: attempt adds a ``lease expired`` entry to ``errors``.
REAP_EXPIRED: Update = (
    jobs.update()
    .where(
        jobs.c.status == status_literal(JobStatus.RUNNING),
        jobs.c.locked_until < func.now(),
    )
    .values(
        status=case(
            (jobs.c.attempts >= jobs.c.max_attempts, status_literal(JobStatus.FAILED)),
            else_=status_literal(JobStatus.QUEUED),
        ),
        locked_until=null(),
        last_error=func.coalesce(jobs.c.last_error, literal("lease expired", Text)),
        errors=_with_error(literal_column(f"'{LEASE_EXPIRED_ERROR}'", Text), null()),
        finished_at=case((jobs.c.attempts >= jobs.c.max_attempts, func.now())),
    )
    .returning(jobs.c.id, jobs.c.status, jobs.c.attempts)
)


@lru_cache(maxsize=8)
def purge_statement(status: JobStatus = JobStatus.DONE, *, by_queue: bool = False) -> Delete:
    """R20: delete one batch of finished jobs older than ``:older_than``; callers loop.

    ``by_queue=True`` deletes only those of queue ``:queue_name`` (the dashboard's purge).
    """
    where = [
        jobs.c.status == status_literal(status),
        jobs.c.created_at < func.now() - bindparam("older_than", type_=Interval),
    ]
    if by_queue:
        where.append(jobs.c.queue == bindparam("queue_name", type_=Text))
    batch = select(jobs.c.id).where(*where).limit(bindparam("batch_size", type_=Integer))
    return delete(jobs).where(jobs.c.id.in_(batch.scalar_subquery()))


# -- batched lifecycle (the worker's completer, heartbeat and shutdown) -------------------------
#
# Parameters: ``batch_ids`` and ``batch_attempts`` (parallel arrays: each job with the attempts it
# was claimed with), plus the per-statement extras. Each statement first locks the still-ours rows
# in id order in a MATERIALIZED CTE, so two workers flushing overlapping batches (or a flush and a
# reaper) queue behind each other instead of deadlocking, then updates them with the same guard as
# the single-job statements and returns the ids that matched.
#
# Their status guard is :func:`_still_running`, like the single-job guard: with ``= 'running'`` the
# planner scanned every running job once per batch (80 ms for 10 jobs among 13,000 running).
#
# Each also takes ``lock_timeout`` (milliseconds as text, or NULL to keep the session's): the
# locking CTE sets it for the statement's transaction first, in a one-time filter (an InitPlan
# evaluated before LockRows takes its first row lock), so the completer runs each statement in
# autocommit, one round trip, instead of BEGIN, SET LOCAL, the statement and COMMIT.


def statement_lock_timeout() -> ColumnElement[bool]:
    """``(SELECT set_config('lock_timeout', coalesce(:lock_timeout, <current>), true)) IS NOT
    NULL``: true, and from then on this transaction waits at most that long for a row lock."""
    name = literal_column("'lock_timeout'", Text)
    wanted = func.coalesce(bindparam("lock_timeout", type_=Text), func.current_setting(name))
    return (
        select(func.set_config(name, wanted, literal_column("true"))).scalar_subquery().is_not(None)
    )


def _batch_ids() -> ColumnElement[Any]:
    return bindparam("batch_ids", type_=ARRAY(BigInteger))


def _batch_attempts() -> ColumnElement[Any]:
    return bindparam("batch_attempts", type_=ARRAY(Integer))


def _locked_batch(*extra: tuple[str, ColumnElement[Any]]) -> Any:
    """``WITH mine AS MATERIALIZED (SELECT ... FOR UPDATE OF jobs ORDER BY id)`` over the arrays."""
    names = ["id", "attempts", *(name for name, _ in extra)]
    batch = (
        func.unnest(_batch_ids(), _batch_attempts(), *(arr for _, arr in extra))
        .table_valued(*names)
        .render_derived(name="batch")
    )
    return (
        select(jobs.c.id, jobs.c.attempts, *(batch.c[name] for name, _ in extra))
        .select_from(
            jobs.join(batch, (jobs.c.id == batch.c.id) & (jobs.c.attempts == batch.c.attempts))
        )
        .where(_still_running(), statement_lock_timeout())
        .order_by(jobs.c.id)
        .with_for_update(of=jobs)
        .cte("mine")
        .prefix_with("MATERIALIZED")
    )


def _batched_update(mine: Any, values: dict[str, Any]) -> Update:
    return (
        jobs.update()
        .where(
            jobs.c.id == mine.c.id,
            _still_running(),
            jobs.c.attempts == mine.c.attempts,
        )
        .values(values)
    )


#: R10 for a batch: ``done`` for every job still ours. Returns the ids that matched.
COMPLETE_MANY: Update = _batched_update(_locked_batch(), _done_values()).returning(jobs.c.id)


def _json_element(index: int) -> ColumnElement[Any]:
    return literal_column(str(index))


def _locked_json_batch() -> Any:
    """:func:`_locked_batch` with one JSON array text, ``batch_json``, beside the id and attempts
    arrays: its n-th element is the n-th job's ``[result]`` or ``[result, progress]`` (``result``
    JSON ``null`` for none; no second element for no new progress), joined by position. The
    values travel as one text: as an array of 500 texts of 1 KB the driver's quoting of each
    element cost ~25x the text's (measured: 55 ms against 2 ms for the elements, 0.4 ms for the
    one text), on the completer's thread. The ids stay an array: the planner then probes
    ``jobs_pkey`` per id, where a join on ids read from the JSON hash-joined a scan of the table.
    """
    batch = (
        func.unnest(_batch_ids(), _batch_attempts())
        .table_valued("id", "attempts", with_ordinality="ord")
        .render_derived(name="batch")
    )
    values = (
        func.jsonb_array_elements(cast(bindparam("batch_json", type_=Text), JSONB))
        .table_valued(column("element", JSONB), with_ordinality="ord")
        .render_derived(name="batch_values")
    )
    element = values.c.element
    result = func.nullif(
        element.op("->", return_type=JSONB)(_json_element(0)), literal_column("'null'::jsonb")
    )
    progress = element.op("->", return_type=JSONB)(_json_element(1))
    return (
        select(jobs.c.id, jobs.c.attempts, result.label("result"), progress.label("progress"))
        .select_from(
            jobs.join(
                batch, (jobs.c.id == batch.c.id) & (jobs.c.attempts == batch.c.attempts)
            ).join(values, values.c.ord == batch.c.ord)
        )
        .where(_still_running(), statement_lock_timeout())
        .order_by(jobs.c.id)
        .with_for_update(of=jobs)
        .cte("mine")
        .prefix_with("MATERIALIZED")
    )


_completed_batch = _locked_json_batch()

#: COMPLETE_MANY that also writes each job's result and last progress, in the same one statement
#: (#22): parameters ``batch_ids``, ``batch_attempts``, ``batch_json`` (see
#: :func:`_locked_json_batch`) and ``lock_timeout``. The
#: completer sends COMPLETE_MANY itself for a batch that carries neither (handlers that return
#: ``None``), so that path sends nothing more than before. Returns the ids that matched.
COMPLETE_MANY_WITH_RESULTS: Update = _batched_update(
    _completed_batch,
    {
        **_done_values(),
        "result": _completed_batch.c.result,
        "progress": func.coalesce(_completed_batch.c.progress, jobs.c.progress),
    },
).returning(jobs.c.id)

_failed_batch = _locked_batch(
    ("error", bindparam("batch_errors", type_=ARRAY(Text))),
    ("retry", bindparam("batch_retry", type_=ARRAY(Boolean))),
    ("traceback", bindparam("batch_tracebacks", type_=ARRAY(Text))),
)

#: R11 for a batch sharing one retry policy (``base_seconds``, ``cap_seconds``); each job brings
#: its own error text, retry flag and traceback (``batch_errors``, ``batch_retry``,
#: ``batch_tracebacks``: NULL elements for none). Returns like ``FAIL``.
FAIL_MANY: Update = _batched_update(
    _failed_batch,
    _failure_values(_failed_batch.c.retry, _failed_batch.c.error, _failed_batch.c.traceback),
).returning(*_FAIL_RETURNING)

_snoozed_batch = _locked_batch(("delay", bindparam("batch_delays", type_=ARRAY(Float))))

#: Snoozes for a batch, each job with its own delay in seconds (``batch_delays``). Returns the ids
#: that matched.
SNOOZE_MANY: Update = _batched_update(
    _snoozed_batch, _snooze_values(_snoozed_batch.c.delay)
).returning(jobs.c.id)

#: R14 for a batch (``lease``): the heartbeat. A job missing from the result is no longer ours.
EXTEND_LEASE_MANY: Update = _batched_update(
    _locked_batch(), {"locked_until": _lease_end()}
).returning(jobs.c.id)

_progress_batch = _locked_batch(("progress", bindparam("batch_progress", type_=ARRAY(Text))))

#: EXTEND_LEASE_MANY that also writes the progress running jobs set since the last beat
#: (``batch_progress``: JSON texts, NULL keeps a job's stored progress): many ``set_progress``
#: calls between two beats cost no write of their own, the rows are updated by the beat anyway.
EXTEND_LEASE_MANY_WITH_PROGRESS: Update = _batched_update(
    _progress_batch,
    {
        "locked_until": _lease_end(),
        "progress": func.coalesce(cast(_progress_batch.c.progress, JSONB), jobs.c.progress),
    },
).returning(jobs.c.id)

_bounded_batch = _locked_batch(
    ("lease_seconds", bindparam("batch_lease_seconds", type_=ARRAY(Float))),
    ("progress", bindparam("batch_progress", type_=ARRAY(Text))),
)

#: EXTEND_LEASE_MANY_WITH_PROGRESS with a lease of its own per job (``batch_lease_seconds``):
#: the heartbeat's statement while some held job has a timeout, whose lease it never extends
#: past timeout + grace (pgqueue_0015), so a dead worker's timed-out job is reaped as usual.
EXTEND_LEASE_MANY_BOUNDED: Update = _batched_update(
    _bounded_batch,
    {
        "locked_until": func.now()
        + _bounded_batch.c.lease_seconds * literal_column("interval '1 second'", Interval),
        "progress": func.coalesce(cast(_bounded_batch.c.progress, JSONB), jobs.c.progress),
    },
).returning(jobs.c.id)

#: Give claimed jobs that never started back to the queue without charging the attempt.
RELEASE_MANY: Update = _batched_update(
    _locked_batch(),
    {
        "status": status_literal(JobStatus.QUEUED),
        "attempts": jobs.c.attempts - 1,
        "locked_until": null(),
    },
).returning(jobs.c.id)

_settled_batch = (
    func.unnest(_batch_ids(), _batch_attempts())
    .table_valued("id", "attempts")
    .render_derived(name="batch")
)

#: Which of a batch left ``running`` with the same attempts, and how: ``done`` (completed by their
#: handler's own transaction, ``pgqueue.complete`` beside its writes: not lost) or cancelled
#: (``pgqueue.cancel`` while the worker held them: ``cancelled_at`` set). Returns ``id, cancelled``.
SETTLED_AMONG: Select[Any] = (
    select(
        jobs.c.id,
        jobs.c.cancelled_at.is_not(None).label("cancelled"),
    )
    .select_from(
        jobs.join(
            _settled_batch,
            (jobs.c.id == _settled_batch.c.id) & (jobs.c.attempts == _settled_batch.c.attempts),
        )
    )
    .where(
        (jobs.c.status == status_literal(JobStatus.DONE))
        | ((jobs.c.status == status_literal(JobStatus.FAILED)) & jobs.c.cancelled_at.is_not(None))
    )
)

# -- observability ---------------------------------------------------------------------------------


@lru_cache(maxsize=8)
def queue_depth_statement(limit: int) -> Select[Any]:
    """Ready depth and oldest ready age of each queue in ``:queue_names``, for metrics gauges.

    Returns ``queue, ready, oldest_age`` (seconds, ``NULL`` when nothing is ready) for every
    queue asked, in one statement: a ``LATERAL`` walk of ``jobs_ready_idx`` per queue, oldest
    first, stopping after ``limit`` rows, so its cost is bounded however deep a backlog grows
    (``ready`` then reads ``limit``). The limit is inlined, like the claim's.
    """
    queues = (
        func.unnest(bindparam("queue_names", type_=ARRAY(Text)))
        .table_valued("queue")
        .render_derived(name="q")
    )
    ready = (
        select(jobs.c.run_at)
        .where(
            jobs.c.queue == queues.c.queue,
            jobs.c.status == status_literal(JobStatus.QUEUED),
            jobs.c.run_at <= func.now(),
        )
        .order_by(jobs.c.run_at)
        .limit(literal(limit, Integer, literal_execute=True))
        .lateral("r")
    )
    return (
        select(
            queues.c.queue,
            func.count(ready.c.run_at).label("ready"),
            func.extract("epoch", func.now() - func.min(ready.c.run_at)).label("oldest_age"),
        )
        .select_from(queues.outerjoin(ready, true()))
        .group_by(queues.c.queue)
    )


#: ``SET LOCAL lock_timeout`` as a function call (``lock_timeout`` in ms, text): a bound value,
#: and no session state left behind for a transaction-mode pooler.
SET_LOCAL_LOCK_TIMEOUT: Select[Any] = select(
    func.set_config(literal("lock_timeout", Text), bindparam("lock_timeout", type_=Text), True)
)

__all__ = [
    "BACKEND_PID",
    "CANCEL",
    "CANCELLED_ERROR",
    "CANCEL_BACKEND",
    "COMPLETE",
    "COMPLETE_MANY",
    "COMPLETE_MANY_WITH_RESULTS",
    "COMPLETE_WITH_RESULT",
    "CURRENT_LOCK_TIMEOUT",
    "ENQUEUE",
    "ENQUEUE_KEYED",
    "ENQUEUE_MANY",
    "ENQUEUE_MANY_KEYED",
    "ENQUEUE_MANY_UNIQUE",
    "ENQUEUE_MANY_UNIQUE_KEYED",
    "ENQUEUE_UNIQUE",
    "ENQUEUE_UNIQUE_KEYED",
    "EXTEND_LEASE",
    "EXTEND_LEASE_MANY",
    "EXTEND_LEASE_MANY_BOUNDED",
    "EXTEND_LEASE_MANY_WITH_PROGRESS",
    "FAIL",
    "FAIL_MANY",
    "JOB_RESULT",
    "KEY_HOLDERS",
    "LEASE_EXPIRED_ERROR",
    "LIVE_AMONG",
    "LIVE_KEY",
    "MAX_ERRORS_KEPT",
    "REAP_EXPIRED",
    "RELEASE_MANY",
    "SETTLED_AMONG",
    "SET_LOCAL_LOCK_TIMEOUT",
    "SNOOZE",
    "SNOOZE_MANY",
    "claim_statement",
    "claim_values",
    "purge_statement",
    "queue_depth_statement",
    "ready_ids",
    "retry_statement",
    "statement_lock_timeout",
    "status_literal",
]


# -- operator commands (``pgqueue retry`` / ``cancel``) ------------------------------------------

#: Back to ``queued``, due now, with ``attempts + :extra_attempts`` as the new budget. ``attempts``
#: is never reset: it is the fencing token of every guarded update (R13). Running jobs are left
#: alone (their owner still holds them); done jobs stay done. A retried cancelled job is no
#: longer cancelled.
_RETRY_VALUES: dict[str, Any] = {
    "status": status_literal(JobStatus.QUEUED),
    "run_at": func.now(),
    "locked_until": null(),
    # Summed as bigint and held at the largest int: a budget that large never runs out, where
    # an int sum past it would fail the whole statement ("integer out of range").
    "max_attempts": func.least(
        cast(jobs.c.attempts, BigInteger) + bindparam("extra_attempts", type_=BigInteger),
        literal_column(str(MAX_INT32)),
    ),
    "finished_at": null(),
    "cancelled_at": null(),
    "expired_at": null(),
}


def _key_is_free() -> ColumnElement[bool]:
    """No other live job of the queue holds this job's unique key (or it has none)."""
    other = jobs.alias("holder")
    held = (
        select(other.c.id)
        .where(
            other.c.queue == jobs.c.queue,
            other.c.unique_key == jobs.c.unique_key,
            is_live(other.c.status),
            other.c.id != jobs.c.id,
        )
        .exists()
    )
    return jobs.c.unique_key.is_(None) | ~held


def retry_statement(
    *, all_failed: bool = False, include_cancelled: bool = False, include_expired: bool = False
) -> Update:
    """Requeue jobs with a fresh budget of attempts, by raising ``max_attempts``.

    With ``all_failed=False`` (parameters ``job_ids``, ``extra_attempts``) the listed jobs that are
    ``failed`` (cancelled ones too: the operator named them) or ``queued`` are retried now; with
    ``all_failed=True`` (parameters ``queue_name``, which may be ``NULL`` for every queue, and
    ``extra_attempts``) every ``failed`` job is, except cancelled ones unless
    ``include_cancelled`` and expired ones unless ``include_expired``. A job whose unique key
    another live job holds is left alone. Returns ``id`` of each requeued job.
    """
    return _retry_statement(all_failed, include_cancelled, include_expired)


@lru_cache(maxsize=8)
def _retry_statement(all_failed: bool, include_cancelled: bool, include_expired: bool) -> Update:
    """:func:`retry_statement`, built once per shape (positional: one cache key per shape)."""
    if all_failed:
        where = (jobs.c.status == status_literal(JobStatus.FAILED)) & (
            jobs.c.queue == func.coalesce(bindparam("queue_name", type_=Text), jobs.c.queue)
        )
        if not include_cancelled:
            where = where & jobs.c.cancelled_at.is_(None)
        if not include_expired:
            where = where & jobs.c.expired_at.is_(None)
    else:
        where = jobs.c.id.in_(bindparam("job_ids", type_=BigInteger, expanding=True)) & (
            jobs.c.status.in_([status_literal(JobStatus.FAILED), status_literal(JobStatus.QUEUED)])
        )
        # A job waiting for its dependencies (pgqueue_0013) is left alone: its release is theirs.
        where = where & (jobs.c.waiting_on == 0)
    # Of several candidates sharing a key, only the newest comes back: two live jobs cannot hold
    # one key, and one such pair must not stop ``retry --failed`` for the whole queue.
    newest_per_key = (
        func.row_number()
        .over(
            partition_by=(
                jobs.c.queue,
                jobs.c.unique_key,
                case((jobs.c.unique_key.is_(None), jobs.c.id)),
            ),
            order_by=jobs.c.id.desc(),
        )
        .label("rank")
    )
    candidates = select(jobs.c.id, newest_per_key).where(where).cte("candidates")
    return (
        jobs.update()
        .where(jobs.c.id == candidates.c.id, candidates.c.rank == 1, where, _key_is_free())
        .values(**_RETRY_VALUES)
        .returning(jobs.c.id)
    )


def _cancel_ids() -> ColumnElement[bool]:
    """``id = ANY(:job_ids) AND status IN ('queued', 'running')``: what a cancel may touch."""
    return (jobs.c.id == func.any(bindparam("job_ids", type_=ARRAY(BigInteger)))) & (
        is_live(jobs.c.status)
    )


_cancellable = (
    select(jobs.c.id, jobs.c.status)
    .where(_cancel_ids(), statement_lock_timeout())
    .order_by(jobs.c.id)
    # Waits, bounded, and in id order like every batched statement of the worker: a cancel never
    # waits for a row while it holds a higher one, so it cannot deadlock with them.
    .with_for_update()
    .cte("target")
    .prefix_with("MATERIALIZED")
)
_was_running = _cancellable.c.status == status_literal(JobStatus.RUNNING)

#: Queued and running jobs become ``failed`` with ``cancelled_at = now()`` (and ``last_error =
#: 'cancelled'``) at once: no worker can complete them afterwards (their guard no longer
#: matches). Parameters ``job_ids`` (an array), ``channel`` and ``notify_payload``: each running
#: job sends that ``pg_notify`` (folded into one per transaction, delivered on commit) so its
#: worker stops it now. Returns ``id, was_running``.
#:
#: ``lock_timeout`` (milliseconds, text): it waits at most that long for each row lock, having
#: set it for the rest of the transaction before its first one (the one-time filter of
#: :func:`statement_lock_timeout`). A row held longer raises ``LockNotAvailable``: the caller
#: runs it in a savepoint, and restores its own ``lock_timeout`` (:data:`CURRENT_LOCK_TIMEOUT`).
CANCEL: Update = (
    jobs.update()
    .where(jobs.c.id == _cancellable.c.id)
    .values(
        status=status_literal(JobStatus.FAILED),
        locked_until=null(),
        last_error=literal_column(f"'{CANCELLED_ERROR}'", Text),
        finished_at=func.now(),
        cancelled_at=func.now(),
    )
    .returning(
        jobs.c.id,
        _was_running.label("was_running"),
        case(
            (
                _was_running,
                func.pg_notify(
                    bindparam("channel", type_=Text), bindparam("notify_payload", type_=Text)
                ),
            )
        ).label("notified"),
    )
)

#: Which of ``:job_ids`` are queued or running, in id order, without locking them.
LIVE_AMONG: Select[Any] = select(jobs.c.id).where(_cancel_ids()).order_by(jobs.c.id)

#: Cancel the statement a session (``pid``) runs: a transaction-mode handler's at its timeout.
CANCEL_BACKEND: Select[Any] = select(func.pg_cancel_backend(bindparam("pid", type_=Integer)))

#: The server process of this session (its transaction's, behind a pooler).
BACKEND_PID: Select[Any] = select(func.pg_backend_pid())

#: Ends a session from another one: the server rolls back its open transaction and frees its row
#: locks. Transaction mode, for a handler still running at timeout + grace.
TERMINATE_BACKEND: Select[Any] = select(func.pg_terminate_backend(bindparam("pid", type_=Integer)))

#: Whether session ``:waiter`` waits for a lock that session ``:holder`` holds: the failure of a
#: terminated session's attempt is queued on the row before that session is ended.
WAITS_FOR: Select[Any] = select(
    bindparam("holder", type_=Integer)
    == any_(func.pg_blocking_pids(bindparam("waiter", type_=Integer), type_=ARRAY(Integer)))
)

#: Transaction mode, after :data:`TERMINATE_BACKEND` rolled a handler's transaction back: the
#: claim that went with it, taken again (``attempts`` back to the claimed value, leased to the
#: same worker), so that the attempt's failure is written by the ordinary guarded :data:`FAIL`
#: and charged as any failure. Only the row as that claim found it (queued, one attempt fewer):
#: a job claimed since by another worker is left to it. Waits at most ``:lock_timeout`` for the
#: row, which the terminated session holds until the server has rolled it back.
RETAKE_ROLLED_BACK: Update = (
    jobs.update()
    .where(
        statement_lock_timeout(),
        jobs.c.id == bindparam("job_id", type_=BigInteger),
        # Spelled so that it does not imply jobs_ready_idx's predicate (see _still_running).
        jobs.c.status.is_not_distinct_from(status_literal(JobStatus.QUEUED)),
        jobs.c.attempts == bindparam("claimed_attempts", type_=Integer) - literal_column("1"),
    )
    .values(
        status=status_literal(JobStatus.RUNNING),
        attempts=jobs.c.attempts + 1,
        locked_until=_lease_end(),
        locked_by=_claimant(),
        locked_at=func.now(),
    )
    .returning(jobs.c.id)
)

#: This transaction's ``lock_timeout``, to put back after a statement that set its own.
CURRENT_LOCK_TIMEOUT: Select[Any] = select(
    func.current_setting(literal_column("'lock_timeout'", Text))
)


# -- results (``pgqueue.fetch_result``, ``pgqueue.wait_for``) ------------------------------------

#: One job's outcome by ``:job_id``: no row for an unknown id. Only the columns a producer that
#: waits is granted (:data:`pgqueue.grants.WAITER_COLUMNS`).
JOB_RESULT: Select[Any] = select(*JOB_RESULT_COLUMNS).where(
    jobs.c.id == bindparam("job_id", type_=BigInteger)
)
