"""The test project's tasks (imported by the worker as each app's ``tasks`` module)."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from pathlib import Path
from typing import Any

from django.core.mail import send_mail

from djapp.models import Note
from pgqueue import RetryPolicy

try:
    from django.tasks import task
except ImportError:
    from django_tasks import task


@task
def email_users(emails: list[str], subject: str, message: str) -> int:
    """Django's documented example."""
    return send_mail(subject=subject, message=message, from_email=None, recipient_list=emails)


@task(takes_context=True)
def email_users_with_context(
    context: Any, emails: list[str], subject: str, message: str
) -> dict[str, Any]:
    """Django's documented ``takes_context`` example, returning what it printed."""
    line = f"Attempt {context.attempt}: sending email to {len(emails)} users"
    sent = send_mail(subject=subject, message=message, from_email=None, recipient_list=emails)
    return {"line": line, "sent": sent}


@task
def add(a: int, b: int) -> int:
    return a + b


@task
def count_notes() -> int:
    return Note.objects.count()


@task(queue_name="emails")
def shout(text: str) -> str:
    return text.upper()


@task(takes_context=True)
def attempt_of(context: Any, tag: str) -> dict[str, Any]:
    return {"attempt": context.attempt, "id": context.task_result.id, "tag": tag}


#: A fast retry policy, passed through @task to pgqueue (its default backs off from 10 s).
@task(takes_context=True, max_attempts=5, retry=RetryPolicy(base=0.05, cap=0.2))
def flaky(context: Any) -> int:
    """Fails on its first two attempts, then returns the attempt number."""
    if context.attempt < 3:
        raise RuntimeError(f"attempt {context.attempt} fails")
    return context.attempt


@task(max_attempts=2, retry=RetryPolicy(base=0.05, cap=0.2))
def always_fails() -> None:
    raise ValueError("never works")


@task
def wait_for_file(marker: str, release: str) -> str:
    """Writes ``marker`` with its pid, then waits (bounded) until ``release`` exists."""
    Path(marker).write_text(str(os.getpid()))
    deadline = time.monotonic() + 60
    while not Path(release).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return "released"


@task
def record(path: str, tag: str) -> str:
    """Appends ``tag`` to a file: the order tasks ran in."""
    with open(path, "a") as out:
        out.write(tag + "\n")
    return tag


@task
async def async_loop_name(tag: str) -> dict[str, Any]:
    """Where it runs: the thread of the worker's event loop, and a Django query from there."""
    await asyncio.sleep(0)
    notes = await Note.objects.acount()
    return {"thread": threading.current_thread().name, "notes": notes, "tag": tag}


def _log_signal(kind: str) -> Any:
    def receiver(sender: Any, task_result: Any, **kwargs: Any) -> None:
        with open(os.environ["DJAPP_SIGNAL_LOG"], "a") as out:
            out.write(f"{kind} {task_result.id} {task_result.status}\n")

    return receiver


if os.environ.get("DJAPP_SIGNAL_LOG"):  # the worker's signals, written where a test reads them
    try:
        from django.tasks.signals import task_finished, task_started
    except ImportError:
        from django_tasks.signals import task_finished, task_started
    _STARTED, _FINISHED = _log_signal("started"), _log_signal("finished")
    task_started.connect(_STARTED)
    task_finished.connect(_FINISHED)
