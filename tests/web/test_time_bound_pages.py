"""The dashboard's view of time bounds (#31, item 4): the overview counts expired jobs apart,
the job page gives the timeout, the deadline and what happened."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from sqlalchemy import Engine
from starlette.testclient import TestClient

import pgqueue


def test_the_overview_counts_expired_jobs_and_the_job_page_says_why(
    engine: Engine, client: TestClient
) -> None:
    with engine.begin() as conn:
        expired = pgqueue.enqueue(
            conn,
            {},
            queue="codes",
            run_at=datetime.now(timezone.utc) - timedelta(seconds=5),
            expires_in=1,
        )
        assert pgqueue.claim(conn, queue="codes") == []
        bounded = pgqueue.enqueue(conn, {}, queue="codes", timeout=30, expires_in=600)
    overview = client.get("/").text
    assert 'data-count="expired"><a href="/jobs?queue=codes&amp;status=expired">1</a>' in overview
    page = client.get(f"/jobs/{expired}").text
    assert 'id="expired">at ' in page
    assert "not started within 1s of its run_at, so never run" in page
    page = client.get(f"/jobs/{bounded}").text
    assert '<dd id="timeout">30s per attempt</dd>' in page
    assert "(never run if not started by then)" in page
    listed = client.get("/jobs", params={"status": "expired"}).text
    assert f'href="/jobs/{expired}"' in listed
