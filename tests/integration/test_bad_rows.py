"""Rows written by SQL that no Python client can load do not break the readers; values at the
documented bounds round-trip.

pgqueue refuses a ``run_at`` or duration past :data:`pgqueue.MAX_DURATION` and JSON deeper than
:data:`pgqueue.MAX_JSON_DEPTH` before any SQL, but SQL can still write ``run_at = '29405-01-01'``,
``'infinity'`` or a payload 5,000 levels deep: psycopg then fails the whole result (``DataError``,
``RecursionError``). The readers (``admin``, and through it the CLI and the dashboard, and
``pgqueue.testing``) show such a value as an :class:`pgqueue.admin.Unreadable` with the server's
text, and every other row and value as usual.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy import Connection, Engine, text

import pgqueue
import pgqueue.testing
from pgqueue import MAX_DURATION, admin
from pgqueue._base.validation import MAX_INT32
from pgqueue.admin import Unreadable

TIME = "outside the years 1 to 9999 of Python's datetime"
DEEP = "nested more than 100 levels deep"

#: ``{column: SQL value}`` of each poison row, written with SQL as a careless script would.
POISON = [
    {"run_at": "'29405-01-01 00:00:00+00'"},
    {"run_at": "'infinity'", "created_at": "'-infinity'"},
    {"status": "'running'", "locked_until": "'10000-01-01 00:00:00+00'"},
    {"status": "'done'", "finished_at": "'0001-01-01 00:00:00+00 BC'"},
    {"payload": "('[' || repeat('[', 5000) || repeat(']', 5000) || ']')::jsonb"},
    {"payload": "('[' || repeat('7', 5000) || ']')::jsonb"},  # 5,000 digits
    {"headers": "('{\"a\": ' || repeat('[', 3000) || repeat(']', 3000) || '}')::jsonb"},
]


def _insert(conn: Connection, values: dict[str, str]) -> int:
    row = {"queue": "'poison'", "payload": "'{}'::jsonb", **values}
    # The values are literals of this test, never user input.
    sql = f"INSERT INTO jobs ({', '.join(row)}) VALUES ({', '.join(row.values())}) RETURNING id"
    return int(conn.execute(text(sql)).scalar_one())


@pytest.fixture
def poisoned(engine: Engine) -> tuple[list[int], list[int]]:
    """Good jobs around the poison rows: ``(good ids, poison ids)``."""
    with engine.begin() as conn:
        good = [pgqueue.enqueue(conn, {"n": 0}, queue="poison")]
        bad = [_insert(conn, values) for values in POISON]
        good.append(pgqueue.enqueue(conn, {"n": 1}, queue="poison", headers={"h": "v"}))
    return good, bad


def test_a_listing_survives_every_poison_row_and_keeps_the_rest(
    engine: Engine, poisoned: tuple[list[int], list[int]]
) -> None:
    good, bad = poisoned
    with engine.connect() as conn:
        rows = {row["id"]: row for row in admin.list_jobs(conn, queue="poison", limit=100)}
    assert sorted(rows) == sorted(good + bad)
    for job_id in good:
        assert isinstance(rows[job_id]["run_at"], datetime)
        assert not any(isinstance(v, Unreadable) for v in rows[job_id].values())
    assert rows[good[0]]["payload"] == {"n": 0}
    year, infinite, lease, finished, deep, digits, _ = (rows[i] for i in bad)
    assert year["run_at"] == Unreadable("29405-01-01 00:00:00+00", TIME)
    assert (infinite["run_at"], infinite["created_at"]) == (
        Unreadable("infinity", TIME),
        Unreadable("-infinity", TIME),
    )
    assert lease["locked_until"] == Unreadable("10000-01-01 00:00:00+00", TIME)
    assert finished["finished_at"] == Unreadable("0001-01-01 00:00:00+00 BC", TIME)
    assert isinstance(deep["payload"], Unreadable)
    assert deep["payload"].problem == DEEP
    assert deep["payload"].text.startswith("[[[[")
    assert isinstance(digits["payload"], Unreadable)
    assert "4300 digits" in digits["payload"].problem
    # The other values of a poison row are intact.
    assert (year["status"], year["queue"], year["payload"]) == ("queued", "poison", {})
    assert isinstance(year["created_at"], datetime)


def test_one_poison_job_shows_with_its_other_values(
    engine: Engine, poisoned: tuple[list[int], list[int]]
) -> None:
    good, bad = poisoned
    with engine.connect() as conn:
        headers = admin.get_job(conn, bad[-1])
        fine = admin.get_job(conn, good[1])
        infinite = admin.get_job(conn, bad[1])
    assert headers is not None
    assert fine is not None
    assert infinite is not None
    assert isinstance(headers["headers"], Unreadable)
    assert headers["headers"].problem == DEEP
    assert headers["payload"] == {}
    assert (fine["payload"], fine["headers"]) == ({"n": 1}, {"h": "v"})
    assert infinite["run_at"] == Unreadable("infinity", TIME)
    # Every column, and what a waiting job waits for (None here: it waits for nothing).
    # ``deadline`` (run_at + expires_in) is derived, as ``waiting_for`` is.
    derived = {"waiting_for", "deadline"}
    assert set(infinite) == {c.name for c in pgqueue.Job.__table__.columns} | derived
    assert infinite["waiting_for"] is None


@pytest.mark.parametrize("zone", ["UTC", "Pacific/Kiritimati", "Pacific/Pago_Pago", "Asia/Tokyo"])
def test_times_python_holds_load_in_every_session_time_zone(engine: Engine, zone: str) -> None:
    """psycopg loads a timestamptz in the session's zone: 9999-12-31 23:00 UTC is year 10000 in
    Tokyo. The readers' range keeps two days of margin at both ends, whatever the zone."""
    with engine.begin() as conn:
        edges = [
            _insert(conn, {"run_at": "'0001-01-03 00:00:00+00'"}),
            _insert(conn, {"run_at": "'9999-12-29 00:00:00+00'"}),
            _insert(conn, {"run_at": "'9999-12-31 23:00:00+00'"}),
            _insert(conn, {"run_at": "'0001-01-01 00:00:00+00'"}),
        ]
    with engine.connect() as conn:
        conn.execute(text("SELECT set_config('TimeZone', :zone, false)"), {"zone": zone})
        rows = {r["id"]: r["run_at"] for r in admin.list_jobs(conn)}
    first, last, late, early = (rows[i] for i in edges)
    assert first == datetime(1, 1, 3, tzinfo=timezone.utc)
    assert last == datetime(9999, 12, 29, tzinfo=timezone.utc)
    assert isinstance(late, Unreadable)
    assert isinstance(early, Unreadable)


