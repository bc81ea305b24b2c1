"""The overview's queue table shows each queue's retention (#31 item 4)."""

from __future__ import annotations

import re
from datetime import timedelta

from sqlalchemy import Engine
from starlette.testclient import TestClient

import pgqueue


def _cell(html: str, queue: str) -> str:
    row = re.search(rf'<tr data-queue="{re.escape(queue)}">(.*?)</tr>', html, re.S)
    assert row is not None, html
    cell = re.search(r"<td class=\"retention\" data-retention([^>]*)>([^<]*)</td>", row.group(1))
    assert cell is not None, row.group(1)
    return cell.group(1).strip() + " | " + cell.group(2)


def test_each_queue_shows_its_own_retention_or_the_defaults(
    engine: Engine, client: TestClient
) -> None:
    with engine.begin() as conn:
        pgqueue.enqueue(conn, {}, queue="email")
        pgqueue.enqueue(conn, {}, queue="reports")
        pgqueue.set_retention(conn, failed=timedelta(days=90))
        pgqueue.set_retention(conn, "reports", done=None, failed=timedelta(hours=12))
    html = client.get("/live").text
    assert ">retention</th>" in html
    assert _cell(html, "email") == (
        'title="done and failed from the default" | done 7d, failed 90d'
    )
    assert _cell(html, "reports") == " | done never, failed 12h"
