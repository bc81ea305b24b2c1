"""Passwords are masked in every line printed, in time linear in the text's length, and the
masking keeps the text's structure: a value ends at its closing quote, comma or brace, so JSON
stays JSON, and a quoted password is masked whole.

``mask_text`` runs on all the CLI's output, whole payloads included: a regex that backtracks over
a run of letters from each of its letters took 3.4 s on 80,000 of them and kept ``pgqueue show``
of a 100 MB payload busy for more than 9 minutes. The other regexes applied to user data
(durations typed in the CLI and the dashboard's form, the unique-key detail of an error) are held
to the same rule. Speed is asserted as a ratio only: four times the text, about four times the
time (a quadratic scan takes sixteen).
"""

from __future__ import annotations

import io
import json
import random
import re
import string
import time
from collections.abc import Callable
from contextlib import redirect_stdout
from typing import Any

import pytest

from pgqueue._base.durations import parse_duration
from pgqueue._base.urls import mask_text, mask_url, mask_value
from pgqueue._sql.driver_errors import _KEY_DETAIL
from pgqueue.cli.common import emit_json

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
    """Same output as the quadratic regexes on 50,000 short texts made of URL fragments (without
    the quotes and separators whose masking changed: it now stops at them)."""
    pieces = ["postgresql://", "x://", "u", ":", "p", "@", "@@", "h", " ", "\t", "/", "//", "1",
              "+", "-", ".", "a", "Z", "password", "=", " = ", "::"]  # fmt: skip
    rng = random.Random(20)
    for _ in range(50_000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 14)))
        assert mask_text(text) == _old_mask(text), text


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        ('password="two words" user=x', "password=*** user=x"),  # the second word too
        ("password='a\\' b' user=x", "password=*** user=x"),  # conninfo's escaped quote
        ('{"dsn": "host=x password=s3cret"}', '{"dsn": "host=x password=***"}'),
        ('{"dsn": "password=s3cret", "n": 1}', '{"dsn": "password=***", "n": 1}'),
        ('["password=abc","x"]', '["password=***","x"]'),
        ("{password=abc}", "{password=***}"),
        ("password=abc, user=x", "password=***, user=x"),
        ('{"dsn": "password=\\"two words\\""}', '{"dsn": "password=***"}'),  # JSON-escaped
        ("?password=abc&sslmode=require", "?password=***&sslmode=require"),
        ("password='never closed", "password=***"),
        ("password=a\\,b rest", "password=*** rest"),  # a backslash-escaped comma is the value's
    ],
)
def test_a_masked_value_stops_at_its_closing_quote_comma_or_brace(text: str, masked: str) -> None:
    assert mask_text(text) == masked
    assert mask_text(masked) == masked  # masking twice changes nothing more


#: Characters of a secret with no character that ends a bare value.
_BARE = string.ascii_letters + string.digits + "!#$%*+-./:=?@^_|~"
#: And of one inside quotes: blanks and the other quote, commas and braces included.
_QUOTED = _BARE + " ,{}[]&;"


def _secret(rng: random.Random, alphabet: str, marker: str) -> str:
    """A random secret around ``marker``, so the test can tell whether it leaked."""
    return (
        "".join(rng.choices(alphabet, k=rng.randint(0, 6)))
        + marker
        + "".join(rng.choices(alphabet, k=rng.randint(0, 6)))
    )


def _with_secret(rng: random.Random, marker: str) -> str:
    """One of the forms a password takes in a payload, with plain text around it."""
    form = rng.randrange(6)
    if form == 0:
        found = f"password={_secret(rng, _BARE, marker)}"
    elif form == 1:
        found = f"PASSWORD = '{_secret(rng, _QUOTED + chr(34), marker)}'"
    elif form == 2:
        found = f'password="{_secret(rng, _QUOTED + chr(39), marker)}"'
    elif form == 3:
        user = rng.choice(["app", "", "u.v"])
        pw = _secret(rng, _BARE.replace("@", "") + "\"'{},", marker)
        found = f"{rng.choice(['postgresql', 'redis', 'x+y'])}://{user}:{pw}@db:5432/app"
    elif form == 4:
        found = f"host=db password={_secret(rng, _BARE, marker)} user=app"
    else:
        found = f'dsn "password=\\"{_secret(rng, _QUOTED, marker)}\\"" end'  # JSON-escaped
    before = rng.choice(["", "x ", "{", "[", "'", '"', "a,b ", "see: "])
    after = rng.choice(["", " y", "}", "]", ",", '"', "'", ", z", "\n"])
    return before + found + after


def _plain(rng: random.Random) -> str:
    """Text without a secret, full of what JSON escapes and what the masking looks for."""
    return "".join(
        rng.choices(
            ['"', "'", "\\", ",", "{", "}", "password", "=", "://", "@", " ", "é", "a"], k=8
        )
    )


