"""``PgQueueBackend``: Django's task API (``@task``, ``enqueue``, ``get_result``) on pgqueue.

A Django task's job is an ordinary pgqueue task job: ``jobs.task`` is the task's
``module_path``, the payload is its call (:func:`pgqueue.tasks.encode_call`), the queue its
``queue_name``. It is written through :func:`pgqueue.repository.enqueue_with` on Django's own
connection (:mod:`pgqueue.contrib.django._bridge`), inside ``transaction.atomic(using=...)``: in
the caller's transaction when there is one (a savepoint), committed at once otherwise. Results
are read back from the job's row with :func:`pgqueue.admin.get_job`.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import dataclasses
import inspect
import threading
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from asgiref.sync import sync_to_async
from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.utils import timezone
from django.utils.module_loading import import_string

from pgqueue import admin, repository
from pgqueue._base.validation import encode_payload
from pgqueue.contrib.django import _compat
from pgqueue.contrib.django._bridge import borrowed
from pgqueue.enqueue_options import EnqueueOptions
from pgqueue.errors import InvalidArgumentError
from pgqueue.retry_policy import RetryPolicy
from pgqueue.tasks import decode_call, encode_call

#: Every task a ``PgQueueBackend`` validated in this process, by ``module_path``: what
#: ``manage.py pgqueue_worker`` can run. ``@task`` validates at import, so importing a module
#: records its tasks.
SEEN: dict[str, Any] = {}
_SEEN_LOCK = threading.Lock()

#: pgqueue's priorities, 0 (lowest) to 9.
_LEVELS = 9


def pgqueue_priority(priority: int) -> int:
    """Django's priority (-100..100, higher first) on pgqueue's 0..9, linearly, halves rounded
    up: -100 -> 0, -60 -> 2, 0 -> 5, 60 -> 7, 100 -> 9."""
    low, high = _compat.TASK_MIN_PRIORITY, _compat.TASK_MAX_PRIORITY
    span = high - low
    return ((priority - low) * _LEVELS + span // 2) // span


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PgQueueTask(_compat.Task):  # type: ignore[misc]
    """The backend's ``task_class``: a Django ``Task`` with pgqueue's options beyond Django's,
    given to ``@task(...)`` (Django 6.1 passes its extra keywords here)::

        @task(queue_name="emails", max_attempts=3, unique_key="digest")
        def send_digest(user_id: int) -> None: ...

    Each is :func:`pgqueue.enqueue`'s option of that name, default as there; ``retry`` is the
    task's :class:`pgqueue.RetryPolicy` (default: the worker's). Change them per call with
    :meth:`with_options`.

    .. versionadded:: 0.1.0
    """

    max_attempts: int | None = None
    retry: RetryPolicy | None = None
    timeout: timedelta | float | None = None
    expires_in: timedelta | float | None = None
    concurrency_key: str | None = None
    unique_key: str | None = None
    depends_on: tuple[int, ...] | None = None

    def with_options(self, **options: Any) -> PgQueueTask:
        """This task with pgqueue options changed (Django's ``using`` takes Django's only)."""
        return dataclasses.replace(self, **options)


#: The pgqueue options a :class:`PgQueueTask` carries, by name.
_PASSED = ("max_attempts", "timeout", "expires_in", "concurrency_key", "unique_key", "depends_on")

_STATUS = {
    "queued": "READY",
    "waiting": "READY",
    "running": "RUNNING",
    "done": "SUCCESSFUL",
    "failed": "FAILED",
    "cancelled": "FAILED",
    "expired": "FAILED",
}


def exception_class_path(entry: Mapping[str, Any]) -> str:
    """The raised class's dotted path, from the exception line that ends a stored traceback
    (Python writes ``module.Class`` there, bare names for builtins)."""
    lines = [line for line in str(entry.get("traceback") or "").splitlines() if line.strip()]
    text = lines[-1] if lines else str(entry.get("error") or "")
    name = text.partition(":")[0].strip()
    if not name or " " in name:
        return "builtins.Exception"
    return name if "." in name else f"builtins.{name}"


class PgQueueBackend(_compat.BaseTaskBackend):  # type: ignore[misc]
    """pgqueue as a ``TASKS`` backend::

        TASKS = {"default": {"BACKEND": "pgqueue.contrib.django.PgQueueBackend",
                             "QUEUES": ["default", "emails"],
                             "OPTIONS": {"database": "default"}}}

    ``OPTIONS["database"]`` is the ``DATABASES`` alias whose connection writes and reads the
    jobs (default ``"default"``); it must hold pgqueue's schema (``manage.py pgqueue_migrate``).

    .. versionadded:: 0.1.0
    """

    task_class = PgQueueTask
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: Mapping[str, Any]) -> None:
        super().__init__(alias, params)
        self.database: str = self.options.get("database", DEFAULT_DB_ALIAS)

    def validate_task(self, task: Any) -> None:
        """Django's checks, then the task is recorded for the worker of this process
        (:data:`SEEN`)."""
        super().validate_task(task)
        with _SEEN_LOCK:
            SEEN.setdefault(task.module_path, task)  # ``using`` copies share the path

    # -- enqueue ------------------------------------------------------------------------------

    def enqueue(self, task: Any, args: Iterable[Any], kwargs: Mapping[str, Any]) -> Any:
        """Write the task's job in Django's transaction on ``OPTIONS["database"]`` (committed at
        once outside one); its ``TaskResult`` (``READY``). Workers are woken on commit.

        Raises:
            InvalidArgumentError: the arguments do not bind to the function's signature, or
                are not JSON (:class:`~pgqueue.errors.InvalidPayloadError`), before any SQL.
        """
        args, kwargs = list(args), dict(kwargs)
        payload, options = self._job_of(task, args, kwargs)
        with transaction.atomic(using=self.database), borrowed(self.database) as conn:
            job = repository.enqueue_with(conn, payload, options)
        result = self._result(
            task, job.id, "queued", args, kwargs, enqueued_at=timezone.now(), attempts=0
        )
        _compat.task_enqueued.send(type(self), task_result=result)
        return result

    async def aenqueue(self, task: Any, args: Iterable[Any], kwargs: Mapping[str, Any]) -> Any:
        """:meth:`enqueue` from async code, on Django's connection of the calling context (the
        same transaction rule: Django's connections are thread-bound, so it runs on the
        thread-sensitive executor, as Django's own database calls do)."""
        return await sync_to_async(self.enqueue, thread_sensitive=True)(task, args, kwargs)

    def _job_of(
        self, task: Any, args: list[Any], kwargs: dict[str, Any]
    ) -> tuple[dict[str, Any], EnqueueOptions]:
        context = [None] if task.takes_context else []
        try:
            inspect.signature(task.func).bind(*context, *args, **kwargs)
        except TypeError as exc:
            raise InvalidArgumentError(
                f"task {task.module_path!r}", f"arguments do not bind: {exc}"
            ) from None
        payload = encode_call(args, kwargs)
        encode_payload(payload, argument=f"the arguments of task {task.module_path!r}")
        run_at = task.run_after
        if run_at is not None and timezone.is_naive(run_at):
            # Only without USE_TZ (validate_task refuses it otherwise): Django's naive times are
            # in its TIME_ZONE.
            run_at = timezone.make_aware(run_at)
        options: dict[str, Any] = {
            "queue": task.queue_name,
            "priority": pgqueue_priority(task.priority),
            "run_at": run_at,
        }
        for name in _PASSED:
            value = getattr(task, name, None)
            if value is not None:
                options[name] = value
        return payload, EnqueueOptions.of(options, task=task.module_path)

    # -- results ------------------------------------------------------------------------------

    def get_result(self, result_id: Any) -> Any:
        """The ``TaskResult`` of the job whose id is ``result_id``, read on Django's connection
        (so a job enqueued in the open transaction is seen).

        Raises:
            TaskResultDoesNotExist: no such job, an id that is no job id, or a job that is no
                Django task's.
        """
        job_id = _job_id(result_id)
        with borrowed(self.database) as conn:
            row = None if job_id is None else admin.get_job(conn, job_id)
        return self.result_of(row, result_id)

    async def aget_result(self, result_id: Any) -> Any:
        """:meth:`get_result` from async code."""
        return await sync_to_async(self.get_result, thread_sensitive=True)(result_id)

    def result_of(self, row: Mapping[str, Any] | None, result_id: Any = None) -> Any:
        """The ``TaskResult`` of a job's row (:func:`pgqueue.admin.get_job`'s)."""
        if row is None or not row.get("task"):
            raise _compat.TaskResultDoesNotExist(f"no task result {result_id!r}")
        try:
            call_args, kwargs = decode_call(row["payload"])
            args = list(call_args)
        except InvalidArgumentError:
            raise _compat.TaskResultDoesNotExist(f"no task result {result_id!r}") from None
        task = import_string(row["task"])
        if not isinstance(task, _compat.Task):
            raise _compat.TaskResultDoesNotExist(
                f"job {row['id']} names {row['task']!r}, which is not a Django task"
            )
        if task.queue_name != row["queue"] or task.backend != self.alias:
            task = dataclasses.replace(task, queue_name=row["queue"], backend=self.alias)
        errors = [
            _compat.TaskError(
                exception_class_path=exception_class_path(entry),
                traceback=str(entry.get("traceback") or entry.get("error") or ""),
            )
            for entry in row.get("errors") or []
        ]
        return self._result(
            task,
            row["id"],
            str(row["status"]),
            args,
            kwargs,
            enqueued_at=row.get("created_at"),
            started_at=row.get("locked_at"),
            finished_at=row.get("finished_at"),
            attempts=int(row.get("attempts") or 0),
            worker=row.get("locked_by"),
            errors=errors,
            value=row.get("result"),
        )

    def _result(
        self,
        task: Any,
        job_id: int,
        state: str,
        args: list[Any],
        kwargs: dict[str, Any],
        *,
        enqueued_at: datetime | None = None,
        started_at: datetime | None = None,
        finished_at: datetime | None = None,
        attempts: int,
        worker: str | None = None,
        errors: list[Any] | None = None,
        value: Any = None,
    ) -> Any:
        result = _compat.TaskResult(
            task=task,
            id=str(job_id),
            status=_compat.TaskResultStatus[_STATUS.get(state, "READY")],
            enqueued_at=enqueued_at,
            started_at=started_at,
            finished_at=finished_at,
            last_attempted_at=started_at,
            args=args,
            kwargs=kwargs,
            backend=self.alias,
            errors=errors or [],
            # Django counts attempts as len(worker_ids); pgqueue keeps the latest claimer only.
            worker_ids=[worker or ""] * attempts,
        )
        object.__setattr__(result, "_return_value", value)
        return result

    # -- checks -------------------------------------------------------------------------------

    def check(self, **kwargs: Any) -> list[Any]:
        """Django's system check of the backend: its database must be PostgreSQL."""
        from django.core import checks

        if self.database not in connections:
            return [
                checks.Error(
                    f"TASKS[{self.alias!r}] OPTIONS['database'] is {self.database!r}, "
                    "which is not in DATABASES",
                    id="pgqueue.E001",
                )
            ]
        if connections[self.database].vendor != "postgresql":
            return [
                checks.Error(
                    f"TASKS[{self.alias!r}] needs a PostgreSQL database; "
                    f"{self.database!r} is {connections[self.database].vendor}",
                    id="pgqueue.E002",
                )
            ]
        return []


def _job_id(result_id: Any) -> int | None:
    """A job id from a result id (``"42"`` or ``42``); ``None`` for anything else."""
    if isinstance(result_id, bool):
        return None
    if isinstance(result_id, int):
        return result_id if 0 < result_id < 2**63 else None
    text = str(result_id)
    if not (text.isascii() and text.isdigit()):
        return None
    number = int(text)
    return number if 0 < number < 2**63 else None
