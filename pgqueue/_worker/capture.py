"""Jobs' log lines: the ``logging`` capture, and the lines a batch of held jobs carries.

The capture is one handler on the root logger (installed while a worker with
``capture_logs=True`` runs; one for the process however many workers run), at INFO. A record
reaches it after the logger's own level check, as it reaches every handler; it asks the context
for the job running here (:data:`pgqueue.jobs.current_job_var`, set around each handler call)
and returns at once when there is none or that job's worker does not capture: one context
variable read per record, no lock (``handle`` is overridden: the base class takes the
handler's lock for every record). A job's records are recorded as its lines and still reach
every other handler as before.

What a write carries: :func:`pending_lines` reads the buffers of the jobs of a batch (``None``
for a job that logged nothing, one attribute read) and returns the entries of the jobs with lines
not yet written; the completer's and the heartbeat's statements take them
(:func:`pgqueue._sql.log_statements.with_lines`), so a batch of jobs that logged nothing is
sent exactly as before.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable

from pgqueue._sql.log_calls import JobLines
from pgqueue._worker.window import Held
from pgqueue.jobs import JobMarks, current_job_var, marks_of

_installed_lock = threading.Lock()
_installed: list[JobLogHandler] = []  # the one handler, while it is installed
_users = 0


class JobLogHandler(logging.Handler):
    """Records a record emitted while a capturing job's handler runs as that job's line."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)

    def handle(self, record: logging.LogRecord) -> bool:
        job = current_job_var.get()
        if job is None:
            return False
        marks = marks_of(job)
        if not marks.capture:
            return False
        _record(marks, record)
        return True

    def emit(self, record: logging.LogRecord) -> None:
        job = current_job_var.get()
        if job is not None:
            _record(marks_of(job), record)


def _record(marks: JobMarks, record: logging.LogRecord) -> None:
    """``record`` as a line of the job ``marks`` keeps: its message (formatted, with its
    traceback), level and logger name."""
    try:
        message = record.getMessage()
        if record.exc_info:
            message = f"{message}\n{_FORMATTER.formatException(record.exc_info)}"
    except Exception as exc:  # a bad format string: the record as it came
        message = f"{record.msg!r} % {record.args!r} ({type(exc).__name__})"
    level = _LEVELS.get(record.levelname) or record.levelname.lower()
    marks.lines().add(level, message, _NO_FIELDS, record.name)


#: The standard levels' names as lines store them (any other name: in lower case).
_LEVELS = {"INFO": "info", "WARNING": "warning", "ERROR": "error", "CRITICAL": "critical"}
#: A captured record's fields: none (one shared empty dict, never changed).
_NO_FIELDS: dict[str, object] = {}
_FORMATTER = logging.Formatter()


def install() -> None:
    """One more worker captures: the root logger has the handler while any does."""
    global _users
    with _installed_lock:
        _users += 1
        if not _installed:
            handler = JobLogHandler()
            _installed.append(handler)
            logging.getLogger().addHandler(handler)


def uninstall() -> None:
    """A capturing worker stopped: the last one removes the handler."""
    global _users
    with _installed_lock:
        _users = max(0, _users - 1)
        if not _users and _installed:
            logging.getLogger().removeHandler(_installed.pop())


def pending_lines(held: Iterable[Held]) -> tuple[list[JobLines], list[tuple[Held, int]]]:
    """The entries of the jobs of ``held`` whose lines were not all written yet, and each such
    job with the buffer's version they carry (for :meth:`~pgqueue._base.joblog.LogBuffer.written`
    once the write committed)."""
    entries: list[JobLines] = []
    versions: list[tuple[Held, int]] = []
    for h in held:
        logs = marks_of(h.job).logs
        if logs is None:
            continue
        pending = logs.pending()
        if pending is None:
            continue
        version, lines, dropped = pending
        entries.append((h.job.id, h.job.attempts, dropped, lines))
        versions.append((h, version))
    return entries, versions


def written(versions: Iterable[tuple[Held, int]], kept: Iterable[int]) -> None:
    """The lines of ``versions`` whose job is in ``kept`` (the ids the write matched) are
    written as of their version."""
    ids = set(kept)
    for h, version in versions:
        if h.job.id in ids:
            logs = marks_of(h.job).logs
            if logs is not None:
                logs.written(version)
