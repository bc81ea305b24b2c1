"""The order-fulfilment example of docs/durable.md runs (#33): charge and ship once, wait for
the warehouse's signal, email when it comes, refund when three days pass without it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, text

import pgqueue
import pgqueue.testing

ROOT = Path(__file__).resolve().parents[2]
_BLOCK = re.compile(r"<!-- example: durable -->\n```python\n(.*?)\n```", re.S)


def _example(engine: Engine) -> dict[str, Any]:
    (source,) = _BLOCK.findall((ROOT / "docs" / "durable.md").read_text("utf-8"))
    namespace: dict[str, Any] = {"__name__": "myapp.orders", "engine": engine}
    exec(compile(source, "docs/durable.md", "exec"), namespace)
    return namespace


def _states(engine: Engine) -> dict[int, str]:
    from pgqueue.models import JOB_STATE, jobs_table

    with engine.connect() as conn:
        rows = conn.execute(jobs_table.select().with_only_columns(jobs_table.c.id, JOB_STATE))
        return {int(i): str(s) for i, s in rows}


def test_the_order_example_ships_on_the_signal_and_refunds_on_the_timeout(
    engine: Engine,
) -> None:
    example = _example(engine)
    registry, fulfil, ledger = example["registry"], example["fulfil"], example["LEDGER"]
    with engine.begin() as conn:
        confirmed, forgotten = fulfil.enqueue(conn, 1), fulfil.enqueue(conn, 2)
    pgqueue.testing.drain(engine, registry)
    assert _states(engine) == {confirmed: "awaiting signal", forgotten: "awaiting signal"}

    assert example["warehouse_confirms"](confirmed, "ann") is True
    assert pgqueue.testing.drain(engine, registry).results == {confirmed: "shipped"}
    assert example["warehouse_confirms"](confirmed, "ann") is False  # done: nothing written

    # Three days later (moved here: the wait's deadline and the job's wake-up, to now).
    with engine.begin() as conn:
        conn.execute(
            text(
                "UPDATE jobs SET run_at = now(), suspended_until = now(), steps = jsonb_set("
                "steps, '{warehouse,until_s}', to_jsonb(extract(epoch FROM now()))) "
                "WHERE id = :id"
            ),
            {"id": forgotten},
        )
    assert pgqueue.testing.drain(engine, registry).results == {forgotten: "refunded"}
    assert sorted(ledger) == [
        ("charge", 1),
        ("charge", 2),
        ("email", 1),
        ("refund", 2),
        ("ship", 1),
        ("ship", 2),
    ]
    with engine.connect() as conn:
        found = pgqueue.fetch_result(conn, confirmed)
    assert found is not None
    assert list(found.steps) == ["charge", "ship", "warehouse", "email"]
    assert found.steps["warehouse"] == {"by": "ann"}
