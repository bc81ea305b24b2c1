"""Core statements of workflows (pgqueue_0013): dependencies between jobs. Pure builders, no I/O.

A job enqueued with ``depends_on`` is inserted by the ordinary enqueue statements with ``run_at =
WAITING_RUN_AT`` (:mod:`pgqueue.enqueue_options`; not ready: the claim's range scan of
``jobs_ready_idx`` stops before it, as before a future job), then :data:`ATTACH` records its
edges and its count of unfinished dependencies in the same transaction. The release is the
``jobs_release`` trigger of the revision, fired by whatever statement finishes a dependency.

Why ``ATTACH`` sets ``has_dependents`` on each dependency (an ``UPDATE``, so a row lock): it orders
the enqueue against the dependency's completion. If the completion updated the row first, the
enqueue waits for it and reads ``done`` (not counted); if the enqueue locked it first, the
completion waits, then carries ``has_dependents`` into its new row version and fires the trigger,
whose fresh snapshot sees the committed edge. Either way the edge is counted exactly once.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    ARRAY,
    BigInteger,
    Boolean,
    ColumnElement,
    Integer,
    Select,
    Text,
    Update,
    bindparam,
    case,
    cast,
    func,
    null,
    select,
    true,
)
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.functions import FunctionElement

from pgqueue.models import (
    JOB_RESULT_COLUMNS,
    JobState,
    JobStatus,
    dependencies_table,
    in_state,
    is_live,
    jobs_table,
    status_literal,
)

jobs = jobs_table
edges = dependencies_table


class DependencyErrorText(FunctionElement[str]):
    """``jobs_dependency_error(cause, cancelled)`` (pgqueue_0014): the ``last_error`` of a job
    failed by its dependency ``cause``, written once in the database for the enqueue's
    :data:`ATTACH` and the ``jobs_release`` trigger. Rendered in the schema of the ``jobs`` table
    the statement runs against (``use_schema``'s translation applies to it as to the table)."""

    type = Text()
    inherit_cache = True
    name = "jobs_dependency_error"


@compiles(DependencyErrorText)
def _render_dependency_error(element: DependencyErrorText, compiler: Any, **kw: Any) -> str:
    schema = compiler.preparer.schema_for_object(jobs)
    name = f"{compiler.preparer.quote_schema(schema)}.{element.name}" if schema else element.name
    return f"{name}({compiler.process(element.clauses, **kw)})"


def _deps() -> Any:
    return bindparam("depends_on", type_=ARRAY(BigInteger))


#: Which of ``:depends_on`` exist. Returns ``id``. Run before anything is inserted, so an unknown
#: id is refused with nothing written.
DEPENDENCIES_FOUND: Select[Any] = select(jobs.c.id).where(jobs.c.id == func.any(_deps()))

_parents = (
    jobs.update()
    .where(jobs.c.id == func.any(_deps()))
    .values(has_dependents=true())
    .returning(jobs.c.id, jobs.c.status, jobs.c.cancelled_at)
    .cte("parents")
    .prefix_with("MATERIALIZED")
)

_children = (
    func.unnest(bindparam("job_ids", type_=ARRAY(BigInteger)))
    .table_valued("job_id")
    .render_derived(name="children")
)

_edges = (
    edges.insert()
    .from_select(
        ["job_id", "depends_on", "pending", "run_on_failure"],
        select(
            _children.c.job_id,
            _parents.c.id,
            is_live(_parents.c.status),
            bindparam("run_on_failure", type_=Boolean),
        ).select_from(_children.join(_parents, true())),
    )
    .cte("edges")
)

_failed = _parents.c.status == status_literal(JobStatus.FAILED)
_summary = (
    select(
        func.count().filter(is_live(_parents.c.status)).label("unfinished"),
        func.min(_parents.c.id).filter(_failed).label("broken"),
        func.bool_or(_parents.c.cancelled_at.is_not(None)).filter(_failed).label("cancelled"),
    )
    .select_from(_parents)
    .cte("summary")
)


def _one(column: Any) -> Any:
    """A value of the one-row ``summary``, as a scalar subquery (no FROM item in the UPDATE)."""
    return select(column).scalar_subquery()


_unfinished_count = _one(_summary.c.unfinished)
_broken = _one(_summary.c.broken)
_cancelled = _one(_summary.c.cancelled)
# A dependency already failed for good (or cancelled) fails the new job at once, unless it runs
# on dependency failure: the same outcome as if it had failed after the enqueue.
_doomed = _broken.is_not(None) & ~bindparam("run_on_failure", type_=Boolean)
_why = DependencyErrorText(_broken, _cancelled)

#: Record that each of ``:job_ids`` (just inserted, ``run_at = WAITING_RUN_AT``) waits for each of
#: ``:depends_on`` (which exist, checked by :data:`DEPENDENCIES_FOUND`); ``:run_on_failure``.
#: A job whose dependencies are all done is ready at once. Returns ``id, status``.
ATTACH: Update = (
    jobs.update()
    .add_cte(_edges)
    .where(jobs.c.id == func.any(bindparam("job_ids", type_=ARRAY(BigInteger))))
    .values(
        waiting_on=case((_doomed, 0), else_=cast(_unfinished_count, Integer)),
        run_at=case(
            (_doomed | (_unfinished_count == 0), func.now()),
            else_=jobs.c.run_at,
        ),
        status=case((_doomed, status_literal(JobStatus.FAILED)), else_=jobs.c.status),
        last_error=case((_doomed, _why), else_=jobs.c.last_error),
        finished_at=case((_doomed, func.now()), else_=null()),
        cancelled_at=case((_doomed & _cancelled, func.now()), else_=null()),
    )
    .returning(jobs.c.id, jobs.c.status)
)


_down = (
    select(edges.c.job_id.label("id"))
    .where(edges.c.depends_on == func.any(bindparam("job_ids", type_=ARRAY(BigInteger))))
    .cte("down", recursive=True)
)
_down = _down.union(select(edges.c.job_id).where(edges.c.depends_on == _down.c.id))

#: The jobs waiting (transitively) for one of ``:job_ids`` that this transaction cancelled with
#: them (the ``jobs_release`` trigger stamps ``cancelled_at = now()``). Returns ``id``.
CANCELLED_DEPENDENTS: Select[Any] = (
    select(jobs.c.id)
    .join(_down, jobs.c.id == _down.c.id)
    .where(
        jobs.c.cancelled_at == func.now(),
        jobs.c.status == status_literal(JobStatus.FAILED),
        jobs.c.id != func.all(bindparam("job_ids", type_=ARRAY(BigInteger))),
    )
    .order_by(jobs.c.id)
)


#: The outcome of every job ``:job_id`` depends on (:data:`pgqueue.models.JOB_RESULT_COLUMNS`,
#: as :data:`pgqueue._sql.statements.JOB_RESULT`), for
#: :meth:`pgqueue.JobContext.dependency_results`: one index scan of the edges' primary key by
#: ``job_id``'s index, one primary-key probe per dependency. Ordered by id.
DEPENDENCY_RESULTS: Select[Any] = (
    select(*JOB_RESULT_COLUMNS)
    .join(edges, edges.c.depends_on == jobs.c.id)
    .where(edges.c.job_id == bindparam("job_id", type_=BigInteger))
    .order_by(jobs.c.id)
)


#: How many ids :func:`waiting_for` gives of one job: a fan-in of 10,000 members shows its first
#: ones (``waiting_on`` says how many there are).
WAITING_FOR_LIMIT = 20


def waiting_for(limit: int = WAITING_FOR_LIMIT) -> ColumnElement[Any]:
    """The ids a waiting job waits for, the first ``limit`` by id: its pending edges, the
    dependencies that exist and have not finished; ``NULL`` for a job in any other state.

    Correlated with the enclosing ``jobs`` row; the subquery runs for waiting rows only (one
    probe of ``jobs_dependencies_job_id_idx`` each), so a page of finished jobs costs nothing
    more.
    """
    pending = (
        select(edges.c.depends_on)
        .where(edges.c.job_id == jobs.c.id, edges.c.pending)
        .order_by(edges.c.depends_on)
        .limit(limit)
        .scalar_subquery()
    )
    return case((in_state(JobState.WAITING), func.array(pending, type_=ARRAY(BigInteger))))


def _named_ids() -> Any:
    return jobs.c.id == func.any(bindparam("job_ids", type_=ARRAY(BigInteger)))


#: The waiting jobs among ``:job_ids``, and what each waits for (:func:`waiting_for`): what a
#: retry refuses, before it writes anything. Returns ``id, waiting_for``, by id.
WAITING_AMONG: Select[Any] = (
    select(jobs.c.id, waiting_for().label("waiting_for"))
    .where(_named_ids(), in_state(JobState.WAITING))
    .order_by(jobs.c.id)
)

#: Lock the waiting jobs among ``:job_ids``, in id order (the order of every batched statement
#: of the worker). Returns ``id``. The first statement of an unblock: see :data:`UNBLOCK`.
LOCK_WAITING: Select[Any] = (
    select(jobs.c.id)
    .where(_named_ids(), in_state(JobState.WAITING))
    .order_by(jobs.c.id)
    .with_for_update()
)

#: How many dependencies a job waits for that exist and have not finished: its pending edges
#: (correlated with the enclosing ``jobs`` row). A waiting job's ``waiting_on`` equals it, until a
#: dependency's row is deleted by hand: its edge goes with it (``ON DELETE CASCADE``), the count
#: does not, and the job would wait for ever (:data:`MISSING_DEPENDENCY`).
PENDING_EDGES: ColumnElement[int] = (
    select(func.count())
    .select_from(edges)
    .where(edges.c.job_id == jobs.c.id, edges.c.pending)
    .scalar_subquery()
)
#: A waiting job that waits for a dependency that no longer exists: what ``pgqueue doctor``
#: reports and :data:`UNBLOCK` repairs.
MISSING_DEPENDENCY: ColumnElement[bool] = in_state(JobState.WAITING) & (
    jobs.c.waiting_on > PENDING_EDGES
)

#: Count again what each waiting job of ``:job_ids`` waits for: its pending edges, which a
#: dependency deleted by hand took with it (``ON DELETE CASCADE``), so a missing dependency stops
#: counting; a job left waiting for nothing is ready now. Only jobs whose count drops are
#: written. Returns ``id``.
#:
#: Why its rows are locked first, by :data:`LOCK_WAITING` in a statement of its own: a
#: completion of a dependency settles its edge and then decrements the job, both before it
#: commits. Were the count taken in the statement that waits for the job's row, it would be read
#: in that statement's snapshot, from before the completion committed: the settled edge counted
#: again, the job waiting for ever on a count one too high. Once the rows are locked, this
#: statement's fresh snapshot sees every completion that came before, and any later one waits
#: for the lock and decrements the count taken here (its edge still pending in it).
UNBLOCK: Update = (
    jobs.update()
    .where(_named_ids(), MISSING_DEPENDENCY)
    .values(
        waiting_on=PENDING_EDGES,
        run_at=case((PENDING_EDGES == 0, func.now()), else_=jobs.c.run_at),
    )
    .returning(jobs.c.id)
)
