"""Run the ``pgqueue`` command inside the test process, as if it were a fresh one.

A cold ``python -m pgqueue`` costs about a second on a busy machine, most of it importing
SQLAlchemy, psycopg and alembic again; the CLI tiers make about 150 calls. :func:`run_main` calls
:func:`pgqueue.cli.main` directly instead and gives each call what a fresh process would have,
putting back afterwards everything the call changed:

- **output**: ``sys.stdout`` and ``sys.stderr`` are buffers for the call (the commands write
  through them at call time, and so do the worker's log handler and Python's last-resort one);
- **exit code**: what ``main`` returns, or the code of the ``SystemExit`` it raises (argparse's
  errors and ``--help``/``--version``; a message as the code is printed and exits 1, as Python
  does); an exception ``main`` lets through is a traceback on stderr and exit code 1;
- **environment**: ``PGQUEUE_DATABASE_URL`` removed unless ``env`` sets it, ``env`` applied (a
  ``TZ`` in it takes effect), ``COLUMNS`` 80 unless set (argparse wraps its usage as it does
  when stdout is a pipe), every variable restored afterwards;
- **directory and imports**: ``cwd`` entered and left; the directory leads ``sys.path`` as it does
  under ``python -m``; ``sys.path`` restored, and every module the call imported from a directory
  that was not on ``sys.path`` before it (an app a test wrote to ``tmp_path``, a ``--task``
  target) leaves ``sys.modules``, so the next call imports its own module of that name;
- **logging**: the root logger has no handler and level WARNING during the call (pytest's capture
  handlers set aside), so ``logging.basicConfig`` in ``pgqueue worker`` and the last-resort
  handler write to the call's stderr; afterwards pytest's handlers, every logger's level,
  handlers, propagation and the ``logging.disable`` level are as they were (a logger first
  made during the call keeps only a ``NullHandler``, which libraries add when imported);
- **signals**: the handlers of SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 restored;
- **threads**: every thread the call started must have ended (each gets a few seconds to): a
  command that leaves one running does not fit in a process shared with other tests;
- **connections**: the engines the call connected are disposed, as a process exit would close
  their connections (``pgqueue worker`` leaves its engine to the process).

Warnings keep the suite's filters (errors): a warning the command raises fails the test rather
than printing a line a fresh process would print. Commands that serve until a signal (``web``, a
worker without ``--burst``) or start processes (``--processes``) are tested as real processes:
:func:`run_process`.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
import weakref
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, event

import pgqueue
from pgqueue.cli import main
from pgqueue.cli.common import ENV_URL

#: The signals a command may install handlers for; each is put back after the call.
SIGNALS = tuple(
    getattr(signal, name)
    for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2")
    if hasattr(signal, name)
)
#: Seconds a thread the call started gets to end once the call returned.
THREAD_GRACE = 10.0
#: Seconds a real process may take (:func:`run_process`).
PROCESS_TIMEOUT = 120


@dataclass
class Result:
    """What one run of ``pgqueue`` left behind."""

    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


def run_main(
    *args: str, env: Mapping[str, str] | None = None, cwd: str | os.PathLike[str] | None = None
) -> Result:
    """``pgqueue ARGS`` through :func:`pgqueue.cli.main`, in this process (see the module)."""
    out, err = io.StringIO(), io.StringIO()
    with (
        _fresh_process(env, cwd, args),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        code = _exit_code(list(args))
    return Result(code, out.getvalue(), err.getvalue())


def run_process(
    *args: str,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    command: tuple[str, ...] = (sys.executable, "-m", "pgqueue"),
) -> Result:
    """``command ARGS`` as a real process (default ``python -m pgqueue``), with
    ``PGQUEUE_DATABASE_URL`` unset unless ``env`` sets it."""
    full_env = {k: v for k, v in os.environ.items() if k != ENV_URL}
    full_env.update(env or {})
    proc = subprocess.run(
        [*command, *args],
        capture_output=True,
        text=True,
        timeout=PROCESS_TIMEOUT,
        env=full_env,
        cwd=cwd,
        check=False,
    )
    return Result(proc.returncode, proc.stdout, proc.stderr)


def _exit_code(argv: list[str]) -> int:
    """``main(argv)`` with the exit code a process would end with."""
    try:
        return main(argv)
    except SystemExit as exc:
        if exc.code is None:
            return 0
        if isinstance(exc.code, int):
            return exc.code
        sys.stderr.write(f"{exc.code}\n")
        return 1
    except Exception:  # uncaught: the interpreter would print it and exit 1
        sys.stderr.write(traceback.format_exc())
        return 1


@contextlib.contextmanager
def _fresh_process(
    env: Mapping[str, str] | None, cwd: str | os.PathLike[str] | None, args: tuple[str, ...]
) -> Iterator[None]:
    with contextlib.ExitStack() as stack:
        stack.enter_context(_environment(env))
        stack.enter_context(_directory_and_imports(cwd))
        stack.enter_context(_argv(args))
        stack.enter_context(_logging())
        stack.enter_context(_signals())
        stack.enter_context(_engines())  # disposed once the threads that may use them ended
        stack.enter_context(_threads())
        yield


@contextlib.contextmanager
def _environment(env: Mapping[str, str] | None) -> Iterator[None]:
    saved = dict(os.environ)
    os.environ.pop(ENV_URL, None)
    os.environ.setdefault("COLUMNS", "80")  # argparse's width when stdout is a pipe, not a tty
    os.environ.update(env or {})
    tz_changed = os.environ.get("TZ") != saved.get("TZ")
    if tz_changed:
        time.tzset()
    try:
        yield
    finally:
        for key in set(os.environ) - set(saved):
            del os.environ[key]
        for key, value in saved.items():
            if os.environ.get(key) != value:
                os.environ[key] = value
        if tz_changed or os.environ.get("TZ") != saved.get("TZ"):
            time.tzset()


@contextlib.contextmanager
def _directory_and_imports(cwd: str | os.PathLike[str] | None) -> Iterator[None]:
    before_dir = os.getcwd()
    path, modules = list(sys.path), set(sys.modules)
    importer_cache = set(sys.path_importer_cache)
    if cwd is not None:
        os.chdir(cwd)
    sys.path.insert(0, os.getcwd())  # what `python -m` puts first
    importlib.invalidate_caches()  # files a test just wrote
    try:
        yield
    finally:
        os.chdir(before_dir)
        known = [Path(p or before_dir).resolve() for p in path]
        for name in set(sys.modules) - modules:
            if not _found_in(sys.modules[name], known):
                del sys.modules[name]
        sys.path[:] = path
        for key in set(sys.path_importer_cache) - importer_cache:
            del sys.path_importer_cache[key]


def _found_in(module: object, known: list[Path]) -> bool:
    """Whether ``module`` comes from one of the ``known`` directories (or from no file at all:
    built-in, frozen)."""
    files = [getattr(module, "__file__", None), *list(getattr(module, "__path__", None) or [])]
    places = [Path(f).resolve() for f in files if isinstance(f, str)]
    return not places or any(place.is_relative_to(root) for place in places for root in known)


@contextlib.contextmanager
def _argv(args: tuple[str, ...]) -> Iterator[None]:
    saved = sys.argv
    sys.argv = [str(Path(pgqueue.__file__).with_name("__main__.py")), *args]
    try:
        yield
    finally:
        sys.argv = saved


@contextlib.contextmanager
def _logging() -> Iterator[None]:
    root = logging.getLogger()
    saved = {
        logger: (logger.level, list(logger.handlers), logger.propagate, logger.disabled)
        for logger in _loggers()
    }
    disabled = root.manager.disable
    for handler in list(root.handlers):
        root.removeHandler(handler)
    root.setLevel(logging.WARNING)
    logging.disable(logging.NOTSET)
    try:
        yield
    finally:
        logging.disable(disabled)
        for logger in _loggers():
            if logger in saved:
                level, handlers, logger.propagate, logger.disabled = saved[logger]
            else:  # a library imported by the call keeps the NullHandler it gave itself
                level = logging.NOTSET
                handlers = [h for h in logger.handlers if isinstance(h, logging.NullHandler)]
            for handler in logger.handlers:
                if handler not in handlers:
                    handler.close()
            logger.handlers[:] = handlers
            logger.setLevel(level)


def _loggers() -> list[logging.Logger]:
    root = logging.getLogger()
    named = root.manager.loggerDict.values()
    return [root, *(v for v in named if isinstance(v, logging.Logger))]


@contextlib.contextmanager
def _signals() -> Iterator[None]:
    saved = {sig: signal.getsignal(sig) for sig in SIGNALS}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def _threads() -> Iterator[None]:
    before = set(threading.enumerate())
    yield
    deadline = time.monotonic() + THREAD_GRACE
    for thread in set(threading.enumerate()) - before:
        thread.join(max(0.0, deadline - time.monotonic()))
    left = [t.name for t in set(threading.enumerate()) - before]
    assert not left, f"the command left threads running: {left}"


@contextlib.contextmanager
def _engines() -> Iterator[None]:
    connected: weakref.WeakSet[Engine] = weakref.WeakSet()

    def on_connect(connection: Connection) -> None:
        connected.add(connection.engine)

    event.listen(Engine, "engine_connect", on_connect)
    try:
        yield
    finally:
        event.remove(Engine, "engine_connect", on_connect)
        for engine in list(connected):
            engine.dispose()
