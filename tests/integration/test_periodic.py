"""Periodic jobs on a real server: one job per tick across workers and restarts, missed ticks,
a changed schedule, busy handlers, scale-to-zero, the CLI and doctor.

Where the wall clock is not the point (which ticks are enqueued, how often, by whom), the
schedulers run on a :class:`SteppedClock` the test moves itself, a second a step, without waiting
for real seconds to pass; the worker processes, the busy handlers' lateness and scale-to-zero run
on the real time."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from datetime import datetime, timedelta, timezone
from itertools import pairwise
from typing import Any

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.engine import URL
from worker_helpers import running, scalar, statements_sent, until

import pgqueue
import pgqueue._worker.scheduler
from pgqueue import repository
from pgqueue._worker import store
from pgqueue._worker.scheduler import Scheduler
from tests.cli.conftest import Result, run_pgqueue

UTC = timezone.utc
SECOND = timedelta(seconds=1)


def ticks_of(engine: Engine, queue: str = "ticks") -> list[datetime]:
    """``scheduled_for`` of every job of ``queue``, in id order."""
    with engine.connect() as conn:
        rows = conn.execute(
            text("SELECT headers->>'scheduled_for' FROM jobs WHERE queue = :q ORDER BY id"),
            {"q": queue},
        ).scalars()
        return [datetime.fromisoformat(r) for r in rows]


def assert_one_job_per_tick(ticks: list[datetime], step: timedelta = SECOND) -> None:
    assert ticks, "no tick was enqueued"
    assert len(set(ticks)) == len(ticks), f"a tick was enqueued twice: {ticks}"
    ordered = sorted(ticks)
    gaps = [b - a for a, b in pairwise(ordered)]
    assert all(g == step for g in gaps), f"a tick is missing: {ordered}"


def quiet_worker(engine: Engine, periodic: list[pgqueue.Periodic], **kw: Any) -> pgqueue.Worker:
    kw.setdefault("poll_interval", 0.5)
    return pgqueue.Worker(
        engine,
        kw.pop("handlers", {"ticks": lambda job: None}),
        periodic=periodic,
        install_signal_handlers=False,
        **kw,
    )


class SteppedClock:
    """A scheduler's clock (:class:`pgqueue._worker.scheduler.Clock`) whose time moves only when
    the test steps it; a step returns once every scheduler on it sleeps past the new time, that
    is, once each did what was due."""

    def __init__(self) -> None:
        # Half a second past a whole one: a step of whole seconds never lands on a tick, where a
        # scheduler's sleep (it wakes a millisecond past the tick) would not have ended yet.
        self._now = datetime.now(UTC).replace(microsecond=500_000)
        self._cond = threading.Condition()
        self._wakes: dict[int, datetime] = {}  # sleeping thread -> the time it wakes at

    def now(self) -> datetime:
        with self._cond:
            return self._now

    def sleep(self, seconds: float, stop: threading.Event) -> None:
        me = threading.get_ident()
        with self._cond:
            wake = self._now + timedelta(seconds=seconds)
            self._wakes[me] = wake
            self._cond.notify_all()
            try:
                while self._now < wake and not stop.is_set():
                    self._cond.wait(0.05)  # a stop is seen within 50 ms
            finally:
                del self._wakes[me]

    def step(self, by: timedelta = SECOND, *, schedulers: int = 1) -> None:
        """Move the time on by ``by``, then wait until ``schedulers`` sleep past it."""
        with self._cond:
            self._now += by
            self._cond.notify_all()
            settled = self._cond.wait_for(
                lambda: sum(w > self._now for w in self._wakes.values()) >= schedulers, 30
            )
        assert settled, f"{schedulers} scheduler(s) expected asleep past {self._now}"

    def settle(self, *, schedulers: int = 1) -> None:
        """Wait until ``schedulers`` declared their definitions and sleep until a tick."""
        self.step(timedelta(0), schedulers=schedulers)


@contextmanager
def scheduling(
    engine: Engine, definitions: list[pgqueue.Periodic], clock: SteppedClock
) -> Iterator[None]:
    """A worker's scheduler for ``definitions`` on ``clock``, on its thread for the block."""
    stop = threading.Event()
    scheduler = Scheduler(
        engine, definitions, stop=stop, idle=lambda: False, on_enqueued=lambda q: None, clock=clock
    )
    scheduler.start()
    try:
        yield
    finally:
        stop.set()
        scheduler.join(10)


