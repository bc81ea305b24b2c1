"""The same write path for asyncio services (FastAPI, Starlette) with ``pgqueue.aio``."""

from __future__ import annotations

from sqlalchemy import insert
from sqlalchemy.ext.asyncio import AsyncConnection

import pgqueue.aio
from myservice.app import WELCOME_QUEUE
from myservice.models import User


async def create_user(conn: AsyncConnection, email: str) -> int:
    """Insert a user and enqueue its welcome email in the caller's transaction."""
    result = await conn.execute(insert(User).values(email=email).returning(User.id))
    user_id = int(result.scalar_one())
    await pgqueue.aio.enqueue(conn, {"user_id": user_id, "email": email}, queue=WELCOME_QUEUE)
    return user_id
