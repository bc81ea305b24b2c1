"""``python -m pgqueue.cli``: the ``pgqueue`` command, as ``python -m pgqueue``."""

from pgqueue.cli import run

run()
