"""This repository's Alembic env: the same runner as the packaged one (one set of revisions)."""

from logging.config import fileConfig

from alembic import context

from pgqueue.migrations._env import run

if context.config.config_file_name is not None:
    fileConfig(context.config.config_file_name)

run()
