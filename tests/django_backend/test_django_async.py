"""``aenqueue`` from async code, and an ``async def`` task on the worker's event loop."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django_project import FAST, finished, stop, wait_until
from djapp import tasks
from djapp.models import Note
from sqlalchemy import Engine, text

from pgqueue.contrib.django import _compat

Status = _compat.TaskResultStatus


async def async_view() -> Any:
    """An async view: writes a row and enqueues the async task from the event loop."""
    await Note.objects.acreate(text="from async")
    result = await tasks.async_loop_name.aenqueue("async")
    return await tasks.async_loop_name.aget_result(result.id)


def test_aenqueue_and_aget_result(project: Any, engine: Engine) -> None:
    got = asyncio.run(async_view())
    assert got.status == Status.READY
    assert got.args == ["async"]
    with engine.connect() as conn:
        assert conn.execute(text("SELECT task FROM jobs")).scalar_one() == (
            "djapp.tasks.async_loop_name"
        )
    with pytest.raises(_compat.TaskResultDoesNotExist):
        asyncio.run(tasks.async_loop_name.aget_result("424242"))


@pytest.mark.processes
def test_async_task_runs_on_the_workers_event_loop(project: Any) -> None:
    result = asyncio.run(async_view())
    worker = project.start_worker(*FAST)
    try:
        got = wait_until(finished(tasks.async_loop_name, result.id), worker=worker)
        assert got.status == Status.SUCCESSFUL, got.errors
        assert got.return_value == {"thread": "pgqueue-asyncio", "notes": 1, "tag": "async"}
        asyncio.run(sync_to_async(got.refresh)())
        asyncio.run(got.arefresh())
        assert got.attempts == 1
    finally:
        stop(worker)
