"""Durable jobs on the command line (#33): ``pgqueue signal`` (exit 0 delivered, 1 unknown or
finished, 2 a payload that is not JSON, each one line, no traceback)."""

from __future__ import annotations

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
