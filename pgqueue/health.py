"""HTTP health probes for orchestrators: ``GET /livez`` and ``GET /readyz``.

A :class:`HealthServer` answers from the standard library's :mod:`http.server`, in a thread of
its own, for anything that implements :class:`Probe` (a :class:`pgqueue.Worker`, or the
supervisor of ``pgqueue worker --processes N``). Both paths answer 200 or 503 with a short JSON
body naming each check, e.g. ``{"status": "fail", "checks": {"listener": "not connected"}}``.

- ``/livez``: the worker's loops (claimer, completer, heartbeat) are waiting or made progress
  within ``stuck_after``; 503 once one is stuck in one step or its thread died. Restart on it.
- ``/readyz``: the database answers and, with LISTEN on, the listener is connected. Take the
  worker out of rotation (or hold a rollout) on it; restarting does not help a database outage.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Protocol

from sqlalchemy import Engine, text

from pgqueue._base.urls import error_line
from pgqueue._base.validation import check_port

log = logging.getLogger("pgqueue.health")

#: Default host of :class:`HealthServer`: the pod or machine itself, never the network.
DEFAULT_HOST = "127.0.0.1"
#: Seconds :func:`check_database` waits for ``SELECT 1``.
DATABASE_TIMEOUT = 2.0
OK = "ok"


@dataclass(frozen=True)
class Health:
    """The answer of one probe: healthy or not, and each check's ``"ok"`` or its problem.

    .. versionadded:: 0.1.0
    """

    ok: bool
    checks: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, checks: Mapping[str, str]) -> Health:
        """Healthy when every check says ``"ok"``."""
        return cls(all(v == OK for v in checks.values()), dict(checks))

    def as_dict(self) -> dict[str, object]:
        """``{"status": "ok"|"fail", "checks": {...}}``, the JSON body of a probe."""
        return {"status": OK if self.ok else "fail", "checks": dict(self.checks)}


class Probe(Protocol):
    """What a :class:`HealthServer` asks: :class:`pgqueue.Worker` implements it.

    .. versionadded:: 0.1.0
    """

    def liveness(self) -> Health: ...

    def readiness(self) -> Health: ...


def check_database(engine: Engine, timeout: float = DATABASE_TIMEOUT) -> str:
    """``"ok"`` when ``SELECT 1`` through ``engine`` answers within ``timeout`` seconds.

    The query runs on a thread of its own, so a pool with no free connection or a server that
    accepts but never answers makes the probe fail after ``timeout`` instead of hanging it.

    .. versionadded:: 0.1.0
    """
    answer: list[str] = []

    def ping() -> None:
        try:
            with engine.connect() as conn:
                conn.execute(text("SELECT 1"))
            answer.append(OK)
        except Exception as exc:
            answer.append(error_line(exc))

    thread = threading.Thread(target=ping, name="pgqueue-health-ping", daemon=True)
    thread.start()
    thread.join(timeout)
    return answer[0] if answer else f"no answer within {timeout:g}s"


class HealthServer:
    """Serves ``/livez`` and ``/readyz`` for ``probe`` on ``host:port`` in a daemon thread.

    Args:
        probe: Any :class:`Probe`, e.g. a :class:`pgqueue.Worker`.
        host: Address to bind. Default ``127.0.0.1`` (kubelet probes a pod's own address: use
            ``0.0.0.0`` in a container).
        port: TCP port; 0 picks a free one (see :attr:`port`). Default 0.

    Use it as a context manager, or :meth:`start` and :meth:`stop`. ``Worker(health_port=...)``
    starts one for the worker's ``run()``.

    .. versionadded:: 0.1.0
    """

    def __init__(self, probe: Probe, *, host: str = DEFAULT_HOST, port: int = 0) -> None:
        check_port("health_port", port)
        self.probe = probe
        self._server = ThreadingHTTPServer((host, port), _handler_for(probe))
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="pgqueue-health", daemon=True
        )

    @property
    def port(self) -> int:
        """The bound port (the chosen one when created with ``port=0``)."""
        return int(self._server.server_address[1])

    @property
    def host(self) -> str:
        return str(self._server.server_address[0])

    def start(self) -> HealthServer:
        self._thread.start()
        log.info("health probes on http://%s:%d/livez and /readyz", self.host, self.port)
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join(5.0)
        self._server.server_close()

    def __enter__(self) -> HealthServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _handler_for(probe: Probe) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/livez":
                health = probe.liveness()
            elif path == "/readyz":
                health = probe.readiness()
            else:
                self._send(404, {"status": "fail", "checks": {"path": "use /livez or /readyz"}})
                return
            self._send(200 if health.ok else 503, health.as_dict())

        def _send(self, code: int, body: dict[str, object]) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            log.debug("%s %s", self.address_string(), format % args)

    return Handler
