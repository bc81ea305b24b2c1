"""The dashboard answers bad form values with a 400 that says why (never a 503 from the server),
and shows rows written by SQL that no Python client can load, with the rest of the page intact."""

from __future__ import annotations

import re

from sqlalchemy import Engine, text
from starlette.testclient import TestClient

import pgqueue
from tests.web.conftest import csrf_token, row


def _insert(engine: Engine, sql: str) -> int:
    with engine.begin() as conn:
        return int(conn.execute(text(sql)).scalar_one())


def test_purge_with_an_age_past_the_bound_is_a_400_and_deletes_nothing(
    engine: Engine, client: TestClient
) -> None:
    with engine.begin() as conn:
        pgqueue.enqueue(conn, {})
        (job,) = pgqueue.claim(conn)
        pgqueue.complete(conn, job.id, job.attempts)
    token = csrf_token(client)
    for age in ("99999999d", "36526d", "1" + " " * 8000 + "x"):
        response = client.post(
            "/queues/default/purge", data={"csrf_token": token, "older_than": age}
        )
        assert response.status_code == 400, age
        assert "older_than: " in response.text
    assert row(engine, job.id)["status"] == "done"


def test_a_queue_filter_with_control_characters_is_a_422(client: TestClient) -> None:
    response = client.get("/jobs", params={"queue": "a\nb"})
    assert response.status_code == 422
    assert "must not contain control characters" in response.text


def test_pages_show_rows_no_client_can_load_and_the_rest_intact(
    engine: Engine, client: TestClient
) -> None:
    with engine.begin() as conn:
        good = pgqueue.enqueue(conn, {"n": 1}, queue="mix")
    far = _insert(
        engine,
        "INSERT INTO jobs (queue, payload, run_at, created_at) "
        "VALUES ('mix', '{}', '29405-01-01', 'infinity') RETURNING id",
    )
    deep = _insert(
        engine,
        "INSERT INTO jobs (queue, payload, status, finished_at) VALUES ('mix', "
        "(repeat('[', 5000) || repeat(']', 5000))::jsonb, 'done', '-infinity') RETURNING id",
    )
    ready = _insert(  # ready since forever: the overview's oldest-ready age
        engine, "INSERT INTO jobs (queue, payload, run_at) VALUES ('mix', '{}', '-infinity') "
        "RETURNING id",
    )  # fmt: skip
    _insert(  # finished in the future: outside the chart of the last hour
        engine,
        "INSERT INTO jobs (queue, payload, status, finished_at) "
        "VALUES ('mix', '{}', 'done', 'infinity') RETURNING id",
    )
    listing = client.get("/jobs", params={"queue": "mix"})
    assert listing.status_code == 200, listing.text
    rows = dict(re.findall(r'data-job-id="(\d+)">(.*?)</tr>', listing.text, re.S))
    assert {str(i) for i in (good, far, deep, ready)} <= set(rows)
    assert "unreadable (outside the years 1 to 9999" in rows[str(far)]
    assert "29405-01-01 00:00:00+00" in rows[str(far)]
    assert "unreadable" in rows[str(deep)]
    assert "unreadable" not in rows[str(good)]

    page = client.get(f"/jobs/{deep}")
    assert page.status_code == 200, page.text
    payload = re.search(r'<pre id="payload">(.*?)</pre>', page.text, re.S)
    assert payload is not None
    assert payload.group(1).startswith("unreadable (nested more than 100 levels deep): [[[[")
    assert client.get(f"/jobs/{far}").status_code == 200
    assert client.get(f"/jobs/{good}").status_code == 200

    for path in ("/", "/live"):
        response = client.get(path)
        assert response.status_code == 200, (path, response.text)
        assert 'data-queue="mix"' in response.text
