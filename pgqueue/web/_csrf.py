"""CSRF tokens bound to a cookie: a form's token is an HMAC of the cookie under the app's secret.

A page sets a random cookie once (``HttpOnly``, ``SameSite=Strict``) and puts
``HMAC(secret, cookie)`` in each form's hidden ``csrf_token`` field; a POST is accepted only when
its field matches its own cookie. Another site can make the browser send the cookie but cannot
read the page to learn the token, and a cookie planted by a sibling domain is useless without the
secret.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

#: The cookie holding the random value a form's token is derived from.
COOKIE = "pgqueue_csrf"
#: The hidden form field every POST must carry.
FIELD = "csrf_token"


def new_cookie() -> str:
    """A fresh random cookie value (32 bytes, URL-safe)."""
    return secrets.token_urlsafe(32)


def token_for(secret: bytes, cookie: str) -> str:
    """The form token that goes with ``cookie``."""
    return hmac.new(secret, cookie.encode(), hashlib.sha256).hexdigest()


def is_valid(secret: bytes, cookie: str | None, token: str | None) -> bool:
    """Whether a POST's ``token`` belongs to its ``cookie`` (constant-time comparison)."""
    if not cookie or not token:
        return False
    return hmac.compare_digest(token_for(secret, cookie).encode(), token.encode())
