"""Retention: how long finished jobs are kept before running workers delete them.

Two kinds: ``done`` jobs, and ``failed`` ones (cancelled and expired jobs are stored ``failed``,
so they are kept as failed ones are). Each queue takes its own setting of a kind when it has one,
else the default's (set with ``queue=None``), else the built-in :data:`DEFAULT_DONE` (7 days) or
:data:`DEFAULT_FAILED` (30 days). ``None`` keeps the kind for ever. The settings live in
``jobs_retention`` (pgqueue_0016), one row per queue with a setting (the default's row has the
queue ``''``, a name no queue can have); its rows also record when a worker last pruned the queue.

The age is ``finished_at`` (pgqueue_0009): jobs finished before that revision have none and are
never pruned (``pgqueue purge`` removes them).

.. versionadded:: 0.1.0
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from types import EllipsisType

from pgqueue._base.durations import format_duration
from pgqueue._base.validation import check_duration, check_queue
from pgqueue.errors import InvalidArgumentError
from pgqueue.models import (
    DEFAULT_DONE_RETENTION,
    DEFAULT_FAILED_RETENTION,
    DEFAULT_RETENTION_ROW,
    RETENTION_KINDS,
)

#: How long ``done`` jobs are kept where nothing else is set: 7 days.
DEFAULT_DONE = DEFAULT_DONE_RETENTION
#: How long ``failed`` jobs (cancelled and expired ones too) are kept where nothing else is set:
#: 30 days.
DEFAULT_FAILED = DEFAULT_FAILED_RETENTION
#: The kinds of finished jobs a retention is set for.
KINDS = RETENTION_KINDS
#: The ``jobs_retention.queue`` of the default's row: blank, which no queue name may be.
DEFAULT_ROW = DEFAULT_RETENTION_ROW

#: The value of a kind ``set_retention`` leaves as it is (its default: ``...``).
Unchanged = EllipsisType
#: A kind's new value: a duration (``timedelta`` or seconds), ``None`` (kept for ever), or
#: ``...`` (unchanged).
RetentionValue = timedelta | float | None | EllipsisType


@dataclass(frozen=True)
class Retention:
    """How long one queue's finished jobs are kept, as the workers apply it.

    Attributes:
        queue: The queue; ``None`` for the default of every queue without its own setting.
        done: How long ``done`` jobs are kept after they finished; ``None``: for ever.
        failed: How long ``failed`` jobs (cancelled and expired ones too) are kept; ``None``:
            for ever.
        inherited: The kinds this queue takes from the default (for the default: the kinds
            that are the built-in 7 and 30 days). Empty when both are the queue's own.

    .. versionadded:: 0.1.0
    """

    queue: str | None
    done: timedelta | None = DEFAULT_DONE
    failed: timedelta | None = DEFAULT_FAILED
    inherited: tuple[str, ...] = ()

    @property
    def text(self) -> str:
        """``done 7d, failed 30d`` (``never`` for a kind kept for ever): how ``pgqueue
        retention``, ``pgqueue queues`` and the dashboard show it."""
        return describe_retention(self.done, self.failed)


def retention_of(entries: list[Retention], queue: str) -> Retention:
    """``queue``'s retention among ``entries`` (what :func:`pgqueue.retention` returned): its own
    entry, else the default's values, both kinds inherited."""
    default = Retention(None, inherited=KINDS)
    for entry in entries:
        if entry.queue == queue:
            return entry
        if entry.queue is None:
            default = entry
    return Retention(queue, default.done, default.failed, inherited=KINDS)


def describe_retention(done: timedelta | None, failed: timedelta | None) -> str:
    """``done 7d, failed 30d``; ``never`` for a kind kept for ever."""
    return ", ".join(
        f"{kind} {'never' if value is None else format_duration(value)}"
        for kind, value in (("done", done), ("failed", failed))
    )


@dataclass(frozen=True)
class RetentionChange:
    """The checked arguments of ``set_retention``: the row's key and the kinds to set."""

    row: str
    #: ``{kind: value}`` for the kinds given (``None``: for ever); the others stay as they are.
    kinds: dict[str, timedelta | None]


def check_retention(
    queue: object, done: object, failed: object, unknown: dict[str, object]
) -> RetentionChange:
    """The arguments of ``set_retention``, checked before any SQL: a queue name or ``None``, and
    each kind a duration above zero of at most :data:`pgqueue.MAX_DURATION`, ``None`` or
    ``...``; no other kind.

    Raises:
        InvalidArgumentError: an unknown kind, a bad queue name or duration, or no kind at all.
    """
    if unknown:
        names = ", ".join(sorted(unknown))
        raise InvalidArgumentError(
            names,
            "unknown retention kind: the kinds are done and failed (failed covers cancelled "
            "and expired jobs)",
        )
    row = DEFAULT_ROW if queue is None else check_queue(queue)
    kinds: dict[str, timedelta | None] = {}
    for kind, value in (("done", done), ("failed", failed)):
        if value is Ellipsis:
            continue
        kinds[kind] = None if value is None else check_duration(kind, value, allow_zero=False)
    if not kinds:
        raise InvalidArgumentError("done", "give done=, failed= or both (None keeps for ever)")
    return RetentionChange(row, kinds)
