"""Every GET route over HTTP: what each page shows, escaping, bad ids and bad filters."""

from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import URL
from starlette.testclient import TestClient

import pgqueue
from pgqueue.web import create_app
from tests.dead_tuples import pile_up
from tests.web.conftest import MakeClient, failed_job

SCRIPT = "<script>alert('pwned')</script>"


def _cells(html: str, queue: str) -> dict[str, str]:
    """``{count name: text}`` of the queue's row in the overview."""
    found = re.search(rf'<tr data-queue="{re.escape(queue)}">(.*?)</tr>', html, re.S)
    assert found is not None, html
    return dict(re.findall(r'data-count="(\w+)">\s*(?:<a [^>]*>)?(\d+)', found.group(1)))


def test_overview_is_complete_html_with_every_queue_and_its_counts(
    engine: Engine, client: TestClient
) -> None:
    with engine.begin() as conn:
        pgqueue.enqueue_many(conn, [{}, {}, {}], queue="email")
        pgqueue.enqueue(conn, {}, queue="email", delay=timedelta(minutes=5))
        pgqueue.enqueue(conn, {}, queue="thumbs")
        (running,) = pgqueue.claim(conn, queue="thumbs")
        cancelled = pgqueue.enqueue(conn, {}, queue="email", delay=timedelta(minutes=5))
        assert pgqueue.cancel(conn, [cancelled]) == [cancelled]
    failed_job(engine, queue="email")
    response = client.get("/")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    html = response.text
    assert html.startswith("<!doctype html>")
    assert _cells(html, "email") == {
        "ready": "3",
        "scheduled": "1",
        "waiting": "0",
        "sleeping": "0",
        "awaiting_signal": "0",
        "running": "0",
        "expired_leases": "0",
        "failed": "1",  # a cancelled job is counted apart (issue #20, item 3)
        "cancelled": "1",
        "expired": "0",  # counted apart too (#31)
        "done": "0",
    }
    assert _cells(html, "thumbs")["running"] == "1"
    # The doctor's findings and the vacuum view are on the same first response.
    assert "1 failed job(s)" in html
    assert "1 cancelled job(s)" in html
    assert "dead rows" in html
    assert "oldest snapshot" in html
    assert 'data-refresh-url="/live"' in html
    assert running.queue == "thumbs"


def test_overview_shows_the_vacuum_warning_of_a_never_vacuumed_table(
    engine: Engine, db_url: URL, client: TestClient
) -> None:
    pile_up(db_url, engine, 3_000)
    response = client.get("/")
    assert response.status_code == 200, response.text
    warning = re.search(r'<li class="sev-warning">(.*?)</li>', response.text, re.S)
    assert warning is not None, response.text
    assert "<b>vacuum</b>: jobs: 0 live, 3000 dead tuples (100%)" in warning.group(1)
    assert "last autovacuum never, last vacuum never" in warning.group(1)
    assert "VACUUM jobs;" in warning.group(1)


def test_overview_shows_a_backlog_no_worker_takes(engine: Engine, client: TestClient) -> None:
    with engine.begin() as conn:
        ids = pgqueue.enqueue_many(conn, [{}] * 100, queue="reports")
        conn.execute(
            text("UPDATE jobs SET run_at = now() - interval '2 hours' WHERE id = ANY(:ids)"),
            {"ids": ids},
        )
    response = client.get("/")
    assert response.status_code == 200, response.text
    found = re.search(r'<li class="sev-warning">.*?<b>backlog</b>: (.*?)</li>', response.text, re.S)
    assert found is not None, response.text
    assert "no pgqueue worker is connected to this database" in found.group(1)
    assert re.search(r"reports 72\d\d s", found.group(1))


def test_live_fragment_is_the_refreshed_part_alone(engine: Engine, client: TestClient) -> None:
    assert "No jobs yet." in client.get("/live").text
    with engine.begin() as conn:
        pgqueue.enqueue(conn, {}, queue="late")
    fragment = client.get("/live").text
    assert not fragment.lstrip().startswith("<!doctype")
    assert _cells(fragment, "late")["ready"] == "1"