@pytest.mark.slow
def test_three_worker_processes_enqueue_each_tick_once(
    effects: Engine, spawn: Callable[..., subprocess.Popen[str]]
) -> None:
    ran = "SELECT count(*) FROM effects"
    procs = [spawn(periodic="every-second=1") for _ in range(3)]
    # Stopped just after a tick's job ran, every tick enqueued so far having run: the next tick
    # is most of a second away.
    until(
        lambda: scalar(effects, ran) >= 5 and scalar(effects, ran) == len(ticks_of(effects)),
        30,
        "five ticks run",
    )
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    for proc in procs:
        assert proc.wait(30) == 0
    first = ticks_of(effects)
    assert len(first) >= 5, first
    assert_one_job_per_tick(first)
    # Every tick's job ran once.
    with effects.connect() as conn:
        runs = conn.execute(text("SELECT count(*), count(DISTINCT job_id) FROM effects")).one()
    assert runs == (len(first), len(first))
    # A worker started afterwards adds none of the ticks that already ran.
    late = spawn(periodic="every-second=1")
    until(lambda: len(ticks_of(effects)) > len(first), 30, "a tick of the late worker")
    late.send_signal(signal.SIGTERM)
    assert late.wait(30) == 0
    after = ticks_of(effects)
    added = after[len(first) :]
    assert added, "the late worker enqueued nothing"
    assert min(added) > max(first)
    assert len(set(after)) == len(after)


def test_many_workers_in_threads_share_each_tick(engine: Engine) -> None:
    """Four workers' schedulers declare the same definition and wake at each tick together: one
    job per tick."""
    every = pgqueue.Periodic("shared", SECOND, "ticks")
    clock = SteppedClock()
    with ExitStack() as schedulers:
        for _ in range(4):
            schedulers.enter_context(scheduling(engine, [every], clock))
        clock.settle(schedulers=4)
        for _ in range(4):
            clock.step(schedulers=4)
    ticks = ticks_of(engine)
    assert len(ticks) == 4, ticks
    assert_one_job_per_tick(ticks)


def _seed(engine: Engine, definition: pgqueue.Periodic, last_tick: datetime) -> None:
    """State as if workers fired ``definition`` up to ``last_tick`` and then all stopped."""
    with engine.begin() as conn:
        store.declare_periodic(conn, [definition], last_tick - timedelta(hours=1))
        fired = store.fire_periodic(conn, definition, None, [last_tick])
        assert fired.advanced
        conn.execute(text("DELETE FROM jobs"))


def test_missed_ticks_enqueue_only_the_latest_by_default(engine: Engine) -> None:
    hourly = pgqueue.Periodic("hourly", "0 * * * *", "ticks")
    now = datetime.now(UTC)
    last = now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=5)
    _seed(engine, hourly, last)
    quiet_worker(engine, [hourly]).run(until_empty=True)
    got = ticks_of(engine)
    assert got == [hourly.due_ticks(after=last, since=last, now=now)[-1]]
    assert got[0] == now.replace(minute=0, second=0, microsecond=0)
    # Run again: that tick is spent, nothing more for it.
    quiet_worker(engine, [hourly]).run(until_empty=True)
    assert ticks_of(engine) == got


def test_missed_ticks_with_catch_up_enqueue_every_one(engine: Engine) -> None:
    hourly = pgqueue.Periodic("hourly", "0 * * * *", "ticks", catch_up=True)
    top = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    _seed(engine, hourly, top - timedelta(hours=5))
    quiet_worker(engine, [hourly]).run(until_empty=True)
    assert ticks_of(engine) == [top - timedelta(hours=h) for h in (4, 3, 2, 1, 0)]
    with engine.connect() as conn:
        (row,) = repository.periodic_states(conn, ["hourly"])
    assert row.last_tick == top


def test_a_new_definition_gets_no_job_for_the_past(engine: Engine) -> None:
    daily = pgqueue.Periodic("daily", "@daily", "ticks", catch_up=True)
    quiet_worker(engine, [daily]).run(until_empty=True)
    assert ticks_of(engine) == []
    with engine.connect() as conn:
        (row,) = repository.periodic_states(conn, ["daily"])
    assert row.last_tick is None
    assert pgqueue.periodic.next_tick(row, datetime.now(UTC)) == daily.next_tick(row.ticks_from)


