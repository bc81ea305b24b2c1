"""pgqueue's Alembic revisions, shipped inside the package as their own branch (``pgqueue``).

Add :data:`VERSION_LOCATION` to your Alembic ``version_locations`` and run
``alembic upgrade heads``; or, without an Alembic environment of your own, call :func:`upgrade`
(what ``pgqueue migrate`` does).

``versions`` holds the revisions, frozen once released (they never import :mod:`pgqueue.models`);
``options`` the settings they read at migration time (the target schema, the NOTIFY channels);
``env`` is the Alembic entry point of the packaged revisions, whose body ``_env`` shares with the
repository's own ``alembic/env.py``.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Connection
from sqlalchemy.engine import URL

from pgqueue._base.urls import to_sqlalchemy_url
from pgqueue.migrations.options import SCHEMA_ATTRIBUTE
from pgqueue.schema import check_schema

#: The ``version_locations`` entry for a user's Alembic configuration.
VERSION_LOCATION = "pgqueue:migrations/versions"
#: The Alembic branch label of pgqueue's revisions.
BRANCH = "pgqueue"
#: ``alembic upgrade`` target that applies only pgqueue's revisions.
HEAD = "pgqueue@head"

_HERE = Path(__file__).parent


def alembic_config(target: str | URL | Connection, *, schema: str | None = None) -> Config:
    """An Alembic config that runs the packaged revisions against a URL or an open connection.

    ``schema`` places pgqueue's objects (and its ``alembic_version``) in that schema.
    """
    cfg = Config()
    if schema is not None:
        cfg.attributes[SCHEMA_ATTRIBUTE] = check_schema(schema)
    cfg.set_main_option("script_location", str(_HERE))
    cfg.set_main_option("version_locations", str(_HERE / "versions"))
    cfg.set_main_option("path_separator", "os")
    if isinstance(target, Connection):
        cfg.attributes["connection"] = target
    else:
        url = to_sqlalchemy_url(target).render_as_string(hide_password=False)
        # ConfigParser interpolation: a literal '%' in a password must be doubled.
        cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def upgrade(
    target: str | URL | Connection,
    revision: str = HEAD,
    *,
    sql: bool = False,
    schema: str | None = None,
) -> None:
    """Apply pgqueue's revisions up to ``revision`` (offline SQL to stdout with ``sql=True``)."""
    command.upgrade(alembic_config(target, schema=schema), revision, sql=sql)


def downgrade(
    target: str | URL | Connection, revision: str = "pgqueue@base", *, schema: str | None = None
) -> None:
    """Revert pgqueue's revisions down to ``revision``."""
    command.downgrade(alembic_config(target, schema=schema), revision)
