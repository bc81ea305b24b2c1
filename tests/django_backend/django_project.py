"""The Django tests' helpers (a module of a name no other folder of tests/ uses: every folder
has a ``conftest``, so ``from conftest import ...`` would find another one in a full run)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent


@dataclass
class Project:
    """The test's database, as Django and as the subprocesses see it."""

    env: dict[str, str]
    tmp: Path

    def manage(self, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "manage.py", *argv],
            cwd=HERE,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def start_worker(self, *argv: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "manage.py", "pgqueue_worker", *argv],
            cwd=HERE,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )


def stop(process: subprocess.Popen[str], sig: int = signal.SIGTERM) -> str:
    """Stop a worker (bounded); its output. SIGTERM goes to the process alone (a supervisor
    forwards it to its children), SIGKILL to its whole session."""
    if process.poll() is None:
        if sig == signal.SIGKILL:
            os.killpg(process.pid, sig)
        else:
            process.send_signal(sig)
    try:
        out, _ = process.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, _ = process.communicate(timeout=10)
    return out or ""


#: Fast workers: a short poll, and a lease (the reaper runs every half lease) for the kill test.
FAST = ("--poll-interval", "0.2s", "--lease", "2s", "--concurrency", "2")


def wait_until(check: Callable[[], Any], timeout: float = 60, worker: Any = None) -> Any:
    """``check()`` once true (bounded); a worker that exited meanwhile fails at once."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        if worker is not None and worker.poll() is not None:
            raise AssertionError(f"the worker exited: {stop(worker)}")
        time.sleep(0.05)
    raise AssertionError(f"not true within {timeout} s")


def finished(task: Any, result_id: str) -> Callable[[], Any]:
    def check() -> Any:
        got = task.get_result(result_id)
        return got if got.is_finished else None

    return check


def failing_view() -> None:
    """A view that writes a row, enqueues a task, then fails: its transaction rolls back."""
    from django.db import transaction
    from djapp import tasks
    from djapp.models import Note

    with transaction.atomic():
        Note.objects.create(text="rolled back")
        tasks.add.enqueue(1, 2)
        raise RuntimeError("the view fails")
