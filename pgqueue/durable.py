"""What one attempt of a durable job remembers and records: its steps, sleeps and signal waits.

:class:`pgqueue.JobContext` keeps one :class:`DurableAttempt` per attempt, made at its first
``step``, ``sleep`` or ``wait_for_signal`` (a job that uses none of them never reads or writes
anything here). The attempt reads the job's ``steps`` and ``signals`` once, in one short guarded
query, then writes each new entry in its own short guarded statement (in transaction mode: on
the job's own connection, inside its transaction) before the call returns. The handler runs from
the top on every attempt; an entry already stored answers its call without running it again.

Not deterministic replay: code between steps runs again on each attempt, and names, not
positions, tell steps apart (a name used twice in one attempt is refused).

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from sqlalchemy import Connection, Engine

from pgqueue._base.validation import check_duration, encode_payload
from pgqueue._sql import durable_calls
from pgqueue._sql.durable_calls import DurableRow
from pgqueue._sql.runners import run
from pgqueue.enqueue_options import WAITING_RUN_AT
from pgqueue.errors import (
    InvalidPayloadError,
    InvalidResultError,
    PgQueueError,
    SignalTimeoutError,
    StepNotStoredError,
)

#: The kinds of entry ``jobs.steps`` holds.
STEP, SLEEP, SIGNAL = "step", "sleep", "signal"

_NOT_FOUND = object()

#: The bound of a step's JSON value where no worker set one: ``Worker(max_result_bytes)``'s
#: default.
DEFAULT_MAX_STEP_BYTES = 1_000_000


@dataclass(frozen=True)
class Suspension:
    """Give the job back until ``until`` (a sleep's wake-up, a wait's timeout, or the far future
    for a wait without one), waiting for ``signal`` (``None``: a sleep)."""

    until: datetime
    signal: str | None


@dataclass(eq=False)
class DurableAttempt:
    """One attempt's view of its job's durable entries. Used by the handler's own thread or
    task only (one call at a time), so it needs no lock.

    Args:
        job_id: The job.
        attempts: The claimed attempt: the guard of every write.
        source: Transaction mode's connection (writes join the job's transaction), else the
            engine (each write commits in a short transaction of its own).
        max_bytes: The bound of a step's JSON value (``Worker(max_result_bytes)``).
    """

    job_id: int
    attempts: int
    source: Connection | Engine
    max_bytes: int
    _row: DurableRow | None = field(default=None, init=False)
    _used: set[str] = field(default_factory=set, init=False)

    # -- steps ---------------------------------------------------------------------------------

    def stored_step(self, name: object) -> Any:
        """The value stored under ``name`` by an earlier attempt, else :data:`NOT_FOUND`.
        Claims the name for this attempt (a second use raises)."""
        checked = self._claim(name)
        entry = self._entry(checked, STEP)
        if entry is None:
            return NOT_FOUND
        return entry.get("value")

    def store_step(self, name: str, value: Any) -> None:
        """Write ``value`` under ``name`` before the step returns.

        Raises:
            InvalidResultError: the value is not JSON, or larger than the bound (the job fails
                for good, as for a task's result).
            StepNotStoredError: the job is no longer this attempt's; nothing was written.
        """
        try:
            text = encode_payload(value, argument="step")
        except InvalidPayloadError as exc:
            raise InvalidResultError(
                f"the value of step {name!r} is not JSON: {exc.problem}"
            ) from exc
        if len(text) > self.max_bytes:
            raise InvalidResultError(
                f"the value of step {name!r} is too large: {len(text)} bytes > "
                f"max_result_bytes {self.max_bytes}"
            )
        self._record(name, {"kind": STEP}, value_json=text)

    # -- sleeps ----------------------------------------------------------------------------------

    def sleep(self, name: object, delay: object) -> Suspension | None:
        """``None`` when the sleep named ``name`` is over (its wake-up passed); else when to
        give the job back until (recording the wake-up the first time)."""
        checked = self._claim(name)
        wanted = check_duration("delay", delay, allow_zero=True)
        entry = self._entry(checked, SLEEP)
        if entry is None:
            until = self._record(checked, {"kind": SLEEP}, delay=wanted)
            return Suspension(until, None)
        wake = _moment(entry)
        if wake <= self._state().now:
            return None
        return Suspension(wake, None)

    # -- signals ---------------------------------------------------------------------------------

    def wait_for_signal(self, name: object, timeout: object) -> tuple[Any, Suspension | None]:
        """``(payload, None)`` when the signal is there (or was received by an earlier attempt);
        else ``(None, suspension)``: give the job back until the signal or the timeout.

        Raises:
            SignalTimeoutError: the wait's timeout passed before the signal arrived.
        """
        checked = self._claim(name)
        wanted = None if timeout is None else check_duration("timeout", timeout, allow_zero=True)
        entry = self._entry(checked, SIGNAL)
        if entry is not None and entry.get("received"):
            return entry.get("value"), None
        if entry is not None and entry.get("timed_out"):
            raise SignalTimeoutError(self.job_id, checked)
        state = self._state()
        arrived = state.signals.get(checked)
        if arrived is not None:
            payload = arrived.get("payload")
            received = {"kind": SIGNAL, "received": True, "received_at": arrived.get("at")}
            self._record(checked, received, value_json=encode_payload(payload))
            return payload, None
        if entry is None:
            until = self._record(checked, {"kind": SIGNAL, "received": False}, delay=wanted)
            return None, Suspension(until if wanted is not None else WAITING_RUN_AT, checked)
        if "until" not in entry:
            return None, Suspension(WAITING_RUN_AT, checked)
        deadline = _moment(entry)
        if deadline <= state.now:
            self._record(checked, {"timed_out": True})
            raise SignalTimeoutError(self.job_id, checked)
        return None, Suspension(deadline, checked)

    # -- the row ---------------------------------------------------------------------------------

    def _claim(self, name: object) -> str:
        checked = durable_calls.check_step_name(name)
        if checked in self._used:
            raise PgQueueError(
                f"job {self.job_id}: the name {checked!r} was already used in this attempt "
                "(each step, sleep and signal wait needs a name of its own)"
            )
        self._used.add(checked)
        return checked

    def _entry(self, name: str, kind: str) -> dict[str, Any] | None:
        entry = self._state().steps.get(name)
        if entry is not None and entry.get("kind") != kind:
            raise PgQueueError(
                f"job {self.job_id}: {name!r} is stored as a {entry.get('kind')}, not a {kind}"
            )
        return entry

    def _state(self) -> DurableRow:
        if self._row is None:
            row = self._execute(durable_calls.durable_state(self.job_id, self.attempts))
            if row is None:
                raise StepNotStoredError(self.job_id, self.attempts, "its steps")
            self._row = row
        return self._row

    def _record(
        self,
        name: str,
        entry: dict[str, Any],
        *,
        value_json: str | None = None,
        delay: timedelta | None = None,
    ) -> datetime:
        state = self._state()
        known = state.steps.get(name)
        written = dict(entry)
        if known is None:
            written["n"] = len(state.steps) + 1
            written["attempt"] = self.attempts
        call = durable_calls.record_step(
            self.job_id, self.attempts, name, written, delay, value_json
        )
        matched, until = self._execute(call)
        if not matched:
            raise StepNotStoredError(self.job_id, self.attempts, name)
        merged = {**(known or {}), **written}
        if value_json is not None:
            merged["value"] = json.loads(value_json)
        if until is not None:
            merged["until"] = until.isoformat()
            merged["until_s"] = until.timestamp()
        state.steps[name] = merged
        return until or state.now

    def _execute(self, call: Any) -> Any:
        if isinstance(self.source, Connection):
            return run(self.source, call)
        with self.source.begin() as conn:
            return run(conn, call)


#: What :meth:`DurableAttempt.stored_step` answers for a step not stored yet.
NOT_FOUND: Any = _NOT_FOUND


def _moment(entry: dict[str, Any]) -> datetime:
    """The wake-up or timeout an entry recorded (``until_s``: seconds since the epoch)."""
    return datetime.fromtimestamp(float(entry["until_s"]), tz=timezone.utc)


__all__ = [
    "DEFAULT_MAX_STEP_BYTES",
    "NOT_FOUND",
    "SIGNAL",
    "SLEEP",
    "STEP",
    "DurableAttempt",
    "Suspension",
]
