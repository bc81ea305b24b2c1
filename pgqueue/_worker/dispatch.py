"""Which code runs a claimed job: its task, by the name in ``jobs.task``, or its queue's handler.

Built once per worker from its handlers and its registry's tasks; the lanes, the transaction lane
and ``pgqueue.testing.drain`` ask it for each job's :class:`~pgqueue._worker.executors.Target`.
A job whose task this worker does not know (a rolling deploy: a newer producer, an older worker),
or a queue-keyed job on a queue this worker runs tasks of only, gets a target that raises
:class:`~pgqueue.errors.UnknownTaskError` (:class:`~pgqueue.errors.NoHandlerError`): the attempt
fails with that ``last_error`` and is retried as usual, never run by the wrong code and never
lost.

A registry made with ``Registry(find_task=...)`` is asked for a name it lacks when a job first
names it (a task module not imported at start-up): what it returns runs in whichever lane claimed
the job (:func:`_run_anywhere`), and is kept, so the finder is asked once per name.

Each queue is claimed for one lane (threads or the event loop); a queue whose tasks and handler
are of both kinds is *mixed*, and :meth:`Dispatch.split` sends each job of its claims to its own
target's lane.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Callable, Mapping
from typing import Any

from pgqueue._worker.executors import DEFAULT_MAX_RESULT_BYTES, Target
from pgqueue._worker.window import Lane
from pgqueue.errors import NoHandlerError, UnknownTaskError
from pgqueue.jobs import Handler, JobContext, Registry, fresh_payload, is_async_handler
from pgqueue.tasks import Task, decode_call


def _lane(target: Target) -> Lane:
    return Lane.ASYNC if target.is_async else Lane.THREADS


def _task_call(task: Task[..., Any]) -> Callable[[JobContext], object]:
    """The task's function behind the decoding of its job's payload into arguments (from the
    claim's JSON text when the job holds it: the arguments live as long as the call)."""
    func = task.func
    if task.is_async:

        async def run_async(job: JobContext) -> object:
            args, kwargs = decode_call(fresh_payload(job))
            return await func(*args, **kwargs)

        return run_async

    def run(job: JobContext) -> object:
        args, kwargs = decode_call(fresh_payload(job))
        return func(*args, **kwargs)

    return run


def _run_anywhere(task: Task[..., Any]) -> Callable[[JobContext], object]:
    """A found task for either lane: on a handler thread, the call (an ``async def`` one under
    ``asyncio.run``); on the event loop, a coroutine (a sync one on ``asyncio.to_thread``, which
    carries the job's context). A queue's lane was fixed before the task was known."""
    call = _task_call(task)

    def run(job: JobContext) -> object:
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # a handler thread
            value = call(job)
            return asyncio.run(value) if inspect.isawaitable(value) else value  # type: ignore[arg-type]
        return call(job) if task.is_async else asyncio.to_thread(call, job)

    return run


def _raises(error: Exception) -> Callable[[JobContext], object]:
    def run(job: JobContext) -> object:
        raise error

    return run


class Dispatch:
    """The targets of one worker: ``handlers`` by queue, ``tasks`` by name.

    Args:
        handlers: ``{queue: handler}``, checked.
        tasks: ``{name: Task}`` (a :class:`pgqueue.Registry`'s ``tasks``).
        max_result_bytes: The bound of a result's JSON text (``Worker(max_result_bytes)``).
        find_task: Asked for a task name none of ``tasks`` has (``Registry(find_task=...)``);
            ``None``: such a job fails its attempt with ``UnknownTaskError``.
    """

    def __init__(
        self,
        handlers: Mapping[str, Handler],
        tasks: Mapping[str, Task[..., Any]] | None = None,
        *,
        max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
        find_task: Callable[[str], Task[..., Any] | None] | None = None,
    ) -> None:
        self._max = max_result_bytes
        self._find = find_task
        #: What ``find_task`` answered, by name (``None``: not found); several lanes ask at once.
        self._found: dict[str, Target | None] = {}
        self._found_lock = threading.Lock()
        self._handlers = {
            queue: Target(h, is_async_handler(h), max_result_bytes=max_result_bytes)
            for queue, h in handlers.items()
        }
        self._tasks = {
            name: Target(
                _task_call(task),
                task.is_async,
                task=name,
                retry=task.retry,
                max_result_bytes=max_result_bytes,
            )
            for name, task in (tasks or {}).items()
        }
        self._task_queues: dict[str, list[Target]] = {}
        for name, task in (tasks or {}).items():
            self._task_queues.setdefault(task.queue, []).append(self._tasks[name])
        #: The lane each queue is claimed for: its handler's, else threads if one of its tasks
        #: is sync, else the event loop.
        self.queue_lanes: dict[str, Lane] = {}
        self._mixed: set[str] = set()
        for queue in [*self._handlers, *(q for q in self._task_queues if q not in self._handlers)]:
            targets = [
                *([self._handlers[queue]] if queue in self._handlers else []),
                *self._task_queues.get(queue, []),
            ]
            lanes = {_lane(t) for t in targets}
            if queue in self._handlers:
                self.queue_lanes[queue] = _lane(self._handlers[queue])
            else:
                self.queue_lanes[queue] = Lane.THREADS if Lane.THREADS in lanes else Lane.ASYNC
            if len(lanes) > 1:
                self._mixed.add(queue)
        #: Every lane some target runs in.
        self.lanes = {_lane(t) for t in [*self._handlers.values(), *self._tasks.values()]}

    def async_names(self) -> list[str]:
        """The queues of async handlers and the names of async tasks (transaction mode's
        refusal names them)."""
        return [
            *(repr(q) for q, t in self._handlers.items() if t.is_async),
            *(f"task {n!r}" for n, t in self._tasks.items() if t.is_async),
        ]

    def target(self, job: JobContext) -> Target:
        """What runs ``job``: its task, or its queue's handler, or a target that fails it."""
        if job.task is None:
            handler = self._handlers.get(job.queue)
            if handler is not None:
                return handler
            return Target(_raises(NoHandlerError(job.queue)), False)
        task = self._tasks.get(job.task)
        if task is not None:
            return task
        found = None if self._find is None else self._found_target(job.task)
        if found is not None:
            return found
        return Target(_raises(UnknownTaskError(job.task, job.queue)), False)

    def _found_target(self, name: str) -> Target | None:
        """``find_task``'s task of ``name`` as a target for either lane, asked once per name."""
        assert self._find is not None
        with self._found_lock:
            if name in self._found:
                return self._found[name]
            task = self._find(name)
            target = (
                None
                if task is None
                else Target(
                    _run_anywhere(task),
                    False,
                    task=name,
                    retry=task.retry,
                    max_result_bytes=self._max,
                )
            )
            self._found[name] = target
            return target

    def lane_of(self, job: JobContext, claimed_for: Lane) -> Lane:
        """The lane ``job`` runs in; a job that cannot run stays where it was claimed for."""
        known = self._handlers.get(job.queue) if job.task is None else self._tasks.get(job.task)
        return claimed_for if known is None else _lane(known)

    def split(self, lane: Lane, jobs: list[JobContext]) -> list[tuple[Lane, list[JobContext]]]:
        """The jobs of one claim (one queue) by the lane each runs in: as claimed, unless the
        queue is mixed."""
        if not jobs or jobs[0].queue not in self._mixed:
            return [(lane, jobs)]
        by_lane: dict[Lane, list[JobContext]] = {}
        for job in jobs:
            by_lane.setdefault(self.lane_of(job, lane), []).append(job)
        return list(by_lane.items())


def registry_tasks(handlers: object) -> Mapping[str, Task[..., Any]]:
    """The tasks of a :class:`pgqueue.Registry` given as a worker's (or a drain's) handlers."""
    return handlers.tasks if isinstance(handlers, Registry) else {}


def registry_finder(handlers: object) -> Callable[[str], Task[..., Any] | None] | None:
    """The ``find_task`` of a :class:`pgqueue.Registry` given as handlers (``None`` else)."""
    return handlers.find_task if isinstance(handlers, Registry) else None


def as_dispatch(handlers: Mapping[str, Handler] | Dispatch) -> Dispatch:
    """A lane's ``handlers`` argument: a :class:`Dispatch`, or a ``{queue: handler}`` mapping."""
    return handlers if isinstance(handlers, Dispatch) else Dispatch(handlers)
