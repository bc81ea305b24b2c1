"""One table from a job's :class:`~pgqueue.jobs.Outcome` to its stats counter, log line and hook.

The completer, the executors, the heartbeat and shutdown all end a job through this table, so an
outcome is counted, logged and told to hooks the same way wherever it was decided.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from pgqueue._base.urls import mask_text
from pgqueue.jobs import JobContext, Outcome, WorkerStats
from pgqueue.results import Settled

log = logging.getLogger("pgqueue.worker")


@dataclass(frozen=True)
class OutcomeRow:
    """``counter``: the :class:`WorkerStats` field; ``message``: the log line after the job's
    ids (``{detail}`` is the outcome's detail, masked); ``event``: the hook told, if any."""

    counter: str
    level: int
    message: str
    event: str | None


OUTCOMES: dict[Outcome, OutcomeRow] = {
    Outcome.DONE: OutcomeRow("done", logging.INFO, "done", "on_succeeded"),
    Outcome.DONE_BY_HANDLER: OutcomeRow(
        "done_by_handler", logging.INFO, "done by its handler", "on_succeeded"
    ),
    Outcome.RETRY: OutcomeRow("retried", logging.WARNING, "{detail}", "on_retry"),
    Outcome.FAILED: OutcomeRow("failed", logging.ERROR, "failed: {detail}", "on_failed"),
    Outcome.LOST: OutcomeRow(
        "lost", logging.WARNING, "lost ({detail}); outcome dropped", "on_lost"
    ),
    Outcome.RELEASED: OutcomeRow("released", logging.INFO, "released to the queue", None),
    Outcome.CANCELLED: OutcomeRow(
        "cancelled", logging.WARNING, "cancelled; outcome dropped", "on_cancelled"
    ),
    Outcome.SNOOZED: OutcomeRow("snoozed", logging.INFO, "snoozed for {detail}", "on_snoozed"),
}


def count_and_log(
    stats: WorkerStats,
    job: JobContext,
    outcome: Outcome,
    detail: str,
    traceback: str | None = None,
) -> None:
    """Bump the outcome's counter and write its log line (the caller tells the hooks).

    ``traceback``: the failed attempt's (already masked, see :mod:`pgqueue._base.tracebacks`),
    written on the lines after the message as ``logging`` writes ``exc_info``.
    """
    row = OUTCOMES[outcome]
    setattr(stats, row.counter, getattr(stats, row.counter) + 1)
    if log.isEnabledFor(row.level):
        message = row.message.format(detail=mask_text(detail) if detail else "?")
        if traceback:
            message = f"{message}\n{traceback}"
        log.log(
            row.level, "job %d queue=%s attempt=%d: %s", job.id, job.queue, job.attempts, message
        )


_SETTLED = {Settled.DONE_BY_HANDLER: Outcome.DONE_BY_HANDLER, Settled.CANCELLED: Outcome.CANCELLED}


def settled_outcome(settled: Settled | None) -> Outcome:
    """A job whose guard matched nothing: done by its handler, cancelled, or else lost."""
    return Outcome.LOST if settled is None else _SETTLED[settled]
