"""One table decides how each job outcome is counted, logged and told to hooks.

Every component ends jobs through :data:`pgqueue._worker.outcomes.OUTCOMES`, so the table must
cover every outcome, name real counters and hook methods, and the hook dispatcher must pass each
event the arguments its :class:`pgqueue.WorkerHooks` signature promises.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
from datetime import timedelta
from typing import Any

import pytest

import pgqueue
from pgqueue._worker.outcomes import OUTCOMES, count_and_log
from pgqueue.hooks import HookDispatcher
from pgqueue.jobs import JobContext, Outcome, WorkerStats

SECRET_URL = "postgresql://u:secret@h/db"
#: Outcomes whose log line shows the detail (the others have a fixed message).
WITH_DETAIL = [o for o in Outcome if "{detail}" in OUTCOMES[o].message]


def make_job() -> JobContext:
    return JobContext(41, "emails", {"to": "a@example.com"}, 3)


def counters(stats: WorkerStats) -> dict[str, int]:
    return dataclasses.asdict(stats)


# -- the table -------------------------------------------------------------------------------------


def test_every_outcome_has_a_row() -> None:
    """An outcome missing from the table would raise KeyError where a job ends."""
    assert set(OUTCOMES) == set(Outcome)


def test_every_counter_is_a_worker_stats_field() -> None:
    """``count_and_log`` sets the counter by name: a typo would add a stray attribute."""
    fields = {f.name for f in dataclasses.fields(WorkerStats)}
    for outcome, row in OUTCOMES.items():
        assert row.counter in fields, outcome


def test_each_outcome_has_its_own_counter_and_every_end_is_counted() -> None:
    """Stats tell outcomes apart, and no ``WorkerStats`` counter but ``claimed`` goes unfed."""
    used = [row.counter for row in OUTCOMES.values()]
    assert len(used) == len(set(used))
    # Not outcomes: ``claimed``, ``timed_out`` (counted beside a retry's or failure's own
    # counter), ``expired`` (counted by the claim that failed them: never held, no outcome) and
    # ``stuck`` (threads stuck now).
    not_outcomes = {"claimed", "timed_out", "expired", "stuck"}
    assert set(used) == {f.name for f in dataclasses.fields(WorkerStats)} - not_outcomes


def test_every_event_is_a_worker_hooks_method() -> None:
    """The dispatcher looks the event up by name on the hooks: it must be a real event."""
    for outcome, row in OUTCOMES.items():
        if row.event is None:
            continue
        method = getattr(pgqueue.WorkerHooks, row.event, None)
        assert callable(method), (outcome, row.event)
        assert row.event.startswith("on_")


def test_only_released_has_no_event() -> None:
    """A job given back unstarted at shutdown is documented to have no outcome event."""
    assert [o for o, row in OUTCOMES.items() if row.event is None] == [Outcome.RELEASED]


def test_levels_rise_with_what_the_outcome_costs() -> None:
    """Routine ends stay at INFO, dropped or retried work warns, a job failed for good errors."""
    assert {o: row.level for o, row in OUTCOMES.items()} == {
        Outcome.DONE: logging.INFO,
        Outcome.DONE_BY_HANDLER: logging.INFO,
        Outcome.RELEASED: logging.INFO,
        Outcome.SNOOZED: logging.INFO,
        Outcome.RETRY: logging.WARNING,
        Outcome.LOST: logging.WARNING,
        Outcome.CANCELLED: logging.WARNING,
        Outcome.FAILED: logging.ERROR,
    }


# -- count_and_log ---------------------------------------------------------------------------------


@pytest.mark.parametrize("outcome", list(Outcome))
def test_count_and_log_bumps_exactly_its_counter_and_logs_at_its_level(
    outcome: Outcome, caplog: pytest.LogCaptureFixture
) -> None:
    """One end, one count, one log line with the job's ids at the table's level."""
    caplog.set_level(logging.DEBUG, logger="pgqueue.worker")
    stats = WorkerStats(claimed=5, done=2)
    before = counters(stats)
    row = OUTCOMES[outcome]

    count_and_log(stats, make_job(), outcome, "some detail")

    expected = {**before, row.counter: before[row.counter] + 1}
    assert counters(stats) == expected
    (record,) = caplog.records
    assert record.name == "pgqueue.worker"
    assert record.levelno == row.level
    message = record.getMessage()
    assert message.startswith("job 41 queue=emails attempt=3: ")
    if outcome in WITH_DETAIL:
        assert "some detail" in message


@pytest.mark.parametrize("outcome", WITH_DETAIL)
@pytest.mark.parametrize(
    "detail",
    [
        f"OperationalError: connection to {SECRET_URL} failed",
        "connection failed: host=h user=u password=secret dbname=db",
    ],
)
def test_count_and_log_masks_passwords_in_the_detail(
    outcome: Outcome, detail: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Handler errors often quote a connection string: logs must never show its password."""
    caplog.set_level(logging.DEBUG, logger="pgqueue.worker")
    count_and_log(WorkerStats(), make_job(), outcome, detail)
    message = caplog.records[0].getMessage()
    assert "secret" not in message
    assert "***" in message


