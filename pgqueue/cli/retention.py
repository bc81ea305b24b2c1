"""``pgqueue retention``: how long finished jobs are kept, listed or set.

``pgqueue retention`` lists the default and every queue with a setting of its own;
``pgqueue retention QUEUE`` shows what applies to that queue; ``--done`` and ``--failed`` (a
duration such as ``7d``, or ``never``) set it, the default's without a ``QUEUE``. The change is
one short transaction; workers apply it at their next visit of the queue (within a minute).
"""

from __future__ import annotations

import argparse
from datetime import timedelta

from pgqueue import repository
from pgqueue._base.durations import format_duration
from pgqueue.cli.common import emit, emit_json, parse_duration, table, transaction
from pgqueue.cli.flow import retention_json
from pgqueue.retention_policy import Retention, retention_of

#: What ``--done`` and ``--failed`` take to keep a kind for ever.
NEVER = "never"


def retention_arg(value: str) -> timedelta | None:
    """``--done 7d`` / ``--failed never``: a duration, or ``None`` (kept for ever)."""
    if value.strip().lower() == NEVER:
        return None
    return parse_duration(value)


def cmd_retention(args: argparse.Namespace) -> int:
    """List how long finished jobs are kept (the default, then each queue with its own), show one
    queue's, or set them: --done and --failed take a duration (7d, 12h, 30m) or never; a kind
    not given keeps its value. Without QUEUE they set the default of every queue without its
    own. Defaults: done jobs 7 days, failed ones (cancelled and expired too) 30 days. Running
    workers delete older finished jobs, at most once a minute per queue."""
    changes = {kind: getattr(args, kind) for kind in ("done", "failed")}
    changing = any(value is not ... for value in changes.values())
    with transaction(args) as conn:
        if changing:
            entries = [repository.set_retention(conn, args.queue, **changes)]
        else:
            entries = repository.retention(conn)
            if args.queue is not None:
                entries = [retention_of(entries, args.queue)]
    if args.json:
        emit_json([{"queue": e.queue, **retention_json(e)} for e in entries])
        return 0
    if changing:
        emit(f"{_name(entries[0])}: {entries[0].text}{_from_default(entries[0])}")
        return 0
    table(
        ["queue", "done", "failed", "from the default"],
        [(_name(e), *_kinds(e), ", ".join(e.inherited) or "-") for e in entries],
    )
    return 0


def _name(entry: Retention) -> str:
    return "(default)" if entry.queue is None else entry.queue


def _kinds(entry: Retention) -> tuple[str, str]:
    return _kept(entry.done), _kept(entry.failed)


def _kept(value: timedelta | None) -> str:
    return NEVER if value is None else format_duration(value)


def _from_default(entry: Retention) -> str:
    if entry.queue is None or not entry.inherited:
        return ""
    return f" ({' and '.join(entry.inherited)} from the default)"
