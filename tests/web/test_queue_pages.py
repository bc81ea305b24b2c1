"""``/queues/{name}`` and ``/periodic`` (#34 items 3 and 4): what they show, their forms (CSRF,
read-only), and hostile names escaped."""

from __future__ import annotations

import re
from datetime import timedelta

import psycopg
from sqlalchemy import Engine, text
from sqlalchemy.engine import URL
from starlette.testclient import TestClient

import pgqueue
from pgqueue._worker import store
from tests.web.conftest import MakeClient, csrf_token, failed_job

SCRIPT = "<script>alert('pwned')</script>"
ESCAPED = "&lt;script&gt;alert(&#39;pwned&#39;)&lt;/script&gt;"


def _counts(html: str) -> dict[str, str]:
    return dict(re.findall(r'data-count="(\w+)">(?:<a [^>]*>)?(\d+)', html))


def test_the_queue_page_shows_counts_settings_chart_and_workers(
    engine: Engine, client: TestClient, db_url: URL
) -> None:
    failed_job(engine, queue="mail")
    with engine.begin() as conn:
        pgqueue.enqueue_many(conn, [{}] * 3, queue="mail")
        pgqueue.enqueue(conn, {}, queue="mail", delay=3600)
        done = pgqueue.claim(conn, queue="mail", limit=1)
        store.complete_many(conn, [(j.id, j.attempts) for j in done])
        pgqueue.enqueue(conn, {}, queue="other")
        pgqueue.set_queue_limits(conn, "mail", concurrency=4, rate=pgqueue.Rate(10, 1))
        pgqueue.pause(conn, "mail")
        pgqueue.set_retention(conn, "mail", done=timedelta(days=2))
        conn.execute(
            text("INSERT INTO jobs_workers (name, host, pid, queues) VALUES (:n, 'box', 7, :q)"),
            {"n": "pgqueue-worker:box:7", "q": ["mail", "other"]},
        )
    # A session named as a worker's: the page lists the workers connected now.
    plain = db_url.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(plain, application_name="pgqueue-worker:box:7"):
        html = client.get("/queues/mail").text
    assert _counts(html) == {
        "ready": "2",
        "scheduled": "1",
        "waiting": "0",
        "running": "0",
        "expired_leases": "0",
        "failed": "1",
        "cancelled": "0",
        "expired": "0",
        "done": "1",
    }
    assert 'id="state"><span class="paused">paused</span>' in html
    assert "concurrency 4" in html
    assert "rate 10/1s" in html
    assert "done 2d, failed 30d (failed from the default)" in html
    assert 'figure class="chart" data-queue="mail"' in html
    assert "1 done, 1 failed" in html
    assert '<td class="name">pgqueue-worker:box:7</td>' in html
    assert 'href="/jobs?queue=mail&amp;status=failed">1</a>' in html
    # The overview's queue names link here.
    assert 'href="/queues/mail"' in client.get("/").text
    # A queue nothing knows is a page of zeros, not an error.
    empty = client.get("/queues/nothing-here")
    assert empty.status_code == 200
    assert 'id="no-jobs"' in empty.text


def test_the_queue_pages_forms_pause_resume_and_set_limits(
    engine: Engine, client: TestClient
) -> None:
    with engine.begin() as conn:
        pgqueue.enqueue(conn, {}, queue="mail")
    token = csrf_token(client, "/queues/mail")
    form = {"csrf_token": token, "back": "queue"}
    paused = client.post("/queues/mail/pause", data=form, follow_redirects=False)
    assert paused.status_code == 303
    assert paused.headers["location"] == "/queues/mail?done=paused"
    resumed = client.post("/queues/mail/resume", data=form, follow_redirects=False)
    assert resumed.headers["location"] == "/queues/mail?done=resumed"
    limits = {"csrf_token": token, "concurrency": "3", "per_key": "", "rate": "5/1m"}
    saved = client.post("/queues/mail/limits", data=limits, follow_redirects=False)
    assert saved.headers["location"] == "/queues/mail?done=limits-set"
    with engine.connect() as conn:
        (stored,) = pgqueue.queue_settings(conn, "mail")
    assert (stored.concurrency, stored.per_key, str(stored.rate)) == (3, None, "5/1m")
    assert 'value="3"' in client.get("/queues/mail").text
    for bad in ({"concurrency": "0"}, {"per_key": "x"}, {"rate": "fast"}, {"concurrency": "٣"}):
        refused = client.post("/queues/mail/limits", data={"csrf_token": token, **bad})
        assert refused.status_code == 400, bad
    with engine.connect() as conn:
        assert pgqueue.queue_settings(conn, "mail")[0] == stored  # nothing written
    # Blank fields remove the limits.
    client.post("/queues/mail/limits", data={"csrf_token": token})
    with engine.connect() as conn:
        assert pgqueue.queue_settings(conn, "mail")[0].limits_text == "-"
    # Without the token: 403, nothing changed.
    assert client.post("/queues/mail/limits", data={"concurrency": "2"}).status_code == 403
    with engine.connect() as conn:
        assert pgqueue.queue_settings(conn, "mail")[0].concurrency is None


def test_read_only_queue_page_has_no_form(engine: Engine, make_client: MakeClient) -> None:
    with engine.begin() as conn:
        pgqueue.enqueue(conn, {}, queue="mail")
    client = make_client(read_only=True)
    html = client.get("/queues/mail").text
    assert 'method="post"' not in html
    assert client.post("/queues/mail/limits", data={"concurrency": "2"}).status_code == 403


def test_the_periodic_page_lists_definitions_and_their_last_job(
    engine: Engine, client: TestClient
) -> None:
    assert 'id="no-periodic"' in client.get("/periodic").text
    nightly = pgqueue.Periodic(SCRIPT, timedelta(hours=1), queue=SCRIPT, payload={})
    pgqueue.Worker(engine, {SCRIPT: lambda job: None}, periodic=[nightly]).run(until_empty=True)
    with engine.begin() as conn:  # declared now: its ticks count from two hours ago instead
        conn.execute(text("UPDATE jobs_periodic SET ticks_from = now() - interval '2 hours'"))
    worker = pgqueue.Worker(engine, {SCRIPT: lambda job: None}, periodic=[nightly])
    assert worker.run(until_empty=True).done == 1
    html = client.get("/periodic").text
    assert "<script>alert" not in html
    assert html.replace("<wbr>", "").count(ESCAPED) >= 2  # the name and the queue
    with engine.connect() as conn:
        job_id = conn.execute(text("SELECT id FROM jobs")).scalar_one()
    assert (
        f'<a href="/jobs/{job_id}">{job_id}</a> <span class="status status-done">done</span>'
        in (html)
    )
    assert "<code>every 3600s</code>" in html
    assert 'href="/queues/%3Cscript%3E' in html  # the queue's page, its name encoded
    page = client.get("/queues/" + SCRIPT).text
    assert "<script>alert" not in page
    assert ESCAPED in page
