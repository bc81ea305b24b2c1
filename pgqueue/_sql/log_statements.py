"""The statements of ``jobs_logs`` (pgqueue_0018): the lines each attempt of a job recorded.

The worker writes lines only inside statements it sends anyway: :func:`with_lines` turns a
batched outcome or lease statement (an ``UPDATE ... RETURNING id``) into one that also upserts
the lines of the jobs it matched, in the same statement, so a batch that carries lines costs no
statement and no round trip more than one that carries none (and a batch without lines is sent
as it always was). The lines travel as one JSON text, ``batch_lines``: an array of
``{"id", "attempt", "dropped", "lines"}``, one per job, each job's whole buffer (the row is
replaced). Only the jobs the update matched get lines: those rows exist and are locked by the
statement, and a job no longer ours (cancelled, reaped) keeps what its attempt wrote before.
The lines go with their job in the statements that delete finished jobs
(:func:`with_lines_deleted`: the purge, the dashboard's purge, the retention pruner), not by a
foreign key. Built into calls by :mod:`pgqueue._sql.log_calls`.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from sqlalchemy import (
    BigInteger,
    Delete,
    Insert,
    Integer,
    Select,
    Text,
    Update,
    bindparam,
    cast,
    column,
    func,
    select,
)
from sqlalchemy.dialects.postgresql import JSON
from sqlalchemy.dialects.postgresql import insert as pg_insert

from pgqueue.models import job_logs_table as logs
from pgqueue.models import jobs_table as jobs

_COLUMNS = ["job_id", "attempt", "lines", "dropped"]


def _lines_batch() -> Any:
    """``json_to_recordset(:batch_lines)``: one row per job of the batch that has lines.
    ``json``, not ``jsonb``: checked, not converted (measured: 2,000 jobs of 10 lines inserted
    in 35 ms against 90 ms), and the lines are only ever read back whole."""
    return (
        func.json_to_recordset(cast(bindparam("batch_lines", type_=Text), JSON))
        .table_valued(
            column("id", BigInteger),
            column("attempt", Integer),
            column("dropped", Integer),
            column("lines", JSON),
        )
        .render_derived(name="batch_lines", with_types=True)
    )


def _upsert(rows: Select[Any]) -> Insert:
    insert = pg_insert(logs).from_select(_COLUMNS, rows)
    return insert.on_conflict_do_update(
        index_elements=[logs.c.job_id, logs.c.attempt],
        set_={
            "lines": insert.excluded.lines,
            "dropped": insert.excluded.dropped,
            "updated_at": func.now(),
        },
    )


def with_lines(outcome: Update) -> Select[Any]:
    """``outcome`` (returning ``id`` among its columns) that also writes the lines of the jobs
    it matched: ``WITH outcome AS (UPDATE ...), logged AS (INSERT ...) SELECT * FROM outcome``.
    Returns what ``outcome`` returns."""
    written = outcome.cte("outcome")
    batch = _lines_batch()
    rows = select(batch.c.id, batch.c.attempt, batch.c.lines, batch.c.dropped).where(
        batch.c.id.in_(select(written.c.id))
    )
    return select(*written.c).add_cte(_upsert(rows).cte("logged"))


@lru_cache(maxsize=16)
def with_lines_deleted(purge: Delete) -> Select[Any]:
    """``purge`` (a delete of finished jobs) that also deletes their lines, in the same
    statement: ``WITH gone AS (DELETE FROM jobs ... RETURNING id), lines AS (DELETE FROM
    jobs_logs ...) SELECT count(*) FROM gone``. Returns how many jobs were deleted.

    A set-based delete rather than a foreign key's ``ON DELETE CASCADE``: the cascade is a
    trigger per deleted job (measured: 50,000 done jobs purged in 0.68 s against 0.45 s without
    it, 1.5x), this is one semi-join (0.48 s: the same speed within the noise), so the purge and
    the retention pruner keep their pace."""
    gone = purge.returning(jobs.c.id).cte("gone")
    lines = logs.delete().where(logs.c.job_id.in_(select(gone.c.id))).cte("gone_lines")
    return select(func.count()).select_from(gone).add_cte(lines)


def _write_lines() -> Insert:
    batch = _lines_batch()
    rows = select(batch.c.id, batch.c.attempt, batch.c.lines, batch.c.dropped).where(
        batch.c.id.in_(select(jobs.c.id).where(jobs.c.id == batch.c.id))
    )
    return _upsert(rows)


#: The lines of jobs whose outcome was written alone (transaction mode, ``testing.drain``): one
#: statement after the outcome, in the same transaction, for a job that logged. A job deleted
#: meanwhile gets none.
WRITE_LINES: Insert = _write_lines()


def job_lines_statement(*, one_attempt: bool) -> Select[Any]:
    """The stored lines of job ``:job_id`` by attempt, oldest attempt first (``one_attempt``:
    only attempt ``:attempt``): ``attempt, lines, dropped``. The primary key's walk."""
    stmt = select(logs.c.attempt, logs.c.lines, logs.c.dropped).where(
        logs.c.job_id == bindparam("job_id", type_=BigInteger)
    )
    if one_attempt:
        stmt = stmt.where(logs.c.attempt == bindparam("attempt", type_=Integer))
    return stmt.order_by(logs.c.attempt)
