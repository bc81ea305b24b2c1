"""Import each module of a package as if it were the first import of a fresh interpreter.

Run as a script (``python import_alone.py``) with a JSON request on stdin::

    {"package": "pgqueue", "modules": [...], "preload": [...], "path": [...]}

and it answers on stdout::

    {"loaded_by_package": [...], "checked": [...], "failures": {module: "Error: message"}}

How, and why it is the same check as one interpreter per module, in a fraction of the time:

1. The process puts ``path`` first on ``sys.path`` and imports every ``preload`` module it can:
   the standard library and third-party modules the package imports, never the package itself
   (checked: it exits 2 if one was loaded). They are what makes a cold interpreter slow, and
   they would be imported the same way in a fresh one, only later: the package's own import
   order, which alone decides whether a circle among its modules bites, is untouched.
2. A forked child imports ``package`` alone (a failure there is the package's) and notes the
   package's modules that import loaded (``loaded_by_package``).
3. ``import package.x`` in a fresh interpreter first runs ``import package`` to its end, so the
   import of ``x`` itself always starts from the state that child is in. For every module that
   import did not load, the child forks a grandchild that imports it and reports on a pipe
   (``checked``, and ``failures`` by module: the exception's last line).

This file imports only the standard library.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import json
import os
import sys
import traceback
from collections.abc import Callable

Answer = dict[str, object]


def _error_line(exc: BaseException) -> str:
    return traceback.format_exception_only(type(exc), exc)[-1].strip()


def _of(package: str) -> list[str]:
    """The package's modules loaded now."""
    return sorted(m for m in sys.modules if m == package or m.startswith(f"{package}."))


def _fork(work: Callable[[], Answer]) -> tuple[int, int]:
    """``work()`` in a forked child that sends its answer (JSON) on a pipe: (pid, read end)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child; stdout is the answer of the process, so its prints go to stderr
        os.close(read)
        os.dup2(2, 1)
        code = 0
        try:
            message = json.dumps(work()).encode()
            with os.fdopen(write, "wb") as pipe:
                pipe.write(message)
        except BaseException:
            traceback.print_exc()
            code = 1
        os._exit(code)
    os.close(write)
    return pid, read


def _answer(pid: int, read: int) -> Answer:
    """What the child sent, once it exited."""
    with os.fdopen(read, "rb") as pipe:
        data = pipe.read()
    _, status = os.waitpid(pid, 0)
    if not data:
        return {"error": f"the child died (exit code {os.waitstatus_to_exitcode(status)})"}
    answer: Answer = json.loads(data)
    return answer


def _import(module: str) -> Answer:
    """In a child: import ``module``; whatever it raises (``SystemExit`` too) is its failure."""
    try:
        importlib.import_module(module)
    except BaseException as exc:
        return {"error": _error_line(exc)}
    return {"error": None}


def check(package: str, modules: list[str], jobs: int) -> Answer:
    """In the child of step 2: import the package, then each module it did not load, each in a
    grandchild of its own, ``jobs`` at a time."""
    first = _import(package)
    if first["error"] is not None:
        return {"loaded_by_package": [], "checked": [], "failures": {package: first["error"]}}
    loaded = _of(package)
    todo = [m for m in modules if m not in loaded]
    failures: dict[str, object] = {}
    pending: list[str] = list(todo)
    running: list[tuple[str, int, int]] = []
    while pending or running:
        while pending and len(running) < jobs:
            module = pending.pop(0)
            running.append((module, *_fork(functools.partial(_import, module))))
        module, pid, read = running.pop(0)
        error = _answer(pid, read)["error"]
        if error is not None:
            failures[module] = error
    return {"loaded_by_package": loaded, "checked": todo, "failures": failures}


def main() -> int:
    request = json.load(sys.stdin)
    package: str = request["package"]
    sys.path[:0] = request.get("path", [])
    for name in request.get("preload", []):
        # An optional library that is missing fails again, the same way, where it is imported.
        with contextlib.suppress(Exception):
            importlib.import_module(name)
    if _of(package):
        sys.stderr.write(f"preloading imported the package itself: {_of(package)}\n")
        return 2
    jobs = max(2, os.cpu_count() or 2)
    answer = _answer(*_fork(lambda: check(package, request["modules"], jobs)))
    if "error" in answer:
        sys.stderr.write(f"{answer['error']}\n")
        return 1
    json.dump(answer, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
