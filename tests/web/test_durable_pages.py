"""Durable jobs on the dashboard (#33): the job page lists the steps, the sleep or signal
awaited and the signals received; its signal form sends a signal (CSRF, read-only and auth as
for the other actions) and says whether it was delivered."""

from __future__ import annotations

import re

from sqlalchemy import Engine, text
from starlette.testclient import TestClient

import pgqueue
from pgqueue.jobs import JobContext
from pgqueue.testing import drain
from tests.web.conftest import MakeClient, csrf_token


def _handler(job: JobContext) -> object:
    job.step("charge", lambda: {"id": "ch_<1>", "note": "y" * 300})
    if job.payload.get("sleep"):
        job.sleep("cool-off", 3600)
    return job.wait_for_signal("approved")


def _jobs(engine: Engine) -> tuple[int, int]:
    with engine.begin() as conn:
        sleeper = pgqueue.enqueue(conn, {"sleep": True}, queue="orders")
        waiter = pgqueue.enqueue(conn, {}, queue="orders")
        pgqueue.signal(conn, sleeper, "early", 1)
    drain(engine, {"orders": _handler})
    return sleeper, waiter


def _signals(engine: Engine, job_id: int) -> object:
    with engine.connect() as conn:
        return conn.execute(
            text("SELECT signals FROM jobs WHERE id = :id"), {"id": job_id}
        ).scalar_one()


def test_the_job_page_lists_steps_sleeps_and_signals(engine: Engine, client: TestClient) -> None:
    sleeper, waiter = _jobs(engine)
    page = client.get(f"/jobs/{sleeper}").text
    assert '<span class="status status-sleeping">sleeping</span>' in page
    assert re.search(r'<dd id="sleeping">cool-off until \d{4}-', page), page
    assert '<dd id="signals">early</dd>' in page
    steps = re.search(r'<table class="steps" id="steps">(.*?)</table>', page, re.S)
    assert steps is not None
    assert "ch_&lt;1&gt;" in steps.group(1)  # escaped
    assert "y" * 150 in steps.group(1)
    assert "y" * 250 not in steps.group(1)  # cut to 200 characters
    assert "wakes at" in steps.group(1)
    page = client.get(f"/jobs/{waiter}").text
    assert "awaiting signal</span>" in page
    assert re.search(r'<dd id="awaiting">signal approved until \d{4}-', page) is None
    assert '<dd id="awaiting">signal approved, no timeout</dd>' in page
    assert 'id="signal-form"' in page
    assert "9999" not in page


def test_the_signal_form_sends_and_says_so(engine: Engine, client: TestClient) -> None:
    _, waiter = _jobs(engine)
    token = csrf_token(client, f"/jobs/{waiter}")
    sent = client.post(
        f"/jobs/{waiter}/signal",
        data={"csrf_token": token, "name": "approved", "payload": '{"by": "ann"}'},
        follow_redirects=False,
    )
    assert sent.status_code == 303
    assert sent.headers["location"].endswith("done=signalled")
    assert drain(engine, {"orders": _handler}).results == {waiter: {"by": "ann"}}
    again = client.post(
        f"/jobs/{waiter}/signal",
        data={"csrf_token": token, "name": "approved"},
        follow_redirects=False,
    )
    assert again.headers["location"].endswith("done=not-signalled")
    assert "Signal not sent" in client.get(again.headers["location"]).text


def test_the_signal_form_refuses_what_it_must(engine: Engine, make_client: MakeClient) -> None:
    _, waiter = _jobs(engine)
    client = make_client()
    token = csrf_token(client, f"/jobs/{waiter}")
    for data, status in (
        ({"name": "approved"}, 403),  # no token
        ({"csrf_token": token, "name": ""}, 400),
        ({"csrf_token": token, "name": "approved", "payload": "{nope"}, 400),
        ({"csrf_token": token, "name": "approved", "payload": "NaN"}, 400),
    ):
        response = client.post(f"/jobs/{waiter}/signal", data=data, follow_redirects=False)
        assert response.status_code == status, (data, response.text)
    assert (
        client.post(
            f"/jobs/{waiter + 99}/signal", data={"csrf_token": token, "name": "x"}
        ).status_code
        == 404
    )
    assert _signals(engine, waiter) is None

    read_only = make_client(read_only=True)
    page = read_only.get(f"/jobs/{waiter}").text
    assert 'id="signal-form"' not in page
    refused = read_only.post(f"/jobs/{waiter}/signal", data={"name": "approved"})
    assert refused.status_code == 403

    guarded = make_client(auth="ann:secret")
    assert guarded.post(f"/jobs/{waiter}/signal", data={"name": "approved"}).status_code == 401
    assert _signals(engine, waiter) is None


def test_the_overview_counts_sleeping_and_awaiting_jobs_apart(
    engine: Engine, client: TestClient
) -> None:
    _jobs(engine)
    page = client.get("/").text
    for kind, state in (("sleeping", "sleeping"), ("awaiting_signal", "awaiting+signal")):
        cell = re.search(rf'<span data-count="{kind}">(.*?)</span>', page, re.S)
        assert cell is not None, page
        assert f"status={state}" in cell.group(1)
        assert ">1</a>" in cell.group(1)
    waiting = re.search(r'<td class="n" data-count="waiting">(.*?)</td>', page, re.S)
    assert waiting is not None
    assert waiting.group(1).strip() == "0"
