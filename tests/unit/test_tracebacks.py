"""A failed attempt's traceback: formatted where it was raised, masked, trimmed to keep its end."""

from __future__ import annotations

import builtins
import re
import sys
import traceback

import pytest

from pgqueue._base.tracebacks import format_traceback, trim_traceback
from pgqueue.retry_policy import MAX_TRACEBACK_LENGTH


def send_welcome_email(payload: dict[str, str]) -> None:
    payload["email"]  # the handler's KeyError of issue #20


def raised(fn: object, *args: object) -> BaseException:
    try:
        fn(*args)  # type: ignore[operator]
    except BaseException as exc:
        return exc
    raise AssertionError("did not raise")


def test_the_traceback_names_the_raising_function_and_ends_with_the_exception() -> None:
    text = format_traceback(raised(send_welcome_email, {}))
    assert text.startswith("Traceback (most recent call last):")
    assert "in send_welcome_email" in text
    assert text.endswith("KeyError: 'email'")


def _stdlib(exc: BaseException) -> str:
    """``traceback.format_exception``'s text without Python 3.11's caret lines."""
    text = "".join(traceback.format_exception(exc))
    return "".join(line for line in text.splitlines(True) if not CARETS.match(line)).rstrip("\n")


CARETS = re.compile(r"^\s*[~^]+\s*$")


def _context() -> None:
    try:
        send_welcome_email({})
    except KeyError:
        raise RuntimeError("while handling it")  # noqa: B904 - the implicit context is the point


def _suppressed() -> None:
    try:
        send_welcome_email({})
    except KeyError:
        raise RuntimeError("no context shown") from None


def _cycle() -> None:
    a, b = ValueError("a"), ValueError("b")
    a.__context__, b.__context__ = b, a
    raise a


def _recurse(n: int) -> None:
    if n:
        _recurse(n - 1)
    raise LookupError("bottom")


def _with_note() -> None:
    exc = ValueError("bad address")
    if hasattr(exc, "add_note"):
        exc.add_note("while sending the welcome email")
    raise exc


def _multiline_message() -> None:
    raise ValueError("first line\nsecond line")


@pytest.mark.parametrize(
    "fail",
    [
        lambda: send_welcome_email({}),
        _context,
        _suppressed,
        _cycle,
        lambda: _recurse(12),
        _with_note,
        _multiline_message,
    ],
    ids=["plain", "context", "suppressed", "cycle", "repeated-frames", "note", "multiline"],
)
def test_the_text_is_the_standard_librarys_without_the_caret_lines(fail: object) -> None:
    exc = raised(fail)
    assert format_traceback(exc) == _stdlib(exc)


def test_an_exception_never_raised_has_only_its_line() -> None:
    assert format_traceback(KeyError("email")) == "KeyError: 'email'"


@pytest.mark.skipif(sys.version_info < (3, 11), reason="exception groups are Python 3.11+")
def test_exception_groups_are_formatted_by_the_standard_library() -> None:
    def group() -> None:
        raise builtins.ExceptionGroup("two", [KeyError("email"), ValueError("x")])

    exc = raised(group)
    assert format_traceback(exc) == "".join(traceback.format_exception(exc)).rstrip("\n")
    assert "KeyError: 'email'" in format_traceback(exc)


def test_chained_causes_are_kept() -> None:
    def wrap() -> None:
        try:
            send_welcome_email({})
        except KeyError as exc:
            raise RuntimeError("welcome email failed") from exc

    text = format_traceback(raised(wrap))
    assert "KeyError: 'email'" in text
    assert "direct cause" in text
    assert text.endswith("RuntimeError: welcome email failed")


def ping(n: int) -> None:
    if n == 0:
        send_welcome_email({})
    pong(n - 1)


def pong(n: int) -> None:
    ping(n)  # two alternating frames: Python folds only repeats of the same frame


def test_a_deep_stack_keeps_its_end_within_the_bound_behind_a_marker() -> None:
    exc = raised(ping, 400)
    assert len("".join(traceback.format_exception(exc))) > 10 * MAX_TRACEBACK_LENGTH
    text = format_traceback(exc)
    assert len(text) <= MAX_TRACEBACK_LENGTH
    marker, first_line = text.splitlines()[:2]
    assert marker.startswith("[... ")
    assert marker.endswith(" characters cut ...]")
    assert first_line.startswith("  File ")  # the tail starts at a whole frame
    assert "in send_welcome_email" in text
    assert text.endswith("KeyError: 'email'")


@pytest.mark.parametrize("size", [MAX_TRACEBACK_LENGTH + 1, 100_000, 1_000_000])
def test_trimming_says_how_much_was_cut(size: int) -> None:
    text = "".join(f"line {i:07d}\n" for i in range(size // 13 + 1))[:size]
    trimmed = trim_traceback(text)
    assert len(trimmed) <= MAX_TRACEBACK_LENGTH
    marker, _, tail = trimmed.partition("\n")
    cut = int(marker.removeprefix("[... ").removesuffix(" characters cut ...]"))
    assert cut + len(tail) == len(text)
    assert text.endswith(tail)


def test_a_traceback_within_the_bound_is_unchanged() -> None:
    text = "x" * MAX_TRACEBACK_LENGTH
    assert trim_traceback(text) is text


def test_passwords_in_urls_are_masked() -> None:
    def connect() -> None:
        raise ConnectionError("cannot reach postgresql://app:s3cret@db/app")

    text = format_traceback(raised(connect))
    assert "s3cret" not in text
    assert "postgresql://app:***@db/app" in text
