"""A job's :class:`~pgqueue.jobs.Outcome`: how it is decided, and how it is counted and told.

The decision: what a guarded write's answer means (:func:`after_complete`, :func:`after_fail`,
:func:`after_snooze`) and, for a write that matched nothing, what ``settled_among`` found
(:func:`unmatched`). The completer's batches and the executors' one-job writes (transaction mode,
``pgqueue.testing.drain``) both decide through these, so a job ends with the same outcome and
detail in every mode.

The table: the completer, the executors, the heartbeat and shutdown all end a job through
:data:`OUTCOMES`, so an outcome is counted, logged and told to hooks the same way wherever it was
decided.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta
from typing import TypeAlias

from pgqueue._base.urls import mask_text
from pgqueue.jobs import JobContext, Outcome, WorkerStats
from pgqueue.results import FailResult, Settled

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


# -- the decision ----------------------------------------------------------------------------------

#: An outcome and its detail: the ``{detail}`` of its log line, the text its hook is given.
Decision: TypeAlias = tuple[Outcome, str]

_DONE: Decision = (Outcome.DONE, "")
#: A write whose guard matched no row: ``LOST`` until :func:`unmatched` knows better. The detail
#: names the write, in every mode, so a lost job's log line and ``on_lost`` reason say why it was
#: dropped (the handler's own error, if any, went to ``on_handled``).
_NO_ROW_AT_COMPLETION: Decision = (Outcome.LOST, "guard matched no row at completion")
_NO_ROW_AT_FAILURE: Decision = (Outcome.LOST, "guard matched no row at failure")
_NO_ROW_AT_SNOOZE: Decision = (Outcome.LOST, "guard matched no row at snooze")


def after_complete(matched: bool) -> Decision:
    """The guarded completion was written (``matched``), or matched no row."""
    return _DONE if matched else _NO_ROW_AT_COMPLETION


def after_fail(row: FailResult | None, error: str) -> Decision:
    """The guarded failure's row (``None``: it matched none): retried later or failed for good,
    ``error`` being the text written to ``last_error``."""
    if row is None:
        return _NO_ROW_AT_FAILURE
    if row.retry_in is None:
        return Outcome.FAILED, error
    return Outcome.RETRY, f"retry in {row.retry_in}: {error}"


def after_snooze(matched: bool, delay: timedelta) -> Decision:
    """The guarded snooze by ``delay`` was written (``matched``), or matched no row."""
    return (Outcome.SNOOZED, str(delay)) if matched else _NO_ROW_AT_SNOOZE


_SETTLED = {Settled.DONE_BY_HANDLER: Outcome.DONE_BY_HANDLER, Settled.CANCELLED: Outcome.CANCELLED}


def unmatched(settled: Settled | None, detail: str) -> Decision:
    """A job whose write matched nothing (a ``LOST`` decision with ``detail``), once
    ``settled_among`` said what became of it: done by its handler, cancelled, or lost indeed."""
    return (Outcome.LOST, detail) if settled is None else (_SETTLED[settled], "")
