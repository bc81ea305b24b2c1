"""``pgqueue doctor``: check a live database for what the article warns about.

Each check yields :class:`Finding` objects with a severity and a one-line fix. Severities:
``ok`` and ``info`` (healthy), ``warning`` (exit 1), ``error`` (exit 2). The checks read the
catalogs and ``pg_stat_activity``; a role without ``pg_monitor`` (or ``pg_read_all_stats``)
cannot see other roles' sessions, and the report says so. The ``listen`` check sends itself one
NOTIFY on a private channel, to tell a transaction-mode pooler (where LISTEN hears nothing).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from alembic.script import ScriptDirectory
from sqlalchemy import Connection, TextClause

import pgqueue.migrations
from pgqueue import admin, periodic, repository
from pgqueue._base.connections import WORKER_PREFIX
from pgqueue._base.readable import decoded
from pgqueue._base.validation import MAX_PRIORITY, MIN_PRIORITY
from pgqueue._sql import reads
from pgqueue._sql import retention_statements as retention_reads
from pgqueue.pooler import check_listen
from pgqueue.repository import DEFAULT_PURGE_AGE
from pgqueue.storage import JOBS_STORAGE_PARAMETERS, alter_table_sql

SEVERITIES = ("ok", "info", "warning", "error")
#: Dead tuples above this share of ``jobs`` (and above :data:`DEAD_TUPLES_MIN`) are a warning.
DEAD_RATIO_WARNING = 0.2
DEAD_TUPLES_MIN = 1_000
#: With many dead tuples, no autovacuum for this long is a warning.
AUTOVACUUM_STALE = timedelta(hours=1)
#: Ready jobs waiting longer than this are a stalled backlog (``pgqueue doctor --backlog-age``).
DEFAULT_BACKLOG_AGE = timedelta(minutes=5)
#: Free connections below this share of the usable ones (and below :data:`HEADROOM_MIN`) warn.
HEADROOM_WARNING = 0.1
HEADROOM_MIN = 5


@dataclass(frozen=True)
class Finding:
    """One result of a check.

    Attributes:
        check: Short name of the check (``indexes``, ``sessions``, ...).
        severity: ``ok``, ``info``, ``warning`` or ``error``.
        message: What was seen.
        fix: One line saying what to do; empty when there is nothing to do.
        details: Rows behind the finding (sessions, counts), for ``--json``.
    """

    check: str
    severity: str
    message: str
    fix: str = ""
    details: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """The finding as JSON-ready data."""
        return asdict(self)


def exit_code(findings: list[Finding]) -> int:
    """0 when healthy, 1 with warnings, 2 with errors."""
    worst = max((SEVERITIES.index(f.severity) for f in findings), default=0)
    return {3: 2, 2: 1}.get(worst, 0)


def run_checks(
    conn: Connection,
    *,
    idle_threshold: timedelta,
    listen: bool = True,
    backlog_age: timedelta = DEFAULT_BACKLOG_AGE,
) -> list[Finding]:
    """Every check, in order; without the ``jobs`` table only the schema finding.

    ``listen=False`` leaves out the LISTEN check (a second connection that waits up to a second
    for its own NOTIFY): the dashboard, which refreshes often and listens to nothing, skips it.
    ``backlog_age``: the ``backlog`` check warns when the oldest ready job of a queue has waited
    longer (default :data:`DEFAULT_BACKLOG_AGE`).
    """
    if not admin.schema_present(conn):
        return [_NO_SCHEMA]
    findings: list[Finding] = []
    for check in (
        _revision,
        _indexes,
        _trigger,
        lambda c: _sessions(c, idle_threshold),
        _vacuum,
        _storage,
        _jobs,
        lambda c: _backlog(c, backlog_age),
        _dependencies,
        _retention,
        _periodic,
        _connections,
        *([_listen] if listen else []),
    ):
        findings.extend(check(conn))
    return findings


_NO_SCHEMA = Finding(
    "schema",
    "error",
    "no jobs table in this database (or not on the search_path)",
    "run `pgqueue migrate`",
)


def revision_findings(conn: Connection) -> list[Finding]:
    """The schema and revision checks alone (no ``jobs`` table, or its revision against the
    package's head): cheap enough for a framework's start-up check (the Django app's).

    .. versionadded:: 0.1.0
    """
    if not admin.schema_present(conn):
        return [_NO_SCHEMA]
    return list(_revision(conn))


def _package_revisions() -> tuple[str, set[str]]:
    script = ScriptDirectory.from_config(pgqueue.migrations.alembic_config("postgresql://"))
    head = script.get_revision(pgqueue.migrations.HEAD)
    assert head is not None
    return head.revision, {rev.revision for rev in script.walk_revisions()}


def _revision(conn: Connection) -> Iterator[Finding]:
    head, ours = _package_revisions()
    if not conn.execute(reads.ALEMBIC_VERSION_PRESENT).scalar_one():
        yield Finding(
            "revision",
            "warning",
            "jobs exists but no alembic_version table records pgqueue's revision",
            f"if the schema matches, `alembic stamp {head}`; else run `pgqueue migrate`",
        )
        return
    stamped = set(conn.execute(reads.ALEMBIC_VERSIONS).scalars())
    current = stamped & ours
    if head in current:
        yield Finding("revision", "ok", f"schema at the package's head revision {head}")
    elif current:
        yield Finding(
            "revision",
            "warning",
            f"schema at {', '.join(sorted(current))}, behind the package's head {head}",
            "run `pgqueue migrate` (or `alembic upgrade pgqueue@head`)",
        )
    else:
        yield Finding(
            "revision",
            "warning",
            "alembic_version records none of pgqueue's revisions",
            f"if the schema matches, `alembic stamp {head}`; else run `pgqueue migrate`",
        )


#: Index name -> (severity when missing, why it matters).
_EXPECTED_INDEXES = {
    "jobs_ready_idx": ("error", "every claim scans the whole table"),
    "jobs_lease_idx": ("warning", "the reaper scans the whole table"),
    "jobs_unique_key_idx": ("error", "enqueue with a unique key fails (no ON CONFLICT arbiter)"),
    "jobs_failed_idx": ("warning", "listing and retrying failed jobs scans the whole table"),
    "jobs_prune_idx": (
        "warning",
        "pruning and the dashboard's chart scan the whole table",
    ),
}


def _indexes(conn: Connection) -> Iterator[Finding]:
    found = {row.name: row for row in conn.execute(reads.INDEXES)}
    for name, (severity, why) in _EXPECTED_INDEXES.items():
        row = found.get(name)
        if row is None:
            yield Finding(
                "indexes", severity, f"index {name} is missing: {why}", "run `pgqueue migrate`"
            )
        elif not (row.valid and row.ready):
            yield Finding(
                "indexes",
                severity,
                f"index {name} is INVALID (an interrupted CONCURRENTLY build): {why}",
                f"REINDEX INDEX CONCURRENTLY {name};",
            )
        else:
            yield Finding("indexes", "ok", f"index {name} present and valid")


def _trigger(conn: Connection) -> Iterator[Finding]:
    enabled = conn.execute(reads.TRIGGER).scalar()
    if enabled is None:
        yield Finding(
            "trigger",
            "warning",
            "trigger jobs_notify is missing: listening workers wake only on their fallback poll",
            "run `pgqueue migrate`",
        )
    elif enabled == "D":
        yield Finding(
            "trigger",
            "warning",
            "trigger jobs_notify is disabled: listening workers wake only on their fallback poll",
            "ALTER TABLE jobs ENABLE TRIGGER jobs_notify;",
        )
    else:
        yield Finding("trigger", "ok", "trigger jobs_notify present")


def _sessions(conn: Connection, threshold: timedelta) -> Iterator[Finding]:
    if not conn.execute(reads.CAN_SEE_ALL).scalar():
        yield Finding(
            "visibility",
            "info",
            "this role cannot see other roles' sessions: long transactions of other roles "
            "and their snapshots are not checked",
            "GRANT pg_monitor TO <this role>;",
        )
    rows = [
        dict(r._mapping) for r in conn.execute(reads.LONG_TRANSACTIONS, {"threshold": threshold})
    ]
    seconds = threshold.total_seconds()
    if rows:
        idle = [r for r in rows if (r["state"] or "").startswith("idle in transaction")]
        kind = "idle in transaction" if idle else "in a transaction"
        listed = ", ".join(
            f"pid {r['pid']} ({r['application_name'] or '-'}, {r['state']}, "
            f"{r['xact_age_s']:.0f} s)"
            for r in rows[:5]
        )
        yield Finding(
            "sessions",
            "warning",
            f"{len(rows)} session(s) {kind} for more than {seconds:g} s: {listed}; "
            "they hold back vacuum and pin a server connection",
            "commit or roll back in the application (claim, commit, work outside a transaction); "
            "or SELECT pg_terminate_backend(<pid>)",
            rows,
        )
    else:
        yield Finding("sessions", "ok", f"no transaction open for more than {seconds:g} s")
    row = admin.oldest_snapshot(conn)
    if row is not None:
        age = row["xact_age_s"] or 0.0
        severity = "warning" if age > seconds else "info"
        yield Finding(
            "snapshot",
            severity,
            f"oldest snapshot: pid {row['pid']} ({row['application_name'] or '-'}), "
            f"{row['xmin_age_xids']} transactions old, open {age:.0f} s: "
            "vacuum cannot remove rows that died after it started",
            "end that transaction" if severity == "warning" else "",
            [row],
        )


def vacuum_finding(
    stats: Mapping[str, Any],
    now: datetime,
    *,
    server_autovacuum: bool = True,
    table_autovacuum: bool = True,
) -> Finding:
    """The ``vacuum`` finding for ``pg_stat_user_tables`` of ``jobs``, seen at ``now``.

    A warning when dead tuples pass :data:`DEAD_TUPLES_MIN` and :data:`DEAD_RATIO_WARNING`; its
    fix depends on the last vacuum (manual or auto, whichever is later): never (autovacuum off, or
    a new table), older than :data:`AUTOVACUUM_STALE` (autovacuum does not keep up), or recent
    (an old snapshot keeps the rows, or they died since).
    """
    live, dead = stats.get("n_live_tup") or 0, stats.get("n_dead_tup") or 0
    ratio = dead / (live + dead) if live + dead else 0.0
    auto, manual = stats.get("last_autovacuum"), stats.get("last_vacuum")
    message = (
        f"jobs: {live} live, {dead} dead tuples ({ratio:.0%}); "
        f"last autovacuum {auto or 'never'}, last vacuum {manual or 'never'}"
    )
    off = [
        where
        for where, on in (("on this server", server_autovacuum), ("for jobs", table_autovacuum))
        if not on
    ]
    if off:
        message += f"; autovacuum is off {' and '.join(off)}"
    details = [{**stats, "dead_ratio": ratio}]
    if dead < DEAD_TUPLES_MIN or ratio <= DEAD_RATIO_WARNING:
        return Finding("vacuum", "ok", message, "", details)
    last = max((t for t in (auto, manual) if t is not None), default=None)
    fix = ""
    if not server_autovacuum:
        fix = "turn autovacuum on (autovacuum = on in postgresql.conf, then reload); "
    elif not table_autovacuum:
        fix = "ALTER TABLE jobs RESET (autovacuum_enabled); "
    if last is None:
        fix += "VACUUM jobs; (never vacuumed: a new table, or autovacuum does not reach it)"
    elif now - last > AUTOVACUUM_STALE:
        fix += (
            "look for long transactions (above); tune autovacuum for jobs, e.g. "
            "ALTER TABLE jobs SET (autovacuum_vacuum_scale_factor = 0.01);"
        )
    else:
        fix += (
            "dead rows that a recent vacuum left are kept by an old snapshot (see snapshot): "
            "end that transaction, then VACUUM jobs;"
        )
    return Finding("vacuum", "warning", message, fix, details)


def _vacuum(conn: Connection) -> Iterator[Finding]:
    stats = admin.table_stats(conn)
    if not stats:
        return
    # The server's clock, not this process's: last_(auto)vacuum were stamped by the server.
    context = conn.execute(reads.VACUUM_CONTEXT).one()
    yield vacuum_finding(
        stats,
        context.now,
        server_autovacuum=context.server_on,
        table_autovacuum=context.table_on,
    )


def _same_value(found: str | None, expected: str) -> bool:
    if found is None:
        return False
    try:
        return float(found) == float(expected)
    except ValueError:
        return found == expected


def _storage(conn: Connection) -> Iterator[Finding]:
    options = conn.execute(reads.RELOPTIONS).scalar() or []
    found = dict(str(option).split("=", 1) for option in options)
    changed = {
        name: found.get(name)
        for name, expected in JOBS_STORAGE_PARAMETERS.items()
        if not _same_value(found.get(name), expected)
    }
    if not changed:
        yield Finding("storage", "ok", "jobs keeps pgqueue's autovacuum storage parameters")
        return
    listed = ", ".join(
        f"{name} = {value or 'server default'} (pgqueue: {JOBS_STORAGE_PARAMETERS[name]})"
        for name, value in changed.items()
    )
    yield Finding(
        "storage",
        "warning",
        f"storage parameters of jobs were changed back: {listed}; "
        "autovacuum waits longer and dead rows pile up under the claims",
        alter_table_sql(),
        [{"parameter": name, "value": value} for name, value in changed.items()],
    )


def _jobs(conn: Connection) -> Iterator[Finding]:
    counting = (
        reads.JOB_COUNTS
        if conn.execute(reads.HAS_CANCELLED_AT).scalar_one()
        else reads.JOB_COUNTS_BEFORE_0010
    )
    counts = conn.execute(counting, {"horizon": DEFAULT_PURGE_AGE}).one()
    # Expired jobs (pgqueue_0015) are failed without cancelled_at: counted apart, as cancels are.
    expired_jobs = (
        int(conn.execute(reads.EXPIRED_JOBS).scalar_one())
        if conn.execute(reads.HAS_EXPIRED_AT).scalar_one()
        else 0
    )
    failed = counts.failed - expired_jobs
    days = DEFAULT_PURGE_AGE.days
    if counts.expired:
        yield Finding(
            "leases",
            "warning",
            f"{counts.expired} running job(s) with an expired lease (a worker died or stalled)",
            "run `pgqueue reap` (workers also reap on their own)",
        )
    else:
        yield Finding("leases", "ok", "no running job with an expired lease")
    if failed:
        yield Finding(
            "failed",
            "warning",
            f"{failed} failed job(s)",
            "inspect `pgqueue list --status failed`; then `pgqueue retry --failed` or "
            "`pgqueue purge --status failed`",
        )
    if counts.cancelled:
        yield Finding(
            "cancelled",
            "info",
            f"{counts.cancelled} cancelled job(s) (failed on purpose; not counted as failed)",
            "`pgqueue retry --failed` leaves them; `--include-cancelled` requeues them too",
        )
    if expired_jobs:
        yield Finding(
            "expired",
            "info",
            f"{expired_jobs} expired job(s) (never started within their expires_in; not counted "
            "as failed)",
            "`pgqueue list --status expired`; `pgqueue retry --failed --include-expired` "
            "requeues them",
        )
    if counts.old_done:
        yield Finding(
            "purge",
            "warning",
            f"{counts.old_done} done job(s) older than {days} days",
            f"run `pgqueue purge --older-than {days}d` on a schedule",
        )


def backlog_findings(
    ready: list[dict[str, Any]], workers: int, max_age: timedelta
) -> Iterator[Finding]:
    """The ``backlog`` findings for each queue's oldest ready wait and the workers connected.

    Args:
        ready: ``{"queue", "oldest_ready_s"}`` per queue with ready jobs, oldest first.
        workers: pgqueue worker processes connected to this database.
        max_age: Waits longer than this are a warning.
    """
    limit = max_age.total_seconds()
    if not ready:
        yield Finding("backlog", "ok", "no ready job waiting")
        return
    listed = ", ".join(f"{r['queue']} {r['oldest_ready_s']:.0f} s" for r in ready[:5])
    if len(ready) > 5:
        listed += f" (+{len(ready) - 5} more)"
    if workers == 0:
        yield Finding(
            "backlog",
            "warning",
            f"ready jobs wait in {len(ready)} queue(s) and no pgqueue worker is connected to "
            f"this database; oldest ready job per queue: {listed}",
            "start a worker (`pgqueue worker module:attr`); workers are seen by their "
            f"application_name {WORKER_PREFIX}<host>:<pid>, unless their URL names them",
            ready,
        )
        return
    late = [r for r in ready if r["oldest_ready_s"] > limit]
    if late:
        stalled = ", ".join(f"{r['queue']} {r['oldest_ready_s']:.0f} s" for r in late[:5])
        yield Finding(
            "backlog",
            "warning",
            f"ready jobs waited longer than {limit:g} s in {len(late)} queue(s): {stalled}; "
            f"{workers} worker process(es) connected",
            "check that a worker serves these queues (--queues), that it keeps up "
            "(more --concurrency or --processes) and its logs",
            late,
        )
        return
    yield Finding(
        "backlog",
        "ok",
        f"oldest ready job per queue: {listed} (under {limit:g} s); "
        f"{workers} worker process(es) connected",
        "",
        ready,
    )


def _backlog(conn: Connection, max_age: timedelta) -> Iterator[Finding]:
    ready = [
        dict(r._mapping)
        for r in conn.execute(reads.BACKLOG, {"lowest": MIN_PRIORITY, "highest": MAX_PRIORITY})
    ]
    workers = (
        conn.execute(reads.WORKERS_HERE, {"prefix": WORKER_PREFIX}).scalar_one() if ready else 0
    )
    yield from backlog_findings(ready, int(workers), max_age)


#: Jobs the ``dependencies`` finding lists at most (in its details; ids in the message: 10).
MISSING_DEPENDENCIES_SHOWN = 100


def dependency_findings(rows: list[dict[str, Any]]) -> Iterator[Finding]:
    """The ``dependencies`` finding for the waiting jobs whose dependency no longer exists.

    Args:
        rows: ``{"id", "queue", "waiting_on", "found", "total"}`` per such job, by id (at most
            :data:`MISSING_DEPENDENCIES_SHOWN`): ``found`` the dependencies still there and
            unfinished, ``total`` how many such jobs there are in all.
    """
    if not rows:
        yield Finding("dependencies", "ok", "every waiting job's dependencies exist")
        return
    total = int(rows[0]["total"])
    ids = [str(row["id"]) for row in rows]
    listed = ", ".join(ids[:10]) + (f" (+{total - 10} more)" if total > 10 else "")
    named = " ".join(ids) + (" ..." if total > len(ids) else "")
    yield Finding(
        "dependencies",
        "warning",
        f"{total} waiting job(s) wait for a dependency that no longer exists (its row was "
        f"deleted by hand, the count of what they wait for was not): {listed}; they would "
        "wait for ever",
        f"`pgqueue unblock {named}` (`pgqueue.unblock(conn, ids)`): each waits only for the "
        "dependencies that remain, and runs once they are done; or `pgqueue cancel "
        f"{named}` (`pgqueue.cancel(conn, ids)`) to drop them and what waits for them",
        [{k: row[k] for k in ("id", "queue", "waiting_on", "found")} for row in rows],
    )


def _unreadable(
    conn: Connection, readable: TextClause, check: str, unchecked: str
) -> list[Finding] | None:
    """``None`` when the check can read its table (``jobs_<check>``); else what it reports instead:
    nothing before the table's revision (the revision check says so), an ``info`` finding when
    this role may not read it."""
    found = conn.execute(readable).scalar_one()
    if found is None:
        return []
    if found:
        return None
    table = f"jobs_{check}"
    return [
        Finding(
            check,
            "info",
            f"this role cannot read {table}: {unchecked} not checked",
            f"grant it SELECT on {table} (see `pgqueue grants --role-monitor`)",
        )
    ]


def _dependencies(conn: Connection) -> Iterator[Finding]:
    """Waiting jobs whose dependency's row was deleted by hand (pgqueue_0013)."""
    skipped = _unreadable(
        conn, reads.DEPENDENCIES_READABLE, "dependencies", "waiting jobs' dependencies"
    )
    if skipped is not None:
        yield from skipped
        return
    stmt = reads.missing_dependencies_statement(MISSING_DEPENDENCIES_SHOWN)
    yield from dependency_findings([dict(row._mapping) for row in conn.execute(stmt)])


def retention_findings(rows: list[dict[str, Any]]) -> Iterator[Finding]:
    """One warning per queue whose finished jobs are more than a day past its retention (the
    rows of :func:`~pgqueue._sql.retention_statements.overdue_statement`); else one ok."""
    if not rows:
        yield Finding("retention", "ok", "no finished job more than a day past its retention")
        return
    by_queue: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_queue.setdefault(row["queue"], []).append(row)
    for queue, kinds in by_queue.items():
        counts = ", ".join(f"{r['jobs']} {r['kind']}" for r in kinds)
        times = [r["oldest"] for r in kinds]
        # A time Python cannot hold (written by SQL) is shown as stored, and is the oldest.
        odd = [t for t in times if not isinstance(t, datetime)]
        oldest = str(odd[0]) if odd else min(times).isoformat(timespec="seconds")
        yield Finding(
            "retention",
            "warning",
            f"queue {queue!r}: {counts} job(s) more than a day past their retention (oldest "
            f"finished {oldest}): no worker prunes it",
            f"run a worker that serves queue {queue!r} with pruning on (not --no-prune; its role "
            "needs DELETE on jobs, `pgqueue grants --role-worker`); `pgqueue retention "
            f"{queue}` shows its retention",
            [{**r, "oldest": _iso(r["oldest"])} for r in kinds],
        )


def _iso(value: object) -> str:
    return value.isoformat() if isinstance(value, datetime) else str(value)


def _retention(conn: Connection) -> Iterator[Finding]:
    """Finished jobs that the workers should have pruned a day ago (pgqueue_0016)."""
    skipped = _unreadable(
        conn, reads.RETENTION_READABLE, "retention", "finished jobs past their retention"
    )
    if skipped is not None:
        yield from skipped
        return
    rows = conn.execute(retention_reads.overdue_statement())
    yield from retention_findings([decoded(row) for row in rows])


def _periodic(conn: Connection) -> Iterator[Finding]:
    """Definitions that workers declare but nobody fires, and ones no worker declares any more."""
    skipped = _unreadable(conn, reads.PERIODIC_READABLE, "periodic", "periodic definitions")
    if skipped is not None:
        yield from skipped
        return
    now = datetime.now(timezone.utc)
    rows = repository.periodic_states(conn)
    stale = [row for row in rows if periodic.is_stale(row, now)]
    for row in rows:
        late = None if row in stale else periodic.overdue(row, now)
        if late is not None:
            yield Finding(
                "periodic",
                "warning",
                f"periodic {row.name!r} ({row.schedule}): a tick is {late.total_seconds():.0f} s "
                f"overdue, though a "
                f"worker declared it at {row.declared_at.isoformat(timespec='seconds')}",
                "check that its workers run and their logs (the scheduler logs each failure)",
            )
    for row in stale:
        yield Finding(
            "periodic",
            "info",
            f"periodic {row.name!r}: no worker declared it since "
            f"{row.declared_at.isoformat(timespec='seconds')} (stale)",
            f"if it is gone for good: `pgqueue periodic --remove {row.name}`",
        )
    if rows and not stale and all(periodic.overdue(r, now) is None for r in rows):
        yield Finding("periodic", "ok", f"{len(rows)} periodic definition(s) fired on time")


def headroom_severity(usable: int, in_use: int) -> str:
    """``warning`` when fewer than 10% of the usable connections (at least 5) are free."""
    free = usable - in_use
    return "warning" if free < max(HEADROOM_MIN, HEADROOM_WARNING * usable) else "ok"


def _connections(conn: Connection) -> Iterator[Finding]:
    limits = conn.execute(reads.CONNECTION_LIMITS).one()
    rows = [
        dict(r._mapping) for r in conn.execute(reads.WORKER_CONNECTIONS, {"prefix": WORKER_PREFIX})
    ]
    here = conn.execute(reads.CURRENT_DATABASE).scalar_one()
    ours = [r for r in rows if r["database"] == here]
    usable = limits.max_connections - limits.reserved
    severity = headroom_severity(usable, limits.in_use)
    message = (
        f"{len(rows)} pgqueue worker process(es) hold {sum(r['connections'] for r in rows)} "
        f"connection(s) on this server ({len(ours)} process(es), "
        f"{sum(r['connections'] for r in ours)} connection(s) on this database); "
        f"{limits.in_use} of {usable} usable connections in use (max_connections "
        f"{limits.max_connections} - {limits.reserved} reserved): {usable - limits.in_use} free"
    )
    yield Finding(
        "connections",
        severity,
        message,
        "fewer worker processes or a smaller --concurrency, producers through PgBouncer, or "
        "a higher max_connections (see docs/deploy.md, Sizing)"
        if severity == "warning"
        else "",
        rows,
    )


def _listen(conn: Connection) -> Iterator[Finding]:
    reached = check_listen(conn.engine.url, conn.engine, timeout=1.0)
    if reached is None:
        return
    if reached:
        yield Finding("listen", "ok", "LISTEN on this URL receives notifications")
    else:
        yield Finding(
            "listen",
            "info",
            "LISTEN on this URL received nothing within 1 s: a transaction-mode pooler? "
            "Workers using it must LISTEN elsewhere",
            "give workers listen_url=<direct server URL> (pgqueue worker --listen-url)",
        )
