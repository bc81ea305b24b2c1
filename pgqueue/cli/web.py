"""``pgqueue web``: serve the dashboard with uvicorn.

The web extra is imported inside :func:`cmd_web` only, so every other command (and ``import
pgqueue.cli``) works without it, and ``pgqueue web`` says which extra to install.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket

from pgqueue import admin
from pgqueue._base.distribution import pip_install
from pgqueue._base.urls import mask_url
from pgqueue.cli.common import UserError, database_url, make_engine, note, schema_arg, tcp_port
from pgqueue.errors import PgQueueError

#: ``pgqueue web --auth`` from the environment, so the password stays off the command line.
ENV_WEB_AUTH = "PGQUEUE_WEB_AUTH"


def web_port(value: str) -> int:
    """The dashboard's port: one it can print in its address, so not 0."""
    return tcp_port(value, lowest=1)


def _check_bind(host: str, port: int) -> None:
    """Fail with one line before serving when the address cannot be bound."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        family, kind, proto, _, address = infos[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(address)
    except OSError as exc:
        raise UserError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc


def _allowed_hosts(bound: str, given: list[str]) -> list[str]:
    """``--allowed-host`` names, and the bound one when it is a name (``--host box.lan``); a
    wildcard bind (``0.0.0.0``, ``::``) is no name a browser uses."""
    return [*given, *([] if bound in ("0.0.0.0", "::", "") else [bound])]


def cmd_web(args: argparse.Namespace) -> int:
    """Serve the dashboard (needs the web extra); Ctrl-C stops it."""
    try:
        import uvicorn

        import pgqueue.web
    except ImportError as exc:
        raise UserError(f"pgqueue web needs the web extra: {pip_install('web')}") from exc
    raw_auth = args.auth if args.auth is not None else os.environ.get(ENV_WEB_AUTH) or None
    try:
        auth = None if raw_auth is None else pgqueue.web.parse_credentials(raw_auth)
    except PgQueueError as exc:
        source = "--auth" if args.auth is not None else ENV_WEB_AUTH
        raise UserError(f"{source} must be USER:PASSWORD ({exc})") from exc
    url = database_url(args) or ""
    # pool_pre_ping: a dashboard idles for hours, and its pooled connections die meanwhile.
    engine = make_engine(url, schema=schema_arg(args), pool_pre_ping=True)
    try:
        with engine.connect() as conn:
            if not admin.schema_present(conn):
                raise UserError(
                    f"the database ({mask_url(url)}) has no pgqueue schema: "
                    "run `pgqueue migrate` first"
                )
        _check_bind(args.host, args.port)
        try:
            app = pgqueue.web.create_app(
                engine,
                read_only=args.read_only,
                auth=auth,
                show_raw_values=args.show_raw_values,
                allowed_hosts=_allowed_hosts(args.host, args.allowed_host),
            )
        except PgQueueError as exc:
            raise UserError(f"--allowed-host: {exc}") from exc
        mode = "read-only" if args.read_only else "writable"
        guard = ", basic auth" if auth else ", no auth"
        raw = ", raw values: passwords shown" if args.show_raw_values else ""
        note(
            f"pgqueue web: {mask_url(url)} on http://{args.host}:{args.port}/ "
            f"({mode}{guard}{raw}); Ctrl-C stops it"
        )
        if auth is None and args.host not in ("127.0.0.1", "localhost", "::1"):
            note(
                f"pgqueue web: warning: {args.host} is reachable from other machines and there is "
                f"no --auth: anyone who reaches it can retry, cancel and purge jobs"
            )
        server = uvicorn.Server(
            uvicorn.Config(app, host=args.host, port=args.port, log_level="info", lifespan="off")
        )
        # uvicorn shuts down gracefully on Ctrl-C, then raises the signal it held back.
        with contextlib.suppress(KeyboardInterrupt):
            server.run()
    finally:
        engine.dispose()
    note("pgqueue web: stopped")
    return 0
