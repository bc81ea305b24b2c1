"""Enqueue throughput: ``enqueue()`` one per transaction and ``enqueue_many`` by 1,000, each beside
the same statements driven by a minimal psycopg loop."""

from __future__ import annotations

import json
import time
from typing import Any

import psycopg
from sqlalchemy import Engine
from sqlalchemy.engine import URL

import pgqueue
from bench import _db, _sql
from pgqueue._base.urls import to_libpq_url


def run(url: URL, engine: Engine, *, single: int, many: int, batch: int = 1_000) -> dict[str, Any]:
    """Jobs/s of each way to enqueue; the table is emptied before each measurement."""
    one_sql = _sql.enqueue_sql(engine)
    many_sql = _sql.enqueue_many_sql(engine)
    batches = max(1, many // batch)

    _db.reset(url)
    t0 = time.perf_counter()
    for i in range(single):
        with engine.begin() as conn:
            pgqueue.enqueue(conn, {"i": i}, queue=_db.QUEUE)
    one = single / (time.perf_counter() - t0)

    _db.reset(url)
    t0 = time.perf_counter()
    with psycopg.connect(to_libpq_url(url)) as raw:
        query = one_sql.sql.encode()
        params = dict(one_sql.params)
        for i in range(single):
            params["payload_json"] = json.dumps({"i": i})
            raw.execute(query, params).fetchone()  # BEGIN (implicit), INSERT ... RETURNING
            raw.commit()
    one_raw = single / (time.perf_counter() - t0)

    payload_batches = [[{"i": b * batch + i} for i in range(batch)] for b in range(batches)]
    _db.reset(url)
    t0 = time.perf_counter()
    for payloads in payload_batches:
        with engine.begin() as conn:
            pgqueue.enqueue_many(conn, payloads, queue=_db.QUEUE)
    bulk = batches * batch / (time.perf_counter() - t0)

    _db.reset(url)
    t0 = time.perf_counter()
    with psycopg.connect(to_libpq_url(url)) as raw:
        query = many_sql.sql.encode()
        params = dict(many_sql.params)
        for payloads in payload_batches:
            params["batch_json"] = json.dumps(payloads, separators=(",", ":"))
            raw.execute(query, params).fetchall()
            raw.commit()
    bulk_raw = batches * batch / (time.perf_counter() - t0)
    no_trigger = _plain_insert(url, payload_batches, trigger=False)
    _db.reset(url)
    return {
        "single": {"jobs": single, "jobs_per_s": one, "raw_jobs_per_s": one_raw},
        "many": {
            "jobs": batches * batch,
            "batch": batch,
            "jobs_per_s": bulk,
            "raw_jobs_per_s": bulk_raw,
            # The floor of any enqueue: a prepared 1,000-row INSERT ... VALUES of (queue,
            # payload), the jobs_notify trigger disabled.
            "no_trigger_insert_jobs_per_s": no_trigger,
        },
        "sql": {"enqueue": one_sql.sql, "enqueue_many": many_sql.sql},
    }


def _plain_insert(url: URL, payload_batches: list[list[Any]], *, trigger: bool) -> float:
    """Jobs/s of a prepared multi-row ``INSERT ... VALUES`` through bare psycopg."""
    _db.reset(url)
    size = len(payload_batches[0])
    # Placeholders only: the values travel as parameters.
    query = "INSERT INTO jobs (queue, payload) VALUES " + ", ".join(["(%s, %s::jsonb)"] * size)  # noqa: S608
    with psycopg.connect(to_libpq_url(url)) as raw:
        if not trigger:
            raw.execute("ALTER TABLE jobs DISABLE TRIGGER jobs_notify")
            raw.commit()
        try:
            t0 = time.perf_counter()
            for payloads in payload_batches:
                args: list[str] = []
                for p in payloads:
                    args += [_db.QUEUE, json.dumps(p)]
                raw.execute(query, args, prepare=True)
                raw.commit()
            rate = len(payload_batches) * size / (time.perf_counter() - t0)
        finally:
            raw.rollback()
            raw.execute("ALTER TABLE jobs ENABLE TRIGGER jobs_notify")
            raw.commit()
    return rate