def test_a_job_carries_its_origin_and_the_definition_payload(engine: Engine) -> None:
    every = pgqueue.Periodic("sync-crm", SECOND, "crm", {"full": False}, priority=7, max_attempts=2)
    clock = SteppedClock()
    with scheduling(engine, [every], clock):
        clock.settle()
        clock.step()
        clock.step()
    seen: list[pgqueue.JobContext] = []
    pgqueue.Worker(engine, {"crm": seen.append}, listen=False).run(until_empty=True)
    assert len(seen) == 2, seen
    job = seen[0]
    assert job.payload == {"full": False}
    assert job.priority == 7
    assert job.headers is not None
    assert job.headers["periodic"] == "sync-crm"
    tick = datetime.fromisoformat(job.headers["scheduled_for"])
    assert tick.utcoffset() == timedelta(0)
    assert tick.microsecond == 0
    with engine.connect() as conn:
        assert (
            conn.execute(
                text("SELECT max_attempts FROM jobs WHERE id = :i"), {"i": job.id}
            ).scalar_one()
            == 2
        )


def test_a_changed_schedule_takes_effect_from_the_next_tick_and_never_doubles(
    engine: Engine,
) -> None:
    old = pgqueue.Periodic("report", SECOND, "ticks")
    new = pgqueue.Periodic("report", timedelta(seconds=2), "ticks")
    clock = SteppedClock()
    with scheduling(engine, [old], clock):
        clock.settle()
        clock.step()
        clock.step()
        assert len(ticks_of(engine)) == 2  # ticks of the old schedule
        switched = clock.now()
        # The new deploy starts beside the old worker: the newest declaration wins.
        with scheduling(engine, [new], clock):
            clock.settle(schedulers=2)
            for _ in range(4):
                clock.step(schedulers=2)
    ticks = ticks_of(engine)
    before = [t for t in ticks if t <= switched]
    after = [t for t in ticks if t > switched]
    assert_one_job_per_tick(before)
    assert len(after) == 2, ticks  # four seconds of the new schedule
    assert_one_job_per_tick(after, step=timedelta(seconds=2))
    assert all(t.timestamp() % 2 == 0 for t in after)
    with engine.connect() as conn:
        (row,) = repository.periodic_states(conn, ["report"])
    assert row.schedule == "every 2s"
    assert row.ticks_from >= switched


def test_ticks_are_enqueued_on_time_while_every_handler_thread_is_busy(engine: Engine) -> None:
    release = threading.Event()

    def slow(job: pgqueue.JobContext) -> None:
        release.wait(20)

    every = pgqueue.Periodic("busy", SECOND, "ticks")
    worker = quiet_worker(engine, [every], handlers={"ticks": slow}, concurrency=1, prefetch=0)
    with running(worker):
        try:
            until(lambda: len(ticks_of(engine)) >= 4, 10, "four ticks with a busy handler")
            with engine.connect() as conn:
                rows = conn.execute(
                    text(
                        "SELECT created_at, (headers->>'scheduled_for')::timestamptz, status "
                        "FROM jobs ORDER BY id"
                    )
                ).all()
        finally:
            release.set()
    running_now = [r for r in rows if r.status == "running"]
    assert len(running_now) == 1  # the one handler thread is stuck on the first tick
    late = [r[0] - r[1] for r in rows]
    assert all(timedelta(0) <= d < timedelta(seconds=0.5) for d in late), late


def test_skip_if_running_skips_a_tick_while_the_previous_job_runs(engine: Engine) -> None:
    release = threading.Event()
    every = pgqueue.Periodic("exclusive", SECOND, "ticks", skip_if_running=True)
    worker = pgqueue.Worker(
        engine,
        {"ticks": lambda job: release.wait(20)},
        concurrency=2,
        poll_interval=0.05,
        install_signal_handlers=False,
    )
    status = "SELECT status FROM jobs ORDER BY id LIMIT 1"
    clock = SteppedClock()
    with running(worker), scheduling(engine, [every], clock):
        clock.settle()
        try:
            clock.step()
            until(lambda: scalar(engine, status) == "running", 10, "the first tick's job runs")
            for _ in range(3):
                clock.step()
            during = ticks_of(engine)
        finally:
            release.set()
        until(lambda: scalar(engine, status) == "done", 10, "the first tick's job done")
        clock.step()
        after = ticks_of(engine)
    assert len(during) == 1  # three ticks came while the first job ran: skipped
    assert after == [during[0], during[0] + 4 * SECOND]  # the first tick after the job ended
    with engine.connect() as conn:
        (row,) = repository.periodic_states(conn, ["exclusive"])
    assert row.last_tick == during[0] + 4 * SECOND


