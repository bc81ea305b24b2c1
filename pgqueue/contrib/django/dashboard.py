"""pgqueue's dashboard inside a Django project's ASGI application, for staff users only.

Needs the ``web`` extra too (Starlette). In the project's ``asgi.py``::

    from django.core.asgi import get_asgi_application

    from pgqueue.contrib.django.dashboard import with_dashboard

    application = with_dashboard(get_asgi_application(), prefix="/pgqueue")

Requests under ``prefix`` go to :func:`pgqueue.web.create_app` behind :func:`staff_only`;
everything else to Django. The guard reads Django's session cookie and asks
``django.contrib.auth`` for the user, as a Django view would: an active staff user passes; anyone
else is sent to ``settings.LOGIN_URL`` (with ``?next=``), or answered 403 when logged in but not
staff. The dashboard's own CSRF check and ``Host`` allow-list stay on.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from importlib import import_module
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from asgiref.sync import sync_to_async

if TYPE_CHECKING:
    from sqlalchemy import Engine

Scope = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Any, Any], Awaitable[None]]


def _user_of(scope: Scope) -> Any:
    """The Django user of a request's session cookie (``AnonymousUser`` without one)."""
    from http.cookies import SimpleCookie

    from django.conf import settings
    from django.contrib.auth import get_user
    from django.http import HttpRequest

    request = HttpRequest()
    cookie: SimpleCookie = SimpleCookie()
    for name, value in scope.get("headers", []):
        if name == b"cookie":
            cookie.load(value.decode("latin-1"))
    request.COOKIES = {key: morsel.value for key, morsel in cookie.items()}
    store = import_module(settings.SESSION_ENGINE).SessionStore
    request.session = store(request.COOKIES.get(settings.SESSION_COOKIE_NAME))
    try:
        return get_user(request)
    finally:
        from django.db import close_old_connections

        close_old_connections()


def staff_only(app: ASGIApp) -> ASGIApp:
    """``app`` for Django's active staff users; a redirect to the login page (or 403) else."""

    async def guarded(scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        user = await sync_to_async(_user_of, thread_sensitive=True)(scope)
        if user.is_active and user.is_staff:
            await app(scope, receive, send)
            return
        if user.is_authenticated:
            await _answer(send, 403, [], b"staff only")
            return
        from django.conf import settings
        from django.shortcuts import resolve_url

        root, path = scope.get("root_path", ""), scope.get("path", "")
        # Starlette's Mount keeps the prefix in ``path`` (and names it in ``root_path``).
        target = path if path.startswith(root) else root + path
        if scope.get("query_string"):
            target += "?" + scope["query_string"].decode("latin-1")
        login = f"{resolve_url(settings.LOGIN_URL)}?next={quote(target)}"
        await _answer(send, 302, [(b"location", login.encode("latin-1"))], b"")

    return guarded


async def _answer(send: Any, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"text/plain; charset=utf-8"), *headers],
        }
    )
    await send({"type": "http.response.body", "body": body})


def dashboard(
    database: str = "default", *, engine: Engine | None = None, **options: Any
) -> ASGIApp:
    """The dashboard of ``DATABASES[database]``'s pgqueue schema, for staff only.

    ``engine``: the SQLAlchemy engine it reads through, which the caller owns (disposes);
    default: one of its own on the database's URL, with ``pool_pre_ping`` (a dashboard idles for
    hours), kept for the life of the process. ``options`` are :func:`pgqueue.web.create_app`'s
    (``read_only``, ``allowed_hosts``, ``secret``...).
    """
    from sqlalchemy import create_engine

    import pgqueue.web
    from pgqueue.contrib.django._bridge import database_url

    if engine is None:
        engine = create_engine(database_url(database), pool_pre_ping=True)
    return staff_only(pgqueue.web.create_app(engine, **options))


def with_dashboard(
    django_app: ASGIApp,
    prefix: str = "/pgqueue",
    database: str = "default",
    *,
    engine: Engine | None = None,
    **options: Any,
) -> ASGIApp:
    """Django's ASGI application with the staff-only dashboard (:func:`dashboard`) mounted at
    ``prefix``."""
    from starlette.applications import Starlette
    from starlette.routing import Mount

    inner = dashboard(database, engine=engine, **options)
    routes = [Mount(prefix.rstrip("/"), app=inner), Mount("", app=django_app)]
    return Starlette(routes=routes)
