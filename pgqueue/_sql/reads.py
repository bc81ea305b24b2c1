"""Every read query of the operator side, as data: admin, doctor, testing and the dashboard.

What :mod:`pgqueue.admin` (``pgqueue list/show/stats``, the dashboard's pages and snapshot),
:mod:`pgqueue.doctor` and :mod:`pgqueue.testing` run, built here once and executed there: pure
builders and constants, no I/O (a builder may check its arguments, raising before any SQL). The
queue's own statements (claim, lifecycle, enqueue, the worker's row) live in
:mod:`pgqueue._sql.statements`.

Core is used wherever it can say the query. Raw ``text()`` stays where it cannot, each with a
comment saying why: the catalog views and functions without models (``pg_stat_activity``,
``pg_class``, ``pg_index`` ...), a recursive skip scan whose shape its plan depends on, and the
doctor's counts, which must run on a schema older than the models (before pgqueue_0010).

May import: :mod:`pgqueue.models`, :mod:`pgqueue._sql.statements`, :mod:`pgqueue.errors` and
:mod:`pgqueue._base` (like the rest of :mod:`pgqueue._sql`). Never admin, doctor, the runners,
the worker, the CLI or the dashboard.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Float,
    Integer,
    Interval,
    Select,
    and_,
    bindparam,
    case,
    cast,
    func,
    literal,
    literal_column,
    select,
    table,
    text,
    true,
    union_all,
)
from sqlalchemy import Text as TextType
from sqlalchemy.dialects.postgresql import ARRAY, JSONB
from sqlalchemy.sql.elements import Label
from sqlalchemy.sql.expression import column

from pgqueue._base.connections import WORKER_PREFIX
from pgqueue._base.readable import READABLE_FROM, STORED_SUFFIX, readable
from pgqueue._base.storable import unstorable
from pgqueue._base.validation import check_unique_key, encode_payload
from pgqueue._sql.statements import loose_index_scan, status_literal
from pgqueue._sql.workflow_statements import MISSING_DEPENDENCY, PENDING_EDGES, waiting_for
from pgqueue.enqueue_options import WAITING_RUN_AT
from pgqueue.errors import InvalidArgumentError, InvalidArgumentTypeError
from pgqueue.models import (
    JOB_STATE,
    JobState,
    JobStatus,
    dependencies_table,
    in_state,
    is_live,
    jobs_table,
    queues_table,
    workers_table,
)

jobs = jobs_table

# -- admin: jobs ----------------------------------------------------------------------------------

#: The columns ``pgqueue list`` and ``show`` print, in order. ``status`` is the job's
#: :class:`pgqueue.JobState` (``waiting``, ``cancelled``: :data:`pgqueue.models.JOB_STATE`), not
#: the stored status; ``run_at`` is ``None`` for a waiting job (it has no time of its own until
#: its dependencies are done), and ``waiting_for`` the ids it waits for
#: (:func:`pgqueue._sql.workflow_statements.waiting_for`), ``None`` for a job in any other state.
JOB_COLUMNS = (
    "id",
    "queue",
    "status",
    "priority",
    "attempts",
    "max_attempts",
    "run_at",
    "locked_until",
    "last_error",
    "unique_key",
    "created_at",
    "finished_at",
    "task",
    "waiting_on",
    "waiting_for",
)


def _shown(columns: Iterable[Any]) -> list[ColumnElement[Any]]:
    """``columns`` of ``jobs`` as the operator's readers show them (:data:`JOB_COLUMNS`): through
    :func:`readable`, ``status`` as the state, no ``run_at`` while waiting, and ``waiting_for``
    after them."""
    waiting = in_state(JobState.WAITING)
    # No fake time either for a job awaiting a signal without a timeout (pgqueue_0019).
    no_time = waiting | (jobs.c.run_at == literal(WAITING_RUN_AT, jobs.c.run_at.type))
    shown: list[ColumnElement[Any]] = []
    for selected in readable(columns):
        if selected.name == "status":
            selected = JOB_STATE.label("status")
        elif selected.name in ("run_at", "run_at" + STORED_SUFFIX):
            assert isinstance(selected, Label)  # readable() labels every timestamp
            selected = case((~no_time, selected.element)).label(selected.name)
        shown.append(selected)
    return [*shown, waiting_for().label("waiting_for")]


#: The columns of ``jobs`` behind :data:`JOB_COLUMNS` (``waiting_for`` is derived).
_LISTED = tuple(name for name in JOB_COLUMNS if name != "waiting_for")


#: Most characters of ``error_contains``: a search, not a document.
MAX_SEARCH_CHARS = 1000


def list_jobs_statement(
    *,
    queue: str | None = None,
    status: JobState | JobStatus | None = None,
    limit: int = 50,
    before_id: int | None = None,
    payload_contains: Any = None,
    error_contains: str | None = None,
    unique_key: str | None = None,
    with_payload: bool = True,
    task: str | None = None,
) -> Select[Any]:
    """The statement :func:`pgqueue.admin.list_jobs` runs (its plan is checked on a million done
    jobs)."""
    names = (*_LISTED, "payload") if with_payload else _LISTED
    stmt: Select[Any] = select(*_shown(jobs.c[name] for name in names))
    if queue is not None:
        stmt = stmt.where(jobs.c.queue == bindparam("queue_name", queue))
    if status is not None:
        stmt = stmt.where(in_state(status))
    if before_id is not None:
        stmt = stmt.where(jobs.c.id < bindparam("before_id", before_id, type_=BigInteger))
    if payload_contains is not None:
        try:
            wanted = encode_payload(payload_contains)
        except InvalidArgumentError as exc:
            raise InvalidArgumentError("payload_contains", exc.problem) from exc
        stmt = stmt.where(
            jobs.c.payload.op("@>")(
                cast(bindparam("payload_contains", wanted, type_=TextType), JSONB)
            )
        )
    if error_contains is not None:
        text_ = _search_text("error_contains", error_contains)
        stmt = stmt.where(jobs.c.last_error.icontains(text_, autoescape=True))
    if unique_key is not None:
        key = check_unique_key(unique_key)
        stmt = stmt.where(jobs.c.unique_key == bindparam("unique_key", key, type_=TextType))
    if task is not None:
        name = _search_text("task", task)
        stmt = stmt.where(jobs.c.task == bindparam("task_name", name, type_=TextType))
    return stmt.order_by(jobs.c.id.desc()).limit(limit)


def _search_text(name: str, value: object) -> str:
    if not isinstance(value, str):
        raise InvalidArgumentTypeError(name, "str", value)
    if not value or len(value) > MAX_SEARCH_CHARS:
        raise InvalidArgumentError(name, f"must be 1 to {MAX_SEARCH_CHARS} characters")
    problem = unstorable(value)
    if problem is not None:
        raise InvalidArgumentError(name, problem)
    return value


def job_statement(job_id: int) -> Select[Any]:
    """:func:`pgqueue.admin.get_job` without ``payload_chars``: the whole row of ``job_id``
    (checked by the caller)."""
    return select(*_shown(jobs.c)).where(jobs.c.id == job_id)


def get_job_statement(payload_chars: int) -> Select[Any]:
    """:func:`pgqueue.admin.get_job` with ``payload_chars`` (parameter ``job_id``): every column
    but the payload, and the payload's text cut on the server (computed once, in a subquery)."""
    as_text = (
        select(cast(jobs.c.payload, TextType).label("t"))
        .correlate(jobs)
        .offset(literal_column("0"))
        .lateral("p")
    )
    columns = _shown(c for c in jobs.c if c.name != "payload")
    return (
        select(
            *columns,
            func.left(as_text.c.t, literal(payload_chars, Integer, literal_execute=True)).label(
                "payload_text"
            ),
            func.length(as_text.c.t).label("payload_length"),
        )
        .select_from(jobs.join(as_text, true()))
        .where(jobs.c.id == bindparam("job_id", type_=BigInteger))
    )


