"""Pages as responses: templates, links that hold under any mount prefix, the CSRF cookie.

Links are built from the app's own router and the request's ASGI ``root_path`` (``/queue`` when a
service mounts the dashboard there, or a proxy's prefix given to uvicorn), never from the parent
app's router, so a mount with or without a name works alike. Path values are percent-encoded: a
queue name may hold any character.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

from jinja2 import Environment, PackageLoader, StrictUndefined, pass_context
from jinja2.runtime import Context
from markupsafe import Markup, escape
from sqlalchemy import Engine
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse

from pgqueue._base.durations import format_duration
from pgqueue._base.readable import Unreadable
from pgqueue._base.urls import mask_text
from pgqueue.web import _csrf

if TYPE_CHECKING:  # the app builds the overview source; pages only read it
    from pgqueue.web._snapshot import OverviewSource


@dataclass(frozen=True)
class Settings:
    """What :func:`pgqueue.web.create_app` was given, kept in ``app.state.pgqueue``."""

    engine: Engine
    read_only: bool
    secret: bytes
    refresh_s: float
    overview: OverviewSource
    show_raw_values: bool = False


def settings(request: Request) -> Settings:
    found: Settings = request.app.state.pgqueue
    return found


def url(
    request: Request, name: str, /, query: Mapping[str, object] | None = None, **params: Any
) -> str:
    """The path of route ``name`` under this request's mount prefix, with an optional query."""
    encoded = {k: quote(v, safe="") if isinstance(v, str) else v for k, v in params.items()}
    path = request.scope.get("root_path", "").rstrip("/") + request.app.router.url_path_for(
        name, **encoded
    )
    kept = {k: str(v) for k, v in (query or {}).items() if v is not None and v != ""}
    return f"{path}?{urlencode(kept)}" if kept else path


def _age(seconds: object) -> str:
    if seconds is None:
        return "-"
    value = float(seconds)  # type: ignore[arg-type]
    for size, unit in ((86400.0, "d"), (3600.0, "h"), (60.0, "min")):
        if value >= size:
            return f"{value / size:.1f} {unit}"
    return f"{value:.0f} s"


def _when(value: object) -> str:
    if not isinstance(value, datetime):
        return "-" if value is None else str(value)
    return value.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _duration(value: object) -> str:
    """A stored interval (a job's ``timeout``, ``expires_in``) as people type it: ``30s``."""
    if not isinstance(value, timedelta):
        return "-" if value is None else str(value)
    return format_duration(value)


def _json(value: object) -> str:
    if isinstance(value, Unreadable):  # a row written by SQL: its text, and why
        return str(value)
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


@pass_context
def _masked(context: Context, value: object) -> object:
    """Every value a template prints, passwords masked by the function that masks every line the
    CLI prints, unless the app shows raw values. The ``finalize`` of every ``{{ }}``, and a filter
    for the templates that cut a text: masked first, as a URL cut before its ``@`` is none."""
    if isinstance(value, str) and not isinstance(value, Markup) and not context.get("raw_values"):
        return mask_text(value)
    return value


#: Where a name may break when it must: after a separator people put in queue and task names.
_BREAK_AFTER = re.compile(r"(?<=[._:/@-])")


@pass_context
def _breakable(context: Context, value: object) -> Markup:
    """A name (masked, escaped) with a ``<wbr>`` after each separator: a long ``tenant.a.b``
    breaks there, and a short name never mid-word (the CSS breaks an unbroken one at its cell's
    width only)."""
    text = str(_masked(context, str(value)))
    return Markup("<wbr>").join(escape(part) for part in _BREAK_AFTER.split(text))


def _progress(value: object) -> tuple[float, str] | None:
    """A progress value a bar can show, as ``(fraction, label)``: a number from 0 to 1, or an
    object with numeric ``done`` and ``total`` (``total`` > 0), or one with a ``fraction``."""
    if isinstance(value, dict):
        done, total = value.get("done"), value.get("total")
        if _number(done) and _number(total) and total > 0:  # type: ignore[operator]
            fraction = min(1.0, max(0.0, float(done) / float(total)))  # type: ignore[arg-type]
            return fraction, f"{done} / {total}"
        value = value.get("fraction")
    if _number(value) and 0.0 <= float(value) <= 1.0:  # type: ignore[arg-type]
        return float(value), f"{float(value) * 100:.0f}%"  # type: ignore[arg-type]
    return None


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value


def _environment() -> Environment:
    # autoescape=True for every template: every value from the database is escaped, in text
    # and in attributes alike; finalize masks the passwords in each one first.
    env = Environment(
        loader=PackageLoader("pgqueue.web", "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=_masked,
    )
    env.filters.update(
        age=_age,
        when=_when,
        json=_json,
        masked=_masked,
        duration=_duration,
        breakable=_breakable,
        progress_bar=_progress,
    )
    return env


TEMPLATES = _environment()


def page(request: Request, template: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    """Render ``template``; the first page a browser gets also sets its CSRF cookie."""
    conf = settings(request)
    cookie = request.cookies.get(_csrf.COOKIE)
    fresh = not cookie
    if not cookie:
        cookie = _csrf.new_cookie()
    html = TEMPLATES.get_template(template).render(
        request=request,
        url=lambda name, /, query=None, **params: url(request, name, query, **params),
        csrf_field=_csrf.FIELD,
        csrf_token=_csrf.token_for(conf.secret, cookie),
        read_only=conf.read_only,
        refresh_s=conf.refresh_s,
        raw_values=conf.show_raw_values,
        message=context.pop("message", None),
        **context,
    )
    response = HTMLResponse(html, status_code=status_code)
    response.headers["cache-control"] = "no-store"
    if fresh:
        response.set_cookie(
            _csrf.COOKIE,
            cookie,
            path=request.scope.get("root_path", "") or "/",
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
    return response


def error_page(request: Request, status_code: int, problem: str) -> HTMLResponse:
    """A page saying what was wrong with the request, with its status code."""
    return page(request, "error.html", status_code, status=status_code, problem=problem)


def redirect(location: str) -> RedirectResponse:
    """303 See Other: the browser GETs the page it came from, and a reload posts nothing."""
    return RedirectResponse(location, status_code=303)
