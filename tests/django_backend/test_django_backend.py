"""PgQueueBackend in process: enqueue in Django's transaction, the mapping, results, signals."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import transaction
from django.utils import timezone
from django_project import failing_view
from djapp import tasks
from djapp.models import Note
from sqlalchemy import Engine, text

from pgqueue.contrib.django import PgQueueBackend, PgQueueTask, _compat
from pgqueue.contrib.django.backend import pgqueue_priority
from pgqueue.errors import InvalidArgumentError, InvalidPayloadError


def _jobs(engine: Engine) -> list[Any]:
    with engine.connect() as conn:
        return list(
            conn.execute(
                text("SELECT id, task, queue, priority, payload, run_at FROM jobs ORDER BY id")
            )
        )


def test_rollback_leaves_no_job_and_commit_keeps_it(project: Any, engine: Engine) -> None:
    with pytest.raises(RuntimeError, match="the view fails"):
        failing_view()
    assert _jobs(engine) == []
    assert not Note.objects.exists()
    with transaction.atomic():
        Note.objects.create(text="kept")
        result = tasks.add.enqueue(1, 2)
        # Not committed yet: another connection does not see it, Django's does.
        assert _jobs(engine) == []
        assert tasks.add.get_result(result.id).status == _compat.TaskResultStatus.READY
    [job] = _jobs(engine)
    assert (str(job.id), job.task, job.queue) == (result.id, "djapp.tasks.add", "default")
    assert job.payload == {"args": [1, 2], "kwargs": {}}
    assert Note.objects.get().text == "kept"


def test_outside_a_transaction_the_job_commits_at_once(project: Any, engine: Engine) -> None:
    result = tasks.shout.enqueue("hi")
    [job] = _jobs(engine)
    assert (str(job.id), job.queue) == (result.id, "emails")


def test_commit_notifies_the_queue_channel(project: Any, engine: Engine) -> None:
    import psycopg

    from pgqueue._base.urls import to_libpq_url

    with psycopg.connect(to_libpq_url(engine.url), autocommit=True) as listener:
        listener.execute("LISTEN jobs")
        with transaction.atomic():
            tasks.add.enqueue(2, 3)
            assert list(listener.notifies(timeout=0.2, stop_after=1)) == []
        [note] = list(listener.notifies(timeout=10, stop_after=1))
    assert note.payload == "default"


def test_arguments_are_checked_before_any_sql(project: Any, engine: Engine) -> None:
    with pytest.raises(InvalidArgumentError, match="arguments do not bind"):
        tasks.add.enqueue(1)
    with pytest.raises(InvalidPayloadError):
        tasks.add.enqueue(1, object())
    assert _jobs(engine) == []


def test_queue_not_in_queues_is_refused_by_validate_task(project: Any) -> None:
    with pytest.raises(_compat.InvalidTask, match="Queue 'nope'"):
        tasks.add.using(queue_name="nope")


def test_priority_maps_linearly_onto_five_distinct_levels() -> None:
    assert [pgqueue_priority(p) for p in (-100, -60, 0, 60, 100)] == [0, 2, 5, 7, 9]
    levels = [pgqueue_priority(p) for p in range(-100, 101)]
    assert levels == sorted(levels)


def test_priority_run_after_and_options_reach_the_row(project: Any, engine: Engine) -> None:
    later = timezone.now() + timedelta(hours=1)
    tasks.add.using(priority=100, run_after=later).enqueue(1, 1)
    tasks.add.using(priority=-100).enqueue(1, 1)
    first, second = _jobs(engine)
    assert (first.priority, second.priority) == (9, 0)
    assert abs((first.run_at - later).total_seconds()) < 0.001
    assert isinstance(tasks.flaky, PgQueueTask)
    tasks.flaky.with_options(unique_key="once").enqueue()
    tasks.flaky.with_options(unique_key="once").enqueue()
    with engine.connect() as conn:
        rows = list(conn.execute(text("SELECT max_attempts, unique_key FROM jobs WHERE id > 2")))
    assert [tuple(r) for r in rows] == [(5, "once")]


def test_naive_run_after_is_refused(project: Any) -> None:
    with pytest.raises(_compat.InvalidTask, match="aware"):
        tasks.add.using(run_after=timezone.now().replace(tzinfo=None))


def test_get_result_fields_and_unknown_ids(project: Any) -> None:
    result = tasks.attempt_of.enqueue("x")
    got = tasks.attempt_of.get_result(result.id)
    assert got.status == _compat.TaskResultStatus.READY
    assert (got.args, got.kwargs, got.errors, got.attempts) == (["x"], {}, [], 0)
    assert got.enqueued_at is not None
    assert got.finished_at is None
    with pytest.raises(ValueError, match="not finished"):
        _ = got.return_value
    backend = tasks.add.get_backend()
    assert isinstance(backend, PgQueueBackend)
    for unknown in ("999999", 999999, "abc", "", "-1", "1e3"):
        with pytest.raises(_compat.TaskResultDoesNotExist):
            backend.get_result(unknown)


def test_signals_task_enqueued(project: Any) -> None:
    seen: list[Any] = []

    def receiver(sender: Any, task_result: Any, **kwargs: Any) -> None:
        seen.append(task_result)

    _compat.task_enqueued.connect(receiver)
    try:
        result = tasks.add.enqueue(4, 5)
    finally:
        _compat.task_enqueued.disconnect(receiver)
    assert [r.id for r in seen] == [result.id]
    assert seen[0].task.module_path == "djapp.tasks.add"


def test_backend_flags() -> None:
    assert PgQueueBackend.supports_defer
    assert PgQueueBackend.supports_async_task
    assert PgQueueBackend.supports_get_result
    assert PgQueueBackend.supports_priority


def test_pgqueue_api_on_djangos_connection_joins_its_transaction(
    project: Any, engine: Engine
) -> None:
    import pgqueue
    from pgqueue.contrib.django import connection

    result = tasks.add.enqueue(1, 2)

    def cancel_then_fail() -> None:
        with transaction.atomic(), connection("default") as conn:
            assert pgqueue.cancel(conn, [int(result.id)]) == [int(result.id)]
            raise RuntimeError("rolled back")

    with pytest.raises(RuntimeError, match="rolled back"):
        cancel_then_fail()
    assert tasks.add.get_result(result.id).status == _compat.TaskResultStatus.READY
    with transaction.atomic(), connection("default") as conn:
        pgqueue.cancel(conn, [int(result.id)])
        pgqueue.set_queue_limits(conn, "emails", rate=pgqueue.Rate(10, 1))
    assert tasks.add.get_result(result.id).status == _compat.TaskResultStatus.FAILED
    with engine.connect() as conn:
        [limits] = pgqueue.queue_settings(conn, "emails")
    assert limits.rate == pgqueue.Rate(10, 1)


def test_without_use_tz_a_naive_run_after_is_in_time_zone(project: Any, engine: Engine) -> None:
    from zoneinfo import ZoneInfo

    from django.test import override_settings

    with override_settings(USE_TZ=False, TIME_ZONE="Europe/Paris"):
        naive = timezone.now().replace(microsecond=0) + timedelta(hours=1)
        tasks.add.using(run_after=naive).enqueue(1, 1)
    [job] = _jobs(engine)
    assert job.run_at == naive.replace(tzinfo=ZoneInfo("Europe/Paris"))