def _payload(rng: random.Random, markers: list[str], depth: int = 0) -> Any:
    kind = rng.randrange(6 if depth < 3 else 3)
    if kind == 0:
        markers.append(f"S3CR{len(markers)}T")
        return _with_secret(rng, markers[-1])
    if kind == 1:
        return _plain(rng)
    if kind == 2:
        return rng.choice([None, True, 42, 2.5, ""])
    if kind == 3:
        return [_payload(rng, markers, depth + 1) for _ in range(rng.randint(0, 4))]
    items: dict[str, Any] = {}
    for _ in range(rng.randint(0, 4)):
        if rng.random() < 0.2:
            markers.append(f"S3CR{len(markers)}T")
            key = _with_secret(rng, markers[-1])
        else:
            key = _plain(rng)
        if all(mask_text(key) != mask_text(other) for other in items):  # keys stay apart
            items[key] = _payload(rng, markers, depth + 1)
    return items


def test_json_output_stays_valid_json_over_random_payloads_with_secrets() -> None:
    """``emit_json`` (``show --json``, ``list --json``) over 3,000 seeded random payloads: the
    text parses, has the payload's structure, shows no secret, and changes nothing else."""
    rng = random.Random(29)
    for _ in range(3_000):
        markers: list[str] = []
        payload = _payload(rng, markers)
        out = io.StringIO()
        with redirect_stdout(out):
            emit_json({"id": 1, "payload": payload})
        printed = json.loads(out.getvalue())  # valid JSON
        assert printed == {"id": 1, "payload": mask_value(payload)}
        for marker in markers:
            assert marker not in out.getvalue(), (payload, out.getvalue())
        assert _shape(printed["payload"]) == _shape(payload)


def _shape(value: Any) -> Any:
    """The structure of a JSON value: its containers and their sizes, strings as ``str``."""
    if isinstance(value, dict):
        return ("dict", sorted(repr(_shape(v)) for v in value.values()))
    if isinstance(value, list):
        return ("list", [_shape(v) for v in value])
    return type(value).__name__


def test_text_without_a_secret_is_kept_by_mask_value() -> None:
    rng = random.Random(7)
    for _ in range(2_000):
        text = _plain(rng)
        if "=" in text or "://" in text:
            continue
        assert mask_value({text: [text]}) == {text: [text]}


#: Five times linear growth, a twelfth of quadratic (see :func:`_growth`).
LINEAR = 320


def _growth(make: Callable[[int], str], work: Callable[[str], object], size: int) -> float:
    """How much longer ``work`` takes on a text of ``size`` than on one 64 times shorter: about
    64 when it is linear, 4,096 when quadratic. Tests bound it at :data:`LINEAR`.

    The best of 9 runs of each, taken in turns, timed in this thread's CPU time: the parallel
    suite and other load on the machine take the cores away, not the work's own seconds. Load
    still slows the long text more (its bytes fall out of the caches the other processes
    share): up to 3 times here under ``stress --cpu 2``, hence the wide ratio."""
    texts = (make(size // 64), make(size))
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
        lambda n: 'password="' + ' password=\\"' * (n // 12),
        lambda n: "password='" + " password=\\'" * (n // 12),
        lambda n: 'password=\\"' * (n // 11),
        lambda n: "password=" + "\\" * n,
        lambda n: 'password="' + "\\" * n,
        lambda n: "password=" + "\\" * (n // 2) + '"' + "\\" * (n // 2),
        lambda n: "password=" + "\\" * 7 + '"' + "\\" * n,
    ],
    ids=[
        "letters",
        "digits",
        "mixed",
        "url-starts",
        "one-long-user",
        "urls",
        "pairs",
        "escaped-double-quotes",
        "escaped-single-quotes",
        "json-escaped",
        "backslashes",
        "quoted-backslashes",
        "backslash-runs-around-a-quote",
        "json-escape-never-closed",
    ],
)
def test_mask_text_time_is_linear(make: Callable[[int], str]) -> None:
    """1 MB against 16 KB: about 64 times as long (a quadratic scan: 4,096 times)."""
    assert _growth(make, mask_text, 1_000_000) < LINEAR


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
    assert _growth(make, _parse_or_none, 400_000) < LINEAR


def test_the_unique_key_detail_parses_in_linear_time() -> None:
    """A key full of ", " (a queue never has a comma) is split at the first one, in one pass."""
    detail = "Key (queue, unique_key)=(q, k, with, commas) already exists."
    found = _KEY_DETAIL.search(detail)
    assert found is not None
    assert found.groups() == ("q", "k, with, commas")

    def make(n: int) -> str:
        return "Key (queue, unique_key)=(q, " + ", " * n + ") already exist."

    assert _growth(make, _KEY_DETAIL.search, 20_000) < LINEAR
