"""The line buffer of one attempt (#34): bounds, what a writer sees pending, and lines that are
always valid jsonb text; and the statement that carries lines beside an outcome."""

from __future__ import annotations

import json
import threading

from sqlalchemy.dialects import postgresql

from pgqueue._base.joblog import MAX_BYTES, MAX_LINE_BYTES, MAX_LINES, LogBuffer, encode_line
from pgqueue._sql import log_calls
from pgqueue._sql import statements as job_statements
from pgqueue._sql.calls import complete_many


def test_pending_is_the_whole_buffer_once_per_addition() -> None:
    buffer = LogBuffer()
    assert buffer.pending() is None
    buffer.add("info", "one", {"k": 1}, None)
    version, lines, dropped = buffer.pending() or (0, "", 0)
    assert [line["m"] for line in json.loads(lines)] == ["one"]
    assert dropped == 0
    buffer.written(version)
    assert buffer.pending() is None
    buffer.add("warning", "two", {}, "app")
    _, lines, _ = buffer.pending() or (0, "", 0)
    assert [(x["m"], x["l"], x["g"]) for x in json.loads(lines)] == [
        ("one", "info", None),
        ("two", "warning", "app"),
    ]
    buffer.written(version)  # an older version does not hide the newer line
    assert buffer.pending() is not None


def test_the_bounds_drop_the_oldest() -> None:
    buffer = LogBuffer()
    for i in range(MAX_LINES + 5):
        buffer.add("info", str(i), {}, None)
    _, lines, dropped = buffer.pending() or (0, "", 0)
    decoded = json.loads(lines)
    assert (len(decoded), decoded[0]["m"], dropped) == (MAX_LINES, "5", 5)
    big = LogBuffer()
    for i in range(40):
        big.add("info", f"{i}" + "y" * 10_000, {}, None)
    _, lines, dropped = big.pending() or (0, "", 0)
    assert len(lines) <= MAX_BYTES + MAX_LINES
    assert dropped == 40 - len(json.loads(lines))
    assert json.loads(lines)[-1]["m"].startswith("39")


def test_a_line_is_always_ascii_jsonb_text() -> None:
    cyclic: list[object] = []
    cyclic.append(cyclic)
    for message, fields in [
        ("\x00\udcff", {}),
        ("ok", {"cycle": cyclic}),
        ("ok", {"nan": float("nan")}),
        ("ok", {"set": {1, 2}}),
        ("ok", {"\udcff": "key"}),
        (object(), {}),
    ]:
        line = encode_line(1.5, "info", message, fields, "a\udcffb")
        assert line.isascii()
        decoded = json.loads(line)
        assert set(decoded) == {"t", "l", "m", "f", "g"}
        # every string jsonb would store: valid UTF-8, no U+0000
        for text in _strings(decoded):
            text.encode("utf-8")
            assert "\x00" not in text


def _strings(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in [*_strings(k), *_strings(v)]]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def test_a_huge_line_is_cut() -> None:
    line = encode_line(0.0, "info", "z" * 100_000, {"big": "w" * 100_000}, None)
    assert len(line) <= MAX_LINE_BYTES
    assert json.loads(line)["m"].endswith("cut)")


def test_concurrent_adds_lose_nothing() -> None:
    buffer = LogBuffer()

    def add() -> None:
        for i in range(200):
            buffer.add("info", str(i), {}, None)

    threads = [threading.Thread(target=add) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    _, lines, dropped = buffer.pending() or (0, "", 0)
    assert (len(json.loads(lines)), dropped, buffer.version) == (800, 0, 800)


def test_lines_ride_in_the_outcomes_own_statement() -> None:
    plain = complete_many([(1, 1)])
    assert log_calls.with_lines(plain, []) is plain
    carried = log_calls.with_lines(plain, [(1, 1, 0, '[{"m":"x"}]')])
    sql = str(carried.statement.compile(dialect=postgresql.dialect()))  # type: ignore[union-attr]
    assert sql.startswith("WITH mine AS MATERIALIZED")
    assert "UPDATE jobs SET status" in sql
    assert "INSERT INTO jobs_logs" in sql
    assert "ON CONFLICT (job_id, attempt) DO UPDATE" in sql
    assert json.loads(carried.params["batch_lines"]) == [
        {"id": 1, "attempt": 1, "dropped": 0, "lines": [{"m": "x"}]}
    ]
    assert plain.statement is job_statements.COMPLETE_MANY
