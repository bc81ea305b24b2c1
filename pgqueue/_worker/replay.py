"""The claim loop's statement, replayed on the psycopg connection under SQLAlchemy's.

The claim loop sends one statement again and again with the same parameters. SQLAlchemy's path
around it (pool checkout, execution context, result wrapping) cost about 370 µs of client time
per claim here, against ~600 µs for the statement itself: most of the gap between a notified
worker and a bare LISTEN loop. So the loop holds one pooled connection, runs each distinct call
once through SQLAlchemy, keeps the SQL text and parameters the driver received, and from then on
sends that same text on the psycopg connection beneath.

What stays the same: the text (schema translation, inline limits and casts, all compiled by
SQLAlchemy), the parameters (those that reach the driver as given, such as the queue, the lease or
the claim's low-water mark, take each call's own value under the same text), the driver connection
and its settings (``prepare_threshold`` for a pooler, a JSON loader), autocommit. What changes:
SQLAlchemy's cursor events and engine logging see only the first run, so the replay stands aside
while anyone watches (``echo``, the ``sqlalchemy.engine`` logger at INFO, a
``before_cursor_execute`` or ``after_cursor_execute`` listener). A driver error drops the held
connection (invalidated: it is not trusted again) and the call runs once more through SQLAlchemy on
a fresh one, so errors surface translated, and a pool's ``pre_ping`` and ``recycle`` apply at every
checkout: the hold is given back after ``max_hold`` seconds. One loop, one thread: a ``Replay`` is
not shared.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

import psycopg
from psycopg.rows import namedtuple_row
from sqlalchemy import Connection, Engine

from pgqueue._base.urls import error_line
from pgqueue._sql.calls import Call, claim, claim_queues, complete_many
from pgqueue._sql.deferred_json import defer_jsonb
from pgqueue._sql.limited_claim import (
    ClaimState,
    limited_claim,
    lock_queue,
    queue_settings,
    queue_state,
)
from pgqueue.flow import QueueSettings
from pgqueue.results import ClaimedJob

log = logging.getLogger("pgqueue.worker")

T = TypeVar("T")
U = TypeVar("U")
V = TypeVar("V")

#: SQLAlchemy logs statements through this logger when it is at INFO (``echo`` sets it too).
_ENGINE_LOG = logging.getLogger("sqlalchemy.engine.Engine")
#: Distinct calls remembered before the memory starts over (statements x claim sizes; queues
#: too, for a call whose parameters SQLAlchemy processed).
_MAX_REMEMBERED = 256


@dataclass(frozen=True)
class _Sent:
    """A statement as the driver received it from SQLAlchemy.

    ``template``: every parameter of the call reached the driver as it was given (equal, under
    its own name: no type processing changed it), so the text serves any call of the same
    statement and parameter names (another queue, another lease, another batch of ids): its
    parameters are the call's over the rest SQLAlchemy added. A worker of
    1,000 queues compiles each claim size once, not once per queue (a memory keyed by the values
    made most of its claims go through SQLAlchemy again: 0.3x the drain of one queue).
    """

    sql: str
    params: Any
    template: bool = False

    def params_for(self, call: Call[Any]) -> Any:
        return {**self.params, **call.params} if self.template else self.params


def _by_names(call: Call[Any]) -> Hashable:
    return (call.statement, tuple(sorted(call.params)))


def _by_values(call: Call[Any]) -> Hashable | None:
    """The key of a call's exact values; ``None`` when one is a list (not remembered)."""
    try:
        key = (call.statement, tuple(sorted(call.params.items())))
        hash(key)
    except TypeError:
        return None
    return key


def _sent(call: Call[Any], sql: str, params: Any) -> tuple[Hashable | None, _Sent]:
    """What to remember of ``call``'s first run, and under which key (``None``: not kept)."""
    template = isinstance(params, dict) and all(
        name in params and params[name] == value for name, value in call.params.items()
    )
    key = _by_names(call) if template else _by_values(call)
    return key, _Sent(sql, params, template)


