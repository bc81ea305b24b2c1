"""The service's write path: a user and its welcome-email job commit, or roll back, together."""

from __future__ import annotations

from sqlalchemy import Connection, insert

import pgqueue
from myservice.models import User

WELCOME_QUEUE = "welcome_email"


def create_user(conn: Connection, email: str) -> int:
    """Insert a user and enqueue its welcome email in the caller's transaction."""
    user_id = conn.execute(insert(User).values(email=email).returning(User.id)).scalar_one()
    pgqueue.enqueue(conn, {"user_id": user_id, "email": email}, queue=WELCOME_QUEUE)
    return int(user_id)