def test_overview_charts_the_jobs_finished_in_the_last_hour(
    engine: Engine, client: TestClient
) -> None:
    with engine.begin() as conn:
        pgqueue.enqueue_many(conn, [{}] * 4, queue="email")
        claimed = pgqueue.claim(conn, queue="email")
        for job in claimed[:3]:
            pgqueue.complete(conn, job.id, job.attempts)
        # Finished two hours ago: outside the chart.
        conn.execute(
            text("UPDATE jobs SET finished_at = now() - interval '2 hours' WHERE id = :id"),
            {"id": claimed[2].id},
        )
    failed_job(engine, queue="email")
    html = client.get("/").text
    chart = re.search(r'<figure class="chart" data-queue="email">(.*?)</figure>', html, re.S)
    assert chart is not None
    assert "2 done, 1 failed (peak 3/min)" in chart.group(1)
    assert len(re.findall(r'<rect class="done"', chart.group(1))) == 1  # one minute, one bar
    assert "<title>" in chart.group(1)
    assert "2 done, 1 failed</title>" in chart.group(1)


def test_job_list_links_each_row_and_filters_by_queue_and_status(
    engine: Engine, client: TestClient
) -> None:
    with engine.begin() as conn:
        kept = pgqueue.enqueue(conn, {}, queue="email")
        other = pgqueue.enqueue(conn, {}, queue="thumbs")
    failed = failed_job(engine, queue="email", error="smtp down")
    html = client.get("/jobs").text
    for job_id in (kept, other, failed):
        assert f'href="/jobs/{job_id}"' in html
    assert html.index(f'data-job-id="{failed}"') < html.index(
        f'data-job-id="{kept}"'
    )  # newest first
    only = client.get("/jobs", params={"queue": "email", "status": "failed"}).text
    assert re.findall(r'data-job-id="(\d+)"', only) == [str(failed)]
    assert "smtp down" in only


def _ids_shown(html: str) -> list[int]:
    return [int(i) for i in re.findall(r'data-job-id="(\d+)"', html)]


def _older_link(html: str) -> str | None:
    found = re.search(r'rel="next" href="([^"]+)"', html)
    return None if found is None else found.group(1).replace("&amp;", "&")


def test_job_list_pages_by_keyset(engine: Engine, client: TestClient) -> None:
    with engine.begin() as conn:
        ids = pgqueue.enqueue_many(conn, [{}] * 7)
    newest_first = ids[::-1]
    first = client.get("/jobs", params={"limit": 3}).text
    assert _ids_shown(first) == newest_first[:3]
    link = _older_link(first)
    assert link is not None
    assert f"before={newest_first[2]}" in link  # the last id shown: a keyset, not an offset
    assert "limit=3" in link
    assert "offset" not in link
    second = client.get(link).text
    assert _ids_shown(second) == newest_first[3:6]
    link = _older_link(second)
    assert link is not None
    last = client.get(link).text
    assert _ids_shown(last) == newest_first[6:]
    assert _older_link(last) is None
    assert "« newest" in last


@pytest.mark.parametrize(
    ("params", "problem"),
    [
        (
            {"status": "bogus"},
            "status must be one of queued, waiting, running, done, failed, cancelled",
        ),
        ({"before": "x"}, "before must be an integer"),
        ({"before": "0"}, "before must be an integer from 1"),
        ({"before": str(2**63)}, "before must be an integer"),
        ({"limit": "100000"}, "limit must be an integer from 1 to 500"),
        ({"queue": "a,b"}, "must not contain a comma"),
    ],
)
def test_bad_filters_are_a_422_that_says_why(
    client: TestClient, params: dict[str, str], problem: str
) -> None:
    response = client.get("/jobs", params=params)
    assert response.status_code == 422
    assert problem in response.text


def test_job_page_shows_every_field(engine: Engine, client: TestClient) -> None:
    with engine.begin() as conn:
        job_id = pgqueue.enqueue(
            conn, {"to": 42}, queue="email", priority=7, headers={"trace": "abc"}, unique_key="k1"
        )
    html = client.get(f"/jobs/{job_id}").text
    for fragment in (
        f"Job {job_id}",
        "queued",
        "<dd>7</dd>",
        "<dd>0/5</dd>",
        "&#34;to&#34;: 42",
        "&#34;trace&#34;: &#34;abc&#34;",
        "k1",
        "run_at",
        "locked_until",
        "created",
        "finished",
        "last_error",
    ):
        assert fragment in html, fragment


