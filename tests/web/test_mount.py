"""Mounted under a prefix (a Starlette or FastAPI service, or a proxy's root_path): every link,
form, redirect and cookie stays under it."""

from __future__ import annotations

import re

import pytest
from fastapi import FastAPI
from sqlalchemy import Engine
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route

from pgqueue.web import create_app
from tests.web.conftest import MakeClient, failed_job, row

_LINK = re.compile(r'(?:href|action|src|data-refresh-url)="([^"]+)"')


def _starlette(engine: Engine) -> Starlette:
    async def home(request: object) -> PlainTextResponse:
        return PlainTextResponse("the service")

    return Starlette(routes=[Route("/", home), Mount("/queue", app=create_app(engine))])


def _fastapi(engine: Engine, name: str | None) -> FastAPI:
    service = FastAPI()

    @service.get("/")
    def home() -> dict[str, str]:
        return {"service": "yes"}

    service.mount("/queue", create_app(engine), name=name)
    return service


@pytest.mark.parametrize("kind", ["starlette", "fastapi", "fastapi-named"])
def test_every_link_and_form_works_under_the_prefix(
    engine: Engine, make_client: MakeClient, kind: str
) -> None:
    job_id = failed_job(engine, queue="email", error="smtp down")
    parent = (
        _starlette(engine)
        if kind == "starlette"
        else _fastapi(engine, "dashboard" if kind == "fastapi-named" else None)
    )
    client = make_client(parent)
    assert client.get("/").status_code == 200  # the service's own route
    overview = client.get("/queue/")
    assert overview.status_code == 200
    assert "path=/queue" in overview.headers["set-cookie"].lower()
    pages = [overview.text, client.get(f"/queue/jobs/{job_id}").text]
    links = {link.replace("&amp;", "&") for html in pages for link in _LINK.findall(html)}
    assert links, "no link found"
    for link in links:
        assert link.startswith("/queue/"), link
        if any(verb in link for verb in ("/retry", "/cancel", "/purge", "/pause", "/resume")):
            continue  # forms: posted below
        assert client.get(link).status_code == 200, link
    assert f"/queue/jobs/{job_id}/retry" in links
    token = re.search(r'name="csrf_token" value="([^"]+)"', pages[1])
    assert token is not None
    response = client.post(
        f"/queue/jobs/{job_id}/retry", data={"csrf_token": token.group(1)}, follow_redirects=False
    )
    assert response.status_code == 303
    assert response.headers["location"] == f"/queue/jobs/{job_id}?done=retried"
    assert row(engine, job_id)["status"] == "queued"
    assert "/queue/queues/email/pause" in links
    paused = client.post(
        "/queue/queues/email/pause", data={"csrf_token": token.group(1)}, follow_redirects=False
    )
    assert (paused.status_code, paused.headers["location"]) == (303, "/queue/?done=paused")
    assert client.get("/queue/nowhere").status_code == 404


def test_a_proxy_root_path_prefixes_the_links(engine: Engine) -> None:
    """uvicorn --root-path /ops behind a proxy that strips the prefix."""
    from starlette.testclient import TestClient

    failed_job(engine, queue="email")
    with TestClient(create_app(engine), root_path="/ops") as client:
        html = client.get("/").text
    links = _LINK.findall(html)
    assert links
    assert all(link.startswith("/ops/") for link in links), links
