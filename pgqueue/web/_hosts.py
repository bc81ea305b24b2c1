"""Which ``Host`` a request may name, and which ``Origin`` may change something (DNS rebinding).

A page of ``attacker.example`` whose name the attacker re-points at 127.0.0.1 reaches a dashboard
bound there with ``Host: attacker.example``, and to the browser it is the attacker's own origin: it
may read the pages (and their CSRF tokens) and post the forms. So every request must name an
allowed host (else 400, before any page, cookie or token is made), and a state-changing request
whose ``Origin`` (or, without one, ``Referer``) is another site's is refused (403) whatever token
it carries.

Host names are compared, never ports (``Host`` includes the port; any port of an allowed name is
allowed). Always allowed: ``localhost``, ``127.0.0.1``, ``::1`` and the address the request came
in on (the ASGI ``server``, the bound address), which a rebinding page cannot name: its ``Host`` is
its own domain. A request without ``Host`` (HTTP/1.0) is no browser's: it passes the host check.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from urllib.parse import urlsplit

from pgqueue.errors import InvalidArgumentError, InvalidArgumentTypeError
from pgqueue.web._asgi import ASGIApp, Receive, Scope, Send

#: Names every dashboard answers to: this machine, whatever address it was bound to.
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")
#: ``allowed_hosts=["*"]``: answer any ``Host`` (the parent app or a proxy checks it).
ANY_HOST = "*"
#: Methods that change nothing: the only ones an ``Origin`` of another site may send.
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_DEFAULT_PORTS = {"http": 80, "https": 443}


def normalize_host(name: str) -> str:
    """``Example.COM.`` -> ``example.com``, ``[::1]`` -> ``::1``: how names are compared."""
    name = name.strip().lower()
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    return name.removesuffix(".")


def check_allowed_hosts(value: object) -> tuple[str, ...]:
    """``allowed_hosts`` as normalized names: host names or addresses (``queue.example.com``,
    ``10.0.0.5``, ``[::1]``), ``*.example.com`` for its subdomains, or ``*`` for any host; no
    scheme, port or path."""
    if value is None:
        return ()
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise InvalidArgumentTypeError("allowed_hosts", "a list of host names", value)
    names: list[str] = []
    for entry in value:
        if not isinstance(entry, str):
            raise InvalidArgumentTypeError("allowed_hosts", "a list of host names (str)", entry)
        name = normalize_host(entry)
        if name != ANY_HOST and not _is_host_name(name.removeprefix("*.")):
            raise InvalidArgumentError(
                "allowed_hosts",
                f"{entry!r} is not a host name: give the name alone, without scheme, port or "
                "path (queue.example.com, *.example.com, 10.0.0.5, [::1] or *)",
            )
        names.append(name)
    return tuple(names)


def _is_host_name(name: str) -> bool:
    if ":" in name:
        try:
            ipaddress.IPv6Address(name)
        except ValueError:
            return False
        return True
    return bool(name) and not any(c in name for c in "/@?#*[] \t\\")


def _matches(name: str, patterns: Iterable[str]) -> bool:
    for pattern in patterns:
        if pattern in (ANY_HOST, name):
            return True
        if pattern.startswith("*.") and name.endswith(pattern[1:]):
            return True
    return False


def _split_host(header: str) -> tuple[str, int | None] | None:
    """``Host`` as (normalized name, port), or ``None`` when it is not a host."""
    try:
        parts = urlsplit("//" + header)
        hostname, port = parts.hostname, parts.port
    except ValueError:
        return None
    if not hostname or parts.path or parts.query or parts.fragment or parts.username:
        return None
    return normalize_host(hostname), port


def _same_port(origin_port: int | None, scheme: str, host_port: int | None) -> bool:
    """An ``Origin`` without a port (or with its scheme's default) matches a ``Host`` without
    one; behind a TLS proxy the request itself may be plain HTTP, so the scheme decides nothing
    more."""
    if origin_port == _DEFAULT_PORTS.get(scheme):
        origin_port = None
    if host_port in (80, 443):
        host_port = None
    return origin_port == host_port


class HostGuard:
    """400 for a ``Host`` that is not allowed; 403 for a state-changing request from another site.

    ``allowed`` are the names given to :func:`pgqueue.web.create_app` (normalized): each is
    allowed as a ``Host``, and as the host of an ``Origin`` (a proxy may pass the public name in
    ``Origin`` and its own upstream address in ``Host``). Otherwise an ``Origin`` must be the very
    host and port the request names in ``Host``. A state-changing request with neither ``Origin``
    nor ``Referer`` (a script, curl) passes here; it still needs its form's CSRF token.
    """

    def __init__(self, app: ASGIApp, *, allowed: tuple[str, ...]) -> None:
        self.app = app
        self._allowed = allowed
        self._names = tuple(name for name in allowed if name != ANY_HOST)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        raw_host = headers.get(b"host")
        host = None if raw_host is None else _split_host(raw_host.decode("latin-1"))
        if raw_host is not None and (host is None or not self._host_allowed(host[0], scope)):
            await _refuse(
                scope,
                send,
                400,
                "400: this dashboard does not answer to that Host name; allow it with "
                "pgqueue web --allowed-host NAME or create_app(allowed_hosts=[...])\n",
            )
            return
        method = str(scope.get("method", "GET")).upper()
        if scope["type"] == "http" and method not in SAFE_METHODS:
            source = headers.get(b"origin", headers.get(b"referer"))
            if source is not None and not self._same_site(source.decode("latin-1"), host):
                await _refuse(
                    scope,
                    send,
                    403,
                    "403: this request comes from another site's page (its Origin or Referer "
                    "is not this dashboard's); nothing was changed\n",
                )
                return
        await self.app(scope, receive, send)

    def _host_allowed(self, name: str, scope: Scope) -> bool:
        if name in LOOPBACK_HOSTS or _matches(name, self._allowed):
            return True
        server = scope.get("server")
        bound = server[0] if server else None
        return isinstance(bound, str) and normalize_host(bound) == name

    def _same_site(self, source: str, host: tuple[str, int | None] | None) -> bool:
        try:
            parts = urlsplit(source)
            hostname, port = parts.hostname, parts.port
        except ValueError:
            return False
        # ``Origin: null`` (a sandboxed frame, a privacy redirect) has no host: never ours.
        if parts.scheme not in _DEFAULT_PORTS or not hostname:
            return False
        name = normalize_host(hostname)
        if _matches(name, self._names):
            return True
        return host is not None and name == host[0] and _same_port(port, parts.scheme, host[1])


async def _refuse(scope: Scope, send: Send, status: int, body: str) -> None:
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 1008})
        return
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"cache-control", b"no-store"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body.encode()})
