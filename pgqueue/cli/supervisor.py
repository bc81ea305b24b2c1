"""The supervisor of ``pgqueue worker --processes N``: N worker processes, one command.

Each child is a fresh ``python -m pgqueue worker ...`` with the same arguments (spawned, never
forked: it imports the target and builds its own engine and :class:`pgqueue.Worker`), told by
:data:`CHILD_ENV` that it is child *k* and handed one end of a socket pair. Over it the child says
``started`` (with its health port and shutdown timeout) or the one-line error that stopped it;
the child reads the same socket only to notice that the supervisor is gone (end of file), and then
stops gracefully, so no worker outlives its supervisor.

The supervisor forwards SIGTERM/SIGINT to every child as SIGTERM (children run in sessions of
their own, so a terminal's Ctrl-C reaches them once, through it), waits for each within its
shutdown timeout plus a margin, and exits 0 after a clean stop. A child that dies is restarted
with a capped, doubling backoff; its jobs come back through the lease like any crashed worker's.
A child that fails before it started (a user error, exit code 2, at once; anything else three
times in a row) stops the supervisor with that error. PostgreSQL stays the only coordinator: the
children share nothing but the database.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from types import FrameType

from pgqueue._base.validation import check_processes
from pgqueue._worker.signals import handle_stop_signals
from pgqueue.health import OK, Health

log = logging.getLogger("pgqueue.supervisor")

#: ``<child id>:<socket fd>:<1 when the child serves health probes, else 0>``.
CHILD_ENV = "PGQUEUE_WORKER_CHILD"
#: A child's shutdown timeout until it told its own (the worker's default).
DEFAULT_SHUTDOWN_TIMEOUT = 30.0
#: Seconds a child's health probe may take before the aggregate counts it as failed.
CHILD_PROBE_TIMEOUT = 2.0


@dataclass(frozen=True)
class SupervisorOptions:
    """How the supervisor runs its children.

    Attributes:
        processes: Children to keep running: at most 4 per CPU
            (:func:`pgqueue._base.validation.max_processes`) unless ``force_bounds``.
        burst: Children drain and exit (``--burst``): one that exits 0 is done, not restarted.
        min_backoff: Seconds before the first restart of a child; doubles per restart.
        max_backoff: The cap of that backoff.
        stable_after: A child up this long had no crash loop: its backoff starts over.
        startup_failures: Failures before ``started`` in a row that stop the supervisor.
        stop_margin: Seconds beyond a child's shutdown timeout before it is killed.
        force_bounds: Take more ``processes`` than the bound (``--force-bounds``).

    Raises:
        InvalidArgumentError: ``processes`` over the bound without ``force_bounds``.
    """

    processes: int
    burst: bool = False
    min_backoff: float = 1.0
    max_backoff: float = 30.0
    stable_after: float = 60.0
    startup_failures: int = 3
    stop_margin: float = 10.0
    force_bounds: bool = False

    def __post_init__(self) -> None:
        check_processes(
            "processes", self.processes, force=self.force_bounds, forced_by="force_bounds=True"
        )


@dataclass(frozen=True)
class Exit:
    """How the supervisor ended: the exit code, and the reason when it is not 0."""

    code: int
    reason: str = ""


@dataclass
class _Child:
    """One slot and its current process. Fields the reader thread writes are under the lock."""

    id: int
    proc: subprocess.Popen[bytes] | None = None
    sock: socket.socket | None = None
    reader: threading.Thread | None = None
    spawned_at: float = 0.0
    started: bool = False
    health_port: int | None = None
    shutdown_timeout: float = DEFAULT_SHUTDOWN_TIMEOUT
    error: str | None = None
    failures: int = 0
    backoff: float = 0.0
    restart_at: float | None = None
    done: bool = False
    restarts: int = field(default=0)

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid


def describe_exit(code: int) -> str:
    """``exit code 3`` or ``killed by SIGKILL``."""
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


class Supervisor:
    """Runs ``command`` ``options.processes`` times over; implements :class:`pgqueue.health.Probe`.

    Args:
        command: The child's command line (``[python, -m, pgqueue, worker, ...]``).
        options: See :class:`SupervisorOptions`.
        health: Whether children serve health probes (the supervisor's probe asks them).
    """

    def __init__(
        self, command: Sequence[str], options: SupervisorOptions, *, health: bool = False
    ) -> None:
        self._command = list(command)
        self._opts = options
        self._health = health
        self._children = [
            _Child(i + 1, backoff=options.min_backoff) for i in range(options.processes)
        ]
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._signals = 0

    # -- the loop ---------------------------------------------------------------------------------

    def run(self) -> Exit:
        """Start the children; supervise them until a signal, a fatal error or (burst) the end."""
        restore = self._install_signals()
        fatal: Exit | None = None
        try:
            log.info(
                "supervisor started: %d worker processes%s",
                self._opts.processes,
                " (burst)" if self._opts.burst else "",
            )
            for child in self._children:
                self._spawn(child)
            while fatal is None and not self._stopping.is_set():
                self._wake.wait(0.2)
                self._wake.clear()
                now = time.monotonic()
                for child in self._children:
                    if child.proc is not None and child.proc.poll() is not None:
                        fatal = fatal or self._exited(child, now)
                    elif child.restart_at is not None and now >= child.restart_at:
                        self._spawn(child)
                if self._opts.burst and all(c.done for c in self._children):
                    log.info("supervisor: every worker process drained its queues and exited")
                    return Exit(0)
            return self._shutdown(fatal)
        finally:
            restore()
            for child in self._children:
                self._close(child)

    def _spawn(self, child: _Child) -> None:
        ours, theirs = socket.socketpair()
        env = dict(os.environ)
        env[CHILD_ENV] = f"{child.id}:{theirs.fileno()}:{int(self._health)}"
        try:
            proc = subprocess.Popen(
                self._command, env=env, pass_fds=(theirs.fileno(),), start_new_session=True
            )
        except OSError:
            ours.close()
            raise
        finally:
            theirs.close()
        with self._lock:
            child.proc, child.sock = proc, ours
            child.started, child.health_port, child.error = False, None, None
            child.restart_at, child.spawned_at = None, time.monotonic()
        child.reader = threading.Thread(
            target=self._read,
            args=(child, ours),
            name=f"pgqueue-supervisor-{child.id}",
            daemon=True,
        )
        child.reader.start()
        log.info("worker %d: started pid %d", child.id, proc.pid)

    def _read(self, child: _Child, sock: socket.socket) -> None:
        """The child's messages, one JSON object per line, until it exits."""
        with contextlib.suppress(OSError), sock.makefile("rb") as stream:
            for line in stream:
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                with self._lock:
                    if event.get("event") == "started":
                        child.started = True
                        child.health_port = event.get("health_port")
                        child.shutdown_timeout = float(
                            event.get("shutdown_timeout", DEFAULT_SHUTDOWN_TIMEOUT)
                        )
                    elif event.get("event") == "error":
                        child.error = str(event.get("message", ""))
        self._wake.set()

    def _exited(self, child: _Child, now: float) -> Exit | None:
        """A child's process ended while the supervisor runs: restart it, or stop everything."""
        assert child.proc is not None
        if child.reader is not None:
            child.reader.join(1.0)  # its last messages (an error line) first
        code, pid = child.proc.returncode, child.proc.pid
        how = describe_exit(code)
        started, error, uptime = child.started, child.error, now - child.spawned_at
        self._close(child)
        if self._opts.burst and code == 0 and started:
            child.done = True
            log.info("worker %d (pid %d): drained and exited", child.id, pid)
            return None
        if not started:
            child.failures += 1
            reason = error or f"{how} before it started (see its log above)"
            if code == 2 or child.failures >= self._opts.startup_failures:
                return Exit(
                    2 if code == 2 else 1, f"worker {child.id} failed at start-up: {reason}"
                )
            log.warning(
                "worker %d (pid %d) failed at start-up (%s); retrying in %.1fs",
                child.id,
                pid,
                reason,
                child.backoff,
            )
        else:
            child.failures = 0
            if uptime >= self._opts.stable_after:
                child.backoff = self._opts.min_backoff
            log.warning(
                "worker %d (pid %d) %s after %.0fs; restarting in %.1fs (its jobs return "
                "when their leases expire)",
                child.id,
                pid,
                how,
                uptime,
                child.backoff,
            )
        child.restart_at = now + child.backoff
        child.restarts += 1
        child.backoff = min(child.backoff * 2, self._opts.max_backoff)
        return None

    def _shutdown(self, fatal: Exit | None) -> Exit:
        """SIGTERM every child, wait for each within its shutdown timeout, kill stragglers."""
        self._stopping.set()
        t0 = time.monotonic()
        live = [c for c in self._children if c.proc is not None and c.proc.poll() is None]
        for child in live:
            assert child.proc is not None
            with contextlib.suppress(ProcessLookupError):
                child.proc.send_signal(signal.SIGTERM)
        problems: list[str] = []
        for child in self._children:
            proc = child.proc
            if proc is None:
                continue
            allowed = child.shutdown_timeout + self._opts.stop_margin
            try:
                code = proc.wait(max(0.0, t0 + allowed - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
                problems.append(
                    f"worker {child.id} (pid {proc.pid}) did not stop within {allowed:g}s: killed"
                )
                continue
            if code != 0 and child in live:
                problems.append(
                    f"worker {child.id} (pid {proc.pid}) {describe_exit(code)} while stopping"
                )
            elif child.started or code == 0:  # not one that failed at start-up, as the first did
                log.info("worker %d (pid %d): stopped", child.id, proc.pid)
        if fatal is not None:
            return fatal
        if problems:
            return Exit(1, "; ".join(problems))
        log.info("supervisor stopped: every worker process stopped cleanly")
        return Exit(0)

    def _close(self, child: _Child) -> None:
        with self._lock:
            sock, child.sock = child.sock, None
            proc, child.proc = child.proc, None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        if child.reader is not None:
            child.reader.join(1.0)
            child.reader = None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(10)

    # -- signals ----------------------------------------------------------------------------------

    def _install_signals(self) -> Callable[[], None]:

        def on_signal(signum: int, frame: FrameType | None) -> None:
            self._signals += 1
            if self._signals == 1:
                log.info("signal %d: stopping every worker process", signum)
            else:
                # The workers' own rule: a second signal means now. Pass it on.
                log.warning("second signal %d: telling every worker process to exit now", signum)
                for child in self._children:
                    if child.proc is not None and child.proc.poll() is None:
                        with contextlib.suppress(ProcessLookupError):
                            child.proc.send_signal(signal.SIGTERM)
            self._stopping.set()
            self._wake.set()

        return handle_stop_signals(on_signal)

    # -- health -----------------------------------------------------------------------------------

    def liveness(self) -> Health:
        """``/livez``: every child up and live; a restarting or starting child fails it."""
        return self._aggregate("/livez")

    def readiness(self) -> Health:
        """``/readyz``: every child up and ready."""
        if self._stopping.is_set():
            return Health.of({"supervisor": "stopping"})
        return self._aggregate("/readyz")

    def _aggregate(self, path: str) -> Health:
        if self._stopping.is_set():
            return Health(True, {"supervisor": "stopping"})
        with self._lock:
            seen = [
                (c.id, c.done, c.proc is not None, c.started, c.health_port) for c in self._children
            ]

        def one(entry: tuple[int, bool, bool, bool, int | None]) -> tuple[str, str]:
            child_id, done, running, started, port = entry
            name = f"worker-{child_id}"
            if done:
                return name, OK
            if not running:
                return name, "restarting"
            if not started or port is None:
                return name, "starting"
            return name, _ask(port, path)

        with ThreadPoolExecutor(max_workers=len(seen)) as pool:
            return Health.of(dict(pool.map(one, seen)))


def _ask(port: int, path: str) -> str:
    """``"ok"``, or what a child's probe said was wrong."""
    url = f"http://127.0.0.1:{port}{path}"
    try:
        with urllib.request.urlopen(url, timeout=CHILD_PROBE_TIMEOUT) as response:
            body = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        with exc:
            try:
                body = json.loads(exc.read())
            except ValueError:
                return f"HTTP {exc.code}"
    except (OSError, ValueError) as exc:
        return f"no answer ({exc})"
    if body.get("status") == OK:
        return OK
    failed = {k: v for k, v in dict(body.get("checks", {})).items() if v != OK}
    return ", ".join(f"{k}: {v}" for k, v in failed.items()) or "fail"


# -- the child's side ------------------------------------------------------------------------------


class ChildLink:
    """A worker process's end of the socket pair, when a supervisor started it."""

    def __init__(self, child_id: int, fd: int, health: bool) -> None:
        self.id = child_id
        self.health = health
        os.set_inheritable(fd, False)  # handlers' subprocesses must not hold it open
        self._sock = socket.socket(fileno=fd)
        self._send_lock = threading.Lock()
        self._closed = False

    @classmethod
    def from_env(cls) -> ChildLink | None:
        """The link :data:`CHILD_ENV` describes, or None for a worker started by hand."""
        value = os.environ.pop(CHILD_ENV, None)  # not inherited by what the handlers start
        if not value:
            return None
        child_id, fd, health = value.split(":")
        return cls(int(child_id), int(fd), health == "1")

    def _send(self, **event: object) -> None:
        with self._send_lock, contextlib.suppress(OSError):
            self._sock.sendall(json.dumps(event).encode() + b"\n")

    def started(self, *, health_port: int | None, shutdown_timeout: float) -> None:
        self._send(event="started", health_port=health_port, shutdown_timeout=shutdown_timeout)

    def error(self, message: str) -> None:
        self._send(event="error", message=message)

    def watch_parent(self, on_gone: Callable[[], None]) -> None:
        """Call ``on_gone`` (from a daemon thread) once the supervisor's end closes."""

        def watch() -> None:
            with contextlib.suppress(OSError):
                while self._sock.recv(1024):
                    pass
            if not self._closed:
                log.warning("the supervisor went away: stopping")
                on_gone()

        threading.Thread(target=watch, name="pgqueue-supervisor-watch", daemon=True).start()

    def close(self) -> None:
        self._closed = True
        self._sock.close()


def child_command(argv: Sequence[str]) -> list[str]:
    """The command line of a child: this interpreter running ``pgqueue`` with ``argv``."""
    return [sys.executable, "-m", "pgqueue", *argv]
