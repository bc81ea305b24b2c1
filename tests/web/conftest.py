"""The dashboard against a real database: an app per test, jobs made through the public API."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import Engine, text
from starlette.applications import Starlette
from starlette.testclient import TestClient

import pgqueue
from pgqueue.web import create_app

_TOKEN = re.compile(r'name="csrf_token" value="([^"]+)"')

MakeClient = Callable[..., TestClient]


@pytest.fixture
def make_client(engine: Engine) -> Iterator[MakeClient]:
    """``make_client(**create_app_options)``: a client of a fresh app on the test's database."""
    clients: list[TestClient] = []

    def make(app: Starlette | None = None, **options: Any) -> TestClient:
        client = TestClient(app if app is not None else create_app(engine, **options))
        client.__enter__()
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.__exit__(None, None, None)


@pytest.fixture
def client(make_client: MakeClient) -> TestClient:
    return make_client()


def csrf_token(client: TestClient, path: str = "/") -> str:
    """The form token of the page at ``path`` (which sets the client's CSRF cookie)."""
    response = client.get(path)
    assert response.status_code == 200, response.text
    found = _TOKEN.search(response.text)
    assert found is not None, "no form on " + path
    return found.group(1)


def failed_job(
    engine: Engine, *, queue: str = "default", payload: Any = None, error: str = "boom"
) -> int:
    """A job that failed for good with ``error`` (priority 9, so the claim takes it first)."""
    with engine.begin() as conn:
        job_id = pgqueue.enqueue(conn, payload or {}, queue=queue, max_attempts=1, priority=9)
        (job,) = pgqueue.claim(conn, queue=queue, limit=1)
        assert job.id == job_id
        pgqueue.fail(conn, job.id, job.attempts, error)
    return job_id


def row(engine: Engine, job_id: int) -> dict[str, Any]:
    with engine.connect() as conn:
        found = conn.execute(
            text(
                "SELECT status, attempts, max_attempts, last_error, finished_at "
                "FROM jobs WHERE id = :id"
            ),
            {"id": job_id},
        ).one()
    return dict(found._mapping)
