"""The dashboard's queries stay bounded on a table of 1,000,000 done jobs: keyset pages of the
job list and the chart's last hour read an index range, never the whole table.

Plans are read with ``EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)`` of the statements the dashboard
runs, with their parameters bound as the driver binds them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Connection, Engine, Select, event, text
from sqlalchemy.dialects import postgresql
from starlette.testclient import TestClient

from pgqueue import admin
from pgqueue.models import JobStatus
from pgqueue.web import create_app

DONE_JOBS = 1_000_000


@pytest.fixture(scope="module")
def history(pg_server: Any, template_db: str) -> Iterator[Engine]:
    """One database for the module: a million done jobs finished one per second (about 11.6
    days of history), plus a few failed and queued ones, vacuumed and analyzed."""
    from sqlalchemy import create_engine

    from tests.conftest import _database

    with _database(pg_server, "pgqueue_plans", template_db) as name:
        engine = create_engine(pg_server.database_url(name))
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO jobs (queue, payload, status, attempts, created_at, finished_at) "
                    "SELECT 'bulk', '{}', 'done', 1, now() - make_interval(secs => i), "
                    "now() - make_interval(secs => i) FROM generate_series(:n, 1, -1) AS i"
                ),
                {"n": DONE_JOBS},
            )
            conn.execute(
                text(
                    "INSERT INTO jobs (queue, payload, status, attempts, max_attempts, last_error, "
                    "finished_at) SELECT 'bulk', '{}', 'failed', 1, 1, 'boom', now() "
                    "FROM generate_series(1, 10)"
                )
            )
            conn.execute(text("INSERT INTO jobs (queue, payload) VALUES ('bulk', '{}')"))
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text("VACUUM ANALYZE jobs"))
        try:
            yield engine
        finally:
            engine.dispose()


def _plan(conn: Connection, stmt: Select[Any]) -> dict[str, Any]:
    compiled = stmt.compile(dialect=postgresql.dialect())  # type: ignore[no-untyped-call]
    result = conn.exec_driver_sql(
        "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + str(compiled), compiled.params
    ).scalar_one()
    plan: dict[str, Any] = result[0]["Plan"]
    return plan


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


def _page_nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The nodes that read the page, without the per-row subplans (what a waiting job waits
    for), after checking that those never ran: no row of the page waits."""
    yield plan
    for child in plan.get("Plans", []):
        if child.get("Parent Relationship") == "SubPlan":
            assert all(node["Actual Loops"] == 0 for node in _nodes(child)), child
            continue
        yield from _page_nodes(child)


def _buffers(plan: dict[str, Any]) -> int:
    return int(plan.get("Shared Hit Blocks", 0)) + int(plan.get("Shared Read Blocks", 0))


def _assert_bounded(plan: dict[str, Any], index: str) -> None:
    kinds = [node["Node Type"] for node in _nodes(plan)]
    assert "Seq Scan" not in kinds, kinds
    scans = [n for n in _nodes(plan) if n.get("Index Name") == index]
    assert scans, (index, kinds)
    # Whatever the history, the work is a page's worth (a few hundred buffers at most).
    assert _buffers(plan) < 500, (_buffers(plan), kinds)


pytestmark = pytest.mark.slow


@pytest.mark.parametrize("status", [None, JobStatus.DONE])
@pytest.mark.parametrize("before", [None, 500_000, 20])
def test_a_page_of_jobs_is_a_backward_index_scan_without_sort(
    history: Engine, status: JobStatus | None, before: int | None
) -> None:
    stmt = admin.list_jobs_statement(queue="bulk", status=status, limit=51, before_id=before)
    with history.connect() as conn:
        plan = _plan(conn, stmt)
    kinds = [node["Node Type"] for node in _page_nodes(plan)]
    assert kinds[0] == "Limit"
    assert "Sort" not in kinds, kinds
    (scan,) = [n for n in _page_nodes(plan) if n["Node Type"] == "Index Scan"]
    assert scan["Index Name"] == "jobs_pkey"
    assert scan["Scan Direction"] == "Backward"
    _assert_bounded(plan, "jobs_pkey")
    assert plan["Actual Rows"] == (19 if before == 20 else 51)


def test_a_page_of_failed_jobs_reads_only_the_failed_index(history: Engine) -> None:
    """10 failed jobs behind a million done ones: the partial index of failed ids (0008)."""
    stmt = admin.list_jobs_statement(status=JobStatus.FAILED, limit=51)
    with history.connect() as conn:
        plan = _plan(conn, stmt)
    _assert_bounded(plan, "jobs_failed_idx")
    assert plan["Actual Rows"] == 10