def job_links_statement() -> Any:
    """:func:`pgqueue.admin.job_links` (parameters ``job_id``, ``limit``): ``direction, id,
    status`` (its :class:`pgqueue.JobState`) of the jobs ``job_id`` waits for (``'waits_for'``)
    and of those that wait for it (``'waited_by'``), at most ``limit`` of each, by id: one index
    scan each (the edges' primary key, ``jobs_dependencies_job_id_idx``), so a fan-in of 10,000
    members shows its first ones.
    """
    edges = dependencies_table
    job_id = bindparam("job_id", type_=BigInteger)
    limit = bindparam("limit", type_=Integer)

    def side(direction: str, near: Any, far: Any) -> Any:
        return (
            select(literal(direction).label("direction"), jobs.c.id, JOB_STATE.label("status"))
            .select_from(edges.join(jobs, jobs.c.id == far))
            .where(near == job_id)
            .order_by(jobs.c.id)
            .limit(limit)
        )

    return union_all(
        side("waits_for", edges.c.job_id, edges.c.depends_on),
        side("waited_by", edges.c.depends_on, edges.c.job_id),
    )


def job_statuses_statement(job_ids: list[int]) -> Select[Any]:
    """``id, status`` (its :class:`pgqueue.JobState`) of each existing id
    (:func:`pgqueue.admin.job_statuses`)."""
    return select(jobs.c.id, JOB_STATE.label("status")).where(jobs.c.id.in_(job_ids))


def key_holders_statement(job_ids: list[int]) -> Select[Any]:
    """``id, unique_key, holder_id`` for each of ``job_ids`` whose unique key another queued or
    running job of its queue holds (:func:`pgqueue.admin.key_holders`)."""
    holder = jobs.alias("holder")
    return (
        select(jobs.c.id, jobs.c.unique_key, holder.c.id.label("holder_id"))
        .select_from(jobs)
        .join(
            holder,
            and_(
                holder.c.queue == jobs.c.queue,
                holder.c.unique_key == jobs.c.unique_key,
                holder.c.unique_key.is_not(None),
                is_live(holder.c.status),
                holder.c.id != jobs.c.id,
            ),
        )
        .where(jobs.c.id.in_(job_ids))
    )