def test_an_idle_worker_sends_nothing_between_ticks(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Scale-to-zero: an idle worker's scheduler sleeps until the next tick, while an awake one
    refreshes ``declared_at`` (every 0.3 s here instead of 5 minutes)."""
    monkeypatch.setattr(pgqueue._worker.scheduler, "REFRESH_INTERVAL", 0.2)
    nightly = pgqueue.Periodic("nightly", "0 3 * * *", "ticks")
    with (
        statements_sent(engine, "jobs_periodic") as awake,
        running(quiet_worker(engine, [nightly])),
    ):
        until(lambda: len(awake) >= 4, 10, "the declaration, then refreshes")
    idle_worker = quiet_worker(engine, [nightly], idle_poll_interval=600, idle_after=0)
    with statements_sent(engine, "jobs_periodic") as idle, running(idle_worker):
        until(lambda: len(idle) >= 1, 10, "the declaration")
        until(lambda: idle_worker.idle, 10, "the worker idle")
        time.sleep(1.0)  # an absence: five refreshes' worth of an awake worker
        assert idle_worker.idle
    assert len(idle) == 1, idle  # the declaration only: nothing until 03:00


def test_cli_lists_and_removes_definitions(engine: Engine, db_url: URL) -> None:
    env = {"PGQUEUE_DATABASE_URL": db_url.render_as_string(hide_password=False)}

    def cli(*args: str) -> Result:
        return run_pgqueue(*args, env=env)

    live = pgqueue.Periodic("live", "*/5 * * * *", "ticks", timezone="Europe/Paris")
    gone = pgqueue.Periodic("gone", timedelta(minutes=1), "ticks")
    with engine.begin() as conn:
        store.declare_periodic(conn, [live, gone], datetime.now(UTC))
        conn.execute(
            text(
                "UPDATE jobs_periodic SET declared_at = now() - interval '3 hours' "
                "WHERE name = 'gone'"
            )
        )
    listed = cli("periodic", "--json")
    assert listed.code == 0, listed.err
    rows = {r["name"]: r for r in json.loads(listed.out)}
    assert rows["live"]["schedule"] == "*/5 * * * *"
    assert rows["live"]["timezone"] == "Europe/Paris"
    assert rows["live"]["stale"] is False
    assert rows["gone"]["stale"] is True
    assert rows["gone"]["schedule"] == "every 60s"
    assert datetime.fromisoformat(rows["live"]["next_tick"]).minute % 5 == 0
    table = cli("periodic")
    assert "stale" in table.out
    assert "live" in table.out
    refused = cli("periodic", "--remove", "live")
    assert refused.code == 1
    assert "not stale" in refused.err
    removed = cli("periodic", "--remove", "gone")
    assert removed.code == 0, removed.err
    assert cli("periodic", "--remove", "nope").code == 1
    with engine.connect() as conn:
        assert [r.name for r in repository.periodic_states(conn)] == ["live"]
    forced = cli("periodic", "--remove", "live", "--force")
    assert forced.code == 0, forced.err


def test_doctor_warns_when_a_declared_definition_is_not_fired(engine: Engine, db_url: URL) -> None:
    from pgqueue import doctor

    every = pgqueue.Periodic("forgotten", timedelta(minutes=1), "ticks")
    with engine.begin() as conn:
        store.declare_periodic(conn, [every], datetime.now(UTC) - timedelta(minutes=30))
    with engine.connect() as conn:
        findings = [
            f for f in doctor.run_checks(conn, idle_threshold=SECOND) if f.check == "periodic"
        ]
    assert [f.severity for f in findings] == ["warning"]
    assert "forgotten" in findings[0].message
    assert "overdue" in findings[0].message
    # Fired on time: healthy.
    quiet_worker(engine, [every]).run(until_empty=True)
    with engine.connect() as conn:
        findings = [
            f for f in doctor.run_checks(conn, idle_threshold=SECOND) if f.check == "periodic"
        ]
    assert [f.severity for f in findings] == ["ok"]
