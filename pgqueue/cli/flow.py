"""The flow-control commands: ``pgqueue queues``, ``pause``, ``resume`` and ``limit``.

Each runs in one short transaction; ``pause``, ``resume`` and ``limit`` notify the workers on
commit (:mod:`pgqueue.flow`), so running workers follow within about a second. ``pause`` and
``limit`` of a queue nothing knows print the library's warning on stderr and go ahead.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from sqlalchemy import Connection

from pgqueue import admin, repository
from pgqueue.cli.common import (
    UserError,
    emit,
    emit_json,
    note,
    table,
    transaction,
    warnings_noted,
)
from pgqueue.errors import PgQueueError
from pgqueue.flow import Rate, describe_limits
from pgqueue.retention_policy import Retention, retention_of

#: Where the flow-control functions log their warnings (:mod:`pgqueue._sql.flow_calls`).
FLOW_LOGGER = "pgqueue.flow"


def rate_arg(value: str) -> Rate:
    """``--rate 10/1s``: a :class:`pgqueue.Rate`, or argparse's one-line error."""
    try:
        return Rate.parse(value)
    except PgQueueError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("rate: ")) from exc


def _rate_json(rate: Rate | None) -> dict[str, float] | None:
    return None if rate is None else {"limit": rate.limit, "period_s": rate.period.total_seconds()}


def retention_json(entry: Retention) -> dict[str, Any]:
    """A retention as ``--json`` writes it: seconds (``null``: kept for ever) and the kinds
    taken from the default."""
    return {
        "done_s": None if entry.done is None else entry.done.total_seconds(),
        "failed_s": None if entry.failed is None else entry.failed.total_seconds(),
        "inherited": list(entry.inherited),
    }


def cmd_queues(args: argparse.Namespace) -> int:
    """One line per queue that has queued or running jobs or stored settings: its name, whether
    it is paused, its limits, its retention (how long its done and failed jobs are kept), and
    its ready and running jobs."""
    with transaction(args) as conn:
        rows = admin.queue_overview(conn)
        entries = repository.retention(conn)
    kept = {r["queue"]: retention_of(entries, r["queue"]) for r in rows}
    if args.json:
        emit_json(
            [
                {**r, "rate": _rate_json(r["rate"]), "retention": retention_json(kept[r["queue"]])}
                for r in rows
            ]
        )
        return 0
    table(
        ["queue", "state", "limits", "retention", "ready", "running"],
        [
            (
                r["queue"],
                "paused" if r["paused"] else "-",
                describe_limits(r["concurrency"], r["per_key"], r["rate"]),
                kept[r["queue"]].text,
                r["ready"],
                r["running"],
            )
            for r in rows
        ],
    )
    if not rows:
        emit("(no queue with live jobs or settings)")
    return 0


def cmd_pause(args: argparse.Namespace) -> int:
    """Pause a queue: workers claim none of its jobs until ``pgqueue resume`` (running jobs
    finish; enqueueing still works)."""
    return _toggle(args, repository.pause, "paused queue {!r}", "queue {!r} was already paused")


def cmd_resume(args: argparse.Namespace) -> int:
    """Take a paused queue up again."""
    return _toggle(args, repository.resume, "resumed queue {!r}", "queue {!r} was not paused")


def _toggle(
    args: argparse.Namespace,
    change: Callable[[Connection, str], bool],
    changed: str,
    unchanged: str,
) -> int:
    """Run ``change`` on ``args.queue`` in one transaction, then say which way it went: a
    ``changed`` line on stdout, an ``unchanged`` note on stderr (both ``{!r}``: the queue)."""
    with warnings_noted(FLOW_LOGGER), transaction(args) as conn:
        done = change(conn, args.queue)
    if done:
        emit(changed.format(args.queue))
    else:
        note(unchanged.format(args.queue))
    return 0


def cmd_limit(args: argparse.Namespace) -> int:
    """Change a queue's limits: the flags given are set, the others kept; ``--clear`` removes
    every limit first (``--clear --rate 10/1s``: the rate alone); ``--forget`` drops the queue's
    settings row (pause and limits)."""
    given = {
        name: getattr(args, name)
        for name in ("concurrency", "per_key", "rate")
        if getattr(args, name) is not None
    }
    if args.forget:
        if given or args.clear:
            raise UserError(
                "--forget drops every setting of the queue (its pause too): give it alone"
            )
        return _forget(args)
    if not given and not args.clear:
        raise UserError(
            "name at least one of --concurrency, --per-key, --rate, or --clear (or --forget)"
        )
    with warnings_noted(FLOW_LOGGER), transaction(args) as conn:
        current = repository.lock_queue_settings(conn, args.queue)
        kept: dict[str, Any] = {}
        if not args.clear:
            kept = {"concurrency": current.concurrency, "per_key": current.per_key}
            kept["rate"] = current.rate
        now = repository.set_queue_limits(conn, args.queue, **{**kept, **given})
    emit(f"queue {args.queue!r}: {now.limits_text}")
    return 0


def _forget(args: argparse.Namespace) -> int:
    with transaction(args) as conn:
        dropped = repository.forget_queue_settings(conn, args.queue)
    if dropped:
        emit(f"forgot the settings of queue {args.queue!r}: unpaused, no limits")
    else:
        note(f"queue {args.queue!r} has no settings: nothing to forget")
    return 0
