"""``/jobs/{id}/graph`` (#34 item 2): a job's whole workflow as server-drawn SVG."""

from __future__ import annotations

import re

from sqlalchemy import Engine
from starlette.testclient import TestClient

import pgqueue
from pgqueue import admin
from pgqueue.web._graph import FOLD_OVER, layout

registry = pgqueue.Registry()
SCRIPT = "<script>alert('pwned')</script>"


@registry.task(queue="flow")
def step(n: int) -> int:
    return n


@registry.task(name=SCRIPT, queue=SCRIPT)
def hostile(n: int) -> int:
    return n


def _boxes(html: str) -> list[tuple[str, str, str | None]]:
    """``(job id, status, members)`` of each box."""
    return re.findall(
        r'<a href="/jobs/(\d+)" class="node" data-job="\d+" data-status="(\w+)"'
        r'(?: data-members="(\d+)")?',
        html,
    )


def test_a_chain_and_a_group_with_a_then(engine: Engine, client: TestClient) -> None:
    with engine.begin() as conn:
        chained = pgqueue.chain(conn, step.s(1), step.s(2), step.s(3))
        grouped = pgqueue.group(conn, [step.s(i) for i in range(10)], then=step.s(99))
        alone = pgqueue.enqueue(conn, {}, queue="alone")
    page = client.get(f"/jobs/{chained[0]}").text
    assert f'href="/jobs/{chained[0]}/graph"' in page
    assert "/graph" not in client.get(f"/jobs/{alone}").text  # no workflow: no link
    html = client.get(f"/jobs/{chained[1]}/graph").text
    boxes = _boxes(html)
    assert [b[0] for b in boxes] == [str(i) for i in chained]
    assert [b[1] for b in boxes] == ["queued", "waiting", "waiting"]
    assert html.count('class="edge"') == 2
    assert 'class="node-waiting focus"' in html
    html = client.get(f"/jobs/{grouped.then}/graph").text
    assert len(_boxes(html)) == 11  # ten members and their then, none folded (<= 20)
    assert html.count('class="edge"') == 10
    assert "<script" not in html.replace('<script src="/static/pgqueue.js" defer></script>', "")
    assert client.get("/jobs/999999/graph").status_code == 404


def test_a_large_group_folds_into_one_box_and_the_walk_is_cut(
    engine: Engine, client: TestClient
) -> None:
    with engine.begin() as conn:
        grouped = pgqueue.group(conn, [hostile.s(i) for i in range(30)], then=step.s(0))
        pgqueue.cancel(conn, grouped.members[:5])
    html = client.get(f"/jobs/{grouped.then}/graph").text
    boxes = _boxes(html)
    assert len(boxes) == 2
    folded = [b for b in boxes if b[2]]
    assert folded == [(str(grouped.members[0]), "queued", "30")]
    assert "25 queued" in html
    assert "5 cancelled" in html
    assert "<script>alert" not in html
    assert "&lt;script&gt;" in html  # the task's name
    # The walk stops at its limit and says so.
    with engine.connect() as conn:
        cut = admin.workflow(conn, grouped.then, limit=10)
    assert cut["cut"] is True
    assert len(cut["nodes"]) == 10


def test_layout_columns_follow_the_dependencies() -> None:
    nodes = [{"id": i, "queue": "q", "task": None, "status": "done"} for i in range(1, 5)]
    graph = layout(nodes, [(1, 2), (2, 3), (1, 4), (4, 3)], focus=1, cut=False)
    x = {b.key: b.x for b in graph.boxes}
    assert x[1] < x[2] == x[4] < x[3]
    assert len(graph.arrows) == 4
    many = [{"id": i, "queue": "q", "task": "t", "status": "done"} for i in range(FOLD_OVER + 1)]
    assert [len(b.members) for b in layout(many, [], focus=0, cut=False).boxes] == [FOLD_OVER + 1]
