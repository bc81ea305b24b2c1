"""The POST actions, each checked in the database: 303 back to the page, with its message."""

from __future__ import annotations

import re

from sqlalchemy import Engine, text
from starlette.testclient import TestClient

import pgqueue
from tests.web.conftest import csrf_token, failed_job, row


def _post(client: TestClient, path: str, **fields: str) -> tuple[int, str]:
    token = csrf_token(client)
    response = client.post(path, data={"csrf_token": token, **fields}, follow_redirects=False)
    return response.status_code, response.headers.get("location", "")


def test_retry_requeues_a_failed_job_with_a_fresh_budget(
    engine: Engine, client: TestClient
) -> None:
    job_id = failed_job(engine, error="smtp down")
    before = row(engine, job_id)
    assert before["finished_at"] is not None
    status, location = _post(client, f"/jobs/{job_id}/retry")
    assert (status, location) == (303, f"/jobs/{job_id}?done=retried")
    after = row(engine, job_id)
    assert after["status"] == "queued"
    assert after["max_attempts"] == before["attempts"] + pgqueue.repository.DEFAULT_MAX_ATTEMPTS
    assert after["finished_at"] is None
    assert "Job requeued" in client.get(location).text


def test_retry_of_a_done_job_changes_nothing_and_says_so(
    engine: Engine, client: TestClient
) -> None:
    with engine.begin() as conn:
        pgqueue.enqueue(conn, {})
        (job,) = pgqueue.claim(conn)
        pgqueue.complete(conn, job.id, job.attempts)
    status, location = _post(client, f"/jobs/{job.id}/retry")
    assert (status, location) == (303, f"/jobs/{job.id}?done=not-retried")
    assert row(engine, job.id)["status"] == "done"
    assert "Job not requeued" in client.get(location).text


def test_cancel_fails_a_queued_and_a_running_job(engine: Engine, client: TestClient) -> None:
    with engine.begin() as conn:
        running_id = pgqueue.enqueue(conn, {}, queue="r")
        (running,) = pgqueue.claim(conn, queue="r")
        queued = pgqueue.enqueue(conn, {}, queue="q")
    for job_id in (queued, running.id):
        status, location = _post(client, f"/jobs/{job_id}/cancel")
        assert (status, location) == (303, f"/jobs/{job_id}?done=cancelled")
        after = row(engine, job_id)
        assert (after["status"], after["last_error"]) == ("failed", "cancelled")
        assert after["finished_at"] is not None
    assert running_id == running.id
    status, location = _post(client, f"/jobs/{queued}/cancel")  # already failed
    assert location == f"/jobs/{queued}?done=not-cancelled"
    assert "Job not cancelled" in client.get(location).text


def test_retry_failed_requeues_that_queue_only(engine: Engine, client: TestClient) -> None:
    mine = [failed_job(engine, queue="email") for _ in range(3)]
    other = failed_job(engine, queue="thumbs")
    with engine.begin() as conn:
        cancelled = pgqueue.enqueue(conn, {}, queue="email")
        assert pgqueue.cancel(conn, [cancelled]) == [cancelled]
    status, location = _post(client, "/queues/email/retry-failed")
    assert (status, location) == (303, "/?done=retried-failed&n=3")
    assert [row(engine, i)["status"] for i in mine] == ["queued"] * 3
    assert row(engine, other)["status"] == "failed"
    assert row(engine, cancelled)["status"] == "failed"  # cancelled on purpose: stays
    page = client.get(location).text
    assert "3 failed job(s) requeued (cancelled jobs are left as they are)." in page
    assert 'cancelled jobs stay as they are">Retry failed<' in page


def test_purge_deletes_that_queues_done_jobs_older_than_the_age(
    engine: Engine, client: TestClient
) -> None:
    with engine.begin() as conn:
        for queue in ("email", "email", "email", "thumbs"):
            pgqueue.enqueue(conn, {}, queue=queue)
        for queue in ("email", "thumbs"):
            for job in pgqueue.claim(conn, queue=queue):
                pgqueue.complete(conn, job.id, job.attempts)
        conn.execute(text("UPDATE jobs SET created_at = now() - interval '3 days'"))
        young = pgqueue.enqueue(conn, {}, queue="email")
        (job,) = pgqueue.claim(conn, queue="email")
        pgqueue.complete(conn, job.id, job.attempts)
    assert job.id == young
    # The overview's form only asks: a confirmation page, and nothing deleted yet.
    token = csrf_token(client)
    asked = client.post("/queues/email/purge", data={"csrf_token": token, "older_than": "48h"})
    assert asked.status_code == 200
    assert "Purge the done jobs of" in asked.text
    assert "created more than <b>2d</b> ago" in asked.text
    assert scalar_count(engine) == 5
    form = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', asked.text))
    assert form == {"csrf_token": token, "older_than": "2d", "confirm": "yes"}
    assert 'action="/queues/email/purge"' in asked.text
    response = client.post("/queues/email/purge", data=form, follow_redirects=False)
    status, location = response.status_code, response.headers["location"]
    assert (status, location) == (303, "/?done=purged&n=3")
    with engine.connect() as conn:
        left = conn.execute(text("SELECT queue, count(*) FROM jobs GROUP BY 1 ORDER BY 1")).all()
    assert [tuple(r) for r in left] == [("email", 1), ("thumbs", 1)]
    assert "3 done job(s) deleted." in client.get(location).text


def scalar_count(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text("SELECT count(*) FROM jobs")).scalar_one())


def test_purge_with_a_bad_age_is_a_400_and_deletes_nothing(
    engine: Engine, client: TestClient
) -> None:
    with engine.begin() as conn:
        pgqueue.enqueue(conn, {})
        (job,) = pgqueue.claim(conn)
        pgqueue.complete(conn, job.id, job.attempts)
    token = csrf_token(client)
    for age in ("", "soon", "-1d", "7 weeks"):
        response = client.post(
            "/queues/default/purge",
            data={"csrf_token": token, "older_than": age, "confirm": "yes"},
        )
        assert response.status_code == 400, age
        assert "invalid duration" in response.text
    assert row(engine, job.id)["status"] == "done"


def test_a_queue_name_with_a_slash_and_spaces_round_trips(
    engine: Engine, client: TestClient
) -> None:
    failed = failed_job(engine, queue="mail/out bound?#")
    html = client.get("/").text
    assert 'action="/queues/mail%2Fout%20bound%3F%23/retry-failed"' in html
    status, _ = _post(client, "/queues/mail%2Fout%20bound%3F%23/retry-failed")
    assert status == 303
    assert row(engine, failed)["status"] == "queued"


def test_actions_on_unknown_or_bad_ids_are_404(engine: Engine, client: TestClient) -> None:
    failed_job(engine)
    token = csrf_token(client)
    for path in (
        "/jobs/999999/retry",
        f"/jobs/{2**63}/cancel",
        "/jobs/abc/retry",
        "/queues/a,b/purge",
    ):
        response = client.post(path, data={"csrf_token": token, "older_than": "1d"})
        assert response.status_code == 404, path


def test_get_on_an_action_is_not_allowed(engine: Engine, client: TestClient) -> None:
    job_id = failed_job(engine)
    assert client.get(f"/jobs/{job_id}/retry").status_code == 405
    assert row(engine, job_id)["status"] == "failed"
