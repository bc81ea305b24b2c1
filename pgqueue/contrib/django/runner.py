"""What ``manage.py pgqueue_worker`` runs: the project's Django tasks as a ``pgqueue.Registry``.

``pgqueue worker pgqueue.contrib.django.runner:registry`` (which the command runs, in each
process under ``--processes``) imports this module: :func:`build_registry` sets Django up (once
per process, from ``DJANGO_SETTINGS_MODULE``), imports each installed app's ``tasks`` module,
and registers one :class:`pgqueue.Task` per Django task a ``PgQueueBackend`` validated, under
its ``module_path``, with its queue, and a handler for each queue of the backend's ``QUEUES`` so
that every one of them is claimed. A job naming a task none of those modules declared imports
its ``module_path`` then (:func:`find_task`, asked once per name). Sync tasks run on the
worker's threads, ``async def`` ones on its event loop (``async_concurrency``).

Each job runs as Django runs a task: ``task_started`` then ``task_finished`` (on success, or
on the failure of the last attempt) are sent with the job's ``TaskResult``, a ``takes_context``
task gets its ``TaskContext``, and the database connections are closed before and after the job
if they are unusable or past ``CONN_MAX_AGE`` (``close_old_connections``), as Django does around
a request.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

_LOCK = threading.Lock()


def setup_django() -> None:
    """``django.setup()`` unless this process has done it (``manage.py`` has)."""
    from django.apps import apps

    if not apps.ready:
        import django

        django.setup()


def build_registry() -> Any:
    """The registry of the project's tasks (see the module's docstring)."""
    setup_django()
    from django.conf import settings
    from django.utils.module_loading import autodiscover_modules

    from pgqueue.contrib.django import backend
    from pgqueue.contrib.django.checks import backend_databases
    from pgqueue.errors import NoHandlerError
    from pgqueue.jobs import JobContext, Registry

    autodiscover_modules("tasks")
    registry = Registry(find_task=find_task)
    aliases = backend_databases()
    queues: set[str] = set()
    for alias in aliases:
        queues.update(settings.TASKS[alias].get("QUEUES", ["default"]))
    with backend._SEEN_LOCK:
        tasks = dict(backend.SEEN)
    for name, task in sorted(tasks.items()):
        registry.task(name, queue=task.queue_name, **_pgqueue_options(task))(_runner(task))
        queues.add(task.queue_name)
    for queue in sorted(queues):

        def no_task(job: JobContext) -> None:
            raise NoHandlerError(job.queue)

        registry.handler(queue)(no_task)
    return registry


def find_task(name: str) -> Any:
    """The pgqueue task of a Django task a job names and no module imported yet declared:
    ``name`` is its ``module_path``, imported here (``None`` when it is no Django task)."""
    from django.utils.module_loading import import_string

    from pgqueue.contrib.django import _compat
    from pgqueue.tasks import Task

    try:
        task = import_string(name)
    except ImportError:
        return None
    if not isinstance(task, _compat.Task) or task.module_path != name:
        return None
    return Task(_runner(task), name=name, queue=task.queue_name, **_pgqueue_options(task))


def _pgqueue_options(task: Any) -> dict[str, Any]:
    retry = getattr(task, "retry", None)
    return {} if retry is None else {"retry": retry}


def _runner(task: Any) -> Callable[..., Any]:
    """The function the worker calls with the job's arguments: the Django task, with its
    signals, its context and Django's connection hygiene around it."""
    from asgiref.sync import sync_to_async
    from django.db import close_old_connections

    from pgqueue.contrib.django import _compat
    from pgqueue.jobs import current_job

    def begin(*args: Any, **kwargs: Any) -> tuple[Any, Any, Any]:
        close_old_connections()
        job = current_job()
        backend = _compat.task_backends[task.backend]
        result = _running_result(backend, job)
        _compat.task_started.send(type(backend), task_result=result)
        return backend, job, result

    def finish(backend: Any, job: Any, result: Any, value: Any, exc: BaseException | None) -> Any:
        try:
            row = _row_of(job)
            if exc is None or _last_attempt(row, job, exc):
                done = backend.result_of(
                    {**row, "status": "done" if exc is None else "failed", "result": value}
                )
                errors = list(result.errors)
                if exc is not None:  # this attempt's, not in the row yet
                    errors.append(_task_error(exc))
                object.__setattr__(done, "errors", errors)
                _compat.task_finished.send(type(backend), task_result=done)
        finally:
            close_old_connections()
        return value

    def _last_attempt(row: dict[str, Any], job: Any, exc: BaseException) -> bool:
        """No attempt follows this failure: the budget is spent, or the task's retry policy
        refuses this exception (the worker's own policy is not known here)."""
        policy = getattr(task, "retry", None)
        refused = policy is not None and not policy.should_retry(exc)
        return refused or int(row.get("max_attempts") or 0) <= job.attempts

    def arguments(result: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
        return (_compat.TaskContext(task_result=result), *args) if task.takes_context else args

    if _is_async(task.func):

        async def run_async(*args: Any, **kwargs: Any) -> Any:
            backend, job, result = await sync_to_async(begin, thread_sensitive=False)()
            try:
                value = await task.func(*arguments(result, args), **kwargs)
            except BaseException as exc:
                await sync_to_async(finish, thread_sensitive=False)(backend, job, result, None, exc)
                raise
            return await sync_to_async(finish, thread_sensitive=False)(
                backend, job, result, value, None
            )

        run_async.__name__ = task.func.__name__
        return run_async

    def run(*args: Any, **kwargs: Any) -> Any:
        backend, job, result = begin()
        try:
            value = task.func(*arguments(result, args), **kwargs)
        except BaseException as exc:
            finish(backend, job, result, None, exc)
            raise
        return finish(backend, job, result, value, None)

    run.__name__ = task.func.__name__
    return run


def _is_async(func: Any) -> bool:
    from pgqueue.tasks import is_async_callable

    return bool(is_async_callable(func))


#: The rows read for the jobs running in this process, by job id (the start's read, reused by
#: the end of the same attempt).
_ROWS: dict[int, dict[str, Any]] = {}


def _running_result(backend: Any, job: Any) -> Any:
    """The job's ``TaskResult`` as it starts (``RUNNING``, this attempt counted), from its row."""
    from pgqueue import admin

    with job.engine.connect() as conn:
        row = admin.get_job(conn, job.id)
    if row is None:  # pragma: no cover - the worker holds the job
        row = {"id": job.id, "task": job.task, "queue": job.queue, "payload": job.payload}
    row = {**row, "status": "running", "attempts": job.attempts}
    with _LOCK:
        _ROWS[job.id] = row
    return backend.result_of(row)


def _row_of(job: Any) -> dict[str, Any]:
    with _LOCK:
        found = _ROWS.pop(job.id, None)
    if found is None:  # pragma: no cover - begin() stored it
        found = {"id": job.id, "task": job.task, "queue": job.queue, "payload": job.payload}
    return found


def _task_error(exc: BaseException) -> Any:
    """Django's ``TaskError`` of an exception raised now."""
    import traceback

    from pgqueue._base.urls import mask_text
    from pgqueue.contrib.django import _compat

    kind = type(exc)
    return _compat.TaskError(
        exception_class_path=f"{kind.__module__}.{kind.__qualname__}",
        traceback=mask_text("".join(traceback.format_exception(exc))),
    )


def __getattr__(name: str) -> Any:
    if name == "registry":
        return build_registry()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
