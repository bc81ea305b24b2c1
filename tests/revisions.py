"""The packaged revision chain, read from the scripts: tests follow the real head."""

from __future__ import annotations

from alembic.script import ScriptDirectory

import pgqueue.migrations


def _script() -> ScriptDirectory:
    return ScriptDirectory.from_config(pgqueue.migrations.alembic_config("postgresql://x/y"))


def pgqueue_revisions() -> list[str]:
    """pgqueue's revision ids, base first."""
    return [r.revision for r in reversed(list(_script().walk_revisions()))]


def pgqueue_head() -> str:
    """The head of pgqueue's branch."""
    head = _script().get_current_head()
    assert head is not None
    return head
