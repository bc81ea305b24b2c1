"""Django's task API, from ``django.tasks`` (Django 6) or the ``django_tasks`` backport (Django 5.2).

The two have the same names and behaviour; the exception names differ (``InvalidTask`` in
Django, ``InvalidTaskError`` in the backport), so both are read here, once.
"""

from __future__ import annotations

from typing import Any

try:
    from django.tasks import base as _base
    from django.tasks import exceptions as _exceptions
    from django.tasks import signals as _signals
    from django.tasks import task_backends
    from django.tasks.backends import base as _backends
except ImportError:
    try:
        from django_tasks import base as _base  # type: ignore[no-redef]
        from django_tasks import exceptions as _exceptions  # type: ignore[no-redef]
        from django_tasks import signals as _signals  # type: ignore[no-redef]
        from django_tasks import task_backends  # type: ignore[no-redef,attr-defined]
        from django_tasks.backends import base as _backends  # type: ignore[no-redef]
    except ImportError as exc:
        from pgqueue.contrib import missing_extra

        raise missing_extra("pgqueue.contrib.django", "django") from exc

BaseTaskBackend: Any = _backends.BaseTaskBackend
Task: Any = _base.Task
TaskResult: Any = _base.TaskResult
TaskResultStatus: Any = _base.TaskResultStatus
TaskError: Any = _base.TaskError
TaskContext: Any = _base.TaskContext
TASK_MIN_PRIORITY: int = _base.TASK_MIN_PRIORITY
TASK_MAX_PRIORITY: int = _base.TASK_MAX_PRIORITY
InvalidTask: Any = getattr(_exceptions, "InvalidTask", None) or _exceptions.InvalidTaskError
TaskResultDoesNotExist: Any = _exceptions.TaskResultDoesNotExist
task_enqueued: Any = _signals.task_enqueued
task_started: Any = _signals.task_started
task_finished: Any = _signals.task_finished

__all__ = [
    "TASK_MAX_PRIORITY",
    "TASK_MIN_PRIORITY",
    "BaseTaskBackend",
    "InvalidTask",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
]