def test_the_chart_reads_only_the_last_hour_of_finished_at(history: Engine) -> None:
    with history.connect() as conn:
        plan = _plan(conn, admin.finished_per_minute_statement())
        rows = admin.finished_per_minute(conn)
    _assert_bounded_chart(plan)
    assert sum(r["done"] for r in rows) == pytest.approx(3600, abs=120)  # one per second
    assert sum(r["failed"] for r in rows) == 10


#: The chart's rows by the plain reading of its definition (every finished row of the window,
#: grouped): what the per-queue statement must return.
_CHART_BY_DEFINITION = text(
    "SELECT queue, date_trunc('minute', finished_at) AS minute, "
    "count(*) FILTER (WHERE status = 'done') AS done, "
    "count(*) FILTER (WHERE status = 'failed') AS failed FROM jobs "
    "WHERE finished_at >= now() - interval '1 hour' AND finished_at <= now() "
    "GROUP BY 1, 2 ORDER BY 2, 1"
)


def test_the_chart_over_two_hundred_queues_probes_each_once_and_counts_as_defined(
    history: Engine,
) -> None:
    """Queues found by one index probe each (no skip scan before PostgreSQL 18), then a range
    scan per queue: the buffers follow the queues and the last hour, not the history."""
    with history.connect() as conn:
        conn.execute(
            text(
                "INSERT INTO jobs (queue, payload, status, attempts, finished_at) "
                "SELECT 'q' || (i % 200), '{}', CASE WHEN i % 7 = 0 THEN 'failed' ELSE 'done' END, "
                "1, now() - make_interval(secs => i * 3) FROM generate_series(1, 2000) AS i"
            )
        )
        conn.execute(
            text(
                "INSERT INTO jobs (queue, payload, status, attempts, finished_at) "
                "SELECT 'old' || (i % 50), '{}', 'done', 1, now() - interval '2 days' "
                "FROM generate_series(1, 5000) AS i"
            )
        )
        conn.execute(text("ANALYZE jobs"))
        plan = _plan(conn, admin.finished_per_minute_statement())
        rows = [
            (r["queue"], r["minute"], r["done"], r["failed"])
            for r in admin.finished_per_minute(conn)
        ]
        expected = [tuple(r) for r in conn.execute(_CHART_BY_DEFINITION)]
        conn.rollback()
    assert rows == expected
    assert len({queue for queue, *_ in rows}) == 201  # the 200 new queues and 'bulk'
    kinds = [node["Node Type"] for node in _nodes(plan)]
    assert "Seq Scan" not in kinds, kinds
    assert any(n.get("Index Name") == "jobs_prune_idx" for n in _nodes(plan)), kinds
    # 251 queues with finished rows, each a probe and a range scan of a few pages: thousands of
    # buffers (3,759 seen), where reading the history would be over ten thousand.
    assert _buffers(plan) < 6_000, _buffers(plan)


def test_the_queue_page_reads_its_own_queue_only(history: Engine) -> None:
    """``queue=``: the rows the whole-table readers give for that queue, and for its chart a
    range of ``jobs_prune_idx`` without the loose scan over the other queues."""
    with history.connect() as conn:
        conn.execute(
            text(
                "INSERT INTO jobs (queue, payload, status, attempts, finished_at) "
                "SELECT 'other' || (i % 50), '{}', 'done', 1, now() - make_interval(secs => i) "
                "FROM generate_series(1, 500) AS i"
            )
        )
        everywhere = admin.finished_per_minute(conn)
        alone = admin.finished_per_minute(conn, queue="bulk")
        stats = [q for q in admin.queue_stats(conn) if q["queue"] == "bulk"]
        one = admin.queue_stats(conn, "bulk")
        stmt = admin.finished_per_minute_statement(one_queue=True).params(queue_name="bulk")
        plan = _plan(conn, stmt)
        conn.rollback()
    assert alone == [row for row in everywhere if row["queue"] == "bulk"]
    assert alone
    assert one == stats
    assert "Recursive Union" not in {n["Node Type"] for n in _nodes(plan)}
    _assert_bounded_chart(plan)


def _assert_bounded_chart(plan: dict[str, Any]) -> None:
    kinds = [node["Node Type"] for node in _nodes(plan)]
    assert "Seq Scan" not in kinds, kinds
    # The one index of finished rows (pgqueue_0017): a probe per queue, then a range scan of
    # (queue, status, finished_at) per queue.
    assert any(n.get("Index Name") == "jobs_prune_idx" for n in _nodes(plan)), kinds
    # An hour of a job a second is ~3,600 rows: tens of heap pages, not the table's thousands.
    assert _buffers(plan) < 1_000, _buffers(plan)