def test_payload_and_last_error_with_script_render_as_text(
    engine: Engine, client: TestClient
) -> None:
    job_id = failed_job(engine, queue=SCRIPT, payload={"html": SCRIPT}, error=SCRIPT)
    escaped = "&lt;script&gt;alert(&#39;pwned&#39;)&lt;/script&gt;"
    for path in ("/", "/live", "/jobs", f"/jobs/{job_id}", "/jobs?status=failed"):
        html = client.get(path).text
        assert "<script>alert" not in html, path
        assert escaped in html, path
    assert "&#34;html&#34;: &#34;&lt;script&gt;" in client.get(f"/jobs/{job_id}").text


def render_invoice(job: pgqueue.JobContext) -> None:
    raise ValueError(SCRIPT)


def test_job_page_shows_the_error_history_and_each_traceback(
    engine: Engine, client: TestClient
) -> None:
    """Attempt, time and error per failed attempt, each traceback in a ``<details>`` (the
    newest open), all escaped; a job that never failed says none."""
    with engine.begin() as conn:
        job_id = pgqueue.enqueue(conn, {}, queue="invoices", max_attempts=2)
        fine = pgqueue.enqueue(conn, {}, queue="other")
    at_once = pgqueue.RetryPolicy(base=timedelta(0), cap=timedelta(0))
    worker = pgqueue.Worker(engine, {"invoices": render_invoice}, retry=at_once, listen=False)
    assert worker.run(until_empty=True).failed == 1
    html = client.get(f"/jobs/{job_id}").text
    section = html[html.index('<table class="errors" id="errors">') :]
    section = section[: section.index("</table>")]
    assert re.findall(r'<td class="n">(\d+)</td>', section) == ["1", "2"]
    assert len(re.findall(r"<td>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC</td>", section)) == 2
    assert section.count("<details") == 2
    assert section.count("<details open>") == 1
    assert section.rindex("<details open>") > section.rindex("<details>")  # the newest is open
    assert section.count("Traceback (most recent call last):") == 2
    assert "in render_invoice" in section
    assert "<script>alert" not in html
    assert "ValueError: &lt;script&gt;alert(&#39;pwned&#39;)&lt;/script&gt;" in section
    never = client.get(f"/jobs/{fine}").text
    assert 'id="errors"' not in never
    assert '<h2>errors</h2>\n<p class="empty">none</p>' in never


@pytest.mark.parametrize("path", ["/jobs/999999", f"/jobs/{2**63}", f"/jobs/{10**30}"])
def test_unknown_job_is_a_404(client: TestClient, path: str) -> None:
    response = client.get(path)
    assert response.status_code == 404
    assert "No job with id" in response.text


@pytest.mark.parametrize("path", ["/jobs/abc", "/jobs/-1", "/jobs/1.5", "/nowhere"])
def test_non_integer_ids_and_unknown_paths_are_a_404(client: TestClient, path: str) -> None:
    response = client.get(path)
    assert response.status_code == 404
    assert "<!doctype html>" in response.text


def test_static_files_ship_in_the_package(client: TestClient) -> None:
    script = client.get("/static/pgqueue.js")
    assert script.status_code == 200
    assert "javascript" in script.headers["content-type"]
    assert "data-refresh-url" in script.text
    assert client.get("/static/pgqueue.css").status_code == 200
    assert client.get("/static/nothing.js").status_code == 404


def test_every_response_carries_the_security_headers(client: TestClient) -> None:
    for path in ("/", "/static/pgqueue.js", "/nowhere"):
        headers = client.get(path).headers
        assert "frame-ancestors 'none'" in headers["content-security-policy"]
        assert "script-src 'self'" in headers["content-security-policy"]
        assert headers["x-content-type-options"] == "nosniff"
        assert headers["x-frame-options"] == "DENY"


def test_no_page_shows_the_database_password(make_client: MakeClient, engine: Engine) -> None:
    """Trust auth ignores the password, so the app works with one in its URL; it never shows."""
    secret = "hunter2-in-the-url"
    with_password = create_engine(engine.url.set(password=secret))
    try:
        client = make_client(create_app(with_password))
        html = "".join(client.get(p).text for p in ("/", "/live", "/jobs", "/nowhere"))
    finally:
        with_password.dispose()
    assert "Queues" in html
    assert secret not in html


