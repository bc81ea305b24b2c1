"""Must fail ``mypy --strict``, on the lines marked ``# E:`` only (the test compares them)."""

from __future__ import annotations

from sqlalchemy import Connection
from sqlalchemy.ext.asyncio import AsyncConnection

import pgqueue

registry = pgqueue.Registry()


@registry.task(queue="emails")
def send_email(user_id: int, *, template: str = "welcome") -> dict[str, str]:
    return {"user": str(user_id), "template": template}


@registry.task
async def call_webhook(url: str) -> int:
    return len(url)


def produce(conn: Connection) -> None:
    send_email.enqueue(conn, "not an int")  # E: arg-type
    send_email.enqueue(conn, 42, templat="reset")  # E: call-arg
    send_email.enqueue(conn)  # E: call-arg
    send_email.args(1, 2)  # E: call-arg arg-type
    send_email.options(priority="high")  # E: arg-type
    send_email.options(dely=5)  # E: call-arg
    text: str = send_email(1)  # E: assignment
    del text
    pgqueue.enqueue(conn, {}, queue=1)  # E: arg-type
    pgqueue.enqueue(conn, {}, on_dependency_failure="skip")  # E: arg-type
    pgqueue.enqueue(conn, {}, dely=5)  # E: call-arg
    pgqueue.enqueue_many(conn, [1], unique_key="k")  # E: call-arg


async def produce_async(conn: AsyncConnection) -> None:
    await call_webhook.aenqueue(conn, 1)  # E: arg-type