# -- admin: statistics ----------------------------------------------------------------------------


def _count(*conditions: Any) -> Any:
    return func.count().filter(and_(*conditions))


def queue_stats_statement(*, one_queue: bool = False) -> Select[Any]:
    """The statement :func:`pgqueue.admin.queue_stats` runs: one pass over ``jobs``, counting
    each :class:`pgqueue.JobState` by its rule (:func:`pgqueue.models.in_state`), ``queued`` as
    ``ready`` and ``scheduled``; with ``one_queue``, over the rows of queue ``:queue_name``
    only."""
    queued = in_state(JobState.QUEUED)
    running = in_state(JobState.RUNNING)
    ready = and_(queued, jobs.c.run_at <= func.now())
    # greatest(): a run_at of '-infinity' (written by SQL) would fail the subtraction below.
    oldest_ready = func.min(func.greatest(jobs.c.run_at, READABLE_FROM)).filter(ready)
    stmt = (
        select(
            jobs.c.queue,
            _count(ready).label("ready"),
            _count(queued, jobs.c.run_at > func.now()).label("scheduled"),
            _count(in_state(JobState.WAITING)).label("waiting"),
            _count(running).label("running"),
            _count(running, jobs.c.locked_until < func.now()).label("expired_leases"),
            _count(in_state(JobState.DONE)).label("done"),
            _count(in_state(JobState.FAILED)).label("failed"),
            _count(in_state(JobState.CANCELLED)).label("cancelled"),
            _count(in_state(JobState.EXPIRED)).label("expired"),
            _count(in_state(JobState.SLEEPING)).label("sleeping"),
            _count(in_state(JobState.AWAITING_SIGNAL)).label("awaiting_signal"),
            func.extract("epoch", func.now() - oldest_ready)
            .cast(Float)
            .label("oldest_ready_age_s"),
        )
        .group_by(jobs.c.queue)
        .order_by(jobs.c.queue)
    )
    if one_queue:
        stmt = stmt.where(jobs.c.queue == bindparam("queue_name", type_=TextType))
    return stmt


#: Done jobs of one queue counted one by one (an index-only range of ``jobs_prune_idx``)
#: before the queue's page gives the planner's estimate instead: a bounded read whatever the
#: history (:func:`queue_counts_statement`).
DONE_COUNTED = 10_000


def queue_counts_statement() -> Select[Any]:
    """The statement :func:`pgqueue.admin.queue_counts` runs: the counts of queue
    ``:queue_name`` that :func:`queue_stats_statement` gives, each read from an index of its
    own rows rather than a pass over the queue's history.

    The live and failed states are counted exactly, each over the rows of its partial index
    (queued: ``jobs_ready_idx``; running: ``jobs_lease_idx``; failed, cancelled and expired:
    ``jobs_failed_idx``), so their cost follows the backlog and the failures kept, never the
    done history. Done jobs are counted up to :data:`DONE_COUNTED` (``done`` is that many when
    there are at least as many: the caller estimates then) by an index-only range of
    ``jobs_prune_idx`` (jobs finished since pgqueue_0009 have ``finished_at``).
    """
    columns, (first, *others) = _counts(bindparam("queue_name", type_=TextType), lateral=False)
    return select(*columns).select_from(_joined(first, others))


def all_queue_counts_statement() -> Select[Any]:
    """The statement :func:`pgqueue.admin.all_queue_counts` runs: ``queue`` and the counts of
    :func:`queue_counts_statement` for every queue with a job, by name, in one statement.

    The queues are found by loose index scans (one probe per queue) of ``jobs_ready_idx`` (the
    queued jobs) and ``jobs_prune_idx`` (the finished ones), and among the running jobs; each
    queue's counts are then read as :func:`queue_counts_statement` reads them, a ``LATERAL``
    per queue: the dashboard's overview costs what its queues' live jobs and up to
    :data:`DONE_COUNTED` done entries each cost, never a pass over the table's history.
    """
    queued = loose_index_scan(
        jobs.c.queue, jobs.c.status == status_literal(JobStatus.QUEUED), name="queued_queues"
    )
    finished = loose_index_scan(
        jobs.c.queue, jobs.c.finished_at.is_not(None), name="finished_queues"
    )
    running = select(jobs.c.queue.label("value")).where(
        jobs.c.status == status_literal(JobStatus.RUNNING)
    )
    names = select(queued.c.value).union(select(finished.c.value), running).subquery("queue_names")
    columns, reads = _counts(names.c.value, lateral=True)
    return (
        select(names.c.value.label("queue"), *columns)
        .select_from(_joined(names, reads))
        .where(names.c.value.is_not(None))
        .order_by(names.c.value)
    )


