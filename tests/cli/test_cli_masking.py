"""What ``pgqueue show`` and ``list`` print of jobs holding passwords: ``--json`` stays valid JSON
of the job's structure with every secret masked, and a table cell is masked before it is cut."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import Any

from sqlalchemy import Engine, text

import pgqueue
from pgqueue._base.urls import mask_value
from tests.cli.conftest import Result

Cli = Callable[..., Result]


def _payloads(count: int) -> tuple[list[Any], list[str]]:
    """Seeded random payloads, each holding secrets in the forms users paste, and the secrets."""
    rng = random.Random(2029)
    secrets: list[str] = []
    payloads = []
    for i in range(count):
        marker = f"S3CR{i}T"
        secrets.append(marker)
        forms = [
            f"host=db password={marker} user=app",
            f'password="two words {marker}"',
            f"PASSWORD = '{marker} with, {{braces}}'",
            f"postgresql://app:{marker}@db:5432/app",
            f'nested "password=\\"{marker} x\\""',
        ]
        rng.shuffle(forms)
        payloads.append(
            {
                "dsn": forms[0],
                "list": [forms[1], {"deep": forms[2], "n": i}],
                forms[3]: forms[4],  # a key holding a secret too
                "plain": "quotes \" ' and , } { \\\\ stay",
            }
        )
    return payloads, secrets


def test_list_and_show_json_are_valid_json_with_every_secret_masked(cli: Cli, db: Engine) -> None:
    payloads, secrets = _payloads(40)
    with db.begin() as conn:
        ids = [pgqueue.enqueue(conn, p, queue="q") for p in payloads]
        conn.execute(
            text("UPDATE jobs SET last_error = :e WHERE id = :id"),
            {"e": f'connect to "password={secrets[0]}", retry', "id": ids[0]},
        )
    listed = cli("list", "--json", "--limit", "100")
    assert listed.code == 0, listed.err
    rows = json.loads(listed.out)  # valid JSON
    by_id = {row["id"]: row for row in rows}
    assert sorted(by_id) == sorted(ids)
    for job_id, payload in zip(ids, payloads, strict=True):
        assert by_id[job_id]["payload"] == mask_value(payload)  # the structure, masked
    assert by_id[ids[0]]["last_error"] == 'connect to "password=***", retry'
    for job_id in (ids[0], ids[17], ids[-1]):
        shown = cli("show", str(job_id), "--json")
        assert shown.code == 0, shown.err
        assert json.loads(shown.out)["payload"] == mask_value(payloads[ids.index(job_id)])
        assert not any(s in shown.out for s in secrets)
        as_text = cli("show", str(job_id))
        assert not any(s in as_text.out for s in secrets), as_text.out
    assert not any(s in listed.out for s in secrets)


def test_a_table_cell_is_masked_before_it_is_cut(cli: Cli, db: Engine) -> None:
    """A long URL cut at the cell's width before its '@' looked like no URL and printed its
    password."""
    secret = "x" * 60
    with db.begin() as conn:
        job_id = pgqueue.enqueue(conn, {}, queue="q")
        conn.execute(
            text("UPDATE jobs SET last_error = :e WHERE id = :id"),
            {"e": f"could not connect to postgresql://app:{secret}@db/app", "id": job_id},
        )
    listed = cli("list")
    assert listed.code == 0, listed.err
    assert "x" * 8 not in listed.out, listed.out
    assert "postgresql://app:***@db/app" in listed.out
