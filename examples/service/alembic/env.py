"""The service's Alembic env: its models and pgqueue's, so autogenerate leaves ``jobs`` alone."""

from __future__ import annotations

import os
from logging.config import fileConfig

from alembic import context
from myservice.models import Base
from sqlalchemy import create_engine, pool

import pgqueue

config = context.config
if config.config_file_name is not None:
    fileConfig(config.config_file_name, disable_existing_loggers=False)

# Both metadatas: with only Base.metadata, autogenerate would propose dropping pgqueue's table.
target_metadata = [Base.metadata, pgqueue.metadata]


def run_migrations_offline() -> None:
    context.configure(url=os.environ["DATABASE_URL"], target_metadata=target_metadata)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    engine = create_engine(os.environ["DATABASE_URL"], poolclass=pool.NullPool)
    with engine.connect() as connection:
        context.configure(connection=connection, target_metadata=target_metadata)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
