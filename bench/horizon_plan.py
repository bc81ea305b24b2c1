"""What the claim reads under a pinned xmin horizon, as the dead entries grow (#32 item 6).

``python -m bench.horizon_plan [--url SERVER_URL] [--steps N,N,...]``

A second session holds a REPEATABLE READ snapshot; a synthetic flow of batches of 20 jobs,
``run_at`` 10 ms apart (2,000 jobs/s), is claimed and completed one batch at a time under it, so
each job claimed leaves a dead ``jobs_ready_idx`` entry. At each of ``--steps`` (dead entries)
the claim's ``next`` CTE is explained (ANALYZE, BUFFERS; the statement as the driver receives
it, rolled back) four ways: the full claim and the claim from a low-water mark 0.5 s behind the
last batch claimed (``pgqueue._worker.low_water``), each with 20 jobs ready and with none.
Prints a Markdown table: shared buffers and execution time. Counts, not speed: the buffers are
the figure to read. Not part of ``.ci/run``.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg

from bench import _db
from pgqueue._base.urls import to_libpq_url
from pgqueue._sql import statements

BATCH = 20
#: A batch of 20 jobs of queue ``%s``, ``run_at`` of batch ``%s``: 10 ms apart, an hour ago.
_INSERT_BATCH = (
    "INSERT INTO jobs (queue, payload, run_at) SELECT %s, '{}', "
    "now() - interval '1 hour' + %s * interval '10 ms' FROM generate_series(1, 20)"
)
#: The mark after batch ``%s`` was claimed: 0.5 s behind its ``run_at``.
_MARK = "SELECT now() - interval '1 hour' + %s * interval '10 ms' - interval '0.5 s'"


def _nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", ()):
        yield from _nodes(child)


def _explain(conn: psycopg.Connection[Any], sql: str, params: Any) -> tuple[int, float]:
    """Buffers of the claim's CTE and the execution time (ms), in the caller's transaction."""
    row = conn.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}", params).fetchone()
    assert row is not None
    plan = row[0][0]
    (cte,) = [n for n in _nodes(plan["Plan"]) if n.get("Subplan Name") == "CTE next"]
    buffers = int(cte.get("Shared Hit Blocks", 0)) + int(cte.get("Shared Read Blocks", 0))
    return buffers, float(plan["Execution Time"])


def _sent(url: Any, stmt: Any, params: dict[str, Any]) -> tuple[str, Any]:
    """The claim as the driver receives it (run once, rolled back)."""
    engine = _db.make_engine(url)
    try:
        with engine.connect() as conn:
            result = conn.execute(stmt, params)
            conn.rollback()
            return result.context.statement, result.context.parameters[0]
    finally:
        engine.dispose()


def _add_batch(conn: psycopg.Connection[Any], batch: int) -> None:
    conn.execute(_INSERT_BATCH, (_db.QUEUE, batch))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.horizon_plan", description=__doc__)
    parser.add_argument("--url", help="a server URL (default: the embedded PostgreSQL)")
    parser.add_argument("--steps", default="0,20000,60000,120000")
    args = parser.parse_args(argv)
    steps = [int(s) for s in args.steps.split(",")]
    with _db.server(args.url) as (server_url, _), _db.throwaway_database(server_url) as url:
        params: dict[str, Any] = {
            "queue_name": _db.QUEUE,
            "lease": timedelta(seconds=30),
            "locked_by": None,
        }
        full = _sent(url, statements.claim_statement(BATCH), params)
        from_mark = statements.claim_statement(BATCH, since=True)
        marked = _sent(url, from_mark, {**params, "since": None})
        with _db.admin_connect(url) as conn, psycopg.connect(to_libpq_url(url)) as pin:
            pin.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            pin.execute("SELECT count(*) FROM jobs")  # the snapshot is taken here
            print(
                "| dead entries | full claim, 20 ready | full claim, queue empty "
                "| from the mark, 20 ready | from the mark, queue empty |"
            )
            print("|---:|---:|---:|---:|---:|")
            batch = 0
            for target in steps:
                while batch * BATCH < target:
                    _add_batch(conn, batch)
                    conn.execute(*full)
                    conn.execute(
                        "UPDATE jobs SET status = 'done', locked_until = NULL, "
                        "finished_at = now() WHERE status = 'running'"
                    )
                    batch += 1
                row = conn.execute(_MARK, (batch - 1,)).fetchone()
                assert row is not None
                since = {**marked[1], "since": row[0]}
                figures = []
                for empty in (False, True):
                    with conn.transaction(force_rollback=True):
                        if not empty:
                            _add_batch(conn, batch)
                        figures.append(_explain(conn, *full))
                        figures.append(_explain(conn, marked[0], since))
                cells = [f"{b:,} ({ms:.1f} ms)" for b, ms in (figures[i] for i in (0, 2, 1, 3))]
                print(f"| {batch * BATCH:,} | " + " | ".join(cells) + " |", flush=True)
            pin.rollback()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