@pytest.mark.parametrize("outcome", WITH_DETAIL)
def test_an_empty_detail_is_shown_as_a_question_mark(
    outcome: Outcome, caplog: pytest.LogCaptureFixture
) -> None:
    """A blank detail would leave a dangling ``failed: `` in the log."""
    caplog.set_level(logging.DEBUG, logger="pgqueue.worker")
    count_and_log(WorkerStats(), make_job(), outcome, "")
    expected = OUTCOMES[outcome].message.format(detail="?")
    assert caplog.records[0].getMessage() == f"job 41 queue=emails attempt=3: {expected}"


def test_braces_and_percent_signs_in_the_detail_are_logged_verbatim(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The detail is error text: it is a format argument, never part of a format string."""
    caplog.set_level(logging.DEBUG, logger="pgqueue.worker")
    detail = "KeyError: '{detail}' {0} at 100%s %d"
    count_and_log(WorkerStats(), make_job(), Outcome.FAILED, detail)
    assert caplog.records[0].getMessage().endswith(f"failed: {detail}")


@pytest.mark.parametrize("outcome", [Outcome.RETRY, Outcome.FAILED])
def test_a_traceback_follows_the_line_of_its_failed_attempt(
    outcome: Outcome, caplog: pytest.LogCaptureFixture
) -> None:
    """On the lines after the message, where ``exc_info`` would go; the line is unchanged."""
    caplog.set_level(logging.DEBUG, logger="pgqueue.worker")
    traceback = "Traceback (most recent call last):\n  File \"app.py\", line 3\nKeyError: 'email'"
    count_and_log(WorkerStats(), make_job(), outcome, "KeyError: 'email'", traceback)
    count_and_log(WorkerStats(), make_job(), outcome, "KeyError: 'email'")
    with_tb, without = (r.getMessage() for r in caplog.records)
    assert with_tb == f"{without}\n{traceback}"
    assert caplog.records[0].levelno == OUTCOMES[outcome].level


def test_counting_does_not_depend_on_logging(caplog: pytest.LogCaptureFixture) -> None:
    """Stats stay right when the worker's logger is silenced."""
    caplog.set_level(logging.CRITICAL + 1, logger="pgqueue.worker")
    stats = WorkerStats()
    for outcome in Outcome:
        count_and_log(stats, make_job(), outcome, "x")
    assert caplog.records == []
    not_outcomes = ("claimed", "timed_out", "expired", "stuck")
    assert all(v == 1 for k, v in counters(stats).items() if k not in not_outcomes)
    assert stats.claimed == 0


# -- HookDispatcher.outcome ------------------------------------------------------------------------


class Recorder(pgqueue.WorkerHooks):
    """Overrides every outcome event and records its name and arguments."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def on_succeeded(self, job: JobContext, duration: float | None) -> None:
        self.calls.append(("on_succeeded", (job, duration)))

    def on_retry(self, job: JobContext, duration: float | None, error: str) -> None:
        self.calls.append(("on_retry", (job, duration, error)))

    def on_failed(self, job: JobContext, duration: float | None, error: str) -> None:
        self.calls.append(("on_failed", (job, duration, error)))

    def on_lost(self, job: JobContext, reason: str) -> None:
        self.calls.append(("on_lost", (job, reason)))

    def on_cancelled(self, job: JobContext, duration: float | None) -> None:
        self.calls.append(("on_cancelled", (job, duration)))

    def on_snoozed(self, job: JobContext, duration: float | None, delay: timedelta) -> None:
        self.calls.append(("on_snoozed", (job, duration, delay)))


JOB = make_job()


@pytest.mark.parametrize("duration", [1.5, None])
@pytest.mark.parametrize(
    ("outcome", "detail", "event", "args"),
    [
        (Outcome.DONE, "", "on_succeeded", ("duration",)),
        (Outcome.DONE_BY_HANDLER, "", "on_succeeded", ("duration",)),
        (Outcome.RETRY, "retry in 0:00:20: ValueError: x", "on_retry", ("duration", "detail")),
        (Outcome.FAILED, "ValueError: x", "on_failed", ("duration", "detail")),
        (Outcome.LOST, "lease lost", "on_lost", ("detail",)),
        (Outcome.CANCELLED, "", "on_cancelled", ("duration",)),
        (Outcome.SNOOZED, "0:00:30", "on_snoozed", ("duration", "snooze")),
    ],
)
def test_outcome_calls_its_hook_with_the_documented_arguments(
    outcome: Outcome, detail: str, event: str, args: tuple[str, ...], duration: float | None
) -> None:
    """Each outcome reaches exactly its event, with ``job`` then the event's own arguments."""
    recorder = Recorder()
    snooze = timedelta(seconds=30)
    HookDispatcher([recorder]).outcome(JOB, OUTCOMES[outcome].event, detail, duration, snooze)
    values = {"duration": duration, "detail": detail, "snooze": snooze}
    assert recorder.calls == [(event, (JOB, *(values[a] for a in args)))]
    assert event == OUTCOMES[outcome].event
    # The recorded arguments bind to the public signature (no argument too many or too few).
    inspect.signature(getattr(pgqueue.WorkerHooks, event)).bind(recorder, *recorder.calls[0][1])


def test_lost_without_a_reason_says_lost() -> None:
    """``on_lost`` always gets a reason, even when the caller had none."""
    recorder = Recorder()
    HookDispatcher([recorder]).outcome(JOB, OUTCOMES[Outcome.LOST].event, "", 2.0)
    assert recorder.calls == [("on_lost", (JOB, "lost"))]


def test_released_calls_no_hook() -> None:
    """A job given back at shutdown never ran here: it has no outcome event."""
    recorder = Recorder()
    HookDispatcher([recorder]).outcome(JOB, OUTCOMES[Outcome.RELEASED].event, "", None)
    assert recorder.calls == []


def test_every_hook_is_told_and_one_that_raises_does_not_stop_the_others(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A broken metrics hook must not hide the outcome from the next hook, nor break the worker."""

    class Broken(pgqueue.WorkerHooks):
        def on_failed(self, job: JobContext, duration: float | None, error: str) -> None:
            raise RuntimeError("boom")

    first, second = Recorder(), Recorder()
    dispatcher = HookDispatcher([first, Broken(), second])
    with caplog.at_level(logging.ERROR, logger="pgqueue.hooks"):
        dispatcher.outcome(JOB, OUTCOMES[Outcome.FAILED].event, "ValueError: x", 0.5)
    assert first.calls == second.calls == [("on_failed", (JOB, 0.5, "ValueError: x"))]
    assert any("Broken.on_failed" in r.getMessage() for r in caplog.records)


def test_hooks_that_do_not_override_an_event_are_not_called() -> None:
    """A hook without ``on_cancelled`` costs nothing and fails nothing on a cancel."""

    class OnlySucceeded(pgqueue.WorkerHooks):
        def __init__(self) -> None:
            self.seen: list[JobContext] = []

        def on_succeeded(self, job: JobContext, duration: float | None) -> None:
            self.seen.append(job)

    hook = OnlySucceeded()
    dispatcher = HookDispatcher([hook])
    for outcome in Outcome:
        dispatcher.outcome(JOB, OUTCOMES[outcome].event, "detail", 1.0)
    assert hook.seen == [JOB, JOB]  # DONE and DONE_BY_HANDLER


# -- the decision ----------------------------------------------------------------------------------


def test_each_write_decides_its_outcome_and_a_miss_names_the_write() -> None:
    """A write that matched nothing is ``LOST`` with the write's name until ``settled_among``
    says otherwise; the detail is the same whichever component wrote (#21)."""
    from pgqueue._worker.outcomes import after_complete, after_fail, after_snooze, unmatched
    from pgqueue.results import FailResult, Settled

    assert after_complete(True) == (Outcome.DONE, "")
    assert after_complete(False) == (Outcome.LOST, "guard matched no row at completion")
    retried = FailResult(id=1, status="queued", attempts=1, retry_in=timedelta(seconds=20))
    assert after_fail(retried, "E: x") == (Outcome.RETRY, "retry in 0:00:20: E: x")
    final = FailResult(id=1, status="failed", attempts=5, retry_in=None)
    assert after_fail(final, "E: x") == (Outcome.FAILED, "E: x")
    assert after_fail(None, "E: x") == (Outcome.LOST, "guard matched no row at failure")
    assert after_snooze(True, timedelta(minutes=1)) == (Outcome.SNOOZED, "0:01:00")
    assert after_snooze(False, timedelta(minutes=1)) == (
        Outcome.LOST,
        "guard matched no row at snooze",
    )
    assert unmatched(None, "why") == (Outcome.LOST, "why")
    assert unmatched(Settled.DONE_BY_HANDLER, "why") == (Outcome.DONE_BY_HANDLER, "")
    assert unmatched(Settled.CANCELLED, "why") == (Outcome.CANCELLED, "")
