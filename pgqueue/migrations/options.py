"""Options the revisions read at migration time (they must not import pgqueue.models)."""

from __future__ import annotations

import os

from alembic import context, op
from sqlalchemy.dialects import postgresql

from pgqueue.schema import SCHEMA_ENV_VAR, channel_for, check_schema, finished_channel_for

#: ``alembic -x pgqueue_schema=NAME upgrade ...`` puts pgqueue's objects in schema NAME.
SCHEMA_X_ARGUMENT = "pgqueue_schema"
#: Key of ``Config.attributes`` for programmatic runs (:func:`pgqueue.migrations.upgrade`).
SCHEMA_ATTRIBUTE = "pgqueue_schema"

_PREPARER = postgresql.dialect().identifier_preparer  # type: ignore[no-untyped-call]


def target_schema() -> str | None:
    """The schema chosen for this run: the API's argument, ``-x pgqueue_schema``, then the env.

    ``None`` is the article's default placement (the connection's current schema, ``public``).
    """
    chosen = context.config.attributes.get(SCHEMA_ATTRIBUTE)
    if chosen is None:
        chosen = context.get_x_argument(as_dictionary=True).get(SCHEMA_X_ARGUMENT)
    if chosen is None:
        chosen = os.environ.get(SCHEMA_ENV_VAR) or None
    return None if chosen is None else check_schema(chosen)


def quoted_schema(schema: str) -> str:
    """The schema as an SQL identifier for hand-written DDL (it is a checked plain identifier)."""
    return str(_PREPARER.quote_schema(check_schema(schema)))


def qualified(name: str, schema: str | None) -> str:
    """``name``, or ``schema.name`` when pgqueue lives in a schema of its own."""
    return name if schema is None else f"{quoted_schema(schema)}.{name}"


def notify_channel(schema: str | None) -> str:
    """The NOTIFY channel the trigger of this placement uses."""
    return channel_for(schema)


def finished_channel(schema: str | None) -> str:
    """The NOTIFY channel on which this placement's finished jobs are named (pgqueue_0011)."""
    return finished_channel_for(schema)


def drop_invalid_index(name: str, schema: str | None) -> None:
    """An interrupted CONCURRENTLY build leaves an INVALID index: drop it before building again.

    Run it inside the same autocommit block as the build. (S608: the only value inlined is the
    schema, a checked plain identifier; ``name`` is one of pgqueue's own index names.)
    """
    op.execute(
        f"""
        DO $$
        BEGIN
          IF EXISTS (
            SELECT 1 FROM pg_index i
            WHERE i.indexrelid = to_regclass('{qualified(name, schema)}') AND NOT i.indisvalid
          ) THEN
            DROP INDEX {qualified(name, schema)};
          END IF;
        END
        $$
        """  # noqa: S608
    )