def test_overview_statistics_survive_infinite_times(engine: Engine) -> None:
    """A ready job with ``run_at = '-infinity'`` and a job finished at ``'infinity'``: the
    oldest-ready age stays a number and the chart leaves the future out."""
    with engine.begin() as conn:
        _insert(conn, {"queue": "'odd'", "run_at": "'-infinity'"})
        _insert(conn, {"queue": "'odd'", "status": "'done'", "finished_at": "'infinity'"})
        _insert(conn, {"queue": "'odd'", "status": "'done'", "finished_at": "now()"})
    with engine.connect() as conn:
        (stats,) = admin.queue_stats(conn)
        chart = admin.finished_per_minute(conn)
    assert (stats["queue"], stats["ready"], stats["done"]) == ("odd", 1, 2)
    assert stats["oldest_ready_age_s"] > 60 * 60 * 24 * 365 * 2000  # since year 1
    assert [(r["queue"], r["done"]) for r in chart] == [("odd", 1)]


def test_assert_enqueued_lists_a_poison_payload_in_its_message(
    engine: Engine, poisoned: tuple[list[int], list[int]]
) -> None:
    _, bad = poisoned
    with engine.connect() as conn, pytest.raises(AssertionError) as info:
        pgqueue.testing.assert_enqueued(conn, "poison", {"n": 2})
    message = str(info.value)
    assert f"#{bad[4]} queued priority 0 Unreadable(text='[[[[" in message
    assert DEEP in message


def test_values_at_the_bounds_round_trip(engine: Engine) -> None:
    """The most that is accepted is read back: a delay or run_at at MAX_DURATION, the largest
    int as max_attempts, and a payload MAX_JSON_DEPTH levels deep."""
    deep: object = 1
    for _ in range(pgqueue.MAX_JSON_DEPTH):
        deep = [deep]
    now = datetime.now(timezone.utc)
    with engine.begin() as conn:
        ids = [
            pgqueue.enqueue(conn, deep, delay=MAX_DURATION, max_attempts=MAX_INT32),
            pgqueue.enqueue(conn, {}, run_at=now - MAX_DURATION + timedelta(minutes=1)),
        ]
    with engine.connect() as conn:
        late, early = (admin.get_job(conn, i) for i in ids)
    assert late is not None
    assert early is not None
    assert late["payload"] == deep
    assert late["max_attempts"] == MAX_INT32
    assert late["run_at"] - now == pytest.approx(MAX_DURATION, abs=timedelta(minutes=1))
    assert isinstance(early["run_at"], datetime)


def test_retry_holds_the_budget_at_the_largest_int(engine: Engine) -> None:
    """``attempts + extra`` past 2**31 - 1 would fail the statement; it is held there."""
    with engine.begin() as conn:
        job_id = pgqueue.enqueue(conn, {}, max_attempts=1)
        (job,) = pgqueue.claim(conn)
        pgqueue.fail(conn, job.id, job.attempts, "boom")
        assert pgqueue.retry(conn, [job_id], attempts=MAX_INT32) == [job_id]
        budget = conn.execute(text("SELECT max_attempts FROM jobs WHERE id = :id"), {"id": job_id})
        assert budget.scalar_one() == MAX_INT32
