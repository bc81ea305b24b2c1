"""Where pgqueue's table lives: ``public.jobs`` by default, or a schema of the user's choice.

A database that already has a ``jobs`` table of its own can hold pgqueue in another schema. The
schema is chosen once at migration time (``-x pgqueue_schema=NAME``, ``PGQUEUE_SCHEMA`` or
``pgqueue migrate --schema NAME``) and then named on the engine with :func:`use_schema`, which
sets SQLAlchemy's ``schema_translate_map``: the model and every statement follow it, and the
worker listens on that schema's channel.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, TypeVar

from sqlalchemy import Connection, Engine

from pgqueue.errors import InvalidArgumentError, InvalidArgumentTypeError

#: The NOTIFY channel of the default placement (``public.jobs``), as in the article.
DEFAULT_CHANNEL = "jobs"
#: The channel on which the default placement's ``jobs_notify_finished()`` trigger names the jobs
#: that finished (pgqueue_0011): what :func:`pgqueue.wait_for` listens to. A schema of its own
#: uses ``<schema>.done`` (:func:`finished_channel_for`); no such name is ``jobs_done``.
DEFAULT_FINISHED_CHANNEL = "jobs_done"
#: The NOTIFY payload of :func:`pgqueue.cancel` on a placement's channel: a comma, which no queue
#: name holds, so workers tell it from the insert trigger's queue names.
CANCEL_HINT = ",cancel"
#: The NOTIFY payload of :func:`pgqueue.pause`, :func:`pgqueue.resume` and
#: :func:`pgqueue.set_queue_limits` on a placement's channel: a queue's settings changed, re-read
#: ``jobs_queues`` (see :mod:`pgqueue.flow`).
SETTINGS_HINT = ",settings"
#: Environment variable read at migration time when no ``-x pgqueue_schema`` is given.
SCHEMA_ENV_VAR = "PGQUEUE_SCHEMA"

# A plain identifier: it is spliced into DDL (quoted) and into the channel name, so keep it simple.
_PLAIN_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Channel names are identifiers too: at most 63 bytes, so "<schema>.jobs" caps the schema at 58.
_MAX_SCHEMA_LENGTH = 63 - len("." + DEFAULT_CHANNEL)

if TYPE_CHECKING:  # the asyncio extra stays optional
    from sqlalchemy.ext.asyncio import AsyncEngine

B = TypeVar("B", Engine, Connection, "AsyncEngine")


def check_schema(schema: object) -> str:
    """A schema name pgqueue accepts: a plain identifier of at most 58 characters."""
    if not isinstance(schema, str):
        raise InvalidArgumentTypeError("schema", "str", schema)
    if not _PLAIN_IDENTIFIER.fullmatch(schema):
        raise InvalidArgumentError(
            "schema", f"must be a plain identifier (letters, digits, _), got {schema!r}"
        )
    if len(schema) > _MAX_SCHEMA_LENGTH:
        raise InvalidArgumentError("schema", f"longer than {_MAX_SCHEMA_LENGTH} characters")
    return schema


def channel_for(schema: str | None) -> str:
    """The NOTIFY channel of a placement: ``jobs`` by default, ``<schema>.jobs`` otherwise.

    Two placements in one database never wake each other's workers.
    """
    return DEFAULT_CHANNEL if schema is None else f"{check_schema(schema)}.{DEFAULT_CHANNEL}"


def finished_channel_for(schema: str | None) -> str:
    """The channel that names a placement's finished jobs: ``jobs_done``, or ``<schema>.done``.

    Its payload is the ids of the jobs a statement made ``done`` or ``failed``, comma-separated
    (several notifications for a large batch). Like :func:`channel_for`, one per placement, and
    of at most 63 bytes (a schema has at most 58 characters).

    .. versionadded:: 0.1.0
    """
    return DEFAULT_FINISHED_CHANNEL if schema is None else f"{check_schema(schema)}.done"


def use_schema(bind: B, schema: str | None) -> B:
    """The same engine (sync or async) or connection, with pgqueue's table mapped to ``schema``.

    ``None`` keeps the default placement. Only pgqueue's unqualified table is translated; the
    application's own tables with an explicit schema are left alone.
    """
    if schema is None:
        return bind
    return bind.execution_options(schema_translate_map={None: check_schema(schema)})


def schema_of(bind: Engine | Connection | AsyncEngine) -> str | None:
    """The schema :func:`use_schema` gave ``bind``, else ``None``."""
    options = bind.get_execution_options()
    translate = options.get("schema_translate_map") or {}
    schema = translate.get(None)
    return None if schema is None else str(schema)


def channel_of(executor: object) -> str:
    """The NOTIFY channel of whatever a repository function was given.

    A ``Connection``, a ``Session`` (its bind), or their asyncio twins (their sync side).
    """
    get_bind = getattr(executor, "get_bind", None)
    bind = get_bind() if callable(get_bind) else executor
    bind = getattr(bind, "sync_connection", None) or getattr(bind, "sync_engine", None) or bind
    if not isinstance(bind, (Engine, Connection)):
        return DEFAULT_CHANNEL
    return channel_for(schema_of(bind))
