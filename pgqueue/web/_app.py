"""The dashboard's ASGI app: routes, middleware and settings put together."""

from __future__ import annotations

import logging
import secrets
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from pgqueue._base.urls import error_line
from pgqueue.errors import InvalidArgumentError, InvalidArgumentTypeError
from pgqueue.web import _actions, _pages
from pgqueue.web._auth import BasicAuth, parse_credentials
from pgqueue.web._headers import SecurityHeaders
from pgqueue.web._hosts import HostGuard, check_allowed_hosts
from pgqueue.web._render import Settings, error_page
from pgqueue.web._snapshot import OverviewSource

log = logging.getLogger("pgqueue.web")

STATIC = Path(__file__).parent / "static"
#: Default seconds between two refreshes of the overview in the browser.
DEFAULT_REFRESH_S = 5.0
#: Default age past which the doctor reports a transaction as long.
DEFAULT_IDLE_THRESHOLD = timedelta(seconds=5)


def _routes() -> list[Route | Mount]:
    return [
        Route("/", _pages.overview, name="overview"),
        Route("/live", _pages.overview_live, name="overview_live"),
        Route("/jobs", _pages.jobs, name="jobs"),
        Route("/jobs/bulk", _actions.jobs_bulk, methods=["POST"], name="jobs_bulk"),
        Route("/workers", _pages.workers, name="workers"),
        # :int matches digits only: /jobs/abc is a 404, never a query with a bad id.
        Route("/jobs/{job_id:int}", _pages.job, name="job"),
        Route("/jobs/{job_id:int}/graph", _pages.job_graph, name="job_graph"),
        Route("/jobs/{job_id:int}/retry", _actions.job_retry, methods=["POST"], name="job_retry"),
        Route(
            "/jobs/{job_id:int}/cancel", _actions.job_cancel, methods=["POST"], name="job_cancel"
        ),
        # :path, so a queue name may hold a slash (percent-encoded in the links).
        Route(
            "/queues/{queue:path}/retry-failed",
            _actions.queue_retry_failed,
            methods=["POST"],
            name="queue_retry_failed",
        ),
        Route(
            "/queues/{queue:path}/purge",
            _actions.queue_purge,
            methods=["POST"],
            name="queue_purge",
        ),
        Route(
            "/queues/{queue:path}/pause",
            _actions.queue_pause,
            methods=["POST"],
            name="queue_pause",
        ),
        Route(
            "/queues/{queue:path}/resume",
            _actions.queue_resume,
            methods=["POST"],
            name="queue_resume",
        ),
        Route(
            "/queues/{queue:path}/limits",
            _actions.queue_limits,
            methods=["POST"],
            name="queue_limits",
        ),
        # After the POST routes: a GET of their paths is this page of a queue so named.
        Route("/queues/{queue:path}", _pages.queue, name="queue"),
        Route("/periodic", _pages.periodic, name="periodic"),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if request.method not in ("GET", "HEAD") and settings_read_only(request):
        # Read-only: every POST is a 403, whatever the path.
        return error_page(request, 403, "This dashboard is read-only: it changes nothing.")
    problem = {404: "No such page.", 405: "Method not allowed here."}.get(exc.status_code)
    return error_page(request, exc.status_code, problem or str(exc.detail))


def settings_read_only(request: Request) -> bool:
    return bool(request.app.state.pgqueue.read_only)


async def _database_error(request: Request, exc: Exception) -> Response:
    """503 with the error's first line, passwords masked; the full error goes to the log."""
    orig = getattr(exc, "orig", None) or exc
    log.error("database error on %s %s: %s", request.method, request.url.path, error_line(orig))
    return error_page(request, 503, f"Database error: {error_line(orig)}")


def create_app(
    engine: Engine,
    *,
    read_only: bool = False,
    auth: tuple[str, str] | str | None = None,
    refresh_seconds: float = DEFAULT_REFRESH_S,
    secret: bytes | None = None,
    idle_threshold: timedelta = DEFAULT_IDLE_THRESHOLD,
    allowed_hosts: Sequence[str] | None = None,
    show_raw_values: bool = False,
) -> Starlette:
    """The dashboard as an ASGI app, to serve alone or mount under a prefix.

    Args:
        engine: A sync SQLAlchemy engine on pgqueue's database (with :func:`pgqueue.use_schema`
            and a ``search_path`` leading with the schema when pgqueue lives in one). The app
            never disposes it: the caller owns it.
        read_only: Show no action and answer every POST with 403. Default ``False``.
        auth: ``"USER:PASSWORD"`` or ``(user, password)``: HTTP basic auth on every route,
            static files included (401 otherwise). Default ``None``: no auth, so keep the
            default ``127.0.0.1`` bind or your service's own auth in front.
        refresh_seconds: How often an open overview refreshes itself (default 5).
        secret: Key of the CSRF tokens. Default: random per app, so a token is valid only for
            the process that issued it; give every process of one service the same secret when
            a load balancer spreads a browser's requests over several.
        idle_threshold: Transactions open longer than this are reported by the doctor's
            findings on the overview (default 5 s).
        allowed_hosts: More names the ``Host`` of a request may give, each also trusted as the
            ``Origin`` of a form (``["queue.example.com"]``, ``"*.example.com"`` for its
            subdomains, ``["*"]`` for any: when your app or proxy checks ``Host`` itself).
            Always allowed: ``localhost``, ``127.0.0.1``, ``[::1]`` and the address the request
            came in on. Any other ``Host`` is answered 400 (DNS rebinding), and a POST whose
            ``Origin`` or ``Referer`` is another site's 403. Ports are not compared. Default
            none. See ``docs/web.md``.
        show_raw_values: Show every value as stored. Default ``False``: each value a page shows
            (payloads, results, errors and tracebacks, names) has its passwords masked as the
            command line masks every line (``scheme://user:***@``, ``password=***``), by the
            same function; ``True`` is for operators who must see, say, the DSN a job was given.

    .. versionadded:: 0.1.0
    """
    if not isinstance(engine, Engine):
        raise InvalidArgumentTypeError("engine", "a sync sqlalchemy Engine (create_engine)", engine)
    if not isinstance(refresh_seconds, (int, float)) or not 1 <= refresh_seconds <= 3600:
        raise InvalidArgumentError("refresh_seconds", "must be a number from 1 to 3600")
    if not isinstance(show_raw_values, bool):
        raise InvalidArgumentTypeError("show_raw_values", "bool", show_raw_values)
    if secret is not None and (not isinstance(secret, bytes) or len(secret) < 16):
        raise InvalidArgumentError("secret", "must be bytes, at least 16 of them")
    hosts = check_allowed_hosts(allowed_hosts)
    middleware = [Middleware(SecurityHeaders), Middleware(HostGuard, allowed=hosts)]
    if auth is not None:
        middleware.append(Middleware(BasicAuth, credentials=parse_credentials(auth)))
    app = Starlette(
        routes=_routes(),
        middleware=middleware,
        exception_handlers={HTTPException: _http_error, SQLAlchemyError: _database_error},
    )
    app.state.pgqueue = Settings(
        engine=engine,
        read_only=bool(read_only),
        secret=secret or secrets.token_bytes(32),
        refresh_s=float(refresh_seconds),
        show_raw_values=show_raw_values,
        overview=OverviewSource(engine, idle_threshold=idle_threshold),
    )
    return app
