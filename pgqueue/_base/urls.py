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


_SECRET_IN_TEXT = re.compile(r"(?P<pre>[a-zA-Z][a-zA-Z0-9+.-]*://[^:/@\s]*:)[^@\s]*(?=@)")
_PASSWORD_KV = re.compile(r"(?P<pre>password\s*=\s*)('[^']*'|\S+)", re.IGNORECASE)


def mask_text(text: str) -> str:
    """Mask passwords in any text that may embed URLs or ``password=`` conninfo pairs."""
    text = _SECRET_IN_TEXT.sub(lambda m: m.group("pre") + "***", text)
    return _PASSWORD_KV.sub(lambda m: m.group("pre") + "***", text)


def error_line(exc: BaseException) -> str:
    """An exception's first line with passwords masked (its type name when it has no text)."""
    text = str(exc).strip()
    return mask_text(text.splitlines()[0] if text else type(exc).__name__)
