"""The job page's log section (#34): per attempt, newest attempt first, hostile text escaped."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from datetime import timedelta

import pytest
from sqlalchemy import Engine
from starlette.testclient import TestClient

import pgqueue

SCRIPT = "<script>alert('pwned')</script>"
ESCAPED = "&lt;script&gt;alert(&#39;pwned&#39;)&lt;/script&gt;"


@pytest.fixture
def hostile_logger() -> Iterator[logging.Logger]:
    logger = logging.getLogger(f"app.{SCRIPT}")
    logger.setLevel(logging.INFO)
    yield logger
    logger.setLevel(logging.NOTSET)


def test_the_job_page_shows_each_attempts_lines_escaped(
    engine: Engine, client: TestClient, hostile_logger: logging.Logger
) -> None:
    def handler(job: pgqueue.JobContext) -> None:
        job.log(f"attempt {job.attempts} {SCRIPT}", **{SCRIPT: SCRIPT})
        hostile_logger.warning("captured %s", SCRIPT)
        if job.attempts == 1:
            raise RuntimeError("again")

    with engine.begin() as conn:
        job_id = pgqueue.enqueue(conn, {}, queue="logs", max_attempts=2)
        quiet = pgqueue.enqueue(conn, {}, queue="quiet")
    at_once = pgqueue.RetryPolicy(base=timedelta(0), cap=timedelta(0))
    worker = pgqueue.Worker(
        engine, {"logs": handler, "quiet": lambda job: None}, retry=at_once, listen=False
    )
    assert worker.run(until_empty=True).done == 2
    html = client.get(f"/jobs/{job_id}").text
    assert "<script>alert" not in html
    section = html[html.index('<div id="logs">') :]
    section = section[: section.index("</div>")]
    # Newest attempt first, each with its own lines.
    assert re.findall(r'data-attempt="(\d+)"', section) == ["2", "1"]
    assert section.count(f"attempt 2 {ESCAPED}") == 1
    assert section.count(f"attempt 1 {ESCAPED}") == 1
    assert section.count(f"captured {ESCAPED}") == 2
    assert f"app.{ESCAPED}" in section  # the logger's name
    assert f"&#34;{ESCAPED}&#34;: &#34;{ESCAPED}&#34;" in section  # the fields
    assert section.count('<td class="name">job.log</td>') == 2
    assert section.count('class="log-warning"') == 2
    never = client.get(f"/jobs/{quiet}").text
    assert 'id="logs">none' in never
