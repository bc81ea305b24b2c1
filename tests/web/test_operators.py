"""What operators asked for (issue #20): the connected workers and who holds a job, searches,
bulk retry and cancel, a purge that asks first, bounded payloads, and a dashboard that survives
its connections being terminated."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import markupsafe
import psycopg
import pytest
from sqlalchemy import Engine, event, text
from sqlalchemy.engine import URL
from starlette.testclient import TestClient

import pgqueue
from pgqueue._base.urls import to_libpq_url
from pgqueue.web._pages import PAYLOAD_PREVIEW_CHARS
from tests.web.conftest import MakeClient, csrf_token, failed_job, row

WORKER = "pgqueue-worker:box-7:4242"


@contextmanager
def sent(engine: Engine) -> Iterator[list[str]]:
    """Every SQL text the engine sends while inside the block."""
    seen: list[str] = []

    def before(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append(statement)

    event.listen(engine, "before_cursor_execute", before)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", before)


def _ids(html: str) -> list[int]:
    return [int(i) for i in re.findall(r'data-job-id="(\d+)"', html)]


# -- workers and who holds a job ------------------------------------------------------------------


def test_the_workers_page_lists_connected_workers_and_the_jobs_they_hold(
    engine: Engine, db_url: URL, client: TestClient
) -> None:
    assert "No worker connected." in client.get("/workers").text
    with psycopg.connect(to_libpq_url(db_url), application_name=WORKER, autocommit=True):
        with engine.begin() as conn:
            pgqueue.enqueue_many(conn, [{}] * 3, queue="mail")
            held = pgqueue.claim(conn, queue="mail", limit=2, locked_by=WORKER)
            conn.execute(
                text(
                    "INSERT INTO jobs_workers (name, host, pid, queues, started_at) VALUES "
                    "(:n, 'box-7', 4242, '{mail,\"a/b c\"}', now() - interval '2 hours')"
                ),
                {"n": WORKER},
            )
        html = client.get("/workers").text
        job_page = client.get(f"/jobs/{held[0].id}").text
    assert f'data-worker="{WORKER}"' in html
    assert ">box-7<" in html
    assert ">4242<" in html
    assert 'href="/jobs?queue=mail"' in html
    assert 'href="/jobs?queue=a%2Fb+c"' in html
    assert re.search(r'data-count="jobs_held">2<', html)
    assert "(2.0 h)" in html
    assert re.search(rf'id="held-by"[^>]*><a href="/workers">{WORKER}</a> since \d{{4}}-', job_page)
    assert 'href="/workers"' in client.get("/").text  # in the navigation
    # Gone with its session, whatever its row says.
    assert "No worker connected." in client.get("/workers").text


def test_a_finished_job_says_who_claimed_it_last(engine: Engine, client: TestClient) -> None:
    with engine.begin() as conn:
        pgqueue.enqueue(conn, {})
        (job,) = pgqueue.claim(conn, locked_by=WORKER)
        pgqueue.complete(conn, job.id, job.attempts)
        queued = pgqueue.enqueue(conn, {})
    assert re.search(
        rf"last claimed by</dt><dd[^>]*>{WORKER} at \d{{4}}-", client.get(f"/jobs/{job.id}").text
    )
    assert 'id="held-by"' not in client.get(f"/jobs/{queued}").text


# -- search ------------------------------------------------------------------------------------


def test_search_by_payload_containment_error_text_and_unique_key(
    engine: Engine, client: TestClient
) -> None:
    a = failed_job(engine, payload={"user": 42, "plan": "pro"}, error="SMTP 550: mailbox 100%_full")
    b = failed_job(engine, payload={"user": 42}, error="timeout after 30s")
    c = failed_job(engine, payload={"user": 7, "tags": ["x", "y"]}, error="mailbox 100xxfull")
    with engine.begin() as conn:
        keyed = pgqueue.enqueue(conn, {"n": 1}, queue="k", unique_key="invoice-9")
    assert _ids(client.get("/jobs", params={"payload": '{"user": 42}'}).text) == [b, a]
    assert _ids(client.get("/jobs", params={"payload": '{"tags": ["y"]}'}).text) == [c]
    # % and _ are the user's characters, not wildcards; case does not matter.
    assert _ids(client.get("/jobs", params={"error": "100%_FULL"}).text) == [a]
    assert _ids(client.get("/jobs", params={"error": "MAILBOX"}).text) == [c, a]
    assert _ids(client.get("/jobs", params={"key": "invoice-9"}).text) == [keyed]
    assert _ids(client.get("/jobs", params={"key": "invoice-%"}).text) == []
    both = {"payload": '{"user": 42}', "error": "timeout", "status": "failed"}
    page = client.get("/jobs", params=both)
    assert _ids(page.text) == [b]
    assert 'value="timeout"' in page.text  # the form keeps what was typed


def test_search_sends_the_values_as_bound_parameters(engine: Engine, client: TestClient) -> None:
    failed_job(engine, payload={"q": "'; DROP TABLE jobs; --"})
    nasty = "'; DROP TABLE jobs; --"
    with sent(engine) as seen:
        found = client.get("/jobs", params={"payload": '{"q": "' + nasty + '"}', "error": nasty})
    assert found.status_code == 200
    assert not any(nasty in sql for sql in seen)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM jobs")).scalar_one() == 1


@pytest.mark.parametrize(
    ("params", "says"),
    [
        ({"payload": "{not json"}, "payload must be a JSON value"),
        ({"payload": '{"a": "\\u0000"}'}, "U+0000"),
        ({"payload": "null"}, "other than null"),
        ({"payload": "[" * 999}, "payload must be a JSON value"),
        ({"payload": "1" * 1001}, "payload must be at most 1000 characters"),
        ({"error": "a\x00b"}, "error must be at most"),
        ({"error": "x" * 1001}, "error must be at most 1000"),
        ({"key": "k" * 1001}, "key must be at most 1000 characters"),
        ({"key": "é" * 501}, "key: 1002 bytes, more than 1000"),
    ],
)
def test_a_search_that_cannot_be_one_is_a_422_that_says_why(
    client: TestClient, params: dict[str, str], says: str
) -> None:
    response = client.get("/jobs", params=params)
    assert response.status_code == 422
    assert says in response.text


def test_pages_of_a_search_keep_the_search(engine: Engine, client: TestClient) -> None:
    ids = [failed_job(engine, payload={"user": 1}, error="boom") for _ in range(3)]
    first = client.get("/jobs", params={"payload": '{"user": 1}', "limit": "2"}).text
    assert _ids(first) == ids[:0:-1]
    older = re.search(r'rel="next" href="([^"]+)"', first)
    assert older is not None
    link = older.group(1).replace("&amp;", "&")
    assert "payload=%7B%22user%22%3A+1%7D" in link
    assert _ids(client.get(link).text) == [ids[0]]


# -- bounded payloads ------------------------------------------------------------------------------


def test_a_huge_payload_is_cut_on_the_server_and_never_listed(
    engine: Engine, client: TestClient
) -> None:
    big = "x" * (5 * 1024 * 1024)
    job_id = failed_job(engine, payload={"blob": big})
    with sent(engine) as seen:
        page = client.get(f"/jobs/{job_id}")
        listed = client.get("/jobs")
        token = csrf_token(client, f"/jobs/{job_id}")
        retried = client.post(
            f"/jobs/{job_id}/retry", data={"csrf_token": token}, follow_redirects=False
        )
    assert page.status_code == 200
    assert len(page.content) < PAYLOAD_PREVIEW_CHARS + 20_000
    assert "The first 65,536 of 5,242,892 characters" in page.text
    assert "pgqueue show" in page.text
    assert len(listed.content) < 20_000
    assert job_id in _ids(listed.text)
    assert retried.status_code == 303
    # No statement of these four requests selects the payload itself: the job page reads a
    # server-side prefix of its text, the list and the action's existence check read no payload.
    selects = [sql for sql in seen if sql.lstrip().startswith("SELECT")]
    assert selects
    for sql in selects:
        assert re.sub(r"CAST\(jobs\.payload AS TEXT\)", "", sql).count("jobs.payload") == 0, sql
    assert any("left(p.t" in sql for sql in selects)


def test_a_small_payload_is_shown_whole_and_indented(engine: Engine, client: TestClient) -> None:
    job_id = failed_job(engine, payload={"b": [1, 2], "a": "é <x>"})
    html = client.get(f"/jobs/{job_id}").text
    assert 'id="payload-cut"' not in html
    shown = '{\n  "a": "é <x>",\n  "b": [\n    1,\n    2\n  ]\n}'
    assert str(markupsafe.escape(shown)) in html


# -- bulk retry and cancel -------------------------------------------------------------------------


def test_bulk_retry_of_selected_failed_jobs(engine: Engine, client: TestClient) -> None:
    mine = [failed_job(engine, queue=f"q{i}") for i in range(3)]
    other = failed_job(engine, queue="q9")
    page = client.get("/jobs", params={"status": "failed"}).text
    assert page.count('name="job_id"') == 4
    assert "Retry selected" in page
    assert "Cancel selected" not in page
    token = csrf_token(client, "/jobs?status=failed")
    form = {"csrf_token": token, "action": "retry", "status": "failed", "queue": ""}
    form["job_id"] = [str(i) for i in mine]  # type: ignore[assignment]
    response = client.post("/jobs/bulk", data=form, follow_redirects=False)
    assert response.status_code == 303
    location = response.headers["location"]
    assert location == "/jobs?status=failed&done=retried-selected&n=3"
    assert [row(engine, i)["status"] for i in mine] == ["queued"] * 3
    assert row(engine, other)["status"] == "failed"
    assert "3 of the selected job(s) requeued" in client.get(location).text


def test_bulk_cancel_of_selected_queued_and_running_jobs(
    engine: Engine, client: TestClient
) -> None:
    with engine.begin() as conn:
        queued = pgqueue.enqueue(conn, {}, queue="a")
        pgqueue.enqueue(conn, {}, queue="b")
        (running,) = pgqueue.claim(conn, queue="b")
        kept = pgqueue.enqueue(conn, {}, queue="c")
    page = client.get("/jobs").text
    assert "Retry selected" in page
    assert "Cancel selected" in page
    token = csrf_token(client, "/jobs")
    form = {"csrf_token": token, "action": "cancel", "job_id": [str(queued), str(running.id)]}
    response = client.post("/jobs/bulk", data=form, follow_redirects=False)
    assert response.headers["location"] == "/jobs?done=cancelled-selected&n=2"
    assert row(engine, queued)["last_error"] == "cancelled"
    assert row(engine, running.id)["status"] == "failed"
    assert row(engine, kept)["status"] == "queued"


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"action": "retry"}, "No job selected"),
        ({"action": "delete", "job_id": "1"}, "action must be one of"),
        ({"action": "retry", "job_id": "1x"}, "job_id must be job ids"),
        ({"action": "retry", "job_id": str(2**63)}, "job_id must be job ids"),
        ({"action": "retry", "job_id": [str(i) for i in range(1, 502)]}, "At most 500"),
    ],
)
def test_a_bulk_request_that_cannot_be_one_is_a_400_and_changes_nothing(
    engine: Engine, client: TestClient, fields: dict[str, Any], says: str
) -> None:
    job_id = failed_job(engine)
    token = csrf_token(client, "/jobs")
    response = client.post("/jobs/bulk", data={"csrf_token": token, **fields})
    assert response.status_code == 400
    assert says in response.text
    assert row(engine, job_id)["status"] == "failed"


def test_bulk_needs_the_token_and_a_writable_dashboard(
    engine: Engine, make_client: MakeClient
) -> None:
    job_id = failed_job(engine)
    writable, read_only = make_client(), make_client(read_only=True)
    csrf_token(writable, "/jobs")
    no_token = writable.post("/jobs/bulk", data={"action": "retry", "job_id": str(job_id)})
    assert no_token.status_code == 403
    token = csrf_token(writable, "/jobs")
    foreign = writable.post(
        "/jobs/bulk",
        data={"csrf_token": token, "action": "retry", "job_id": str(job_id)},
        headers={"Origin": "http://attacker.example"},
    )
    assert foreign.status_code == 403
    page = read_only.get("/jobs?status=failed").text
    assert 'name="job_id"' not in page
    assert "Retry selected" not in page
    read_only.cookies.set("pgqueue_csrf", writable.cookies["pgqueue_csrf"])
    refused = read_only.post(
        "/jobs/bulk", data={"csrf_token": token, "action": "retry", "job_id": str(job_id)}
    )
    assert refused.status_code == 403
    assert row(engine, job_id)["status"] == "failed"


# -- a lost connection -----------------------------------------------------------------------------


def _terminate_others(db_url: URL) -> int:
    with psycopg.connect(to_libpq_url(db_url), autocommit=True) as admin:
        found = admin.execute(
            "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()) t"
        ).fetchone()
    assert found is not None
    return int(found[0])


def test_the_first_request_after_the_connections_were_terminated_succeeds(
    engine: Engine, db_url: URL, client: TestClient
) -> None:
    """The test's engine has no pre_ping: the retry on a lost connection is the dashboard's."""
    assert engine.pool._pre_ping is False  # type: ignore[attr-defined]
    job_id = failed_job(engine)
    token = csrf_token(client)
    for path in ("/", "/live", "/jobs", f"/jobs/{job_id}", "/workers"):
        assert client.get(path).status_code == 200
        assert _terminate_others(db_url) >= 1
        again = client.get(path)
        assert again.status_code == 200, (path, again.text)
    _terminate_others(db_url)
    retried = client.post(
        f"/jobs/{job_id}/retry", data={"csrf_token": token}, follow_redirects=False
    )
    assert retried.status_code == 303
    assert row(engine, job_id)["status"] == "queued"
