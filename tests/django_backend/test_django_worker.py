"""``manage.py pgqueue_worker`` in real processes: it runs what a committed transaction
enqueued, retries with the error history, honours run_after and priorities, and a ``kill -9``
mid-task is recovered by another worker after the lease."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest
from django.db import transaction
from django.utils import timezone
from django_project import FAST, failing_view, finished, stop, wait_until
from djapp import tasks
from djapp.models import Note
from sqlalchemy import Engine, text

from pgqueue.contrib.django import _compat

pytestmark = [pytest.mark.processes]

Status = _compat.TaskResultStatus


def test_committed_job_runs_on_the_worker_and_get_result_is_successful(
    project: Any, engine: Engine
) -> None:
    with pytest.raises(RuntimeError, match="the view fails"):
        failing_view()
    with transaction.atomic():
        Note.objects.create(text="kept")
        committed = tasks.count_notes.enqueue()
    context = tasks.attempt_of.enqueue("ctx")
    emails = tasks.shout.enqueue("hi")
    signals = project.tmp / "signals.txt"
    project.env["DJAPP_SIGNAL_LOG"] = str(signals)
    worker = project.start_worker(*FAST)
    try:
        got = wait_until(finished(tasks.count_notes, committed.id), worker=worker)
        assert got.status == Status.SUCCESSFUL, got.errors
        assert got.return_value == 1  # the worker sees the committed row
        ctx = wait_until(finished(tasks.attempt_of, context.id))
        assert ctx.return_value == {"attempt": 1, "id": context.id, "tag": "ctx"}
        assert wait_until(finished(tasks.shout, emails.id)).return_value == "HI"
        # refresh() reads the row again.
        assert committed.status == Status.READY
        committed.refresh()
        assert committed.status == Status.SUCCESSFUL
        assert committed.attempts == 1
        assert committed.started_at is not None
        assert committed.finished_at is not None
        assert committed.worker_ids[0]
    finally:
        out = stop(worker)
    assert worker.returncode == 0, out
    lines = signals.read_text().splitlines()
    for result in (committed, context, emails):
        assert f"started {result.id} RUNNING" in lines
        assert f"finished {result.id} SUCCESSFUL" in lines
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM jobs")).scalar_one() == 3


def test_fails_twice_then_succeeds_two_errors_three_attempts(project: Any) -> None:
    result = tasks.flaky.enqueue()
    doomed = tasks.always_fails.enqueue()
    signals = project.tmp / "signals.txt"
    project.env["DJAPP_SIGNAL_LOG"] = str(signals)
    worker = project.start_worker(*FAST)
    try:
        # The task's own RetryPolicy (given to @task) backs off 0.1 s, then 0.2 s.
        got = wait_until(finished(tasks.flaky, result.id), worker=worker)
        failed = wait_until(finished(tasks.always_fails, doomed.id), worker=worker)
    finally:
        out = stop(worker)
    assert failed.status == Status.FAILED
    assert [e.exception_class_path for e in failed.errors] == ["builtins.ValueError"] * 2
    lines = signals.read_text().splitlines()
    # task_started per attempt; task_finished once, when nothing follows.
    assert lines.count(f"started {result.id} RUNNING") == 3
    assert [x for x in lines if x.startswith(f"finished {result.id} ")] == [
        f"finished {result.id} SUCCESSFUL"
    ]
    assert [x for x in lines if x.startswith(f"finished {doomed.id} ")] == [
        f"finished {doomed.id} FAILED"
    ]
    assert got.status == Status.SUCCESSFUL, out
    assert got.return_value == 3
    assert got.attempts == 3
    assert len(got.errors) == 2
    for number, error in enumerate(got.errors, start=1):
        assert error.exception_class_path == "builtins.RuntimeError"
        assert error.exception_class is RuntimeError
        assert "Traceback (most recent call last)" in error.traceback
        assert f"RuntimeError: attempt {number} fails" in error.traceback


def test_run_after_and_priority(project: Any, tmp_path: Path) -> None:
    order = tmp_path / "order.txt"
    run_after = timezone.now() + timedelta_s(2)
    later = tasks.record.using(run_after=run_after, priority=-100).enqueue(str(order), "later")
    low = tasks.record.using(priority=-100).enqueue(str(order), "low")
    high = tasks.record.using(priority=100).enqueue(str(order), "high")
    worker = project.start_worker("--poll-interval", "0.2s", "--concurrency", "1")
    try:
        got = wait_until(finished(tasks.record, later.id), worker=worker)
    finally:
        stop(worker)
    # Not started before its run_after (the database's clocks, not the test's).
    assert got.started_at >= run_after
    # One thread: the higher Django priority first; the deferred job (as low as "low", and
    # later) last.
    assert order.read_text().split() == ["high", "low", "later"]
    for result in (low, high):
        assert tasks.record.get_result(result.id).started_at < got.started_at


def timedelta_s(seconds: float) -> Any:
    from datetime import timedelta

    return timedelta(seconds=seconds)


def test_kill_9_mid_task_is_run_by_another_worker_after_the_lease(
    project: Any, engine: Engine, tmp_path: Path
) -> None:
    marker, release = tmp_path / "started", tmp_path / "release"
    result = tasks.wait_for_file.enqueue(str(marker), str(release))
    first = project.start_worker(*FAST)
    try:
        wait_until(marker.exists)
        assert tasks.wait_for_file.get_result(result.id).status == Status.RUNNING
        first_pid = int(marker.read_text())
        os.kill(first_pid, signal.SIGKILL)
        stop(first, signal.SIGKILL)
        marker.unlink()
        release.touch()
        second = project.start_worker(*FAST)
        try:
            got = wait_until(finished(tasks.wait_for_file, result.id), timeout=60)
            assert got.status == Status.SUCCESSFUL
            assert got.return_value == "released"
            assert int(marker.read_text()) != first_pid
        finally:
            stop(second)
    finally:
        stop(first, signal.SIGKILL)
    with engine.connect() as conn:
        running = text("SELECT count(*) FROM jobs WHERE status = 'running'")
        assert conn.execute(running).scalar_one() == 0


def test_djangos_documented_examples(project: Any) -> None:
    """The examples of Django's task documentation: enqueue, status, refresh, return_value,
    get_result, takes_context."""
    result = tasks.email_users.enqueue(
        emails=["user@example.com"], subject="You have a message", message="Hello there!"
    )
    assert result.status == Status.READY
    context = tasks.email_users_with_context.enqueue(
        emails=["a@example.com", "b@example.com"], subject="Hi", message="Hello"
    )
    worker = project.start_worker(*FAST)
    try:
        wait_until(finished(tasks.email_users, result.id), worker=worker)
        result.refresh()
        assert result.status == Status.SUCCESSFUL
        assert result.return_value == 1
        assert tasks.email_users.get_result(result.id).return_value == 1
        got = wait_until(finished(tasks.email_users_with_context, context.id), worker=worker)
    finally:
        stop(worker)
    assert got.return_value == {"line": "Attempt 1: sending email to 2 users", "sent": 1}
    with pytest.raises(_compat.TaskResultMismatch):
        tasks.add.get_result(result.id)


def test_a_task_module_not_imported_at_start_is_imported_when_a_job_names_it(
    project: Any,
) -> None:
    from djapp import late

    result = late.late_add.enqueue(20, 22)
    worker = project.start_worker(*FAST)
    try:
        got = wait_until(finished(late.late_add, result.id), worker=worker)
    finally:
        stop(worker)
    assert got.status == Status.SUCCESSFUL, got.errors
    assert got.return_value == 42


def test_processes_run_django_in_every_child(project: Any, engine: Engine) -> None:
    """``--processes 2``: pgqueue's supervisor starts children that set Django up themselves."""
    results = [tasks.add.enqueue(i, i) for i in range(4)]
    worker = project.start_worker("--processes", "2", "--poll-interval", "0.2s")

    def registered() -> int:
        with engine.connect() as conn:
            return int(conn.execute(text("SELECT count(*) FROM jobs_workers")).scalar_one())

    try:
        got = [wait_until(finished(tasks.add, r.id), worker=worker) for r in results]
        # Both children running (a SIGTERM before a child's handlers exist kills it outright).
        wait_until(lambda: registered() == 2, worker=worker)
    finally:
        out = stop(worker)
    assert [g.return_value for g in got] == [0, 2, 4, 6], out
    assert worker.returncode == 0, out
