"""What operators tripped on (#34 item 5), without a browser: a finished job's result says why
there is none, cancelled jobs have a list of their own, a running job shows how long it has run
and a bar for a fractional progress, names break at separators only and stay escaped."""

from __future__ import annotations

from sqlalchemy import Engine
from starlette.testclient import TestClient

import pgqueue
from pgqueue.web._render import TEMPLATES, _progress
from tests.web.conftest import failed_job


def test_a_finished_jobs_result_says_why_there_is_none(engine: Engine, client: TestClient) -> None:
    failed = failed_job(engine, queue="q")
    with engine.begin() as conn:
        queued = pgqueue.enqueue(conn, {}, queue="q")
        cancelled = pgqueue.enqueue(conn, {}, queue="q")
        pgqueue.cancel(conn, [cancelled])
    assert "none: the job failed for good" in client.get(f"/jobs/{failed}").text
    assert "none: the job was cancelled" in client.get(f"/jobs/{cancelled}").text
    assert "none yet" in client.get(f"/jobs/{queued}").text
    page = client.get("/").text
    assert 'href="/jobs?status=cancelled">Cancelled</a>' in page
    listed = client.get("/jobs?status=cancelled").text
    assert f'data-job-id="{cancelled}"' in listed
    assert f'data-job-id="{failed}"' not in listed
    assert f'data-job-id="{cancelled}"' not in client.get("/jobs?status=failed").text


def test_a_running_job_shows_elapsed_time_and_a_progress_bar(
    engine: Engine, client: TestClient
) -> None:
    with engine.begin() as conn:
        job_id = pgqueue.enqueue(conn, {}, queue="q")
        assert [j.id for j in pgqueue.claim(conn, queue="q", limit=1)] == [job_id]
        conn.exec_driver_sql(
            'UPDATE jobs SET progress = \'{"done": 1, "total": 4}\', '
            "locked_at = now() - interval '90 seconds' WHERE id = %s",
            (job_id,),
        )
    html = client.get(f"/jobs/{job_id}").text
    assert 'id="elapsed">1.5 min' in html
    assert '<progress class="job-progress" max="1" value="0.2500">1 / 4</progress>' in html
    # The actions come before the facts: Cancel is in view at the top of the page.
    assert html.index("Cancel</button>") < html.index('<dl class="facts">')


def test_progress_values_a_bar_can_show() -> None:
    assert _progress(0.5) == (0.5, "50%")
    assert _progress({"done": 3, "total": 4}) == (0.75, "3 / 4")
    assert _progress({"fraction": 1}) == (1.0, "100%")
    for value in (2, -1, "half", None, True, {"done": 1, "total": 0}, float("nan"), [0.5]):
        assert _progress(value) is None, value


def test_names_break_at_separators_and_stay_escaped() -> None:
    template = TEMPLATES.from_string("{{ name | breakable }}")
    assert template.render(name="billing.invoices", raw_values=False) == "billing.<wbr>invoices"
    hostile = template.render(name="<script>.x", raw_values=False)
    assert hostile == "&lt;script&gt;.<wbr>x"
    masked = template.render(name="postgresql://u:pw@h/d", raw_values=False)
    assert "pw" not in masked
