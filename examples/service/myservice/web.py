"""The service's HTTP API (FastAPI), with pgqueue's dashboard mounted at ``/queue`` and a worker
started and stopped in the app's lifespan.

Run it with ``DATABASE_URL=... uvicorn --factory myservice.web:from_environment`` (needs
``pgqueue-sa[web]`` and FastAPI); ``QUEUE_DASHBOARD_AUTH=user:password`` puts basic auth in front of
the dashboard.
"""

from __future__ import annotations

import os
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from sqlalchemy import Engine, create_engine

import pgqueue
import pgqueue.web
from myservice.app import create_user
from myservice.worker import make_handlers


def create_app(engine: Engine, *, dashboard_auth: str | None = None) -> FastAPI:
    """The API on ``engine``; the caller owns the engine (and disposes of it)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # The worker runs beside the event loop in a thread of its own; signals stay uvicorn's.
        worker = pgqueue.Worker(engine, make_handlers(engine), install_signal_handlers=False)
        thread = threading.Thread(target=worker.run, name="myservice-worker", daemon=True)
        thread.start()
        try:
            yield
        finally:
            worker.stop()  # finishes the jobs in hand, then returns
            thread.join(timeout=30)

    app = FastAPI(lifespan=lifespan)

    @app.post("/users")
    def signup(email: str) -> dict[str, int]:
        # The user and its welcome-email job commit together, or not at all.
        with engine.begin() as conn:
            return {"id": create_user(conn, email)}

    # Every link and form of the dashboard stays under /queue.
    app.mount("/queue", pgqueue.web.create_app(engine, auth=dashboard_auth))
    return app


def from_environment() -> FastAPI:
    """``uvicorn --factory`` entry point: ``DATABASE_URL``, ``QUEUE_DASHBOARD_AUTH``."""
    engine = create_engine(os.environ["DATABASE_URL"])
    return create_app(engine, dashboard_auth=os.environ.get("QUEUE_DASHBOARD_AUTH"))