class Replay:
    """One held autocommit connection and the statements SQLAlchemy compiled on it.

    ``defer_json``: the replayed statements' ``jsonb`` values come back as their JSON text
    (``bytes``, :mod:`pgqueue._sql.deferred_json`), for the worker's claims, whose payloads the
    handlers decode when they read them (:meth:`pgqueue.JobContext.of`); a call's first run,
    through SQLAlchemy, decodes them.
    """

    def __init__(self, engine: Engine, *, max_hold: float = 60.0, defer_json: bool = False) -> None:
        self._engine = engine
        self._max_hold = max_hold
        self._defer_json = defer_json
        self._driver_ok = engine.dialect.driver == "psycopg"
        self._conn: Connection | None = None
        self._cursor: psycopg.Cursor[Any] | None = None
        self._held_since = 0.0
        self._replayed_here = 0  # on the held connection
        self._sent: dict[Hashable, _Sent] = {}
        #: SQL texts by statement and parameter names, for calls whose parameters reach the
        #: driver unchanged (:meth:`run_locked` replays them with any values).
        self._locked_cursors: list[psycopg.Cursor[Any]] | None = None
        #: Calls answered by the driver alone (the tests' and the benchmarks' evidence).
        self.replayed = 0

    def run(self, call: Call[T]) -> T:
        """Run ``call`` (one statement, committed when it returns) and map its rows."""
        if call.statement is None or call.from_rows is None:
            raise ValueError("only a call with a statement and a row mapping can be replayed")
        conn = self._connection()
        sent = self._known(call)
        if sent is not None and self._cursor is not None and not self._watched(conn):
            try:
                self._cursor.execute(sent.sql, sent.params_for(call))
                rows = self._cursor.fetchall()
            except psycopg.Error as exc:
                log.debug(
                    "replayed statement failed (%s); again through SQLAlchemy", error_line(exc)
                )
                self.release(invalidate=True)
                conn = self._connection()
            else:
                self.replayed += 1
                self._replayed_here += 1
                return call.from_rows(rows)
        try:
            result = conn.execute(call.statement, call.params)
            answer = call.finish(result)
        except BaseException:
            self.release()
            raise
        if self._driver_ok:
            self._remember(call, result.context.statement, result.context.parameters[0])
        return answer

    def read(self, call: Call[T]) -> T:
        """Run ``call`` through SQLAlchemy on the held connection, not remembered (a read the loop
        makes about once a second, whose parameters may be lists)."""
        conn = self._connection()
        try:
            assert call.statement is not None
            return call.finish(conn.execute(call.statement, call.params))
        except BaseException:
            self.release()
            raise

    def run_locked(self, calls: Sequence[Call[Any]]) -> list[Any]:
        """``calls`` in one transaction, in one round trip once replayed: each one's answer.

        The limited claim (:mod:`pgqueue._sql.limited_claim`): one call takes the queue's
        row lock, the ones after it run once it is granted (each statement's snapshot taken when
        it starts), e.g. the completions of the queue's finished jobs, the claim, and the read of
        what the claim left. Replayed as a psycopg pipeline (``BEGIN``, the calls, ``COMMIT``
        sent together); the first run, a watched engine and another driver go through SQLAlchemy
        in a transaction of their own. A call whose parameters reach the driver as given (the
        ids of a batch, a queue's name) is replayed with its own parameters, so a batch of other
        ids needs no new compilation; any other is replayed only with the same parameters.
        """
        conn = self._connection()
        sent = [self._known(c) for c in calls]
        if all(sent) and self._cursor is not None and not self._watched(conn):
            driver = self._cursor.connection
            # One cursor for BEGIN and COMMIT, one per call: each call's rows stay on its own.
            control, *cursors = self._pipeline_cursors(driver, len(calls) + 1)
            try:
                with driver.pipeline():
                    control.execute("BEGIN")
                    for cursor, text, call in zip(cursors, sent, calls, strict=True):
                        assert text is not None
                        cursor.execute(text.sql, text.params_for(call))
                    control.execute("COMMIT")
                rows = [cursor.fetchall() for cursor in cursors]
            except psycopg.Error as exc:
                log.debug(
                    "replayed locked calls failed (%s); again through SQLAlchemy", error_line(exc)
                )
                self.release(invalidate=True)
            else:
                self.replayed += 1
                self._replayed_here += 1
                answers: list[Any] = []
                for call, got in zip(calls, rows, strict=True):
                    assert call.from_rows is not None
                    answers.append(call.from_rows(got))
                return answers
        sent_texts: list[tuple[str, Any]] = []

        def execute(tx: Connection, one: Call[V]) -> V:
            assert one.statement is not None
            result = tx.execute(one.statement, one.params)
            sent_texts.append((result.context.statement, result.context.parameters[0]))
            return one.finish(result)

        with self._engine.begin() as tx:
            answers = [execute(tx, call) for call in calls]
        if self._driver_ok:
            for call, (sql, params) in zip(calls, sent_texts, strict=True):
                self._remember(call, sql, params)
        return answers

    def _known(self, call: Call[Any]) -> _Sent | None:
        """The text to replay ``call`` with, when a call of its shape ran before (a template)
        or this very call did."""
        sent = self._sent.get(_by_names(call))
        return sent if sent is not None else self._sent.get(_by_values(call))

    def _remember(self, call: Call[Any], sql: str, params: Any) -> None:
        if len(self._sent) >= _MAX_REMEMBERED:
            self._sent.clear()
        key, sent = _sent(call, sql, params)
        if key is not None:
            self._sent[key] = sent

    def _pipeline_cursors(
        self, driver: psycopg.Connection[Any], count: int
    ) -> list[psycopg.Cursor[Any]]:
        """``count`` cursors of the held connection: each statement's rows stay on its own."""
        cursors = self._locked_cursors
        if cursors is None or cursors[0].connection is not driver:
            cursors = self._locked_cursors = []
        while len(cursors) < count:
            cursors.append(self._new_cursor(driver))
        return cursors[:count]

    def _new_cursor(self, driver: psycopg.Connection[Any]) -> psycopg.Cursor[Any]:
        cursor = driver.cursor(row_factory=namedtuple_row)
        if self._defer_json:
            defer_jsonb(cursor)
        return cursor

    def release(self, *, invalidate: bool = False) -> None:
        """Give the held connection back to the pool (``invalidate``: close it for good)."""
        conn, self._conn = self._conn, None
        cursor, self._cursor = self._cursor, None
        locked, self._locked_cursors = self._locked_cursors, None
        if conn is None:
            return
        log.debug(
            "claim connection given back%s after %d replayed statements",
            " (invalidated)" if invalidate else "",
            self._replayed_here,
        )
        self._replayed_here = 0
        try:
            for one in [cursor, *(locked or [])]:
                if one is not None:
                    one.close()
            if invalidate:
                conn.invalidate()
            conn.close()
        except Exception as exc:  # a connection that is already gone has nothing to give back
            log.debug("releasing the claim connection: %s", error_line(exc))

    def _connection(self) -> Connection:
        if self._conn is not None and time.monotonic() - self._held_since > self._max_hold:
            self.release()
        if self._conn is None:
            conn = self._engine.connect().execution_options(isolation_level="AUTOCOMMIT")
            self._conn, self._held_since = conn, time.monotonic()
            driver = conn.connection.driver_connection
            if self._driver_ok and isinstance(driver, psycopg.Connection) and driver.autocommit:
                # One cursor for the hold: a new one per claim cost ~25 µs here.
                self._cursor = self._new_cursor(driver)
        return self._conn

    def _watched(self, conn: Connection) -> bool:
        """Whether someone expects to see every statement (then SQLAlchemy runs each one)."""
        return bool(
            self._engine.echo
            or _ENGINE_LOG.isEnabledFor(logging.INFO)
            or conn.dispatch.before_cursor_execute
            or conn.dispatch.after_cursor_execute
        )