def _joined(first: Any, reads: list[Any]) -> Any:
    """``first`` joined on ``true`` with each of ``reads`` (one row each)."""
    for read in reads:
        first = first.join(read, true())
    return first


def _counts(queue: Any, *, lateral: bool) -> tuple[list[Any], list[Any]]:
    """The columns of :func:`queue_counts_statement` for the queue ``queue`` names (a parameter,
    or the column of an enclosing query, then each read is a ``LATERAL``), and the reads they
    come from (one row each: joined on ``true``)."""
    name = jobs.c.queue == queue

    def derived(stmt: Select[Any], label: str) -> Any:
        # Only ``jobs`` is each read's own: the queue's column (two levels up, for the done
        # rows) comes from the enclosing query.
        stmt = stmt.correlate_except(jobs)
        return stmt.lateral(label) if lateral else stmt.subquery(label)

    def of(status: JobStatus, *columns: Any) -> Any:
        return derived(
            select(*columns).where(name, jobs.c.status == status_literal(status)), status.value
        )

    queued = in_state(JobState.QUEUED)
    ready = and_(queued, jobs.c.run_at <= func.now())
    live = of(
        JobStatus.QUEUED,
        _count(ready).label("ready"),
        _count(queued, jobs.c.run_at > func.now()).label("scheduled"),
        _count(in_state(JobState.WAITING)).label("waiting"),
        _count(in_state(JobState.SLEEPING)).label("sleeping"),
        _count(in_state(JobState.AWAITING_SIGNAL)).label("awaiting_signal"),
        func.min(func.greatest(jobs.c.run_at, READABLE_FROM)).filter(ready).label("oldest"),
    )
    running = of(
        JobStatus.RUNNING,
        func.count().label("running"),
        _count(jobs.c.locked_until < func.now()).label("expired_leases"),
    )
    failed = of(
        JobStatus.FAILED,
        _count(in_state(JobState.FAILED)).label("failed"),
        _count(in_state(JobState.CANCELLED)).label("cancelled"),
        _count(in_state(JobState.EXPIRED)).label("expired"),
    )
    # A plain subquery in the FROM of the done count: its reference to the queue's column of
    # an enclosing query is an outer reference (two levels up for all queues), no LATERAL.
    done_rows = (
        select(literal(1))
        .where(
            name,
            jobs.c.status == status_literal(JobStatus.DONE),
            jobs.c.finished_at.is_not(None),
        )
        # In the index's order: the planner walks jobs_prune_idx (index-only), where a bare
        # LIMIT let it choose a scan of the table that stops early, or never, in another
        # queue's rows.
        .order_by(jobs.c.finished_at)
        .limit(literal_column(str(DONE_COUNTED)))
        .correlate_except(jobs)
        .subquery("done_rows")
    )
    done = derived(select(func.count().label("done")).select_from(done_rows), "done")
    columns = [
        live.c.ready,
        live.c.scheduled,
        live.c.waiting,
        running.c.running,
        running.c.expired_leases,
        done.c.done,
        failed.c.failed,
        failed.c.cancelled,
        failed.c.expired,
        live.c.sleeping,
        live.c.awaiting_signal,
        func.extract("epoch", func.now() - live.c.oldest).cast(Float).label("oldest_ready_age_s"),
    ]
    return columns, [live, running, failed, done]


#: The planner's estimate of the done jobs of queue ``:queue_name`` (``EXPLAIN``'s row count
#: for them, from the table's statistics): what the queue's page shows past
#: :data:`DONE_COUNTED`, labelled as an estimate.
DONE_ESTIMATE = text(
    "EXPLAIN (FORMAT JSON) SELECT 1 FROM jobs WHERE queue = :queue_name AND status = 'done'"
)


def queue_overview_statement() -> Select[Any]:
    """The statement :func:`pgqueue.admin.queue_overview` runs: every queue with queued or
    running jobs or with stored settings (``jobs_queues``), its pause, limits, ready and running
    counts, by name.

    Only live jobs are read (``status IN ('queued', 'running')``, the rows of the partial
    ``jobs_ready_idx`` and ``jobs_lease_idx``), never the finished history: a queue whose jobs
    have all finished and that has no settings is not listed (``pgqueue stats`` lists it).
    """
    queues = queues_table
    live = (
        select(
            jobs.c.queue,
            _count(in_state(JobState.QUEUED), jobs.c.run_at <= func.now()).label("ready"),
            _count(in_state(JobState.RUNNING)).label("running"),
            _count(in_state(JobState.SLEEPING)).label("sleeping"),
            _count(in_state(JobState.AWAITING_SIGNAL)).label("awaiting_signal"),
        )
        .where(is_live(jobs.c.status))
        .group_by(jobs.c.queue)
        .subquery("live")
    )
    name = func.coalesce(queues.c.queue, live.c.queue)
    return (
        select(
            name.label("queue"),
            func.coalesce(queues.c.paused, literal(False)).label("paused"),
            queues.c.concurrency,
            queues.c.per_key,
            queues.c.rate_limit,
            queues.c.rate_period,
            func.coalesce(live.c.ready, 0).label("ready"),
            func.coalesce(live.c.running, 0).label("running"),
            func.coalesce(live.c.sleeping, 0).label("sleeping"),
            func.coalesce(live.c.awaiting_signal, 0).label("awaiting_signal"),
        )
        .select_from(queues.outerjoin(live, queues.c.queue == live.c.queue, full=True))
        .order_by(name)
    )


