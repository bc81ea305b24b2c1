"""The readers' columns and row decoding, without a database (the rows are in tests/integration).

A row written by SQL can hold what no Python client loads; the readers select it so that it comes
as text, and decode it into an :class:`pgqueue.admin.Unreadable` rather than fail the listing.
"""

from __future__ import annotations

import re

from sqlalchemy.dialects import postgresql

from pgqueue import MAX_JSON_DEPTH, admin
from pgqueue._base.readable import decode_json
from pgqueue.admin import Unreadable


def _sql(stmt: object) -> str:
    return str(stmt.compile(dialect=postgresql.dialect()))  # type: ignore[attr-defined]


def test_decodable_json_comes_back_as_json() -> None:
    assert decode_json('{"a": [1, {"b": null}]}') == {"a": [1, {"b": None}]}
    assert decode_json("null") is None
    assert decode_json(None) is None
    assert decode_json("[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH) is not None
    assert decode_json('"' + "[" * 5_000 + '"') == "[" * 5_000  # brackets in a string


def test_json_too_deep_or_with_a_huge_number_is_unreadable_not_an_error() -> None:
    for depth in (MAX_JSON_DEPTH + 1, 900, 5_000, 50_000):
        text = "[" * depth + "]" * depth
        value = decode_json(text)
        assert value == Unreadable(text, f"nested more than {MAX_JSON_DEPTH} levels deep"), depth
    huge = decode_json("[" + "1" * 5_000 + "]")
    assert isinstance(huge, Unreadable)
    assert huge.problem.startswith("not decodable: Exceeds the limit (4300 digits)")
    assert str(huge).startswith("unreadable (not decodable: ")


def test_the_readers_select_timestamps_and_json_in_a_form_that_always_loads() -> None:
    sql = _sql(admin.list_jobs_statement(limit=10))
    # run_at is also NULL while the job waits for its dependencies (it has no time of its own).
    assert (
        "THEN CASE WHEN (jobs.run_at BETWEEN '0001-01-03 00:00:00+00'::timestamptz AND "
        "'9999-12-29 00:00:00+00'::timestamptz) THEN jobs.run_at END END AS run_at"
    ) in sql
    assert "THEN CAST(jobs.run_at AS TEXT) END END AS run_at__stored" in sql
    for column in ("locked_until", "created_at", "finished_at"):
        assert f"END AS {column}__stored" in sql
    assert "CAST(jobs.payload AS TEXT) AS payload" in sql
    # The plan is the same keyset page: the CASEs only run on the rows of the page.
    assert re.search(r"ORDER BY jobs.id DESC \n LIMIT %\(param_\d\)s::INTEGER$", sql), sql


def test_a_listing_that_shows_no_payload_does_not_fetch_it() -> None:
    assert "payload" not in _sql(admin.list_jobs_statement(limit=10, with_payload=False))
    assert "payload" in _sql(admin.list_jobs_statement(limit=10))
