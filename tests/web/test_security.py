"""CSRF, basic auth and read-only mode: a refused request changes nothing."""

from __future__ import annotations

import base64
import re

import pytest
from sqlalchemy import Engine
from starlette.testclient import TestClient

import pgqueue
from pgqueue.web import create_app
from tests.web.conftest import MakeClient, csrf_token, failed_job, row

ACTIONS = [
    "/jobs/{id}/retry",
    "/jobs/{id}/cancel",
    "/queues/q/retry-failed",
    "/queues/q/purge",
    "/queues/q/pause",
    "/queues/q/resume",
]


def _basic(user: str, password: str) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


@pytest.mark.parametrize("path", ACTIONS)
def test_a_post_without_a_token_is_403_and_changes_nothing(
    engine: Engine, client: TestClient, path: str
) -> None:
    job_id = failed_job(engine, queue="q")
    csrf_token(client)  # the cookie is there, the field is not
    response = client.post(path.format(id=job_id), data={"older_than": "0s"})
    assert response.status_code == 403
    assert "CSRF token" in response.text
    assert row(engine, job_id)["status"] == "failed"
    with engine.connect() as conn:
        assert pgqueue.queue_settings(conn) == []


@pytest.mark.parametrize("path", ACTIONS)
def test_a_forged_token_or_a_missing_cookie_is_403(
    engine: Engine, make_client: MakeClient, path: str
) -> None:
    job_id = failed_job(engine, queue="q")
    victim, attacker = make_client(), make_client()
    token = csrf_token(victim)
    url = path.format(id=job_id)
    # The right token, but another browser's cookie (or none): not bound to this cookie.
    assert attacker.post(url, data={"csrf_token": token, "older_than": "0s"}).status_code == 403
    attacker.cookies.clear()
    assert attacker.post(url, data={"csrf_token": token, "older_than": "0s"}).status_code == 403
    # The victim's cookie with a made-up token.
    assert victim.post(url, data={"csrf_token": "0" * 64, "older_than": "0s"}).status_code == 403
    # A cookie planted with a value of the attacker's choice, and the field copied from it.
    forged = make_client()
    forged.cookies.set("pgqueue_csrf", "chosen")
    assert forged.post(url, data={"csrf_token": "chosen", "older_than": "0s"}).status_code == 403
    # The token as JSON or multipart instead of a form: never read.
    assert victim.post(url, json={"csrf_token": token}).status_code == 403
    assert row(engine, job_id)["status"] == "failed"


def test_the_token_of_one_app_is_worthless_to_another(
    engine: Engine, make_client: MakeClient
) -> None:
    job_id = failed_job(engine)
    first = make_client()
    token = csrf_token(first)
    second = make_client(create_app(engine))
    second.cookies.set("pgqueue_csrf", first.cookies["pgqueue_csrf"])
    assert second.post(f"/jobs/{job_id}/retry", data={"csrf_token": token}).status_code == 403
    shared = b"s" * 32
    one, two = make_client(secret=shared), make_client(secret=shared)
    token = csrf_token(one)
    two.cookies.set("pgqueue_csrf", one.cookies["pgqueue_csrf"])
    done = two.post(f"/jobs/{job_id}/retry", data={"csrf_token": token}, follow_redirects=False)
    assert done.status_code == 303


def test_the_csrf_cookie_is_httponly_strict_and_scoped_to_the_app(client: TestClient) -> None:
    cookie = client.get("/").headers["set-cookie"]
    assert cookie.startswith("pgqueue_csrf=")
    assert "HttpOnly" in cookie
    assert "SameSite=strict" in cookie
    assert "Path=/" in cookie
    assert "set-cookie" not in client.get("/").headers  # set once, then reused


def test_an_oversized_form_is_refused(engine: Engine, client: TestClient) -> None:
    job_id = failed_job(engine)
    token = csrf_token(client)
    response = client.post(f"/jobs/{job_id}/retry", data={"csrf_token": token, "pad": "x" * 20_000})
    assert response.status_code == 413
    assert row(engine, job_id)["status"] == "failed"


def test_auth_guards_every_route_and_static_file(engine: Engine, make_client: MakeClient) -> None:
    job_id = failed_job(engine, queue="q")
    client = make_client(auth="ops:s3cr:et")
    for path in ("/", "/live", "/jobs", f"/jobs/{job_id}", "/static/pgqueue.js", "/nowhere"):
        for headers in ({}, _basic("ops", "wrong"), _basic("other", "s3cr:et"), _basic("ops", "")):
            response = client.get(path, headers=headers)
            assert response.status_code == 401, (path, headers)
            assert response.headers["www-authenticate"] == 'Basic realm="pgqueue", charset="UTF-8"'
        assert client.get(path, headers={"Authorization": "Basic !!!"}).status_code == 401
        assert client.get(path, headers={"Authorization": "Bearer x"}).status_code == 401
    good = _basic("ops", "s3cr:et")  # the password may hold a colon
    assert client.get("/", headers=good).status_code == 200
    assert client.post(f"/jobs/{job_id}/retry", headers=_basic("ops", "no")).status_code == 401
    token = _token_with(client, good)
    done = client.post(
        f"/jobs/{job_id}/retry", data={"csrf_token": token}, headers=good, follow_redirects=False
    )
    assert done.status_code == 303
    assert row(engine, job_id)["status"] == "queued"


def _token_with(client: TestClient, headers: dict[str, str]) -> str:
    html = client.get("/jobs?status=failed", headers=headers).text
    job_link = re.search(r'href="(/jobs/\d+)"', html)
    assert job_link is not None
    page = client.get(job_link.group(1), headers=headers).text
    found = re.search(r'name="csrf_token" value="([^"]+)"', page)
    assert found is not None
    return found.group(1)


def test_auth_accepts_a_pair_and_rejects_bad_credentials(engine: Engine) -> None:
    from pgqueue.errors import InvalidArgumentError

    create_app(engine, auth=("ops", "pw"))
    for bad in ("nocolon", ":pw", "ops:", "", ("a:b", "pw")):
        with pytest.raises(InvalidArgumentError, match="auth"):
            create_app(engine, auth=bad)


def test_read_only_shows_no_form_and_refuses_every_post(
    engine: Engine, make_client: MakeClient
) -> None:
    failed = failed_job(engine, queue="q")
    writable, read_only = make_client(), make_client(read_only=True)
    token = csrf_token(writable)
    read_only.cookies.set("pgqueue_csrf", writable.cookies["pgqueue_csrf"])
    pages = ["/", "/live", "/jobs", f"/jobs/{failed}", "/jobs?status=failed", "/nowhere"]
    for path in pages:
        html = read_only.get(path).text
        assert 'method="post"' not in html, path
        assert "csrf_token" not in html, path
    assert "read-only" in read_only.get("/").text
    for path in [*ACTIONS, "/", "/jobs", "/anything"]:
        response = read_only.post(path.format(id=failed), data={"csrf_token": token})
        assert response.status_code == 403, path
    assert row(engine, failed)["status"] == "failed"
    assert 'method="post"' in writable.get(f"/jobs/{failed}").text
    with engine.connect() as conn:
        assert pgqueue.queue_settings(conn) == []  # no pause, no resume went through
