"""The dashboard answers bad form values with a 400 that says why (never a 503 from the server)."""

from __future__ import annotations

from sqlalchemy import Engine
from starlette.testclient import TestClient

import pgqueue
from tests.web.conftest import csrf_token, row


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
