"""Durable jobs on the command line (#33): ``pgqueue signal`` (exit 0 delivered, 1 unknown or
finished, 2 a payload that is not JSON, each one line, no traceback)."""

from __future__ import annotations

import re
from collections.abc import Callable

from sqlalchemy import Engine, text

import pgqueue
from pgqueue.jobs import JobContext
from pgqueue.testing import drain
from tests.cli.conftest import Result

Cli = Callable[..., Result]


def _signals(db: Engine, job_id: int) -> object:
    with db.connect() as conn:
        return conn.execute(
            text("SELECT signals FROM jobs WHERE id = :i"), {"i": job_id}
        ).scalar_one()


def test_signal_delivers_and_says_so(cli: Cli, db: Engine) -> None:
    def handler(job: JobContext) -> object:
        return job.wait_for_signal("approved")

    with db.begin() as conn:
        job_id = pgqueue.enqueue(conn, {}, queue="orders")
    drain(db, {"orders": handler})  # awaiting the signal now

    sent = cli("signal", str(job_id), "approved", "--payload", '{"by": "ann"}')
    assert (sent.code, sent.err) == (0, "")
    assert sent.out.strip() == f"signal 'approved' sent to job {job_id}"
    assert drain(db, {"orders": handler}).results == {job_id: {"by": "ann"}}

    again = cli("signal", str(job_id), "approved")  # the job is done now
    assert again.code == 1
    assert again.err.strip() == (
        f"pgqueue: error: job {job_id} is done: signal 'approved' not sent"
    )
    unknown = cli("signal", str(job_id + 100), "approved")
    assert unknown.code == 1
    assert unknown.err.strip() == (
        f"pgqueue: error: no job with id {job_id + 100}: signal 'approved' not sent"
    )


def test_signal_refuses_a_payload_that_is_not_json(cli: Cli, db: Engine) -> None:
    with db.begin() as conn:
        job_id = pgqueue.enqueue(conn, {}, queue="orders")
    for bad in ("{nope", "NaN"):
        refused = cli("signal", str(job_id), "approved", "--payload", bad)
        assert refused.code == 2, refused.err
        assert len(refused.err.strip().splitlines()) == 1
        assert "Traceback" not in refused.err
    assert _signals(db, job_id) is None
    no_payload = cli("signal", str(job_id), "approved")
    assert no_payload.code == 0
    assert _signals(db, job_id)["approved"]["payload"] is None  # type: ignore[index]


def _durable(job: JobContext) -> object:
    job.step("charge", lambda: {"id": "ch_1", "note": "x" * 300})
    if job.payload.get("sleep"):
        job.sleep("cool-off", 3600)
    return job.wait_for_signal("approved", timeout=3600)


def test_show_stats_and_list_tell_sleeping_and_awaiting_jobs(cli: Cli, db: Engine) -> None:
    with db.begin() as conn:
        sleeper = pgqueue.enqueue(conn, {"sleep": True}, queue="orders")
        waiter = pgqueue.enqueue(conn, {}, queue="orders")
        pgqueue.signal(conn, sleeper, "early", [1])
    drain(db, {"orders": _durable})

    shown = cli("show", str(sleeper))
    assert shown.code == 0, shown.err
    assert re.search(r"^status: +sleeping$", shown.out, re.M), shown.out
    assert re.search(r"^sleeping: +'cool-off' until \d{4}-", shown.out, re.M), shown.out
    assert re.search(r"^signals: +received 'early'$", shown.out, re.M), shown.out
    assert re.search(r"^steps: +2 \(in the order reached\)$", shown.out, re.M), shown.out
    (charge,) = [line for line in shown.out.splitlines() if line.lstrip().startswith("charge")]
    assert '{"id": "ch_1", "note": "xxx' in charge
    assert charge.rstrip().endswith("xxx...")  # cut to 200 characters
    assert "wakes at" in shown.out

    waiting = cli("show", str(waiter))
    assert re.search(r"^status: +awaiting signal$", waiting.out, re.M), waiting.out
    assert re.search(r"^awaiting: +signal 'approved' until \d{4}-", waiting.out, re.M)
    assert "awaited until" in waiting.out

    stats = cli("stats", "--json").json()
    (orders,) = stats["queues"]
    assert (orders["sleeping"], orders["awaiting_signal"], orders["ready"]) == (1, 1, 0)
    assert (orders["waiting"], orders["scheduled"]) == (0, 0)
    table = cli("stats")
    assert "sleeping" in table.out
    assert "awaiting_signal" in table.out

    listed = cli("list", "--status", "sleeping", "--json").json()
    assert [job["id"] for job in listed] == [sleeper]
    listed = cli("list", "--status", "awaiting signal", "--json").json()
    assert [job["id"] for job in listed] == [waiter]


def test_retry_reset_steps_forgets_them(cli: Cli, db: Engine) -> None:
    def failing(job: JobContext) -> None:
        job.step("charge", lambda: job.attempts)
        raise RuntimeError("broken")

    with db.begin() as conn:
        kept, reset = pgqueue.enqueue_many(conn, [{}, {}], queue="orders", max_attempts=1)
    drain(db, {"orders": failing})
    assert cli("retry", str(kept)).code == 0
    retried = cli("retry", str(reset), "--reset-steps")
    assert retried.code == 0, retried.err
    with db.connect() as conn:
        steps = dict(conn.execute(text("SELECT id, steps FROM jobs")).all())
    assert steps[kept]["charge"]["value"] == 1
    assert steps[reset] is None
