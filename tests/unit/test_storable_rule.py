"""The one rule of what PostgreSQL cannot store (:func:`unstorable`), and everything that uses it.

U+0000 and the surrogates U+D800 to U+DFFF: refused in what pgqueue is given to store (payloads,
task arguments, results, progress, names and keys), escaped in what it stores of its own making
(an error's text, a traceback). The database side of each is ``tests/integration``.
"""

from __future__ import annotations

import pytest

from pgqueue._base.storable import storable, unstorable
from pgqueue._base.tracebacks import check_traceback, format_traceback
from pgqueue._base.validation import (
    check_name,
    check_queue,
    check_task_name,
    check_unique_key,
    encode_headers,
    encode_payload,
)
from pgqueue.errors import InvalidArgumentError, InvalidPayloadError
from pgqueue.jobs import JobContext, marks_of
from pgqueue.retry_policy import describe_error

NAME = b"caf\xe9".decode("utf-8", "surrogateescape")  # "caf\udce9"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("a\x00b", "contains the character U+0000 at index 1, which PostgreSQL cannot store"),
        (NAME, "not valid Unicode: U+DCE9 at index 3 is a surrogate"),
        ("\ud800", "U+D800 at index 0 is a surrogate"),
        ("\ud83d\ude00", "U+D83D at index 0 is a surrogate"),  # a pair is two, not a character
    ],
)
def test_unstorable_names_the_character_and_where_it_is(text: str, says: str) -> None:
    problem = unstorable(text)
    assert problem is not None
    assert says in problem
    assert problem.isprintable()


@pytest.mark.parametrize("text", ["", "plain", "é", "файлы", "🚀", "\\u0000", "\\udce9", "\ufffd"])
def test_every_real_character_is_storable(text: str) -> None:
    assert unstorable(text) is None
    assert storable(text) is text


def test_storable_escapes_each_bad_character_and_keeps_the_rest() -> None:
    assert storable(f"open {NAME}\x00 🚀") == "open caf\\udce9\\x00 🚀"
    assert unstorable(storable(f"{NAME}\x00")) is None


@pytest.mark.parametrize(
    ("payload", "says"),
    [
        (NAME, "payload: not valid Unicode: U+DCE9 at index 3"),
        ({"files": ["a", NAME]}, "payload: the string at ['files'][1]: not valid Unicode"),
        ([{"k": (1, NAME)}], "payload: the string at [0]['k'][1]: not valid Unicode"),
        ({"a": {NAME: 1}}, "payload: the key ['a']['caf\\udce9']: not valid Unicode"),
        ({"a": "x\x00"}, "payload: the string at ['a']: contains the character U+0000"),
        ({"k\x00": 1}, "payload: the key ['k\\x00']: contains the character U+0000"),
        ("\ud83d\ude00", "payload: not valid Unicode: U+D83D"),
    ],
)
def test_a_payload_holding_one_is_refused_saying_where(payload: object, says: str) -> None:
    with pytest.raises(InvalidPayloadError) as raised:
        encode_payload(payload)
    assert str(raised.value).startswith(says)


@pytest.mark.parametrize(
    "payload",
    ["🚀", {"emoji": ["🚀", "é"]}, "\\u0000", "C:\\udp\\ud800", {"\\ud800": "\\\\u0000"}],
)
def test_what_only_looks_like_one_in_json_text_is_stored(payload: object) -> None:
    """A character beyond U+FFFF is written as a pair of ``\\ud...`` escapes, and a backslash
    followed by ``u0000`` is text: both make the walk run, and it finds nothing."""
    assert encode_payload(payload)


def test_progress_and_results_are_checked_by_the_same_encoding() -> None:
    job = JobContext(1, "q", None, 1)
    with pytest.raises(InvalidPayloadError, match=r"^progress: the string at \['f'\]"):
        job.set_progress({"f": NAME})
    assert marks_of(job).pending_progress() is None  # nothing recorded for the heartbeat
    with pytest.raises(InvalidPayloadError, match=r"^result: not valid Unicode"):
        encode_payload(NAME, argument="result")


@pytest.mark.parametrize(
    "check",
    [
        lambda v: check_queue(v),
        lambda v: check_unique_key(v),
        lambda v: check_unique_key(v, name="concurrency_key"),
        lambda v: check_task_name(v),
        lambda v: check_name("locked_by", v),
        lambda v: encode_headers({"h": v}),
        lambda v: encode_headers({v: "h"}),
    ],
    ids=["queue", "unique_key", "concurrency_key", "task", "locked_by", "header", "header-key"],
)
@pytest.mark.parametrize("value", [f"a{NAME}", "a\x00b"], ids=["surrogate", "nul"])
def test_names_and_keys_are_refused_by_the_same_rule(check: object, value: str) -> None:
    with pytest.raises(InvalidArgumentError) as raised:
        check(value)  # type: ignore[operator]
    expected = unstorable(value)
    assert expected is not None
    assert expected in str(raised.value)


def test_an_error_text_and_its_traceback_are_escaped_never_dropped() -> None:
    try:
        raise FileNotFoundError(f"no {NAME}\x00")
    except FileNotFoundError as exc:
        error = exc
    assert describe_error(error) == "FileNotFoundError: no caf\\udce9\\x00"
    assert format_traceback(error).endswith("FileNotFoundError: no caf\\udce9\\x00")
    assert check_traceback(f"tb {NAME}") == "tb caf\\udce9"


def test_an_exception_whose_str_raises_still_has_an_error_text() -> None:
    class Broken(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no text")

    assert describe_error(Broken()) == "Broken: <exception str() failed>"
