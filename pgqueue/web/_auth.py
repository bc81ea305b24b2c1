"""HTTP basic auth in front of every route of the dashboard, static files included."""

from __future__ import annotations

import base64
import binascii
import hmac

from pgqueue.errors import InvalidArgumentError, InvalidArgumentTypeError
from pgqueue.web._asgi import ASGIApp, Receive, Scope, Send

#: What the browser shows in its login prompt.
REALM = "pgqueue"


def parse_credentials(value: object) -> tuple[str, str]:
    """``"USER:PASSWORD"`` or ``(user, password)`` as a pair; both parts must be non-empty.

    The password may hold colons (the user name may not, as in HTTP basic auth itself).
    """
    if isinstance(value, tuple) and len(value) == 2 and all(isinstance(v, str) for v in value):
        user, password = value
    elif isinstance(value, str):
        user, sep, password = value.partition(":")
        if not sep:
            raise InvalidArgumentError("auth", "expected USER:PASSWORD (no colon found)")
    else:
        raise InvalidArgumentTypeError(
            "auth", "a 'USER:PASSWORD' string or a (user, password)", value
        )
    if not user or not password:
        raise InvalidArgumentError("auth", "expected USER:PASSWORD, both non-empty")
    if ":" in user:
        raise InvalidArgumentError("auth", "the user name must not contain a colon")
    return user, password


class BasicAuth:
    """Answer 401 to any request without the right ``Authorization: Basic`` credentials.

    Both parts are compared with :func:`hmac.compare_digest`, and both comparisons always run, so
    the time taken says nothing about how much of a guess was right.
    """

    def __init__(self, app: ASGIApp, *, credentials: tuple[str, str]) -> None:
        self.app = app
        user, password = parse_credentials(credentials)
        self._user = user.encode()
        self._password = password.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or self._allowed(scope):
            await self.app(scope, receive, send)
            return
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"text/plain; charset=utf-8"),
                    (b"www-authenticate", f'Basic realm="{REALM}", charset="UTF-8"'.encode()),
                    (b"cache-control", b"no-store"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": b"401: credentials needed\n"})

    def _allowed(self, scope: Scope) -> bool:
        header = dict(scope.get("headers") or []).get(b"authorization", b"")
        scheme, _, encoded = header.partition(b" ")
        if scheme.lower() != b"basic":
            return False
        try:
            decoded = base64.b64decode(encoded.strip(), validate=True)
        except (binascii.Error, ValueError):
            return False
        user, _, password = decoded.partition(b":")
        same_user = hmac.compare_digest(user, self._user)
        same_password = hmac.compare_digest(password, self._password)
        return same_user and same_password
