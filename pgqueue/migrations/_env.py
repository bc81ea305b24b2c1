"""The body of an Alembic ``env.py`` for pgqueue: shared by the packaged and the repository env."""

from __future__ import annotations

import os
from typing import Any

from alembic import context
from sqlalchemy import Connection, create_engine, pool

from pgqueue._base.urls import to_sqlalchemy_url
from pgqueue.migrations.options import quoted_schema, target_schema
from pgqueue.models import metadata

URL_ENV_VAR = "PGQUEUE_DATABASE_URL"


def _url() -> str:
    url = os.environ.get(URL_ENV_VAR) or context.config.get_main_option("sqlalchemy.url")
    if not url:
        raise RuntimeError(f"no database URL: set {URL_ENV_VAR} or sqlalchemy.url in alembic.ini")
    return to_sqlalchemy_url(url).render_as_string(hide_password=False)


def _schema_options() -> dict[str, Any]:
    """With a schema of its own, pgqueue keeps its ``alembic_version`` there too."""
    schema = target_schema()
    return {} if schema is None else {"version_table_schema": schema}


def _run_migrations() -> None:
    with context.begin_transaction():
        schema = target_schema()
        if schema is not None:  # before Alembic creates its version table in it
            context.execute(f"CREATE SCHEMA IF NOT EXISTS {quoted_schema(schema)}")
        context.run_migrations()


def _configure(connection: Connection) -> None:
    context.configure(connection=connection, target_metadata=metadata, **_schema_options())
    _run_migrations()


def run() -> None:
    """Run offline (``--sql``) or online, on a given connection when the caller passed one."""
    if context.is_offline_mode():
        context.configure(
            url=_url(), target_metadata=metadata, literal_binds=True, **_schema_options()
        )
        _run_migrations()
        return
    given = context.config.attributes.get("connection")
    if given is not None:
        _configure(given)
        return
    engine = create_engine(_url(), poolclass=pool.NullPool)
    try:
        with engine.connect() as connection:
            _configure(connection)
    finally:
        engine.dispose()
