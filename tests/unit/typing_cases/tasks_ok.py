"""Must pass ``mypy --strict``: the calls the issue shows, typed as the functions are."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import Connection
from sqlalchemy.ext.asyncio import AsyncConnection

import pgqueue

registry = pgqueue.Registry()


@registry.task(queue="emails", max_attempts=3)
def send_email(user_id: int, *, template: str = "welcome") -> dict[str, str]:
    return {"user": str(user_id), "template": template}


@registry.task
async def call_webhook(url: str, body: dict[str, int]) -> int:
    return len(url) + len(body)


def produce(conn: Connection) -> list[int]:
    job_id: int = send_email.enqueue(conn, 42, template="reset")
    send_email.options(delay=timedelta(seconds=30), priority=5, unique_key="u42").enqueue(conn, 7)
    ids: list[int] = send_email.enqueue_many(conn, [send_email.args(1), send_email.args(2)])
    result: dict[str, str] = send_email(42)
    task: pgqueue.Task[[int], dict[str, str]] | None = None
    del task, result
    # The function doors type their options from pgqueue.EnqueueOptions' fields (#30).
    pgqueue.enqueue(conn, {}, queue="q", delay=5, depends_on=[job_id], on_dependency_failure="run")
    pgqueue.enqueue_unique(conn, {}, unique_key="k", delay=timedelta(seconds=1), priority=2)
    pgqueue.enqueue_many(conn, [1, 2], unique_keys=["a", None], concurrency_keys=["t", None])
    return [job_id, *ids]


async def produce_async(conn: AsyncConnection) -> int:
    job_id: int = await call_webhook.aenqueue(conn, "https://example.com", {"a": 1})
    value: int = await call_webhook("u", {})
    return job_id + value
