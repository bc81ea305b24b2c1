"""The dashboard's new pages (#34): a queue with a long history, and a large workflow's graph.

``python -m bench.pages [--url SERVER_URL] [--done N] [--nodes N] [--requests R]``

One throwaway database holds:

- ``--done`` (default 1,000,000) done jobs of the queue ``bench``, finished one a second up to
  now (one ``INSERT ... SELECT generate_series``), beside a few hundred of its live and failed
  jobs: ready, scheduled, running (held by a worker whose lease is current), failed, cancelled
  and expired; and 10,000 done jobs of 20 other queues;
- a workflow of ``--nodes`` (default 500) jobs made through the public API as an application
  makes one: 25 stages, each a ``group`` of 19 task calls and its ``then``, the members of a stage
  depending on the ``then`` of the stage before (20 jobs a stage: no group is folded);

then ``VACUUM ANALYZE``. The dashboard's app (``pgqueue.web.create_app``) is called in this
process through Starlette's test client, as a browser would call it: ``/queues/bench`` and the
graph of the middle stage's ``then``, ``--requests`` times each after one warm-up request, in
turns. Each request's server time is the time from the call to the full response (the app, its
statements and the template; no network). Prints one JSON object: each page's median, best and
worst, and the counts the queue page showed (checked against a count over the table). Not part
of ``.ci/run``.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.engine import URL
from starlette.testclient import TestClient

import pgqueue
from bench import _db
from pgqueue.web import create_app

registry = pgqueue.Registry()


@registry.task(queue="flow")
def step(stage: int, i: int) -> None:
    """A workflow step (never run here)."""


#: The queue page's live and failed jobs beside the history: how many, and the SQL values of
#: ``status, attempts, cancelled_at, expired_at, locked_until, locked_by, run_at, finished_at``.
_COLUMNS = (
    "INSERT INTO jobs (queue, payload, status, attempts, cancelled_at, expired_at, locked_until, "
    "locked_by, run_at, finished_at) SELECT %(queue)s, '{}', "
)
_LIVE = (
    (200, _COLUMNS + "'queued', 0, NULL, NULL, NULL, NULL, now() - interval '1 minute', NULL"),
    (50, _COLUMNS + "'queued', 0, NULL, NULL, NULL, NULL, now() + interval '1 hour', NULL"),
    (30, _COLUMNS + "'running', 1, NULL, NULL, now() + interval '1 hour', 'w', now(), NULL"),
    (100, _COLUMNS + "'failed', 1, NULL, NULL, NULL, NULL, now(), now()"),
    (20, _COLUMNS + "'failed', 0, now(), NULL, NULL, NULL, now(), now()"),  # cancelled
    (10, _COLUMNS + "'failed', 0, NULL, now(), NULL, NULL, now(), now()"),  # expired
)


def fill_history(url: URL, done: int) -> None:
    """The queue ``bench``'s history and live jobs, and other queues' history (no VACUUM)."""
    with _db.admin_connect(url) as conn:
        conn.execute(
            "INSERT INTO jobs (queue, payload, status, attempts, created_at, finished_at) "
            "SELECT %(queue)s, '{}', 'done', 1, now() - make_interval(secs => i), "
            "now() - make_interval(secs => i) FROM generate_series(%(n)s, 1, -1) AS i",
            {"queue": _db.QUEUE, "n": done},
        )
        conn.execute(
            "INSERT INTO jobs (queue, payload, status, attempts, finished_at) "
            "SELECT 'other' || (i % 20), '{}', 'done', 1, now() - make_interval(secs => i) "
            "FROM generate_series(1, 10000) AS i"
        )
        for count, insert in _LIVE:
            conn.execute(
                insert + " FROM generate_series(1, %(n)s)", {"queue": _db.QUEUE, "n": count}
            )


def fill_workflow(engine: Engine, nodes: int) -> int:
    """A workflow of ``nodes`` jobs (stages of a 19-member group and its ``then``, each stage
    after the last); the id of the middle stage's ``then``."""
    stages = max(1, nodes // 20)
    thens: list[int] = []
    with engine.begin() as conn:
        for stage in range(stages):
            task = step.options(depends_on=[thens[-1]]) if thens else step
            members = [task.s(stage, i) for i in range(19)]
            ids = pgqueue.group(conn, members, then=step.s(stage, 19))
            assert ids.then is not None
            thens.append(ids.then)
    return thens[len(thens) // 2]


def _timed(client: TestClient, path: str) -> tuple[float, str]:
    started = time.perf_counter()
    response = client.get(path)
    elapsed = time.perf_counter() - started
    if response.status_code != 200:
        raise RuntimeError(f"{path}: {response.status_code} {response.text[:300]}")
    return elapsed * 1000, response.text


def _summary(times: list[float]) -> dict[str, float]:
    return {
        "median_ms": round(statistics.median(times), 1),
        "best_ms": round(min(times), 1),
        "worst_ms": round(max(times), 1),
    }


def _shown_counts(html: str) -> dict[str, int]:
    """The counts the queue page shows, by label (a linked count is inside its link)."""
    found = re.findall(r'data-count="(\w+)"[^>]*>(≈ )?(?:<a [^>]*>)?([\d,]+)', html)
    return {
        label + ("_estimated" if about else ""): int(n.replace(",", ""))
        for label, about, n in found
    }


def _true_counts(url: URL) -> dict[str, int]:
    """The queue's counts over the table (what the page must show, or estimate)."""
    with _db.admin_connect(url) as conn:
        row = conn.execute(
            "SELECT count(*) FILTER (WHERE status = 'done'), "
            "count(*) FILTER (WHERE status = 'failed' AND cancelled_at IS NULL "
            "AND expired_at IS NULL), count(*) FILTER (WHERE cancelled_at IS NOT NULL), "
            "count(*) FILTER (WHERE expired_at IS NOT NULL), "
            "count(*) FILTER (WHERE status = 'running'), "
            "count(*) FILTER (WHERE status = 'queued' AND run_at <= now()), "
            "count(*) FILTER (WHERE status = 'queued' AND run_at > now()) "
            "FROM jobs WHERE queue = %s",
            (_db.QUEUE,),
        ).fetchone()
    assert row is not None
    names = ("done", "failed", "cancelled", "expired", "running", "ready", "scheduled")
    return dict(zip(names, (int(n) for n in row), strict=True))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.pages", description=__doc__)
    parser.add_argument("--url", help="a server URL (default: the embedded PostgreSQL)")
    parser.add_argument("--done", type=int, default=1_000_000)
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--requests", type=int, default=9)
    args = parser.parse_args(argv)
    with _db.server(args.url) as (server_url, _), _db.throwaway_database(server_url) as url:
        engine = _db.make_engine(url)
        try:
            started = time.perf_counter()
            fill_history(url, args.done)
            then = fill_workflow(engine, args.nodes)
            _db.analyze(url)
            filled_s = time.perf_counter() - started
            pages = {"queue": f"/queues/{_db.QUEUE}", "graph": f"/jobs/{then}/graph"}
            times: dict[str, list[float]] = {name: [] for name in pages}
            html: dict[str, str] = {}
            with TestClient(create_app(engine)) as client:
                for path in pages.values():
                    _timed(client, path)  # warm: templates compiled, statements cached
                for _ in range(args.requests):
                    for name, path in pages.items():
                        ms, html[name] = _timed(client, path)
                        times[name].append(ms)
            boxes = len(re.findall(r'class="node"', html["graph"]))
            out: dict[str, Any] = {
                "done": args.done,
                "nodes": args.nodes,
                "requests": args.requests,
                "fill_s": round(filled_s, 1),
                "queue_page": {**_summary(times["queue"]), "shown": _shown_counts(html["queue"])},
                "graph_page": {**_summary(times["graph"]), "boxes": boxes},
                "true_counts": _true_counts(url),
            }
        finally:
            engine.dispose()
    json.dump(out, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
