"""Core statements of retention (``jobs_retention``, pgqueue_0016): pure builders, no I/O.

What a queue keeps is written once, :func:`kept`: the queue's own setting of the kind, else the
default row's (queue ``''``), else the built-in. Every reader of a retention (the listing, the
prune, ``pgqueue queues``, the dashboard, ``pgqueue doctor``) selects it through that function.

The prune of one queue is a series of short transactions, each of which first takes the queue's
row with :data:`TAKE` (locked ``FOR UPDATE SKIP LOCKED``, held until that transaction commits) and
then deletes at most :data:`PRUNE_BATCH` rows per kind with :func:`prune_statement`. Two workers
therefore never delete a queue's rows at once: the second finds the row locked and skips it.
Between its transactions a worker's claim on the queue is ``pruned_by`` and a fresh ``pruned_at``;
another worker starts only once ``pruned_at`` is ``:interval`` old (a worker that died mid-way
is taken over then).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from sqlalchemy import (
    Boolean,
    ColumnElement,
    Delete,
    FromClause,
    Insert,
    Interval,
    Select,
    Text,
    Update,
    and_,
    any_,
    bindparam,
    case,
    delete,
    exists,
    func,
    literal_column,
    not_,
    or_,
    select,
    true,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert

from pgqueue._base.readable import readable
from pgqueue.models import (
    DEFAULT_DONE_RETENTION,
    DEFAULT_FAILED_RETENTION,
    DEFAULT_RETENTION_ROW,
    RETENTION_KINDS,
    JobStatus,
    dependencies_table,
    is_live,
    jobs_table,
    retention_table,
    status_literal,
)

retention = retention_table
jobs = jobs_table

#: Most rows one prune statement deletes: its transaction stays short, and vacuum keeps up.
PRUNE_BATCH = 1000

_BUILT_IN = {"done": DEFAULT_DONE_RETENTION, "failed": DEFAULT_FAILED_RETENTION}
KINDS = RETENTION_KINDS
_default = retention.alias("retention_default")


def _interval(value: Any) -> ColumnElement[Any]:
    # A literal, not a parameter: the built-in is a constant of the statement.
    return literal_column(f"interval '{int(value.total_seconds())} seconds'", Interval)


def kept(kind: str, row: FromClause | None) -> ColumnElement[Any]:
    """How long the queue whose ``jobs_retention`` row is ``row`` keeps its jobs of ``kind``
    (``done`` or ``failed``): NULL for ever. ``row`` may be the outer side of a join (NULL
    columns: the queue has no row), or ``None`` for the default alone. The default's row is read
    by uncorrelated subqueries, evaluated once per statement."""
    default_row = _default.c.queue == literal_column(f"'{DEFAULT_RETENTION_ROW}'", Text)
    default_set = exists().where(default_row, _default.c[f"{kind}_set"])
    default_value = select(_default.c[kind]).where(default_row).scalar_subquery()
    whens: list[tuple[Any, Any]] = []
    if row is not None:
        whens.append((row.c[f"{kind}_set"].is_(True), row.c[kind]))
    whens.append((default_set, default_value))
    return case(*whens, else_=_interval(_BUILT_IN[kind]))


def _inherits(kind: str, row: FromClause) -> ColumnElement[bool]:
    return func.coalesce(row.c[f"{kind}_set"], False).is_(False)


#: Every row with a setting of its own, the default's first, then by queue: ``queue``,
#: ``done``, ``failed`` (what applies) and ``done_inherited``, ``failed_inherited``.
ALL_RETENTION: Select[Any] = (
    select(
        retention.c.queue,
        *(kept(kind, retention).label(kind) for kind in KINDS),
        *(_inherits(kind, retention).label(f"{kind}_inherited") for kind in KINDS),
    )
    .where(or_(retention.c.done_set, retention.c.failed_set))
    .order_by(retention.c.queue)
)

#: The default alone (its row may not exist): ``done``, ``failed``.
DEFAULT_RETENTION: Select[Any] = select(*(kept(kind, None).label(kind) for kind in KINDS))


@lru_cache(maxsize=4)
def set_statement(kinds: frozenset[str]) -> Insert:
    """Upsert the row ``:queue_name`` setting each of ``kinds`` to its parameter (``:done``,
    ``:failed``; NULL: kept for ever); the other kind keeps what the row had. Returns the row's
    ``queue``."""
    values: dict[str, Any] = {"queue": bindparam("queue_name", type_=Text)}
    changes: dict[str, Any] = {"updated_at": func.now()}
    for kind in sorted(kinds):
        values[kind] = bindparam(kind, type_=Interval)
        values[f"{kind}_set"] = true()
        changes[kind] = values[kind]
        changes[f"{kind}_set"] = true()
    return (
        pg_insert(retention)
        .values(**values)
        .on_conflict_do_update(index_elements=[retention.c.queue], set_=changes)
        .returning(retention.c.queue)
    )


#: Whether the queue ``:queue_name`` has a row (a plain read: it never waits for a lock).
HAS_ROW: Select[Any] = select(
    exists().where(retention.c.queue == bindparam("queue_name", type_=Text))
)

#: The queue's row, inserted without settings when it has none (a queue a worker prunes needs
#: one to lock). Only after :data:`HAS_ROW` said there is none: an insert that meets a row
#: another transaction is updating waits for that transaction. Parameter ``queue_name``.
ENSURE_ROW: Insert = (
    pg_insert(retention)
    .values(queue=bindparam("queue_name", type_=Text))
    .on_conflict_do_nothing(index_elements=[retention.c.queue])
)

_mine = and_(
    bindparam("continuing", type_=Boolean),
    retention.c.pruned_by == bindparam("worker", type_=Text),
)
_due = or_(
    retention.c.pruned_at.is_(None),
    retention.c.pruned_at <= func.now() - bindparam("interval", type_=Interval),
)
_taken = (
    select(retention.c.queue)
    .where(retention.c.queue == bindparam("queue_name", type_=Text), or_(_mine, _due))
    .with_for_update(skip_locked=True)
    .subquery("taken")
)

#: Take the queue ``:queue_name`` for this transaction's prune: its row locked (or nothing
#: when another transaction holds it), when it is due (``pruned_at`` older than ``:interval``)
#: or, with ``:continuing``, still ``:worker``'s; ``pruned_at`` moves to now. Returns the
#: queue's ``done`` and ``failed`` retention (NULL: kept for ever), or no row: skip the queue.
TAKE: Update = (
    retention.update()
    .where(retention.c.queue == _taken.c.queue)
    .values(pruned_at=func.now(), pruned_by=bindparam("worker", type_=Text))
    .returning(*(kept(kind, retention).label(kind) for kind in KINDS))
)

_STATUS = {"done": JobStatus.DONE, "failed": JobStatus.FAILED}


def _unneeded() -> ColumnElement[bool]:
    """No dependent that is still queued or running waits on the job (it may read its result).

    A scalar subquery with ``LIMIT 1`` rather than ``NOT EXISTS``: the planner may turn an
    ``EXISTS`` under ``OR`` into a hashed subplan, built by reading every queued and running job;
    this one is always the per-row lookup of the edges' primary key, and runs only for the rows
    with ``has_dependents``."""
    waiting = jobs.alias("dependent")
    first = (
        select(literal_column("1"))
        .where(
            dependencies_table.c.depends_on == jobs.c.id,
            waiting.c.id == dependencies_table.c.job_id,
            is_live(waiting.c.status),
        )
        .limit(literal_column("1"))
        .correlate(jobs)
        .scalar_subquery()
    )
    return first.is_(None)


@lru_cache(maxsize=2)
def prune_statement(kind: str) -> Delete:
    """Delete at most :data:`PRUNE_BATCH` of queue ``:queue_name``'s jobs of ``kind`` finished
    more than ``:kept`` ago, oldest first; none that a queued or running dependent waits on.

    Its plan (``tests/integration/test_retention_plan.py``): an index scan of ``jobs_prune_idx``
    (``queue``, the literal status, then ``finished_at < now() - :kept`` in order, no sort)
    under the LIMIT, each row locked ``SKIP LOCKED`` (an operator's retry of the same row is
    neither waited for nor undone), then the batch's ids deleted through ``jobs_pkey``; the
    dependents are looked up only for rows with ``has_dependents``."""
    batch = (
        select(jobs.c.id)
        .where(
            jobs.c.queue == bindparam("queue_name", type_=Text),
            jobs.c.status == status_literal(_STATUS[kind]),
            jobs.c.finished_at < func.now() - bindparam("kept", type_=Interval),
            or_(not_(jobs.c.has_dependents), _unneeded()),
        )
        .order_by(jobs.c.finished_at)
        .limit(literal_column(str(PRUNE_BATCH)))
        .with_for_update(skip_locked=True)
    )
    # ``= ANY(ARRAY(...))``, not ``IN (...)``: the batch's ids are looked up by the primary key,
    # where an ``IN`` may be planned as a hash join over a scan of the whole table.
    return delete(jobs).where(jobs.c.id == any_(func.array(batch.scalar_subquery())))


#: One row's retention (``queue_name``; ``''`` is the default's): the columns of
#: :data:`ALL_RETENTION`, or no row when it has none.
ONE_RETENTION: Select[Any] = select(
    retention.c.queue,
    *(kept(kind, retention).label(kind) for kind in KINDS),
    *(_inherits(kind, retention).label(f"{kind}_inherited") for kind in KINDS),
).where(retention.c.queue == bindparam("queue_name", type_=Text))


#: How far past its retention a finished job must be before ``pgqueue doctor`` says the
#: workers are not pruning (they visit every queue once a minute).
OVERDUE_MARGIN_DAYS = 1


def overdue_statement() -> Select[Any]:
    """``queue, kind, jobs, oldest`` per queue and kind (``done``, ``failed``) of the finished
    jobs more than :data:`OVERDUE_MARGIN_DAYS` past their queue's retention, by queue: what
    ``pgqueue doctor`` reports as not pruned. One pass over the finished rows, as the doctor's
    other counts."""
    queue_row = retention.alias("queue_retention")
    is_done = jobs.c.status == status_literal(JobStatus.DONE)
    kind = case((is_done, literal_column("'done'", Text)), else_=literal_column("'failed'", Text))
    limit = case((is_done, kept("done", queue_row)), else_=kept("failed", queue_row))
    margin = literal_column(f"interval '{OVERDUE_MARGIN_DAYS} day'", Interval)
    return (
        select(
            jobs.c.queue,
            kind.label("kind"),
            func.count().label("jobs"),
            # A time written by SQL outside Python's years ('-infinity') still loads.
            *readable([func.min(jobs.c.finished_at).label("oldest")]),
        )
        .select_from(jobs.outerjoin(queue_row, queue_row.c.queue == jobs.c.queue))
        .where(
            jobs.c.finished_at.is_not(None),
            jobs.c.status.in_([status_literal(JobStatus.DONE), status_literal(JobStatus.FAILED)]),
            jobs.c.finished_at < func.now() - limit - margin,
        )
        .group_by(jobs.c.queue, kind)
        .order_by(jobs.c.queue, kind)
    )
