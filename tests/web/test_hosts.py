"""DNS rebinding: a Host the dashboard does not answer to is a 400 before any page, cookie or
token; a state-changing request from another site's page is a 403 even with a valid token."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.testclient import TestClient

from pgqueue.errors import InvalidArgumentError, InvalidArgumentTypeError
from pgqueue.web import create_app
from tests.web.conftest import MakeClient, csrf_token, failed_job, row

ATTACKER = "attacker.example:18081"


@pytest.mark.parametrize("path", ["/", "/jobs", "/jobs/1", "/static/pgqueue.css", "/nowhere"])
def test_a_foreign_host_is_a_400_without_page_cookie_or_token(
    client: TestClient, path: str
) -> None:
    response = client.get(path, headers={"Host": ATTACKER})
    assert response.status_code == 400
    assert "set-cookie" not in response.headers
    assert "csrf_token" not in response.text
    assert "--allowed-host" in response.text
    assert response.headers["x-frame-options"] == "DENY"  # still behind the security headers


@pytest.mark.parametrize(
    "host",
    ["localhost:18081", "LOCALHOST", "127.0.0.1:8080", "[::1]:18081", "testserver", "localhost."],
)
def test_this_machine_and_the_bound_address_are_allowed_on_any_port(
    client: TestClient, host: str
) -> None:
    # TestClient's server address is "testserver": the address the request came in on.
    assert client.get("/", headers={"Host": host}).status_code == 200


@pytest.mark.parametrize("host", ["", "a b", "user@localhost", "localhost/x", "[::1", "x:99999"])
def test_a_malformed_host_is_a_400(client: TestClient, host: str) -> None:
    assert client.get("/", headers={"Host": host}).status_code == 400


def test_allowed_hosts_adds_names_and_wildcards(engine: Engine, make_client: MakeClient) -> None:
    named = make_client(allowed_hosts=["Queue.Example.com", "*.ops.example", "[fd00::5]"])
    for host in ("queue.example.com", "queue.example.com:443", "a.ops.example", "[fd00::5]:80"):
        assert named.get("/", headers={"Host": host}).status_code == 200, host
    for host in ("example.com", "ops.example", "evil-queue.example.com", ATTACKER):
        assert named.get("/", headers={"Host": host}).status_code == 400, host
    anything = make_client(allowed_hosts=["*"])
    assert anything.get("/", headers={"Host": ATTACKER}).status_code == 200


@pytest.mark.parametrize(
    "bad",
    ["queue.example.com:8443", "http://queue.example.com", "a/b", "", "a b", "*x", ["ok", 5]],
)
def test_allowed_hosts_must_be_bare_names(engine: Engine, bad: object) -> None:
    with pytest.raises((InvalidArgumentError, InvalidArgumentTypeError), match="allowed_hosts"):
        create_app(engine, allowed_hosts=bad if isinstance(bad, list) else [bad])  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentTypeError, match="allowed_hosts"):
        create_app(engine, allowed_hosts="localhost")


def _retry(client: TestClient, job_id: int, **headers: str) -> int:
    token = csrf_token(client)
    response = client.post(
        f"/jobs/{job_id}/retry",
        data={"csrf_token": token},
        headers=headers,
        follow_redirects=False,
    )
    return response.status_code


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "http://attacker.example:18081"},
        {"Origin": "null"},
        {"Origin": "http://testserver:8081"},  # this host, another port: another origin
        {"Origin": "ftp://testserver"},
        {"Origin": "garbage"},
        {"Referer": "http://attacker.example:18081/page"},
        # Origin decides when both are there.
        {"Origin": "http://attacker.example", "Referer": "http://testserver/jobs"},
    ],
)
def test_a_post_from_another_site_is_403_even_with_a_valid_token(
    engine: Engine, client: TestClient, headers: dict[str, str]
) -> None:
    job_id = failed_job(engine)
    assert _retry(client, job_id, **headers) == 403
    assert row(engine, job_id)["status"] == "failed"


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "http://testserver"},
        {"Origin": "http://testserver:80"},
        {"Origin": "https://testserver"},  # TLS ended at a proxy: the request itself is http
        {"Referer": "http://testserver/jobs/1"},
        {},  # no Origin and no Referer: a script or curl; the token still decides
    ],
)
def test_a_same_origin_post_works(
    engine: Engine, client: TestClient, headers: dict[str, str]
) -> None:
    job_id = failed_job(engine)
    assert _retry(client, job_id, **headers) == 303
    assert row(engine, job_id)["status"] == "queued"


def test_without_origin_or_referer_the_token_is_still_required(
    engine: Engine, client: TestClient
) -> None:
    job_id = failed_job(engine)
    csrf_token(client)
    response = client.post(f"/jobs/{job_id}/retry", data={}, follow_redirects=False)
    assert response.status_code == 403
    assert row(engine, job_id)["status"] == "failed"


def test_behind_a_proxy_the_public_name_is_a_trusted_origin(
    engine: Engine, make_client: MakeClient
) -> None:
    """The proxy passes its upstream address as Host and the browser's Origin unchanged."""
    client = make_client(allowed_hosts=["queue.example.com"])
    job_id = failed_job(engine)
    upstream = {"Host": "127.0.0.1:8080"}
    token_page = client.get("/", headers=upstream)
    assert token_page.status_code == 200
    headers = {**upstream, "Origin": "https://queue.example.com"}
    assert _retry(client, job_id, **headers) == 303
    other = failed_job(engine, queue="other")
    assert _retry(client, other, **{**upstream, "Origin": "https://queue.example.org"}) == 403
    assert row(engine, other)["status"] == "failed"
    # X-Forwarded-Host is never read: it does not make a foreign Host acceptable.
    forwarded = client.get("/", headers={"Host": ATTACKER, "X-Forwarded-Host": "localhost"})
    assert forwarded.status_code == 400


def test_mounted_in_a_service_the_default_still_answers(engine: Engine) -> None:
    """Inside a parent app the dashboard checks the same Host the parent was reached by."""
    job_id = failed_job(engine)
    service = Starlette(routes=[Mount("/queue", app=create_app(engine))])
    with TestClient(service) as client:
        assert client.get("/queue/").status_code == 200
        assert client.get("/queue/", headers={"Host": ATTACKER}).status_code == 400
        token = csrf_token(client, "/queue/")
        refused = client.post(
            f"/queue/jobs/{job_id}/retry",
            data={"csrf_token": token},
            headers={"Origin": "http://attacker.example"},
        )
        assert refused.status_code == 403
        assert row(engine, job_id)["status"] == "failed"
