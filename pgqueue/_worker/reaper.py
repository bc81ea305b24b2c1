"""The reaper: requeues (or fails) jobs whose lease expired, whoever held them (R12)."""

from __future__ import annotations

import logging

from sqlalchemy import Engine

from pgqueue import repository
from pgqueue._worker.transient import short_transaction
from pgqueue.hooks import HookDispatcher
from pgqueue.results import ReapedJob

log = logging.getLogger("pgqueue.worker")


def reap(engine: Engine, *, lock_timeout_ms: int, hooks: HookDispatcher | None) -> list[ReapedJob]:
    """One reaping transaction; a transient error is logged and waits for the next round."""
    reaped = short_transaction(
        engine, repository.reap_expired, what="reaper", lock_timeout_ms=lock_timeout_ms
    )
    for job in reaped or ():
        log.warning("job %d attempt=%d: lease expired, now %s", job.id, job.attempts, job.status)
    if reaped and hooks is not None:
        hooks.reaped(reaped)
    return reaped or []
