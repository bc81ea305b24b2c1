"""The scheduler: a worker's thread that enqueues its periodic definitions' ticks.

It has a thread of its own, so busy handlers never delay a tick. It declares the definitions
once at start, then sleeps until the earliest next tick, fires what is due with one
compare-and-set statement per definition (:data:`pgqueue._sql.periodic_statements.FIRE`), and sleeps
again. Whoever wins a tick's compare-and-set enqueues it; the others re-read the rows and find
nothing due. While awake it refreshes ``declared_at`` every few minutes; while the worker is idle
(scale-to-zero) it sends nothing between ticks. What time it is, and the sleep until the next tick,
come from its :class:`Clock` (the wall clock unless one is given).
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import threading
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta, timezone
from typing import Protocol, TypeVar

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import ProgrammingError

from pgqueue._base.urls import error_line
from pgqueue._worker import store
from pgqueue._worker.faults import Faults
from pgqueue._worker.transient import short_transaction
from pgqueue.periodic import Periodic
from pgqueue.results import PeriodicRow

log = logging.getLogger("pgqueue.worker")

#: Seconds between two refreshes of ``declared_at`` while the worker is not idle.
REFRESH_INTERVAL = 300.0
#: Seconds before trying again after a failed statement.
_RETRY_DELAY = 1.0

T = TypeVar("T")


class _Firing(enum.Enum):
    DONE = "done"  # enqueued, or skipped while the previous job runs: the tick is spent
    LOST = "lost"  # another worker fired it, or the row changed: re-read the rows
    FAILED = "failed"  # a transient error (logged): try again shortly


class Clock(Protocol):
    """The scheduler's time: what time it is, and its sleep until a tick."""

    def now(self) -> datetime:
        """The current time, aware."""
        ...

    def sleep(self, seconds: float, stop: threading.Event) -> None:
        """Return after ``seconds`` of this clock's time, or sooner once ``stop`` is set."""
        ...


class WallClock:
    """The real time: ``datetime.now(timezone.utc)``, and a sleep on the stop event."""

    def now(self) -> datetime:
        return datetime.now(timezone.utc)

    def sleep(self, seconds: float, stop: threading.Event) -> None:
        stop.wait(seconds)


