"""``python -m pgqueue``: the ``pgqueue`` command."""

from pgqueue.cli import run

run()
