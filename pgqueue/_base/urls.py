"""Database URLs: accept the forms users paste, and never print a password."""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy.engine import URL, make_url

_PLAIN_SCHEMES = {"postgres", "postgresql"}


def to_sqlalchemy_url(url: str | URL) -> URL:
    """Map ``postgresql://`` and ``postgres://`` to the psycopg 3 driver; keep explicit drivers."""
    parsed = make_url(url) if isinstance(url, str) else url
    if parsed.drivername in _PLAIN_SCHEMES:
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def to_libpq_url(url: str | URL) -> str:
    """A ``postgresql://`` conninfo for psycopg.connect, whatever driver the URL names."""
    parsed = to_sqlalchemy_url(url).set(drivername="postgresql")
    return parsed.render_as_string(hide_password=False)


def mask_url(url: str | URL) -> str:
    """The URL with its password replaced by ``***``, for logs and messages."""
    if isinstance(url, URL):
        return url.render_as_string(hide_password=True)
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # not a URL SQLAlchemy can parse: mask anything between ':' and '@'
        return mask_text(url)


# ``scheme://user:password@``. Linear in the text's length, which may be a 100 MB payload: a match
# starts only where a run of scheme characters starts (the look-behind), so a long run of letters
# is scanned once, not once from each of its letters; and once ``scheme://user:`` matched, the
# password runs to the next ``@`` or blank and is consumed whether an ``@`` ends it or not, so
# the scan never starts again inside it. (A password with no ``@`` after it is no URL's; one
# that starts inside it would end at the same place, and is none either.) Digits and ``+.-``
# may lead the run: the scheme is its part from the first letter on, as RFC 3986 has it.
_SECRET_IN_TEXT = re.compile(
    r"(?<![a-zA-Z0-9+.-])(?P<pre>[0-9+.-]*[a-zA-Z][a-zA-Z0-9+.-]*://[^:/@\s]*:)"
    r"(?P<password>[^@\s]*)(?P<at>@?)"
)
# ``password=...`` pairs (conninfo, a DSN, a config line), the value masked whole and nothing
# after it, so the text around keeps its structure (a JSON string its closing quote):
# - quoted, ``'...'`` or ``"..."`` (a backslash escapes the next character, as in conninfo), or
#   ``\"...\"``, the double quotes of a JSON string's text (``\\\"...\\\"`` in JSON inside JSON,
#   three levels deep at most): masked with its quotes, spaces and all; a quote never closed, to
#   the end of its line;
# - bare: up to a blank, a quote, a backslash (unless it escapes a plain character), a comma, a
#   brace or bracket, or ``&`` (the next URL query parameter).
# Linear: a quoted value ends at the next quote of its kind that no backslash escapes, and every
# opening quote of a later pair is one (it follows ``=`` or a blank), so no scan passes another
# pair's opening quote; a bare run and a JSON-escaped value end at the next quote of any kind
# (the at most 7 backslashes before it compared with the opening's at each character it gives
# back: a bound, so an unbounded run of them costs no square).
_PASSWORD_KV = re.compile(
    r"(?P<pre>password\s*=\s*)"
    r"(?:'(?:[^'\\\n]|\\.)*(?:'|$|(?=\n))"
    r'|"(?:[^"\\\n]|\\.)*(?:"|$|(?=\n))'
    r'|(?P<esc>\\{1,7})"[^"]*(?P=esc)"'
    r"""|(?:['"]|\\")?(?:[^\s'"\\,{}\[\]&]|\\[^\s'"])+)""",
    re.IGNORECASE,
)


def _masked_url(match: re.Match[str]) -> str:
    return match["pre"] + "***@" if match["at"] else match[0]


def mask_text(text: str) -> str:
    """Mask passwords in any text that may embed URLs or ``password=`` pairs.

    ``scheme://user:secret@`` becomes ``scheme://user:***@``; ``password=secret`` becomes
    ``password=***``, a quoted value (``password="two words"``) masked whole with its quotes, a
    bare one up to the next blank, quote, comma, brace or bracket, so a JSON string keeps its
    closing quote. What every line the CLI prints and every value the dashboard shows goes
    through. Time linear in the length of ``text`` (``pgqueue show`` prints whole payloads).
    """
    text = _SECRET_IN_TEXT.sub(_masked_url, text)
    return _PASSWORD_KV.sub(lambda m: m.group("pre") + "***", text)


def mask_value(value: Any) -> Any:
    """``value`` with :func:`mask_text` applied to every string in it, the keys of mappings too:
    a JSON value masked keeps its structure, so its JSON text stays valid JSON (what ``pgqueue
    show --json`` and ``list --json`` print). Other values are returned as they are."""
    if isinstance(value, str):
        return mask_text(value)
    if isinstance(value, dict):
        return {mask_value(k): mask_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [mask_value(v) for v in value]
    return value


def error_line(exc: BaseException) -> str:
    """An exception's first line with passwords masked (its type name when it has no text)."""
    text = str(exc).strip()
    return mask_text(text.splitlines()[0] if text else type(exc).__name__)