class Scheduler:
    """Fires ``definitions`` on a thread of its own until ``stop`` is set.

    Args:
        engine: Where the definitions' state and their jobs live.
        definitions: The periodic definitions to declare and fire.
        stop: Set when the worker stops; the scheduler's waits end on it.
        idle: Whether the worker is idle (scale-to-zero): then no refresh between ticks.
        on_enqueued: Called with a definition's queue after one of its ticks was enqueued.
        clock: Where the time comes from, and the sleep until the next tick or refresh of
            ``declared_at``: the wall clock (:class:`WallClock`) by default; a test may give a
            clock it moves itself. The pauses after a failed statement are real seconds.
    """

    def __init__(
        self,
        engine: Engine,
        definitions: Sequence[Periodic],
        *,
        stop: threading.Event,
        idle: Callable[[], bool],
        on_enqueued: Callable[[str], None],
        clock: Clock | None = None,
    ) -> None:
        self._engine = engine
        self._definitions = list(definitions)
        self._names = [d.name for d in self._definitions]
        self._stop = stop
        self._idle = idle
        self._on_enqueued = on_enqueued
        self._clock = clock if clock is not None else WallClock()
        self._rows: dict[str, PeriodicRow] = {}
        self._not_ours: set[str] = set()
        self._faults = Faults("periodic scheduler")
        self._thread = threading.Thread(target=self._loop, name="pgqueue-scheduler", daemon=True)

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float) -> None:
        if self._thread.is_alive():
            self._thread.join(timeout)

    def fire_due_once(self) -> None:
        """``run(until_empty=True)``: declare, enqueue whatever is due now, and return."""
        if self._declare():
            self._fire_due(self._clock.now())

    # -- the loop ---------------------------------------------------------------------------------

    def _loop(self) -> None:
        clock, refresh_every = self._clock, timedelta(seconds=REFRESH_INTERVAL)
        declared = False
        next_refresh = clock.now()
        while not self._stop.is_set():
            try:
                if not declared:
                    declared = self._declare()
                    if not declared:
                        self._stop.wait(_RETRY_DELAY)
                        continue
                    next_refresh = clock.now() + refresh_every
                wake = self._fire_due(clock.now())
                idle = self._idle()
                if not idle and clock.now() >= next_refresh:
                    self._run(lambda c: store.refresh_periodic(c, self._names), "refresh")
                    next_refresh = clock.now() + refresh_every
            except Exception as exc:
                # A tick that cannot be fired costs no job its truth: logged, tried again
                # (the pause doubling up to a minute), however long it takes.
                self._stop.wait(self._faults.failed(exc))
                continue
            self._faults.succeeded()
            if not idle:
                wake = min(wake, next_refresh)
            clock.sleep(max(0.0, (wake - clock.now()).total_seconds()) + 0.001, self._stop)

    def _fire_due(self, now: datetime) -> datetime:
        """Fire every due tick; return when the next one is."""
        stale = False
        wake = min(d.next_tick(now) for d in self._definitions)
        for definition in self._definitions:
            row = self._rows.get(definition.name)
            # No row: removed while we ran (pgqueue periodic --remove --force); re-read declares it.
            if row is None or not self._is_ours(definition, row):
                stale = True
            else:
                due = definition.due_ticks(after=row.last_tick, since=row.ticks_from, now=now)
                firing = self._fire(definition, row, due) if due else _Firing.DONE
                if firing is _Firing.LOST:
                    stale = True
                elif firing is _Firing.FAILED:
                    wake = min(wake, now + timedelta(seconds=_RETRY_DELAY))
        if stale and not self._reread():
            wake = min(wake, now + timedelta(seconds=_RETRY_DELAY))
        return wake

    def _fire(self, definition: Periodic, row: PeriodicRow, due: list[datetime]) -> _Firing:
        fired = self._run(lambda c: store.fire_periodic(c, definition, row.last_tick, due), "fire")
        if fired is None:
            return _Firing.FAILED
        if not fired.advanced:
            return _Firing.LOST
        self._rows[definition.name] = dataclasses.replace(row, last_tick=due[-1])
        if fired.job_ids:
            self._on_enqueued(definition.queue)
            level = logging.INFO if len(due) > 1 else logging.DEBUG
            log.log(
                level,
                "periodic %s: %d tick(s) up to %s enqueued as job(s) %s",
                definition.name,
                len(due),
                due[-1].isoformat(),
                ",".join(map(str, fired.job_ids)),
            )
        else:
            log.info(
                "periodic %s: tick %s skipped, its previous job is still queued or running",
                definition.name,
                due[-1].isoformat(),
            )
        return _Firing.DONE

    def _is_ours(self, definition: Periodic, row: PeriodicRow) -> bool:
        """A newer worker may have declared another schedule under this name: it wins."""
        ours = (row.schedule, row.timezone) == (definition.schedule_text, definition.timezone)
        if not ours and definition.name not in self._not_ours:
            log.warning(
                "periodic %s: the database has schedule %r (%s), declared by a newer worker; "
                "this worker's %r (%s) is not fired",
                definition.name,
                row.schedule,
                row.timezone,
                definition.schedule_text,
                definition.timezone,
            )
        if ours:
            self._not_ours.discard(definition.name)
        else:
            self._not_ours.add(definition.name)
        return ours

    # -- statements -------------------------------------------------------------------------------

    def _declare(self) -> bool:
        now = self._clock.now()
        rows = self._run(lambda c: store.declare_periodic(c, self._definitions, now), "declare")
        if rows is None:
            return False
        self._rows = {row.name: row for row in rows}
        return True

    def _reread(self) -> bool:
        rows = self._run(lambda c: store.periodic_states(c, self._names), "read")
        if rows is None:
            return False
        self._rows = {row.name: row for row in rows}
        missing = [d for d in self._definitions if d.name not in self._rows]
        if missing:
            now = self._clock.now()
            declared = self._run(lambda c: store.declare_periodic(c, missing, now), "declare")
            self._rows.update({row.name: row for row in declared or []})
        return True

    def _run(self, work: Callable[[Connection], T], what: str) -> T | None:
        try:
            return short_transaction(self._engine, work, what=f"periodic {what}", autocommit=True)
        except ProgrammingError as exc:
            log.error(
                "periodic %s failed: %s (is the jobs_periodic table there? apply pgqueue's "
                "revisions up to pgqueue_0007)",
                what,
                error_line(exc),
            )
            self._stop.wait(_RETRY_DELAY * 10)
            return None
