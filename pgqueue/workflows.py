"""Chains and groups of task calls (the Celery shapes, #24), built on ``depends_on``.

:func:`chain` enqueues signatures (:meth:`pgqueue.Task.s`) so that each job depends on the one
before it; :func:`group` enqueues members that run in parallel and, optionally, a ``then`` job
that depends on all of them (Celery's ``chord``). Both run in the caller's transaction and check
everything first: an empty chain or group, a value that is not a signature, or options that
cannot take a dependency raise before any SQL, so nothing of the call is written.

A later job reads what the earlier ones returned with
:meth:`pgqueue.JobContext.dependency_results` (``pgqueue.current_job().dependency_results()``);
results are never passed as arguments (a signature's arguments are fixed, and checked, when it is
made).

Each is a plan of :mod:`pgqueue._sql.calls` (:func:`chain_plan`, :func:`group_plan`) that the
blocking runner drives here and the awaiting one in :func:`pgqueue.aio.chain` and
:func:`pgqueue.aio.group`: the logic exists once, and the async twins need no greenlet.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pgqueue._sql import calls
from pgqueue._sql.runners import drive
from pgqueue.errors import InvalidArgumentError, InvalidArgumentTypeError
from pgqueue.tasks import Signature, Task

if TYPE_CHECKING:
    from sqlalchemy import Connection
    from sqlalchemy.orm import Session

#: A stand-in dependency for checking, before any SQL, that a signature's options accept one.
_PROBE = 1


@dataclass(frozen=True)
class GroupIds:
    """What :func:`group` enqueued.

    Attributes:
        members: The members' job ids, in the order given.
        then: The id of the job that runs after every member, or ``None`` without ``then``.

    .. versionadded:: 0.1.0
    """

    members: list[int]
    then: int | None


def _check_signature(value: object, name: str) -> Signature:
    if not isinstance(value, Signature):
        raise InvalidArgumentTypeError(name, "a task signature (task.s(...))", value)
    return value


def _own_dependencies(sig: Signature) -> list[int]:
    return list(sig.task.bound_options.depends_on or ())


def _with_dependencies(sig: Signature, ids: Sequence[int], name: str) -> Task[..., Any]:
    """``sig``'s task with ``ids`` added to its own ``depends_on`` (checked, no SQL)."""
    try:
        return sig.task.options(depends_on=[*_own_dependencies(sig), *ids])
    except InvalidArgumentError as exc:
        raise InvalidArgumentError(name, str(exc)) from None


def chain(conn: Connection | Session, /, *signatures: Signature) -> list[int]:
    """Enqueue task calls that run one after another: each job depends on the previous one.

    The first job is ready at once (or waits for its own ``depends_on``); each later one waits
    until the one before it is ``done``, and reads its result with
    ``pgqueue.current_job().dependency_results()``. When a job fails for good or is cancelled,
    the rest of the chain becomes ``failed`` naming it (unless a signature was bound with
    ``on_dependency_failure="run"``). One enqueue per job, in the caller's transaction::

        ids = pgqueue.chain(conn, fetch.s(url), parse.s(), notify.s(user_id=7))

    Args:
        conn: A ``Connection`` or ``Session`` (its transaction; nothing is committed).
        *signatures: At least one :meth:`pgqueue.Task.s`.

    Returns:
        The jobs' ids, in the chain's order.

    Raises:
        InvalidArgumentError: no signature, or one whose options take no dependency (a
            ``run_at`` or ``delay``), before any SQL.
        InvalidArgumentTypeError: a value that is not a signature, before any SQL.

    .. versionadded:: 0.1.0
    """
    return drive(conn, chain_plan(signatures))


def chain_plan(signatures: Sequence[Signature]) -> calls.Plan[list[int]]:
    """The statements of :func:`chain`, for either runner; everything is checked before the
    first one."""
    if not signatures:
        raise InvalidArgumentError("signatures", "a chain needs at least one task.s(...)")
    checked = [_check_signature(s, f"signatures[{i}]") for i, s in enumerate(signatures)]
    for index, sig in enumerate(checked[1:], start=1):
        _with_dependencies(sig, [_PROBE], f"signatures[{index}]")
    ids: list[int] = []
    for index, sig in enumerate(checked):
        task = _with_dependencies(sig, ids[-1:], f"signatures[{index}]") if ids else sig.task
        new_id = yield from calls.enqueue(sig.payload, task.bound_options)
        ids.append(new_id)
    return ids


def group(
    conn: Connection | Session, members: Iterable[Signature], /, *, then: Signature | None = None
) -> GroupIds:
    """Enqueue task calls that run in parallel, and optionally one that runs after all of them.

    The members go through the bulk path: one batch (one round trip) for the members of each
    task with the same options. ``then`` depends on every member (Celery's ``chord``): it runs
    once, after the last one is ``done``, and reads all their results with
    ``pgqueue.current_job().dependency_results()``; if a member fails for good, ``then`` fails
    naming it (unless bound with ``on_dependency_failure="run"``)::

        ids = pgqueue.group(conn, [resize.s(p) for p in photos], then=album.s(album_id))

    Args:
        conn: A ``Connection`` or ``Session`` (its transaction; nothing is committed).
        members: At least one :meth:`pgqueue.Task.s`; none bound with a ``unique_key``.
        then: The call to run after every member, or ``None``.

    Returns:
        :class:`GroupIds`: the members' ids in input order, and ``then``'s id.

    Raises:
        InvalidArgumentError: no member, a member with a ``unique_key``, or a ``then`` whose
            options take no dependency, before any SQL.
        InvalidArgumentTypeError: a member or ``then`` that is not a signature, before any SQL.

    .. versionadded:: 0.1.0
    """
    return drive(conn, group_plan(members, then))


def group_plan(members: Iterable[Signature], then: Signature | None) -> calls.Plan[GroupIds]:
    """The statements of :func:`group`, for either runner; everything is checked before the
    first one."""
    if isinstance(members, (str, bytes, Signature)) or not isinstance(members, Iterable):
        raise InvalidArgumentTypeError("members", "an iterable of task.s(...)", members)
    checked = [_check_signature(s, f"members[{i}]") for i, s in enumerate(members)]
    if not checked:
        raise InvalidArgumentError("members", "a group needs at least one task.s(...)")
    for index, sig in enumerate(checked):
        if sig.task.bound_options.unique_key is not None:
            raise InvalidArgumentError(
                f"members[{index}]", "a group's members are enqueued in batches: no unique_key"
            )
    if then is not None:
        _with_dependencies(_check_signature(then, "then"), [_PROBE], "then")
    # Members of one task with equal options share a batch (options may hold unhashable values,
    # so batches are found by equality).
    batches: list[tuple[Signature, list[int]]] = []
    for index, sig in enumerate(checked):
        for first, positions in batches:
            if first.task.bound_options == sig.task.bound_options:
                positions.append(index)
                break
        else:
            batches.append((sig, [index]))
    ids = [0] * len(checked)
    for first, positions in batches:
        payloads = [checked[i].payload for i in positions]
        found = yield from calls.enqueue_many(payloads, first.task.bound_options)
        for position, job_id in zip(positions, found, strict=True):
            ids[position] = job_id
    then_id = None
    if then is not None:
        task = _with_dependencies(then, ids, "then")
        then_id = yield from calls.enqueue(then.payload, task.bound_options)
    return GroupIds(ids, then_id)


__all__ = ["GroupIds", "Signature", "chain", "group"]