def finished_per_minute_statement(
    window: timedelta = timedelta(hours=1), *, one_queue: bool = False
) -> Select[Any]:
    """The statement :func:`pgqueue.admin.finished_per_minute` runs: per queue, a range scan of
    ``jobs_prune_idx`` over its ``done`` and ``failed`` jobs finished within the window; the
    finished rows need no index of their own (one index entry per finished job is what the
    drain pays for). The queues: every one with a finished job (a loose scan of the same
    index), or with ``one_queue`` the one bound as ``:queue_name``."""
    if one_queue:
        queues = select(bindparam("queue_name", type_=TextType).label("value")).cte("one_queue")
    else:
        queues = loose_index_scan(
            jobs.c.queue, jobs.c.finished_at.is_not(None), name="finished_queues"
        )
    recent = (
        select(jobs.c.status, jobs.c.finished_at)
        .where(
            jobs.c.queue == queues.c.value,
            jobs.c.status.in_([status_literal(JobStatus.DONE), status_literal(JobStatus.FAILED)]),
            jobs.c.finished_at >= func.now() - bindparam("window", window, type_=Interval),
            # Never in the future, but for a row written by SQL ('infinity'): not a minute.
            jobs.c.finished_at <= func.now(),
        )
        .lateral("recent")
    )
    minute = func.date_trunc("minute", recent.c.finished_at).label("minute")
    return (
        select(
            queues.c.value.label("queue"),
            minute,
            func.floor(func.extract("epoch", func.date_trunc("minute", func.now()) - minute) / 60)
            .cast(Integer)
            .label("minutes_ago"),
            _count(recent.c.status == status_literal(JobStatus.DONE)).label("done"),
            _count(recent.c.status == status_literal(JobStatus.FAILED)).label("failed"),
        )
        .select_from(queues.join(recent, true()))
        .where(queues.c.value.is_not(None))
        .group_by(queues.c.value, minute)
        .order_by(minute, queues.c.value)
    )


# pg_stat_activity is a catalog view without a model: its columns are named in text.
OLDEST_SNAPSHOT = text(
    """
    SELECT pid, application_name, state,
           greatest(age(backend_xmin), age(backend_xid)) AS xmin_age_xids,
           extract(epoch FROM now() - xact_start)::float AS xact_age_s
    FROM pg_stat_activity
    WHERE datname = current_database() AND pid <> pg_backend_pid()
      AND (backend_xmin IS NOT NULL OR backend_xid IS NOT NULL)
    ORDER BY greatest(age(backend_xmin), age(backend_xid)) DESC LIMIT 1
    """
)


# pg_stat_user_tables, a catalog view without a model.
TABLE_STATS = text(
    """
    SELECT n_live_tup, n_dead_tup, last_autovacuum, last_vacuum, last_autoanalyze
    FROM pg_stat_user_tables WHERE relid = to_regclass('jobs')
    """
)


# to_regclass() answers on a schema that may not be there; no table to select from.
SCHEMA_PRESENT = text("SELECT to_regclass('jobs') IS NOT NULL")


# -- admin: workers -------------------------------------------------------------------------------

_activity = table(
    "pg_stat_activity",
    column("application_name"),
    column("backend_start"),
    column("backend_type"),
    column("datname"),
    schema="pg_catalog",
)


def connected_workers_statement() -> Select[Any]:
    """The statement :func:`pgqueue.admin.connected_workers` runs (parameter ``prefix``)."""
    connected = (
        select(
            _activity.c.application_name.label("name"),
            func.min(_activity.c.backend_start).label("connected_since"),
            func.count().label("connections"),
        )
        .where(
            _activity.c.datname == func.current_database(),
            _activity.c.backend_type == literal_column("'client backend'"),
            func.starts_with(
                _activity.c.application_name, bindparam("prefix", WORKER_PREFIX, type_=TextType)
            ),
        )
        .group_by(_activity.c.application_name)
        .cte("connected")
    )
    # The literal status: only the partial jobs_lease_idx (running jobs) is read, never history.
    held = (
        select(jobs.c.locked_by, func.count().label("jobs_held"))
        .where(
            jobs.c.status == status_literal(JobStatus.RUNNING),
            jobs.c.locked_by.in_(select(connected.c.name)),
        )
        .group_by(jobs.c.locked_by)
        .cte("held")
    )
    workers = workers_table
    return (
        select(
            connected.c.name,
            workers.c.host,
            workers.c.pid,
            workers.c.queues,
            func.coalesce(workers.c.started_at, connected.c.connected_since).label("since"),
            connected.c.connections,
            func.coalesce(held.c.jobs_held, literal_column("0")).label("jobs_held"),
            func.coalesce(workers.c.stuck, literal_column("0")).label("stuck"),
        )
        .select_from(
            connected.outerjoin(workers, workers.c.name == connected.c.name).outerjoin(
                held, held.c.locked_by == connected.c.name
            )
        )
        .order_by(connected.c.name)
    )