def test_a_database_error_is_a_503_with_the_password_masked(
    make_client: MakeClient, engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "hunter2-in-the-url"
    gone = create_engine(
        engine.url.set(password=secret, database="pgqueue_no_such_database"),
        connect_args={"connect_timeout": 5},
    )
    try:
        response = make_client(create_app(gone)).get("/")
    finally:
        gone.dispose()
    assert response.status_code == 503
    assert "Database error" in response.text
    assert "pgqueue_no_such_database" in response.text
    assert secret not in response.text
    assert secret not in caplog.text


def test_job_page_shows_task_arguments_result_progress_and_error(
    engine: Engine, client: TestClient
) -> None:
    """#22: the task's name (a link to its jobs), its arguments, result and progress; a result
    or progress holding markup renders as text."""
    with engine.begin() as conn:
        job_id, plain = pgqueue.enqueue_many(
            conn, [{"args": [42], "kwargs": {"template": "reset"}}, {}], queue="emails"
        )
        conn.execute(
            text(
                "UPDATE jobs SET task = 'app.send_email', status = 'done', finished_at = now(), "
                "result = CAST(:r AS jsonb), progress = '{\"sent\": 3}', last_error = 'SMTP 451' "
                "WHERE id = :id"
            ),
            {"r": json.dumps({"html": SCRIPT}), "id": job_id},
        )
    html = client.get(f"/jobs/{job_id}").text
    for fragment in (
        'id="task"',
        "app.send_email",
        "/jobs?task=app.send_email",
        "arguments (payload)",
        "&#34;template&#34;: &#34;reset&#34;",
        '<pre id="result">',
        "&#34;html&#34;: &#34;&lt;script&gt;",
        '<pre id="progress">',
        "&#34;sent&#34;: 3",
        "SMTP 451",
    ):
        assert fragment in html, fragment
    assert "<script>alert" not in html
    other = client.get(f"/jobs/{plain}").text
    assert "- (queue handler)" in other
    assert "none yet" in other


def test_job_list_filters_by_task(engine: Engine, client: TestClient) -> None:
    with engine.begin() as conn:
        ids = pgqueue.enqueue_many(conn, [{}, {}, {}], queue="mixed")
        conn.execute(text("UPDATE jobs SET task = 'app.a' WHERE id = ANY(:ids)"), {"ids": ids[:2]})
    html = client.get("/jobs?task=app.a").text
    shown = {int(i) for i in re.findall(r'href="/jobs/(\d+)"', html)}
    assert shown == set(ids[:2])
    assert 'value="app.a"' in html
    assert client.get("/jobs?task=app.none").text.count('href="/jobs/') == 0
    everything = client.get("/jobs").text
    assert {int(i) for i in re.findall(r'href="/jobs/(\d+)"', everything)} >= set(ids)


def test_job_page_links_what_a_job_waits_for_and_what_waits_for_it(
    engine: Engine, client: TestClient
) -> None:
    with engine.begin() as conn:
        first = pgqueue.enqueue(conn, {}, queue="steps")
        second = pgqueue.enqueue(conn, {}, queue="steps")
        then = pgqueue.enqueue(conn, {}, queue="steps", depends_on=[first, second])
        pgqueue.enqueue(conn, {}, queue="steps", delay=timedelta(minutes=5))
    html = client.get(f"/jobs/{then}").text
    waits_for = re.search(r'<dd id="waits-for">(.*?)</dd>', html, re.S)
    assert waits_for is not None, html
    assert re.findall(r'href="/jobs/(\d+)"', waits_for.group(1)) == [str(first), str(second)]
    assert "queued" in waits_for.group(1)
    assert re.search(r'<dd id="waited-by">-</dd>', html)
    parent = client.get(f"/jobs/{first}").text
    waited_by = re.search(r'<dd id="waited-by">(.*?)</dd>', parent, re.S)
    assert waited_by is not None
    assert re.findall(r'href="/jobs/(\d+)"', waited_by.group(1)) == [str(then)]
    # The overview counts the waiting job apart from the ready and the scheduled ones.
    cells = _cells(client.get("/").text, "steps")
    assert (cells["ready"], cells["scheduled"], cells["waiting"]) == ("2", "1", "1")
