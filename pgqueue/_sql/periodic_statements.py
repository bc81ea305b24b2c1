"""Core statements of periodic jobs (``jobs_periodic``): pure builders, no I/O.

The firing statement is the whole exactly-once argument: one statement moves ``last_tick`` from
the value the worker read to the new tick (a compare-and-set) and inserts the tick's jobs from the
row it updated. A second worker firing the same tick waits on the row lock, re-reads the row once
the first commits, finds ``last_tick`` moved and inserts nothing. One statement in autocommit:
no session state, no advisory lock, fine behind a transaction-mode pooler.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    ARRAY,
    DateTime,
    Integer,
    Select,
    SmallInteger,
    Text,
    Update,
    bindparam,
    case,
    cast,
    func,
    select,
    true,
    tuple_,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.dialects.postgresql import insert as pg_insert

from pgqueue._sql.statements import LIVE_KEY
from pgqueue.models import jobs_table, periodic_table

periodic = periodic_table
jobs = jobs_table

_STATE_COLUMNS = (
    periodic.c.name,
    periodic.c.schedule,
    periodic.c.timezone,
    periodic.c.queue,
    periodic.c.ticks_from,
    periodic.c.last_tick,
    periodic.c.declared_at,
)
_MOMENT = DateTime(timezone=True)


def _declare() -> Any:
    declared = (
        func.unnest(
            bindparam("names", type_=ARRAY(Text)),
            bindparam("schedules", type_=ARRAY(Text)),
            bindparam("timezones", type_=ARRAY(Text)),
            bindparam("queues", type_=ARRAY(Text)),
        )
        .table_valued("name", "schedule", "timezone", "queue")
        .render_derived(name="declared")
    )
    now = bindparam("now", type_=_MOMENT)
    rows = select(
        declared.c.name, declared.c.schedule, declared.c.timezone, declared.c.queue, now, now
    )
    insert = pg_insert(periodic).from_select(
        ["name", "schedule", "timezone", "queue", "ticks_from", "declared_at"], rows
    )
    changed = tuple_(periodic.c.schedule, periodic.c.timezone).is_distinct_from(
        tuple_(insert.excluded.schedule, insert.excluded.timezone)
    )
    return insert.on_conflict_do_update(
        index_elements=["name"],
        set_={
            # A changed schedule starts from now: no job for its ticks before the change.
            "ticks_from": case((changed, insert.excluded.ticks_from), else_=periodic.c.ticks_from),
            "schedule": insert.excluded.schedule,
            "timezone": insert.excluded.timezone,
            "queue": insert.excluded.queue,
            "declared_at": insert.excluded.declared_at,
        },
    ).returning(*_STATE_COLUMNS)


#: A worker's start: upsert its definitions (``names``, ``schedules``, ``timezones``, ``queues``
#: arrays and ``now``); the latest worker to start sets the schedule. Returns the rows.
DECLARE: Any = _declare()

#: While a worker runs: ``declared_at = now()`` for its ``names`` (it still declares them).
REFRESH: Update = (
    periodic.update()
    .where(periodic.c.name == func.any(bindparam("names", type_=ARRAY(Text))))
    .values(declared_at=func.now())
)

#: The rows of ``names``.
STATES: Select[Any] = select(*_STATE_COLUMNS).where(
    periodic.c.name == func.any(bindparam("names", type_=ARRAY(Text)))
)

#: Every row, by name (``pgqueue periodic``, ``pgqueue doctor``).
ALL_STATES: Select[Any] = select(*_STATE_COLUMNS).order_by(periodic.c.name)

#: ``pgqueue periodic --remove``: returns the name when the row existed.
REMOVE: Any = (
    periodic.delete()
    .where(periodic.c.name == bindparam("definition", type_=Text))
    .returning(periodic.c.name)
)


def _fire() -> Select[Any]:
    advanced = (
        periodic.update()
        .where(
            periodic.c.name == bindparam("definition", type_=Text),
            periodic.c.schedule == bindparam("stored_schedule", type_=Text),
            periodic.c.timezone == bindparam("stored_timezone", type_=Text),
            periodic.c.last_tick.is_not_distinct_from(bindparam("prev", type_=_MOMENT)),
        )
        .values(last_tick=bindparam("tick", type_=_MOMENT), declared_at=func.now())
        .returning(periodic.c.name)
        .cte("advanced")
    )
    ticks = (
        func.unnest(cast(bindparam("headers_list", type_=ARRAY(Text)), ARRAY(JSONB)))
        .table_valued("headers", with_ordinality="ord")
        .render_derived(name="ticks")
    )
    rows = (
        select(
            bindparam("queue_name", type_=Text),
            cast(bindparam("payload_json", type_=Text), JSONB),
            bindparam("attempt_budget", type_=Integer),
            ticks.c.headers,
            bindparam("priority_level", type_=SmallInteger),
            bindparam("key", type_=Text),
            bindparam("task_name", None, type_=Text),
        )
        .select_from(advanced)
        .join(ticks, true())
        .order_by(ticks.c.ord)
    )
    inserted = (
        pg_insert(jobs)
        .from_select(
            ["queue", "payload", "max_attempts", "headers", "priority", "unique_key", "task"],
            rows,
        )
        .on_conflict_do_nothing(index_elements=["queue", "unique_key"], index_where=LIVE_KEY)
        .returning(jobs.c.id)
        .cte("inserted")
    )
    return select(
        select(func.count()).select_from(advanced).scalar_subquery().label("advanced"),
        select(func.array_agg(inserted.c.id)).scalar_subquery().label("ids"),
    )


#: Fire ticks: move ``last_tick`` of ``definition`` from ``prev`` to ``tick`` if the row still
#: has ``stored_schedule`` and ``stored_timezone``, and insert one job per element of
#: ``headers_list`` (JSON texts), skipping one whose ``key`` a live job holds. Returns
#: ``advanced`` (1 or 0) and the new ``ids``.
FIRE: Select[Any] = _fire()