# -- doctor: catalog checks and counts ------------------------------------------------------

# to_regclass() on a table that may be missing, and alembic_version, which has no model here.
ALEMBIC_VERSION_PRESENT = text("SELECT to_regclass('alembic_version') IS NOT NULL")
ALEMBIC_VERSIONS = text("SELECT version_num FROM alembic_version")

# pg_index and pg_class, catalogs without models.
INDEXES = text(
    """
    SELECT c.relname AS name, i.indisvalid AS valid, i.indisready AS ready
    FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
    WHERE i.indrelid = to_regclass('jobs')
    """
)

# pg_trigger, a catalog without a model.
TRIGGER = text(
    """
    SELECT tgenabled FROM pg_trigger
    WHERE tgrelid = to_regclass('jobs') AND tgname = 'jobs_notify' AND NOT tgisinternal
    """
)

# pg_roles and pg_has_role(), a catalog without a model.
CAN_SEE_ALL = text(
    """
    SELECT rolsuper OR pg_has_role(current_user, 'pg_read_all_stats', 'USAGE')
    FROM pg_roles WHERE rolname = current_user
    """
)

# pg_stat_activity, a catalog view without a model.
LONG_TRANSACTIONS = text(
    """
    SELECT pid, usename AS user, application_name, state,
           extract(epoch FROM now() - xact_start)::float AS xact_age_s,
           extract(epoch FROM now() - state_change)::float AS state_age_s,
           greatest(age(backend_xmin), age(backend_xid)) AS xmin_age_xids
    FROM pg_stat_activity
    WHERE datname = current_database() AND pid <> pg_backend_pid()
      AND xact_start IS NOT NULL AND now() - xact_start > :threshold
    ORDER BY xact_start
    """
)

# pg_class and pg_options_to_table(), catalogs without models.
VACUUM_CONTEXT = text(
    """
    SELECT now() AS now,
           current_setting('autovacuum')::bool AS server_on,
           coalesce(
             (SELECT option_value::bool FROM pg_options_to_table(c.reloptions)
              WHERE option_name = 'autovacuum_enabled'),
             true
           ) AS table_on
    FROM pg_class c WHERE c.oid = to_regclass('jobs')
    """
)

# pg_class, a catalog without a model.
RELOPTIONS = text("SELECT reloptions FROM pg_class WHERE oid = to_regclass('jobs')")

# Text, not the model: its twin below runs on a jobs table older than the model (pgqueue_0010).
JOB_COUNTS = text(
    """
    SELECT
      count(*) FILTER (WHERE status = 'running' AND locked_until < now()) AS expired,
      count(*) FILTER (WHERE status = 'failed' AND cancelled_at IS NULL) AS failed,
      count(*) FILTER (WHERE status = 'failed' AND cancelled_at IS NOT NULL) AS cancelled,
      count(*) FILTER (WHERE status = 'done' AND created_at < now() - :horizon) AS old_done
    FROM jobs
    """
)

#: Before pgqueue_0010 no column tells a cancel (the revision check says to migrate).
JOB_COUNTS_BEFORE_0010 = text(
    """
    SELECT
      count(*) FILTER (WHERE status = 'running' AND locked_until < now()) AS expired,
      count(*) FILTER (WHERE status = 'failed') AS failed,
      0 AS cancelled,
      count(*) FILTER (WHERE status = 'done' AND created_at < now() - :horizon) AS old_done
    FROM jobs
    """
)

# Since pgqueue_0015: the failed jobs that are expired (``expires_in``), counted apart from the
# failed ones (a probe of the partial jobs_failed_idx, failed rows only). Text, as its twins.
EXPIRED_JOBS = text("SELECT count(*) FROM jobs WHERE status = 'failed' AND expired_at IS NOT NULL")
HAS_EXPIRED_AT = text(
    "SELECT EXISTS (SELECT FROM pg_attribute WHERE attrelid = to_regclass('jobs') "
    "AND attname = 'expired_at' AND NOT attisdropped)"
)

# pg_attribute, a catalog without a model.
HAS_CANCELLED_AT = text(
    "SELECT EXISTS (SELECT FROM pg_attribute WHERE attrelid = to_regclass('jobs') "
    "AND attname = 'cancelled_at' AND NOT attisdropped)"
)

