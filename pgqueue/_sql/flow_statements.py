"""Core statements of flow control (``jobs_queues``, pgqueue_0012): pure builders, no I/O.

Every change is one upsert of the queue's row that also sends the settings notification from its
``RETURNING`` (``pg_notify`` is transactional: delivered on commit, dropped on rollback), only for
the row it returns. The rate window (``window_start``, ``window_count``) is the claim's: no
statement here touches it, so a change of limits neither forgets the starts already counted in
the current window nor opens a new one.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    Insert,
    Integer,
    Interval,
    Select,
    Text,
    Update,
    bindparam,
    exists,
    false,
    func,
    or_,
    select,
    true,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.sql.dml import ReturningDelete

from pgqueue.models import LIVE_STATUSES, JobStatus, jobs_table, queues_table, status_literal

queues = queues_table

#: A ``jobs_queues`` row as every reader takes it, the worker's and the users'
#: (:func:`pgqueue._sql.flow_calls.settings_row` reads it into :class:`pgqueue.QueueSettings`).
SETTINGS_COLUMNS = (
    queues.c.queue,
    queues.c.paused,
    queues.c.concurrency,
    queues.c.per_key,
    queues.c.rate_limit,
    queues.c.rate_period,
)


def _notify() -> Any:
    return func.pg_notify(
        bindparam("channel", type_=Text), bindparam("notify_payload", type_=Text)
    ).label("notified")


#: The queue becomes paused: its row is inserted, or updated when it was not paused. Returns a
#: row (and notifies) only when the state changed. Parameters ``queue_name``, ``channel``,
#: ``notify_payload``.
PAUSE: Insert = (
    pg_insert(queues)
    .values(queue=bindparam("queue_name", type_=Text), paused=true())
    .on_conflict_do_update(
        index_elements=[queues.c.queue],
        set_={"paused": true(), "updated_at": func.now()},
        where=queues.c.paused.is_(False),
    )
    .returning(queues.c.queue, _notify())
)

#: The queue is no longer paused. A queue without a row was never paused: nothing to insert.
#: Returns a row (and notifies) only when the state changed.
RESUME: Update = (
    queues.update()
    .where(queues.c.queue == bindparam("queue_name", type_=Text), queues.c.paused.is_(True))
    .values(paused=false(), updated_at=func.now())
    .returning(queues.c.queue, _notify())
)

_LIMITS: dict[str, Any] = {
    "concurrency": bindparam("concurrency", type_=Integer),
    "per_key": bindparam("per_key", type_=Integer),
    "rate_limit": bindparam("rate_limit", type_=Integer),
    "rate_period": bindparam("rate_period", type_=Interval),
}

#: The queue's limits become exactly these (NULL: no limit); its pause is kept. Returns the
#: queue's settings after the change, and always notifies.
SET_LIMITS: Insert = (
    pg_insert(queues)
    .values(queue=bindparam("queue_name", type_=Text), **_LIMITS)
    .on_conflict_do_update(
        index_elements=[queues.c.queue], set_={**_LIMITS, "updated_at": func.now()}
    )
    .returning(*SETTINGS_COLUMNS, _notify())
)

#: Every queue's settings row, by name.
ALL_SETTINGS: Select[Any] = select(*SETTINGS_COLUMNS).order_by(queues.c.queue)

#: One queue's settings row (none when it was never paused or limited).
SETTINGS: Select[Any] = select(*SETTINGS_COLUMNS).where(
    queues.c.queue == bindparam("queue_name", type_=Text)
)

#: The queue's row, inserted with no settings when it has none, locked until the end of the
#: transaction: ``pgqueue limit`` changes some limits and keeps the others, and a second operator
#: changing the same queue waits instead of overwriting. Returns the settings as they are.
LOCK_SETTINGS: Insert = (
    pg_insert(queues)
    .values(queue=bindparam("queue_name", type_=Text))
    .on_conflict_do_update(index_elements=[queues.c.queue], set_={"queue": queues.c.queue})
    .returning(*SETTINGS_COLUMNS)
)

#: The queue's row is deleted: unpaused and unlimited, its rate window forgotten (``pgqueue limit
#: Q --forget``). Returns a row (and notifies) only when there was one.
FORGET: ReturningDelete[Any] = (
    queues.delete()
    .where(queues.c.queue == bindparam("queue_name", type_=Text))
    .returning(queues.c.queue, _notify())
)


def _live_job(status: JobStatus) -> Any:
    # The literal status, so the plan may use the partial index of that status.
    return exists().where(
        jobs_table.c.queue == bindparam("queue_name", type_=Text),
        jobs_table.c.status == status_literal(status),
    )


#: Whether anything knows the queue: a settings row, or a queued or running job (what ``pgqueue
#: queues`` lists). Reads the rows of ``jobs_queues``' key and the partial ``jobs_ready_idx`` and
#: ``jobs_lease_idx``, never the finished history; the cheapest test first, each ``EXISTS``
#: evaluated only when the ones before it found nothing. Parameter ``queue_name``.
QUEUE_KNOWN: Select[Any] = select(
    or_(
        exists().where(queues.c.queue == bindparam("queue_name", type_=Text)),
        *(_live_job(status) for status in LIVE_STATUSES),
    ).label("known")
)
