"""A job waiting for its dependencies on the dashboard: the list, the overview's counts and the
job page call it ``waiting`` and say what it waits for (no year-9999 run_at), the list filters by
the states people see, and no Retry pretends to act on it."""

from __future__ import annotations

import re

from sqlalchemy import Engine, text
from starlette.testclient import TestClient

import pgqueue
from tests.web.conftest import csrf_token, failed_job


def _waiting_pair(engine: Engine) -> tuple[int, int]:
    with engine.begin() as conn:
        parent = pgqueue.enqueue(conn, {}, queue="steps")
        child = pgqueue.enqueue(conn, {}, queue="steps", depends_on=[parent])
    return parent, child


def _row_of(html: str, job_id: int) -> str:
    found = re.search(rf'<tr class="[^"]*" data-job-id="{job_id}">(.*?)</tr>', html, re.S)
    assert found is not None, html
    return found.group(1)


def test_the_list_says_waiting_and_what_for_and_filters_by_state(
    engine: Engine, client: TestClient
) -> None:
    parent, child = _waiting_pair(engine)
    with engine.begin() as conn:
        cancelled = pgqueue.enqueue(conn, {}, queue="steps")
        assert pgqueue.cancel(conn, [cancelled]) == [cancelled]
    failed = failed_job(engine, queue="steps")
    html = client.get("/jobs").text
    assert "9999" not in html
    row = _row_of(html, child)
    assert '<td class="job-status">waiting</td>' in row
    assert re.search(rf'after <a href="/jobs/{parent}">{parent}</a>', row), row
    assert '<td class="job-status">cancelled</td>' in _row_of(html, cancelled)
    assert '<td class="job-status">failed</td>' in _row_of(html, failed)
    assert '<td class="job-status">queued</td>' in _row_of(html, parent)

    def shown(status: str) -> list[int]:
        response = client.get("/jobs", params={"status": status})
        assert response.status_code == 200, response.text
        return [int(i) for i in re.findall(r'data-job-id="(\d+)"', response.text)]

    assert shown("waiting") == [child]
    assert shown("cancelled") == [cancelled]
    assert shown("failed") == [failed]
    assert shown("queued") == [parent]
    options = re.findall(r'<option value="([\w ]+)"', client.get("/jobs").text)
    assert options == [
        "queued",
        "waiting",
        "running",
        "done",
        "failed",
        "cancelled",
        "expired",
        "sleeping",
        "awaiting signal",
    ]
    # The waiting list offers Cancel, never Retry.
    waiting_page = client.get("/jobs", params={"status": "waiting"}).text
    assert 'value="cancel"' in waiting_page
    assert 'value="retry"' not in waiting_page


def test_the_overview_links_its_waiting_and_cancelled_counts_to_those_lists(
    engine: Engine, client: TestClient
) -> None:
    _waiting_pair(engine)
    with engine.begin() as conn:
        cancelled = pgqueue.enqueue(conn, {}, queue="steps")
        assert pgqueue.cancel(conn, [cancelled]) == [cancelled]
    html = client.get("/").text
    row = re.search(r'<tr data-queue="steps">(.*?)</tr>', html, re.S)
    assert row is not None, html
    for state in ("waiting", "cancelled"):
        cell = re.search(rf'data-count="{state}">(.*?)</td>', row.group(1), re.S)
        assert cell is not None, row.group(1)
        assert f'href="/jobs?queue=steps&amp;status={state}">1</a>' in cell.group(1), cell.group(1)


def test_the_job_page_of_a_waiting_job_shows_no_retry_and_no_fake_run_at(
    engine: Engine, client: TestClient
) -> None:
    parent, child = _waiting_pair(engine)
    html = client.get(f"/jobs/{child}").text
    assert '<span class="status status-waiting">waiting</span>' in html
    assert "9999" not in html
    assert re.search(r"<dt>run_at</dt><dd>after the jobs it waits for</dd>", html), html
    waits_for = re.search(r'<dd id="waits-for">(.*?)</dd>', html, re.S)
    assert waits_for is not None
    assert f'href="/jobs/{parent}"' in waits_for.group(1)
    assert "Retry now" not in html
    assert f'action="/jobs/{child}/cancel"' in html
    # The parent's page shows what waits for it as waiting, and keeps its own Retry now.
    parent_page = client.get(f"/jobs/{parent}").text
    waited_by = re.search(r'<dd id="waited-by">(.*?)</dd>', parent_page, re.S)
    assert waited_by is not None
    assert "status-waiting" in waited_by.group(1)
    assert "Retry now" in parent_page
    # A cancelled job says so, and can still be retried (naming it is asking for it).
    with engine.begin() as conn:
        assert pgqueue.cancel(conn, [parent]) == [parent]
    cancelled_page = client.get(f"/jobs/{parent}").text
    assert '<span class="status status-cancelled">cancelled</span>' in cancelled_page
    assert "Retry now" in cancelled_page


def test_a_retry_posted_for_a_waiting_job_says_why_and_changes_nothing(
    engine: Engine, client: TestClient
) -> None:
    parent, child = _waiting_pair(engine)

    def state() -> tuple[str, int, int]:
        with engine.connect() as conn:
            found = conn.execute(
                text("SELECT status, waiting_on, max_attempts FROM jobs WHERE id = :i"),
                {"i": child},
            ).one()
        return (found.status, found.waiting_on, found.max_attempts)

    before = state()
    token = csrf_token(client)
    response = client.post(
        f"/jobs/{child}/retry", data={"csrf_token": token}, follow_redirects=False
    )
    assert response.status_code == 303
    location = response.headers["location"]
    assert location == f"/jobs/{child}?done=not-retried-waiting"
    message = client.get(location).text
    assert "Job not requeued: it waits for its dependencies" in message
    assert state() == before
    # The list's bulk retry with it selected changes nothing either, and names it.
    failed = failed_job(engine, queue="steps")
    bulk = client.post(
        "/jobs/bulk",
        data={"csrf_token": token, "action": "retry", "job_id": [str(child), str(failed)]},
        follow_redirects=False,
    )
    assert bulk.status_code == 409, bulk.text
    assert f"job {child} waits for job {parent}" in bulk.text
    assert state() == before
    with engine.connect() as conn:
        still = conn.execute(text("SELECT status FROM jobs WHERE id = :i"), {"i": failed}).scalar()
    assert still == "failed"