# Text: a recursive skip scan, whose plan depends on this exact shape. Per queue, the oldest
# ready job's wait, in index probes rather than a pass over the backlog: a
# recursive skip scan of jobs_ready_idx finds each queue with queued jobs (one probe per queue),
# then one probe per priority level takes the level's first run_at, as the claim reads them. The
# 'queued' literal matches the partial index's predicate (a bound status would not). greatest(): a
# run_at of '-infinity' (written by SQL) would fail the subtraction (readable.READABLE_FROM).
BACKLOG = text(
    """
    WITH RECURSIVE queues(queue) AS (
      (SELECT queue FROM jobs WHERE status = 'queued' ORDER BY queue LIMIT 1)
      UNION ALL
      SELECT (SELECT j.queue FROM jobs j
              WHERE j.status = 'queued' AND j.queue > q.queue ORDER BY j.queue LIMIT 1)
      FROM queues q WHERE q.queue IS NOT NULL
    )
    SELECT q.queue,
           extract(epoch FROM now() - min(
             greatest(first.run_at, '0001-01-03 00:00:00+00'::timestamptz)
           ))::float AS oldest_ready_s
    FROM queues q
    CROSS JOIN generate_series(CAST(:lowest AS int), CAST(:highest AS int)) AS level
    CROSS JOIN LATERAL (
      SELECT j.run_at FROM jobs j
      WHERE j.status = 'queued' AND j.queue = q.queue AND j.priority = level
        AND j.run_at <= now()
      ORDER BY j.run_at LIMIT 1
    ) first
    WHERE q.queue IS NOT NULL
    GROUP BY q.queue
    ORDER BY oldest_ready_s DESC
    """
)

# pg_stat_activity, a catalog view without a model. Worker connections on this database,
# whatever their state or role (``application_name`` is visible without ``pg_read_all_stats``;
# ``backend_type`` is not).
WORKERS_HERE = text(
    """
    SELECT count(DISTINCT application_name) FROM pg_stat_activity
    WHERE datname = current_database() AND starts_with(application_name, :prefix)
    """
)

# to_regclass() and has_table_privilege() on a table that may be missing (before pgqueue_0013).
DEPENDENCIES_READABLE = text(
    "SELECT CASE WHEN to_regclass('jobs_dependencies') IS NULL THEN NULL "
    "ELSE has_table_privilege(to_regclass('jobs_dependencies'), 'SELECT') END"
)

# The same for the retention settings (before pgqueue_0016).
RETENTION_READABLE = text(
    "SELECT CASE WHEN to_regclass('jobs_retention') IS NULL THEN NULL "
    "ELSE has_table_privilege(to_regclass('jobs_retention'), 'SELECT') END"
)


def missing_dependencies_statement(limit: int) -> Select[Any]:
    """``id, queue, waiting_on, found, total`` of the first ``limit`` waiting jobs (by id) that
    wait for a dependency that no longer exists (:data:`MISSING_DEPENDENCY
    <pgqueue._sql.workflow_statements.MISSING_DEPENDENCY>`): ``found`` the dependencies still
    there and unfinished, ``total`` how many such jobs there are in all. Reads the queued rows
    only (``jobs_ready_idx``'s), and the edges of the waiting ones. Run after
    :data:`DEPENDENCIES_READABLE` said the edges' table is there (pgqueue_0013).
    """
    return (
        select(
            jobs.c.id,
            jobs.c.queue,
            jobs.c.waiting_on,
            PENDING_EDGES.label("found"),
            func.count().over().label("total"),
        )
        .where(MISSING_DEPENDENCY)
        .order_by(jobs.c.id)
        .limit(limit)
    )


# Server settings and pg_stat_activity: catalog views without models.
CONNECTION_LIMITS = text(
    """
    SELECT current_setting('max_connections')::int AS max_connections,
           current_setting('superuser_reserved_connections')::int
             + coalesce(nullif(current_setting('reserved_connections', true), '')::int, 0)
             AS reserved,
           (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')
             AS in_use
    """
)

# pg_stat_activity, a catalog view without a model.
WORKER_CONNECTIONS = text(
    """
    SELECT datname AS database, application_name, count(*) AS connections
    FROM pg_stat_activity
    WHERE backend_type = 'client backend' AND starts_with(application_name, :prefix)
    GROUP BY datname, application_name
    ORDER BY datname, application_name
    """
)

# has_table_privilege() on a table that may be missing (before pgqueue_0007): no model to say it.
PERIODIC_READABLE = text(
    "SELECT CASE WHEN to_regclass('jobs_periodic') IS NULL THEN NULL "
    "ELSE has_table_privilege(to_regclass('jobs_periodic'), 'SELECT') END"
)
# A server function, no table.
CURRENT_DATABASE = text("SELECT current_database()")


# -- testing: what a user's test asserts --------------------------------------------------------


