"""Claim and reap time on an empty table and on one holding a long finished history."""

from __future__ import annotations

import statistics
import time
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.engine import URL

import pgqueue
from bench import _db


def _time_ms(engine: Engine, repeats: int, work: Any) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        with engine.begin() as conn:
            work(conn)
        times.append((time.perf_counter() - t0) * 1000.0)
    return statistics.median(times)


def _measure(url: URL, engine: Engine, claims: int) -> dict[str, float]:
    _db.fill(url, claims * 10)
    claim_ms = _time_ms(engine, claims, lambda conn: pgqueue.claim(conn, queue=_db.QUEUE, limit=10))
    reap_ms = _time_ms(engine, claims, pgqueue.reap_expired)
    return {"claim_ms": claim_ms, "reap_ms": reap_ms}


def run(url: URL, engine: Engine, *, done_rows: int, claims: int) -> dict[str, Any]:
    """Median ms of one claim of 10 (and one reap) with 0, then ``done_rows`` finished rows."""
    _db.reset(url)
    empty = _measure(url, engine, claims)
    _db.reset(url)
    t0 = time.perf_counter()
    _db.fill(url, done_rows, "done")
    fill_s = time.perf_counter() - t0
    full = _measure(url, engine, claims)
    _db.reset(url)
    return {
        "done_rows": done_rows,
        "claims": claims,
        "fill_seconds": fill_s,
        "empty": empty,
        "history": full,
    }
