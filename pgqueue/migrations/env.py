"""Alembic entry point for the packaged revisions (used by ``pgqueue migrate``)."""

from pgqueue.migrations._env import run

run()