def enqueued_ids_statement(
    queue: str | None,
    *,
    payload_subset: Any = None,
    priority: int | None = None,
    unique_key: str | None = None,
    task: str | None = None,
    args_json: str | None = None,
    kwargs_subset: Any = None,
) -> Select[Any]:
    """The ids :func:`pgqueue.testing.assert_enqueued` counts, by id (values checked by it).

    ``queue`` ``None``: any queue (a task's jobs, by ``task``); ``args_json``: the task call's
    positional arguments exactly, as JSON text; ``kwargs_subset``: contained in its keywords.
    """
    where = [] if queue is None else [jobs.c.queue == queue]
    if task is not None:
        where.append(jobs.c.task == task)
    if args_json is not None:
        where.append(jobs.c.payload["args"] == cast(literal(args_json, TextType), JSONB))
    if kwargs_subset is not None:
        where.append(jobs.c.payload.contains({"kwargs": kwargs_subset}))
    if payload_subset is not None:
        where.append(jobs.c.payload.contains(payload_subset))
    if priority is not None:
        where.append(jobs.c.priority == priority)
    if unique_key is not None:
        where.append(jobs.c.unique_key == unique_key)
    return select(jobs.c.id).where(*where).order_by(jobs.c.id)


def queue_jobs_statement(queue: str, limit: int) -> Select[Any]:
    """``id, status, priority, unique_key, payload`` of the first ``limit`` jobs of ``queue``."""
    columns = (jobs.c.id, jobs.c.status, jobs.c.priority, jobs.c.unique_key, jobs.c.payload)
    return select(*readable(columns)).where(jobs.c.queue == queue).order_by(jobs.c.id).limit(limit)


def other_queues_statement(queue: str) -> Select[Any]:
    """``queue, count`` of every queue but ``queue``, by name."""
    return (
        select(jobs.c.queue, func.count())
        .where(jobs.c.queue != queue)
        .group_by(jobs.c.queue)
        .order_by(jobs.c.queue)
    )


# -- the dashboard: periodic definitions ----------------------------------------------------------


def periodic_last_jobs_statement() -> Select[Any]:
    """The job each periodic definition enqueued for its last tick: ``name, id, status`` for the
    arrays ``:names``, ``:queues`` and ``:ticks`` (the ``scheduled_for`` header's text of each
    last tick), a definition without such a job absent. One walk per definition of its queue's
    jobs, newest id first, stopping at the first match."""
    wanted = (
        func.unnest(
            bindparam("names", type_=ARRAY(TextType)),
            bindparam("queues", type_=ARRAY(TextType)),
            bindparam("ticks", type_=ARRAY(TextType)),
        )
        .table_valued("name", "queue", "tick")
        .render_derived(name="wanted")
    )
    marks = func.jsonb_build_object(
        literal("periodic", TextType),
        wanted.c.name,
        literal("scheduled_for", TextType),
        wanted.c.tick,
    )
    last = (
        select(jobs.c.id, JOB_STATE.label("status"))
        .where(jobs.c.queue == wanted.c.queue, jobs.c.headers.op("@>")(marks))
        .order_by(jobs.c.id.desc())
        .limit(1)
        .lateral("last")
    )
    return select(wanted.c.name, last.c.id, last.c.status).select_from(wanted.join(last, true()))


# -- the dashboard: a job's workflow ---------------------------------------------------------------

#: Every job linked to ``:job_id`` by ``depends_on`` either way (its workflow), at most
#: ``:limit``: a recursive walk of the edges, each step one probe of the edges' primary key
#: (``depends_on`` leading) or ``jobs_dependencies_job_id_idx``; ``UNION`` drops the jobs seen, so
#: it ends, and the ``LIMIT`` stops it early on a vast workflow. Text: a recursive CTE whose one
#: self-reference joins on either column.
WORKFLOW_IDS = text(
    """
    WITH RECURSIVE linked(id) AS (
        SELECT CAST(:job_id AS bigint)
        UNION
        SELECT CASE WHEN d.job_id = l.id THEN d.depends_on ELSE d.job_id END
        FROM linked l JOIN jobs_dependencies d ON d.job_id = l.id OR d.depends_on = l.id
    )
    SELECT id FROM linked LIMIT :limit
    """
)


def workflow_nodes_statement() -> Select[Any]:
    """The jobs ``:ids``: ``id, queue, task, status`` (its :class:`pgqueue.JobState`)."""
    return select(jobs.c.id, jobs.c.queue, jobs.c.task, JOB_STATE.label("status")).where(
        jobs.c.id == func.any(bindparam("ids", type_=ARRAY(BigInteger)))
    )


def workflow_edges_statement() -> Select[Any]:
    """The edges among the jobs ``:ids``: ``depends_on, job_id``."""
    edges = dependencies_table
    ids = bindparam("ids", type_=ARRAY(BigInteger))
    return select(edges.c.depends_on, edges.c.job_id).where(
        edges.c.job_id == func.any(ids), edges.c.depends_on == func.any(ids)
    )
