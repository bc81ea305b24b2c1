"""The line buffer of one attempt (#34): bounds, what a writer sees pending, and lines that are
always valid jsonb text; and the statement that carries lines beside an outcome."""

from __future__ import annotations

import json
import threading

from sqlalchemy.dialects import postgresql

from pgqueue._base.joblog import (
    MAX_BYTES,
    MAX_LINE_BYTES,
    MAX_LINES,
    LogBuffer,
    _entry_size,
    encode_line,
)
from pgqueue._sql import log_calls
from pgqueue._sql import statements as job_statements
from pgqueue._sql.calls import complete_many


def test_pending_is_the_whole_buffer_once_per_addition() -> None:
    buffer = LogBuffer()
    assert buffer.pending() is None
    buffer.add("info", "one", {"k": 1}, None)
    version, lines, dropped = buffer.pending() or (0, "", 0)
    assert [line[4] for line in json.loads(lines)] == ["one"]
    assert dropped == 0
    buffer.written(version)
    assert buffer.pending() is None
    buffer.add("warning", "two", {}, "app")
    _, lines, _ = buffer.pending() or (0, "", 0)
    assert [(x[4], x[1], x[2]) for x in json.loads(lines)] == [
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
    assert (len(decoded), decoded[0][4], dropped) == (MAX_LINES, "5", 5)
    big = LogBuffer()
    for i in range(40):
        big.add("info", f"{i}" + "y" * 10_000, {}, None)
    _, lines, dropped = big.pending() or (0, "", 0)
    assert len(lines) <= MAX_BYTES + MAX_LINES
    assert dropped == 40 - len(json.loads(lines))
    assert json.loads(lines)[-1][4].startswith("39")


def test_the_size_kept_is_the_lines_held_after_the_oldest_go() -> None:
    """Sizes are not kept per line: dropping the oldest estimates each again, so the buffer's
    running size must stay the sum over the lines it holds (else the byte bound drifts)."""
    buffer = LogBuffer()
    for i in range(3 * MAX_LINES):
        fields: dict[str, object] = {"i": i, "s": "x" * (i % 97)}
        if i % 50 == 0:
            fields["nested"] = {"deep": [i]}  # encoded when recorded: its exact size
        buffer.add("info", "m" * (i % 300), fields, None)
    held = list(buffer._lines)
    assert buffer._bytes == sum(_entry_size(entry) for entry in held)
    assert buffer._bytes <= MAX_BYTES  # the byte bound binds here, before the count
    assert buffer.dropped == 3 * MAX_LINES - len(held)


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
        line = encode_line(1_500_000, "info", message, fields, "a\udcffb")
        assert line.isascii()
        decoded = json.loads(line)
        when, level, logger, stored_fields, stored_message = decoded
        assert (when, level) == (1_500_000, "info")
        assert isinstance(stored_fields, dict)
        assert isinstance(stored_message, str)
        assert isinstance(logger, str)
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
    line = encode_line(0, "info", "z" * 100_000, {"big": "w" * 100_000}, None)
    assert len(line) <= MAX_LINE_BYTES
    assert json.loads(line)[4].endswith("cut)")


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


def test_the_fast_path_masks_and_escapes_as_the_careful_one() -> None:
    """A plain line takes one ``json.dumps``; any sign of a password, an unstorable character or
    deep nesting sends it down the careful path, so what is stored is the same."""
    plain = json.loads(encode_line(2_000_000, "info", "sent", {"n": 1}, None))
    assert plain == [2_000_000, "info", None, {"n": 1}, "sent"]
    masked = json.loads(
        encode_line(2_000_000, "info", "to PostgreSQL://u:pw@h/d", {"Password": "x"}, None)
    )
    assert "pw" not in masked[4]
    assert masked[3] == {"Password": "x"}  # a key is no password=value pair: kept
    pair = json.loads(
        encode_line(2_000_000, "info", "dsn password=hunter2", {"dsn": "PASSWORD=s"}, None)
    )
    assert "hunter2" not in pair[4]
    assert pair[3] == {"dsn": "PASSWORD=***"}
    deep: object = "leaf"
    for _ in range(200):
        deep = [deep]
    nested = json.loads(encode_line(2_000_000, "info", "deep", {"d": deep}, None))
    assert set(nested[3]) == {"repr"}  # deeper than jsonb should hold: its repr
    emoji = json.loads(encode_line(2_000_000, "info", "ok \U0001f600", {}, None))
    assert emoji[4] == "ok \U0001f600"  # a pair of surrogate escapes is a valid character


def test_a_buffer_mixing_cut_raw_and_careful_lines_encodes_each_right() -> None:
    buffer = LogBuffer()
    buffer.add("info", 'first [with] {brackets} and "quotes"', {"a": [1, {"b": "]"}]}, None)
    buffer.add("info", "z" * (MAX_LINE_BYTES + 10), {}, None)  # cut when recorded
    buffer.add("warning", "last", {}, "app")
    _, lines, _ = buffer.pending() or (0, "", 0)
    decoded = json.loads(lines)
    assert decoded[0][3:] == [{"a": [1, {"b": "]"}]}, 'first [with] {brackets} and "quotes"']
    assert decoded[1][4].endswith("cut)")
    assert decoded[2][1:] == ["warning", "app", {}, "last"]
    buffer.add("info", "see https://u:pw@h/x", {}, None)  # one line needs care: all are right
    _, lines, _ = buffer.pending() or (0, "", 0)
    decoded = json.loads(lines)
    assert len(decoded) == 4
    assert decoded[3][4] == "see https://u:***@h/x"
    assert decoded[0][4] == 'first [with] {brackets} and "quotes"'


def test_the_bounds_hold_on_what_is_written_whatever_the_fields_hold() -> None:
    """Containers in fields and text that escapes to more bytes than it has characters are
    sized exactly when written: no line passes MAX_LINE_BYTES, the lines MAX_BYTES."""
    containers = LogBuffer()
    for i in range(5):
        containers.add("info", f"big {i}", {"data": list(range(100_000))}, None)
        containers.add("info", f"nested {i}", {"data": {"k": "y" * 300_000}}, None)
    _, lines, dropped = containers.pending() or (0, "", 0)
    decoded = json.loads(lines)
    assert (len(decoded), dropped) == (10, 0)  # each cut, none dropped
    assert all(len(json.dumps(line)) <= MAX_LINE_BYTES for line in decoded)
    assert decoded[0][4].startswith("big 0... (")  # the cut says so
    accented = LogBuffer()
    for i in range(2_000):
        accented.add("info", f"{i} " + "\u00e9" * 200, {}, None)  # 6 bytes a character
    _, lines, dropped = accented.pending() or (0, "", 0)
    decoded = json.loads(lines)
    assert len(lines) <= MAX_BYTES + MAX_LINES
    assert dropped == 2_000 - len(decoded)
    assert decoded[-1][4].startswith("1999 ")
    accented.add("info", "one more", {}, None)  # written again: the new line, same bounds
    _, again, dropped_again = accented.pending() or (0, "", 0)
    assert json.loads(again)[-1][4] == "one more"
    assert len(again) <= MAX_BYTES + MAX_LINES
    assert dropped_again >= dropped


def test_pending_encodes_once_per_version() -> None:
    buffer = LogBuffer()
    buffer.add("info", "one", {"k": 1}, None)
    first = buffer.pending()
    assert first is not None
    assert buffer.pending() is first  # asked again, nothing added: not encoded again
    buffer.add("info", "two", {}, None)
    second = buffer.pending()
    assert second is not None
    assert second is not first
    assert [x[4] for x in json.loads(second[1])] == ["one", "two"]
    buffer.written(second[0])
    assert buffer.pending() is None
