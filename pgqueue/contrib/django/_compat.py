"""Django's task API: ``django.tasks`` (Django 6) or the ``django_tasks`` backport (Django 5.2).

The two have the same names and behaviour; the exception names differ (``InvalidTask`` in
Django, ``InvalidTaskError`` in the backport), so both are read here, once.
"""

from __future__ import annotations

import importlib
from typing import Any


def _modules(package: str) -> tuple[Any, Any, Any, Any, Any]:
    """``package``'s ``base``, ``exceptions``, ``signals``, itself and ``backends.base``."""
    return tuple(  # type: ignore[return-value]
        importlib.import_module(f"{package}{suffix}")
        for suffix in (".base", ".exceptions", ".signals", "", ".backends.base")
    )


try:
    _base, _exceptions, _signals, _package, _backends = _modules("django.tasks")
except ImportError:
    try:
        _base, _exceptions, _signals, _package, _backends = _modules("django_tasks")
    except ImportError as exc:
        from pgqueue.contrib import missing_extra

        raise missing_extra("pgqueue.contrib.django", "django") from exc

task_backends: Any = _package.task_backends
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
TaskResultMismatch: Any = _exceptions.TaskResultMismatch
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
    "TaskResultMismatch",
    "TaskResultStatus",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
]
