"""The statements of ``jobs_workers`` (pgqueue_0010): a worker's row, written at start and
deleted at stop; built into calls by :mod:`pgqueue._sql.worker_calls`.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    ARRAY,
    DateTime,
    Delete,
    Insert,
    Integer,
    Text,
    bindparam,
    func,
    literal,
    select,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert

from pgqueue.models import workers_table

#: ``SET LOCAL synchronous_commit = off`` as a value, for the worker's row: it is a courtesy to
#: operators (a server crash that loses the write ends the worker's sessions too, and a row left
#: behind says nothing false), so its two writes do not wait for the WAL to reach the disk. Each
#: runs in autocommit, one round trip; the wait they skip (a WAL flush, 1-5 ms on the project's
#: machine) was on the critical path of every ``run()``, before the first claim and after the last.
_ASYNC_COMMIT = select(
    func.set_config(literal("synchronous_commit", Text), literal("off", Text), True)
).scalar_subquery()

_WORKER_ROW: dict[str, Any] = {
    "name": bindparam("worker_name", type_=Text),
    "host": bindparam("host", type_=Text),
    "pid": bindparam("pid", type_=Integer),
    "queues": bindparam("queues", type_=ARRAY(Text)),
    "started_at": func.now(),
}

#: The worker's row, replacing one a process of the same host and pid left behind (a killed
#: worker's). Returns ``started_at``, which the delete names. Commits without waiting for the
#: disk (:data:`_ASYNC_COMMIT`, evaluated once with the inserted row's values).
REGISTER_WORKER: Insert = (
    pg_insert(workers_table)
    .values(
        {
            **_WORKER_ROW,
            "started_at": select(func.now()).where(_ASYNC_COMMIT.is_not(None)).scalar_subquery(),
        }
    )
    .on_conflict_do_update(
        index_elements=[workers_table.c.name],
        set_={name: value for name, value in _WORKER_ROW.items() if name != "name"},
    )
    .returning(workers_table.c.started_at)
)

#: Only the row this run wrote: a second ``Worker`` of the same process (same name) that started
#: later has replaced it, and keeps its own. Commits without waiting for the disk.
UNREGISTER_WORKER: Delete = workers_table.delete().where(
    workers_table.c.name == bindparam("worker_name", type_=Text),
    workers_table.c.started_at == bindparam("started_at", type_=DateTime(timezone=True)),
    _ASYNC_COMMIT.is_not(None),
)