def test_the_jobs_workers_hold_are_counted_on_the_lease_index(history: Engine) -> None:
    """The workers page counts running jobs per worker: the partial jobs_lease_idx (running jobs
    only), never the million done ones."""
    with history.connect() as conn:
        conn.execute(
            text(
                "INSERT INTO jobs (queue, payload, status, attempts, locked_until, locked_by) "
                "SELECT 'bulk', '{}', 'running', 1, now() + interval '1 minute', "
                "'pgqueue-worker:h:' || (i % 3) FROM generate_series(1, 30) AS i"
            )
        )
        stmt = admin.connected_workers_statement()
        compiled = stmt.compile(dialect=postgresql.dialect())  # type: ignore[no-untyped-call]
        result = conn.exec_driver_sql(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + str(compiled),
            {**compiled.params, "prefix": ""},  # every session counts as a worker here
        ).scalar_one()
        conn.rollback()
    plan = result[0]["Plan"]
    on_jobs = [n for n in _nodes(plan) if n.get("Relation Name") == "jobs"]
    assert on_jobs, [n["Node Type"] for n in _nodes(plan)]
    assert all(n["Node Type"] != "Seq Scan" for n in on_jobs), on_jobs
    # An index scan of jobs_lease_idx, or a bitmap heap scan over a bitmap index scan of it (the
    # index node of a bitmap plan names no relation): the planner picks by the table's statistics.
    assert any(n.get("Index Name") == "jobs_lease_idx" for n in _nodes(plan)), on_jobs
    assert sum(_buffers(n) for n in on_jobs) < 100


def test_the_queue_page_counts_from_indexes_and_estimates_a_long_done_history(
    history: Engine,
) -> None:
    """The queue page's counts (``admin.queue_counts``) over a million done jobs: each state
    read from an index of its own rows (no pass over the table), the same counts as the pass
    over the queue (``queue_stats``), and ``done`` past ``DONE_COUNTED`` an estimate, said so."""
    with history.connect() as conn:
        conn.execute(
            text(
                "INSERT INTO jobs (queue, payload, status, attempts, locked_until, run_at, "
                "cancelled_at, finished_at) SELECT 'bulk', '{}', s, 1, "
                "CASE WHEN s = 'running' THEN now() + interval '1 minute' END, "
                "now() + CASE WHEN i % 3 = 0 THEN interval '1 hour' ELSE interval '0' END, "
                "CASE WHEN s = 'failed' THEN now() END, CASE WHEN s = 'failed' THEN now() END "
                "FROM generate_series(1, 60) AS i, "
                "(VALUES ('queued'), ('running'), ('failed')) AS v(s)"
            )
        )
        conn.execute(
            text(
                "INSERT INTO jobs (queue, payload, status, attempts, finished_at) "
                "SELECT 'small', '{}', 'done', 1, now() FROM generate_series(1, 40)"
            )
        )
        conn.execute(text("ANALYZE jobs"))
        plan = _plan(conn, admin.queue_counts_statement().params(queue_name="bulk"))
        counts = admin.queue_counts(conn, "bulk")
        (passed,) = admin.queue_stats(conn, "bulk")
        small = admin.queue_counts(conn, "small")
        (small_passed,) = admin.queue_stats(conn, "small")
        nothing = admin.queue_counts(conn, "nothing")
        conn.rollback()
    on_jobs = [n for n in _nodes(plan) if n.get("Relation Name") == "jobs"]
    assert on_jobs
    assert all(n["Node Type"] != "Seq Scan" for n in on_jobs), [n["Node Type"] for n in on_jobs]
    assert any(n.get("Index Name") == "jobs_prune_idx" for n in _nodes(plan))
    # The live rows, the failed ones and DONE_COUNTED index entries: hundreds of buffers, where
    # a pass over the queue's rows reads the table's thousands of pages.
    assert _buffers(plan) < 1_000, _buffers(plan)
    exact = [k for k in passed if k not in ("queue", "done", "oldest_ready_age_s")]
    assert {k: counts[k] for k in exact} == {k: passed[k] for k in exact}
    assert (counts["ready"], counts["scheduled"], counts["running"]) == (41, 20, 60)
    assert counts["done_estimated"]
    assert passed["done"] == DONE_JOBS
    assert abs(counts["done"] - DONE_JOBS) < DONE_JOBS / 10  # the statistics' estimate
    assert counts["oldest_ready_age_s"] == pytest.approx(passed["oldest_ready_age_s"], abs=5)
    assert not small["done_estimated"]
    assert small["done"] == small_passed["done"] == 40
    assert small["known"]
    assert not nothing["known"]
    assert nothing["done"] == 0