def claim_replayed(
    replay: Replay,
    *,
    queue: str,
    limit: int,
    lease: timedelta,
    locked_by: str | None = None,
    since: datetime | None = None,
) -> list[ClaimedJob]:
    """The worker's claim: :func:`pgqueue.repository.claim` in autocommit, on the replay's held
    connection, replayed on the driver after the first run (``locked_by``: the worker's name;
    ``since``: the queue's low-water mark, :mod:`pgqueue._worker.low_water`)."""
    return replay.run(claim(queue, limit, lease, locked_by, since))


def claim_queues_replayed(
    replay: Replay,
    *,
    queues: list[str],
    limit: int,
    lease: timedelta,
    locked_by: str | None = None,
    since: list[datetime | None] | None = None,
) -> list[ClaimedJob]:
    """The worker's claim over several queues (:func:`pgqueue._sql.calls.claim_queues`), as
    :func:`claim_replayed`: one text for every set of queues and marks (a JSON parameter)."""
    return replay.run(claim_queues(queues, limit, lease, locked_by, since))


def limited_claim_replayed(
    replay: Replay,
    *,
    queue: str,
    limit: int,
    lease: timedelta,
    per_key: bool,
    free_slots: int,
    lane_slots: int,
    lock_timeout_ms: int,
    locked_by: str | None = None,
    completing: Sequence[tuple[int, int]] = (),
    completions_first: bool = False,
) -> tuple[set[int], list[ClaimedJob], ClaimState]:
    """The claim of a queue with flow limits: lock its settings row, write the completions of
    ``completing`` (``(id, attempts)`` of this worker's finished jobs of the queue), claim
    within the limits, read what is left (:mod:`pgqueue._sql.limited_claim`): one transaction,
    one round trip once replayed. Returns the ids completed (their guard matched), the jobs
    claimed and the state. The claim runs after the completions in the same transaction, so
    it counts their slots as free: they were this worker's own ``running`` rows; its snapshot,
    taken once the lock is granted, sees every claim committed before.

    ``completions_first``: the completions are written before the lock is asked for (the
    completer's second rider, whose ride goes out while the first one's holds the lock: its
    completions then run beside that claim instead of after it). No deadlock comes of it: the
    lock's holder waits for none of those rows (its claim skips locked ones). Not the default:
    alone on the wire, completing first measured ~15% slower at ``concurrency=4``."""
    claim = limited_claim(
        queue,
        limit,
        lease,
        locked_by,
        per_key=per_key,
        free_slots=free_slots,
        lane_slots=lane_slots,
    )
    lock = lock_queue(queue, lock_timeout_ms)
    completions = [complete_many(completing, lock_timeout_ms)] if completing else []
    first: list[Call[Any]] = [*completions, lock] if completions_first else [lock, *completions]
    answers = replay.run_locked([*first, claim, queue_state(queue)])
    completed: set[int] = answers[0 if completions_first else 1] if completions else set()
    return completed, answers[-2], answers[-1]


def settings_replayed(replay: Replay, queues: list[str]) -> dict[str, QueueSettings]:
    """The flow settings of the worker's queues, one statement."""
    return replay.read(queue_settings(queues))
