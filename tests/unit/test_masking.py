"""Passwords are masked in every line printed, in time linear in the text's length.

``mask_text`` runs on all the CLI's output, whole payloads included: a regex that backtracks over
a run of letters from each of its letters took 3.4 s on 80,000 of them and kept ``pgqueue show``
of a 100 MB payload busy for more than 9 minutes. The other regexes applied to user data
(durations typed in the CLI and the dashboard's form, the unique-key detail of an error) are held
to the same rule. Speed is asserted as a ratio only: four times the text, about four times the
time (a quadratic scan takes sixteen).
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable

import pytest

from pgqueue._base.durations import parse_duration
from pgqueue._base.urls import mask_text, mask_url
from pgqueue._sql.driver_errors import _KEY_DETAIL

#: The masking of pgqueue 0.1.0 before it was made linear: the reference its results must match.
_OLD_URL = re.compile(r"(?P<pre>[a-zA-Z][a-zA-Z0-9+.-]*://[^:/@\s]*:)[^@\s]*(?=@)")
_OLD_KV = re.compile(r"(?P<pre>password\s*=\s*)('[^']*'|\S+)", re.IGNORECASE)


def _old_mask(text: str) -> str:
    text = _OLD_URL.sub(lambda m: m.group("pre") + "***", text)
    return _OLD_KV.sub(lambda m: m.group("pre") + "***", text)


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        ("postgresql://app:s3cret@db:5432/app", "postgresql://app:***@db:5432/app"),
        ("postgresql+psycopg://app:s3cret@db/app", "postgresql+psycopg://app:***@db/app"),
        ("connect to postgres://u:p%40ss@h/x failed", "connect to postgres://u:***@h/x failed"),
        ("a://u:one@h and b://v:two@k", "a://u:***@h and b://v:***@k"),
        ("x://u:pa:ss/wo?rd@h", "x://u:***@h"),  # ':' and '/' inside the password
        ("x://:only-password@h", "x://:***@h"),
        ("1abc://u:p@h", "1abc://u:***@h"),  # the scheme starts at the first letter
        ('{"url": "redis://u:hunter2@cache:6379/0"}', '{"url": "redis://u:***@cache:6379/0"}'),
        ("x://u:a://b:c@h", "x://u:***@h"),  # a URL inside the password is masked with it
        ("host=db password=s3cret user=app", "host=db password=*** user=app"),
        ("PASSWORD = 's3 cret' dbname=x", "PASSWORD = *** dbname=x"),
        ("Password=hunter2", "Password=***"),
    ],
)
def test_passwords_are_masked(text: str, masked: str) -> None:
    assert mask_text(text) == masked
    assert _old_mask(text) == masked  # the cases masked before are masked alike


@pytest.mark.parametrize(
    "text",
    [
        "postgresql://app@db/app",  # no password
        "x://u:no-at-sign then@later",  # a blank ends the password before any '@'
        "x://u:never-ends",
        "mailto:someone@example.com",
        "x" * 1000,
        "",
    ],
)
def test_text_without_a_password_is_unchanged(text: str) -> None:
    assert mask_text(text) == text


def test_mask_url_masks_what_sqlalchemy_cannot_parse_too() -> None:
    assert mask_url("postgresql://app:s3cret@db/app") == "postgresql://app:***@db/app"
    assert "s3cret" not in mask_url("postgresql://app:s3cret@db:notaport/app")


def test_masking_matches_the_old_regexes_on_random_text() -> None:
    """Same output as the quadratic regexes on 50,000 short texts made of URL fragments."""
    pieces = ["postgresql://", "x://", "u", ":", "p", "@", "@@", "h", " ", "\t", "/", "//", "1",
              "+", "-", ".", "a", "Z", "password", "=", " = ", "'", "::"]  # fmt: skip
    rng = random.Random(20)
    for _ in range(50_000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 14)))
        assert mask_text(text) == _old_mask(text), text


def _growth(make: Callable[[int], str], work: Callable[[str], object], size: int) -> float:
    """How much longer ``work`` takes on a text four times longer (about 4: linear).

    The best of 9 runs of each, taken in turns, timed in this thread's CPU time: the parallel
    suite and other load on the machine take the cores away, not the work's own seconds."""
    texts = (make(size), make(4 * size))
    best = [float("inf"), float("inf")]
    for _ in range(9):
        for i, text in enumerate(texts):
            start = time.thread_time()
            work(text)
            best[i] = min(best[i], time.thread_time() - start)
    return best[1] / best[0]


@pytest.mark.parametrize(
    "make",
    [
        lambda n: "x" * n,  # one unbroken run of letters
        lambda n: "7" * n,
        lambda n: "1a" * (n // 2),
        lambda n: ("x://a:" * n)[:n],  # a URL start every 6 characters, no '@' anywhere
        lambda n: "a://" + "b" * n,
        lambda n: ("postgresql://u:secret@h/db " * n)[:n],
        lambda n: "password='" + " password=x" * (n // 11),
    ],
    ids=["letters", "digits", "mixed", "url-starts", "one-long-user", "urls", "pairs"],
)
def test_mask_text_time_is_linear(make: Callable[[int], str]) -> None:
    """1 MB against 250 KB: about 4 times as long (a quadratic scan: 16 times)."""
    assert _growth(make, mask_text, 250_000) < 8


def _parse_or_none(text: str) -> object:
    try:
        return parse_duration(text)
    except ValueError:
        return None


@pytest.mark.parametrize(
    "make",
    [
        lambda n: "1" + " " * n + "x",  # blanks between the number and garbage
        lambda n: "1" * n + "x",
        lambda n: " " * n + "x",
    ],
    ids=["blanks", "digits", "leading-blanks"],
)
def test_parse_duration_time_is_linear(make: Callable[[int], str]) -> None:
    """The dashboard's purge form takes 16 KiB: no split of a run of blanks is tried twice."""
    assert _growth(make, _parse_or_none, 100_000) < 8


def test_the_unique_key_detail_parses_in_linear_time() -> None:
    """A key full of ", " (a queue never has a comma) is split at the first one, in one pass."""
    detail = "Key (queue, unique_key)=(q, k, with, commas) already exists."
    found = _KEY_DETAIL.search(detail)
    assert found is not None
    assert found.groups() == ("q", "k, with, commas")

    def make(n: int) -> str:
        return "Key (queue, unique_key)=(q, " + ", " * n + ") already exist."

    assert _growth(make, _KEY_DETAIL.search, 5_000) < 8
