"""Least-privilege grants: what a producer, a worker and a monitoring role need, as SQL.

The role that runs ``pgqueue migrate`` owns the table, its trigger and function; the application
roles get only DML:

- producer: ``INSERT`` on ``jobs`` and ``SELECT (id, queue, unique_key, status)``. ``enqueue``
  reads the new id back with ``RETURNING id``; a unique enqueue also reads the other three, since
  its ``ON CONFLICT (queue, unique_key) WHERE unique_key IS NOT NULL AND status IN (...)`` names
  them (an arbiter's columns and predicate need ``SELECT``) and so does its lookup of the job
  holding the key. Without them a unique enqueue is refused ("permission denied"). The identity
  column needs no sequence grant. A producer that reads or waits for results
  (``pgqueue.fetch_result``, ``pgqueue.wait_for``) also reads ``result``, ``last_error``,
  ``progress``, ``finished_at``, ``task``, ``attempts``, ``cancelled_at`` and ``expired_at``
  (:data:`WAITER_COLUMNS`; ``LISTEN`` needs no privilege). The producer cannot read payloads,
  headers or the attempt history (``errors``, with its tracebacks), nor update or delete. With
  ``dependencies=True`` (``--producer-dependencies``: a producer that enqueues with
  ``depends_on``, pgqueue_0013) it also gets ``SELECT`` and ``UPDATE`` on the columns the
  enqueue of a waiting job writes (``has_dependents`` on its dependencies; ``waiting_on``,
  ``run_at``, ``status``, ``last_error``, ``finished_at``, ``cancelled_at`` on the new job) and
  ``SELECT, INSERT`` on ``jobs_dependencies``: a producer role can then also change those columns
  of other jobs, the price of a column-level grant.
- worker: ``SELECT, INSERT, UPDATE`` on ``jobs`` (claim ``FOR UPDATE SKIP LOCKED``, lease
  extensions, completions, failures, the reaper; ``INSERT`` for the jobs of periodic definitions
  and for handlers that enqueue follow-up jobs) and on ``jobs_periodic`` (declaring periodic
  definitions and firing their ticks), ``SELECT, INSERT, UPDATE`` on ``jobs_dependencies`` (the
  ``jobs_release`` trigger runs as the role finishing the job); ``SELECT, INSERT, UPDATE,
  DELETE`` on ``jobs_workers`` (a worker records itself when it starts and removes its row when
  it stops); ``SELECT, UPDATE`` on ``jobs_queues`` (the claim reads a queue's pause and limits
  and moves its rate window); ``DELETE`` on ``jobs`` and ``SELECT, INSERT, UPDATE`` on
  ``jobs_retention`` (pgqueue_0016: workers delete the finished jobs past their queue's
  retention, noting each visit in the queue's row; ``Worker(prune=False)`` needs neither);
  ``SELECT, INSERT, UPDATE, DELETE`` on ``jobs_logs`` (pgqueue_0018: the jobs' log lines,
  upserted by the outcome and heartbeat statements, deleted with their jobs by the pruner).
  ``LISTEN`` needs no privilege.
- monitor (``doctor``, ``stats``, ``periodic``, ``queues``, ``retention``): ``pg_monitor`` to see
  every session, ``SELECT`` on ``jobs``, ``jobs_periodic``, ``jobs_workers``, ``jobs_queues``,
  ``jobs_dependencies``, ``jobs_retention``, ``jobs_logs`` and ``alembic_version``.

Each role gets ``USAGE`` on the schema. ``purge``, ``retry``, ``cancel`` and ``unblock`` are
maintenance: run them as the owner, or grant ``DELETE`` (purge: on ``jobs`` and ``jobs_logs``)
and ``UPDATE`` (retry, cancel, unblock; which also read ``jobs_dependencies``) to a role of yours;
so is ``pgqueue periodic --remove`` (``DELETE`` on ``jobs_periodic``), and so are ``pause``,
``resume`` and ``set_queue_limits`` (``SELECT, INSERT, UPDATE`` on ``jobs_queues``: they upsert
the queue's row), and ``set_retention`` (``SELECT, INSERT, UPDATE`` on ``jobs_retention``).
Role and schema names are quoted identifiers, never spliced raw.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

from psycopg import sql

from pgqueue.errors import InvalidArgumentError, InvalidArgumentTypeError
from pgqueue.schema import check_schema

#: The columns a producer reads: the new id (``RETURNING id``), and for a unique enqueue the
#: conflict arbiter's columns and predicate and the key holder's lookup (plain lower-case names:
#: constants, printed unquoted).
PRODUCER_COLUMNS = ("id", "queue", "unique_key", "status")
#: What ``fetch_result`` and ``wait_for`` read besides ``id`` and ``status``: a producer gets
#: them too, so it can wait for the jobs it enqueued (#22).
WAITER_COLUMNS = (
    "result",
    "last_error",
    "progress",
    "finished_at",
    "task",
    "attempts",
    "cancelled_at",
    "expired_at",
)

#: The columns an enqueue with ``depends_on`` reads and writes (pgqueue_0013).
PRODUCER_DEPENDENCY_COLUMNS = (
    "has_dependents",
    "waiting_on",
    "run_at",
    "status",
    "last_error",
    "finished_at",
    "cancelled_at",
)

#: PostgreSQL truncates identifiers longer than this (bytes).
_MAX_IDENTIFIER_BYTES = 63


def check_role(name: object, argument: str = "role") -> str:
    """A role name pgqueue will quote: a non-empty string of at most 63 bytes without NUL."""
    if not isinstance(name, str):
        raise InvalidArgumentTypeError(argument, "str", name)
    if not name or "\x00" in name or len(name.encode()) > _MAX_IDENTIFIER_BYTES:
        raise InvalidArgumentError(
            argument, f"must be a role name of 1 to {_MAX_IDENTIFIER_BYTES} bytes, got {name!r}"
        )
    return name


def grants_sql(
    *,
    worker: str | None = None,
    producer: str | None = None,
    monitor: str | None = None,
    schema: str | None = None,
    dependencies: bool = False,
) -> str:
    """The ``GRANT`` statements for the given roles, one per line, to run as the owner.

    ``schema`` is where ``pgqueue migrate --schema`` put the table (default ``public``).
    ``dependencies``: the producer also enqueues with ``depends_on`` (see above).
    """
    place = sql.Identifier(check_schema(schema) if schema is not None else "public")
    jobs = sql.SQL("{}.jobs").format(place)
    periodic = sql.SQL("{}.jobs_periodic").format(place)
    workers = sql.SQL("{}.jobs_workers").format(place)
    queues = sql.SQL("{}.jobs_queues").format(place)
    version = sql.SQL("{}.alembic_version").format(place)
    edges = sql.SQL("{}.jobs_dependencies").format(place)
    retention = sql.SQL("{}.jobs_retention").format(place)
    logs = sql.SQL("{}.jobs_logs").format(place)
    lines: list[sql.Composable] = []
    roles = {
        "role_producer": producer,
        "role_worker": worker,
        "role_monitor": monitor,
    }
    for argument, role in roles.items():
        if role is None:
            continue
        who = sql.Identifier(check_role(role, argument))
        lines.append(sql.SQL("GRANT USAGE ON SCHEMA {} TO {};").format(place, who))
        if argument == "role_producer":
            lines.append(
                sql.SQL("GRANT INSERT, SELECT ({}) ON {} TO {};").format(
                    sql.SQL(", ".join(PRODUCER_COLUMNS + WAITER_COLUMNS)), jobs, who
                )
            )
            if dependencies:
                dependency_columns = sql.SQL(", ".join(PRODUCER_DEPENDENCY_COLUMNS))
                lines.append(
                    sql.SQL("GRANT SELECT ({}), UPDATE ({}) ON {} TO {};").format(
                        dependency_columns, dependency_columns, jobs, who
                    )
                )
                lines.append(sql.SQL("GRANT SELECT, INSERT ON {} TO {};").format(edges, who))
        elif argument == "role_worker":
            lines.append(
                sql.SQL("GRANT SELECT, INSERT, UPDATE ON {}, {} TO {};").format(jobs, periodic, who)
            )
            lines.append(
                sql.SQL("GRANT SELECT, INSERT, UPDATE, DELETE ON {} TO {};").format(workers, who)
            )
            lines.append(sql.SQL("GRANT SELECT, UPDATE ON {} TO {};").format(queues, who))
            lines.append(sql.SQL("GRANT SELECT, INSERT, UPDATE ON {} TO {};").format(edges, who))
            lines.append(sql.SQL("GRANT DELETE ON {} TO {};").format(jobs, who))
            lines.append(
                sql.SQL("GRANT SELECT, INSERT, UPDATE ON {} TO {};").format(retention, who)
            )
            lines.append(
                sql.SQL("GRANT SELECT, INSERT, UPDATE, DELETE ON {} TO {};").format(logs, who)
            )
        else:
            lines.append(
                sql.SQL("GRANT SELECT ON {}, {}, {}, {}, {}, {}, {}, {} TO {};").format(
                    jobs, periodic, workers, queues, edges, retention, logs, version, who
                )
            )
            lines.append(sql.SQL("GRANT pg_monitor TO {};").format(who))
    if not lines:
        raise InvalidArgumentError("roles", "name at least one of worker, producer, monitor")
    return "\n".join(line.as_string(None) for line in lines) + "\n"
