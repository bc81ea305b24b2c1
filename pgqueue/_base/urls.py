"""Database URLs: accept the forms users paste, and never print a password."""

from __future__ import annotations

import re

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
# ``password=...`` conninfo pairs: each try ends at the run of blanks or the quote after it.
_PASSWORD_KV = re.compile(r"(?P<pre>password\s*=\s*)('[^']*'|\S+)", re.IGNORECASE)


def _masked_url(match: re.Match[str]) -> str:
    return match["pre"] + "***@" if match["at"] else match[0]


def mask_text(text: str) -> str:
    """Mask passwords in any text that may embed URLs or ``password=`` conninfo pairs.

    Time linear in the length of ``text`` (output of ``pgqueue show`` holds whole payloads).
    """
    text = _SECRET_IN_TEXT.sub(_masked_url, text)
    return _PASSWORD_KV.sub(lambda m: m.group("pre") + "***", text)


def error_line(exc: BaseException) -> str:
    """An exception's first line with passwords masked (its type name when it has no text)."""
    text = str(exc).strip()
    return mask_text(text.splitlines()[0] if text else type(exc).__name__)
