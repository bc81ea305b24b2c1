"""Pause and resume on the overview (#23): the queue's row shows its state and limits, and its
button changes it in the database, guarded like every action (CSRF, read-only, auth)."""

from __future__ import annotations

import re
from datetime import timedelta

from sqlalchemy import Engine
from starlette.testclient import TestClient

import pgqueue
from pgqueue import QueueSettings, Rate
from tests.web.conftest import MakeClient, csrf_token


def _post(client: TestClient, path: str) -> tuple[int, str]:
    token = csrf_token(client)
    response = client.post(path, data={"csrf_token": token}, follow_redirects=False)
    return response.status_code, response.headers.get("location", "")


def _row(html: str, queue: str) -> str:
    found = re.search(rf'<tr data-queue="{re.escape(queue)}">(.*?)</tr>', html, re.S)
    assert found is not None, html
    return found.group(1)


def _settings(engine: Engine) -> list[QueueSettings]:
    with engine.connect() as conn:
        return pgqueue.queue_settings(conn)


def test_pause_then_resume_from_the_queues_row(engine: Engine, client: TestClient) -> None:
    with engine.begin() as conn:
        pgqueue.enqueue(conn, {}, queue="email")
    row = _row(client.get("/").text, "email")
    assert 'data-state="active"' in row
    assert "/queues/email/pause" in row
    assert "/queues/email/resume" not in row
    status, location = _post(client, "/queues/email/pause")
    assert (status, location) == (303, "/?done=paused")
    assert _settings(engine) == [QueueSettings("email", paused=True)]
    page = client.get(location).text
    assert "Queue paused: workers claim none of its jobs" in page
    row = _row(page, "email")
    assert 'data-state="paused"' in row
    assert ">paused<" in row
    assert "/queues/email/resume" in row
    assert "/queues/email/pause" not in row
    assert _post(client, "/queues/email/pause") == (303, "/?done=already-paused")
    assert _post(client, "/queues/email/resume") == (303, "/?done=resumed")
    assert _settings(engine) == [QueueSettings("email")]
    assert _post(client, "/queues/email/resume") == (303, "/?done=not-paused")
    assert "The queue was not paused: nothing changed." in client.get("/?done=not-paused").text


def test_a_paused_queue_without_jobs_stays_on_the_overview(
    engine: Engine, client: TestClient
) -> None:
    """Else a queue paused before its first job could not be resumed from the dashboard."""
    with engine.begin() as conn:
        pgqueue.pause(conn, "later")
        pgqueue.set_queue_limits(
            conn, "later", concurrency=4, per_key=2, rate=Rate(10, timedelta(seconds=1))
        )
    html = client.get("/live").text
    assert "No jobs yet." not in html
    row = _row(html, "later")
    assert 'data-state="paused"' in row
    assert "concurrency 4, per_key 2, rate 10/1s" in row
    assert "/queues/later/resume" in row


def test_a_queue_name_with_a_slash_pauses_that_queue(engine: Engine, client: TestClient) -> None:
    with engine.begin() as conn:
        pgqueue.enqueue(conn, {}, queue="a/b")
    assert _post(client, "/queues/a%2Fb/pause") == (303, "/?done=paused")
    assert _settings(engine) == [QueueSettings("a/b", paused=True)]


def test_read_only_shows_the_state_and_no_button(engine: Engine, make_client: MakeClient) -> None:
    with engine.begin() as conn:
        pgqueue.enqueue(conn, {}, queue="email")
        pgqueue.pause(conn, "email")
    html = make_client(read_only=True).get("/").text
    row = _row(html, "email")
    assert 'data-state="paused"' in row
    assert "Resume" not in row
    assert "Pause" not in row