def test_the_overview_counts_every_queue_from_indexes(history: Engine) -> None:
    """The overview's counts (``admin.all_queue_counts``) over a million done jobs: the queues
    found by probes of the indexes and each one's states read from them, no pass over the table
    (the overview refreshes itself every few seconds while open); the same counts as the pass
    (``queue_stats``), ``done`` past ``DONE_COUNTED`` an estimate, said so."""
    with history.connect() as conn:
        conn.execute(
            text(
                "INSERT INTO jobs (queue, payload, status, attempts, locked_until, run_at, "
                "finished_at) SELECT q, '{}', s, 1, "
                "CASE WHEN s = 'running' THEN now() + interval '1 minute' END, "
                "now() + CASE WHEN i % 3 = 0 THEN interval '1 hour' ELSE interval '0' END, "
                "CASE WHEN s IN ('done', 'failed') THEN now() END "
                "FROM generate_series(1, 30) AS i, "
                "(VALUES ('queued'), ('running'), ('failed'), ('done')) AS v(s), "
                "(VALUES ('alpha'), ('beta')) AS w(q)"
            )
        )
        conn.execute(text("INSERT INTO jobs (queue, payload) VALUES ('gamma', '{}')"))
        conn.execute(
            text(
                "INSERT INTO jobs (queue, payload, status, attempts, locked_until) "
                "VALUES ('delta', '{}', 'running', 1, now() + interval '1 minute')"
            )
        )
        conn.execute(text("ANALYZE jobs"))
        pages = conn.execute(
            text("SELECT relpages FROM pg_class WHERE relname = 'jobs'")
        ).scalar_one()
        plan = _plan(conn, admin.all_queue_counts_statement())
        counts = {row["queue"]: row for row in admin.all_queue_counts(conn)}
        passed = {row["queue"]: row for row in admin.queue_stats(conn)}
        conn.rollback()
    sent: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        sent.append(statement)

    event.listen(history, "before_cursor_execute", record)
    try:
        with TestClient(create_app(history)) as client:
            overview = client.get("/")
    finally:
        event.remove(history, "before_cursor_execute", record)
    # The page read the counts by the indexes' statement, not by the pass over the table.
    assert [q for q in sent if "queue_names" in q]
    assert not [q for q in sent if "expired_leases" in q and "GROUP BY jobs.queue" in q]
    assert overview.status_code == 200
    shown = re.findall(r'data-count="done"( data-estimated="true")?[^>]*>([^<]*)<', overview.text)
    assert len(shown) == 1  # bulk's: the rows added above were rolled back
    assert shown[0][0] == ' data-estimated="true"'
    assert shown[0][1].startswith("≈ ")
    on_jobs = [n for n in _nodes(plan) if n.get("Relation Name") == "jobs"]
    assert on_jobs
    assert all(n["Node Type"] != "Seq Scan" for n in on_jobs), [n["Node Type"] for n in on_jobs]
    assert any(n.get("Index Name") == "jobs_prune_idx" for n in _nodes(plan))
    # The live and failed rows of five queues and DONE_COUNTED index entries of the long one:
    # hundreds of buffers here alone (a fresh clone's CI once read 5,816, cause not found; the
    # nodes are printed if it happens again), where the pass reads every page of the table.
    assert _buffers(plan) < pages // 2, [
        (n["Node Type"], n.get("Index Name"), _buffers(n), n.get("Heap Fetches"))
        for n in _nodes(plan)
    ]
    assert list(counts) == sorted(passed) == ["alpha", "beta", "bulk", "delta", "gamma"]
    exact = [k for k in passed["alpha"] if k not in ("queue", "done", "oldest_ready_age_s")]
    for queue in passed:
        assert {k: counts[queue][k] for k in exact} == {k: passed[queue][k] for k in exact}
        assert counts[queue]["oldest_ready_age_s"] == pytest.approx(
            passed[queue]["oldest_ready_age_s"], abs=5
        )
    assert (counts["alpha"]["ready"], counts["alpha"]["scheduled"]) == (20, 10)
    assert (counts["delta"]["running"], counts["gamma"]["ready"]) == (1, 1)
    assert [counts[q]["done"] for q in ("alpha", "beta", "gamma")] == [30, 30, 0]
    assert not any(counts[q]["done_estimated"] for q in ("alpha", "beta", "delta", "gamma"))
    assert counts["bulk"]["done_estimated"]
    assert passed["bulk"]["done"] == DONE_JOBS
    assert abs(counts["bulk"]["done"] - DONE_JOBS) < DONE_JOBS / 10
