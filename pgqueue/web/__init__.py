"""``pgqueue web``: an operator dashboard in the browser, mountable in your ASGI app.

Needs the ``web`` extra (``pip install "pgqueue-sa[web]"``: Starlette, Jinja2, uvicorn). Serve it
with ``pgqueue web --url ...``, or mount it in a FastAPI or Starlette service::

    app.mount("/queue", pgqueue.web.create_app(engine, auth=("ops", password)))

Every link and form follows the mount prefix. The pages are rendered on the server (usable
without JavaScript); a small script of the package's own refreshes the overview, and the charts
are inline SVG: nothing is loaded from a CDN. See ``docs/web.md``.

The modules, all private: ``_app`` puts the app together (routes, middleware, settings); ``_pages``
serves the GET pages and ``_actions`` the POST actions (retry, cancel, purge, pause, resume,
a queue's limits); ``_db`` runs every database round off the event loop, ``_snapshot`` reads what
the overview shows and ``_chart`` computes its charts' geometry, ``_graph`` lays out a job's
workflow graph; ``_render`` turns templates into responses. In front of every route: ``_auth``
(HTTP basic auth), ``_csrf`` (tokens bound to a cookie), ``_hosts`` (which ``Host`` and
``Origin`` a request may name) and ``_headers`` (security headers), written against the ASGI
types of ``_asgi``.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

from pgqueue.contrib import missing_extra

try:
    import jinja2  # noqa: F401
    import starlette  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised by a subprocess test
    raise missing_extra("pgqueue.web", "web") from exc

from pgqueue.web._app import DEFAULT_REFRESH_S, create_app
from pgqueue.web._auth import parse_credentials

__all__ = ["DEFAULT_REFRESH_S", "create_app", "parse_credentials"]
