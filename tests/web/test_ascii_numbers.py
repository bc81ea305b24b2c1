"""The dashboard reads numbers as the command line does: ASCII digits only (``٣`` is not 3)."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine
from starlette.testclient import TestClient

import pgqueue
from tests.web.conftest import csrf_token


@pytest.mark.parametrize(
    ("query", "says"),
    [("limit=\u0665", "limit must be an integer"), ("before=\u0663", "before must be an integer")],
)
def test_a_list_parameter_in_other_digits_is_a_422(
    engine: Engine, client: TestClient, query: str, says: str
) -> None:
    with engine.begin() as conn:
        for _ in range(5):
            pgqueue.enqueue(conn, {}, queue="q")
    response = client.get(f"/jobs?{query}")
    assert response.status_code == 422
    assert says in response.text
    assert client.get("/jobs?limit=5").status_code == 200


def test_selected_ids_in_other_digits_are_refused(engine: Engine, client: TestClient) -> None:
    with engine.begin() as conn:
        job_id = pgqueue.enqueue(conn, {}, queue="q")
    token = csrf_token(client, "/jobs")
    other = str(job_id).translate(
        str.maketrans("0123456789", "\u0660\u0661\u0662\u0663\u0664\u0665\u0666\u0667\u0668\u0669")
    )
    response = client.post(
        "/jobs/bulk", data={"csrf_token": token, "action": "cancel", "job_id": other}
    )
    assert response.status_code == 400
    assert "job_id must be job ids" in response.text


def test_a_purge_age_in_other_digits_is_refused(engine: Engine, client: TestClient) -> None:
    with engine.begin() as conn:
        pgqueue.enqueue(conn, {}, queue="q")
    token = csrf_token(client)
    response = client.post(
        "/queues/q/purge", data={"csrf_token": token, "older_than": "\u0667d", "confirm": "yes"}
    )
    assert response.status_code == 400
    assert "invalid duration" in response.text
