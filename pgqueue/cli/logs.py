"""``pgqueue logs ID [--follow]`` and the log section of ``pgqueue show ID --logs``.

Lines are printed as ``time  attempt  level  logger  message  fields``, oldest first, passwords
masked (they were masked when recorded, and every printed line is masked again). ``--follow``
reads the job's lines again every ``--interval`` and prints the new ones, until the job is
finished: a running job's lines are those its worker's last heartbeat wrote.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection

from pgqueue import admin, repository
from pgqueue.cli.common import UserError, database_url, emit, make_engine, schema_arg
from pgqueue.results import LogLine, LogLines

#: The states ``--follow`` stops at: no line is written after them.
_FINISHED = ("done", "failed", "cancelled", "expired")


def format_line(line: LogLine) -> str:
    """One printed line (a multi-line message, a traceback, goes on indented lines)."""
    when = line.time.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    fields = f"  {json.dumps(line.fields)}" if line.fields else ""
    logger = f"  [{line.logger}]" if line.logger else ""
    message = line.message.replace("\n", "\n" + " " * 4)
    return f"{when}  #{line.attempt}  {line.level:<8}{logger}  {message}{fields}"


def line_json(line: LogLine) -> dict[str, Any]:
    return {
        "time": line.time.isoformat(),
        "attempt": line.attempt,
        "level": line.level,
        "logger": line.logger,
        "message": line.message,
        "fields": line.fields,
    }


def emit_lines(lines: Sequence[LogLine], dropped: dict[int, int], *, as_json: bool) -> None:
    """Print ``lines``; a note per attempt whose bound dropped older lines."""
    for attempt, count in sorted(dropped.items()):
        if not as_json:
            emit(f"(attempt {attempt}: {count} older line(s) dropped)")
    for line in lines:
        if as_json:
            emit(json.dumps(line_json(line)))
        else:
            emit(format_line(line))


def print_show_logs(lines: Sequence[LogLine]) -> None:
    """The log section of ``pgqueue show ID --logs``, after the error history."""
    emit(f"{'logs:':<14} {len(lines) or '-'}")
    emit_lines(lines, lines.dropped if isinstance(lines, LogLines) else {}, as_json=False)


def _read(
    conn: Connection, job_id: int, attempt: int | None
) -> tuple[list[LogLine], dict[int, int]]:
    lines = repository.job_logs(conn, job_id, attempt=attempt)
    dropped = lines.dropped if isinstance(lines, LogLines) else {}
    return list(lines), dropped


def cmd_logs(args: argparse.Namespace) -> int:
    """Print one job's log lines; with ``--follow``, the new ones too, until it is finished."""
    engine = make_engine(database_url(args) or "", schema=schema_arg(args))
    printed: dict[int, int] = {}  # per attempt: lines printed so far, dropped ones counted
    try:
        while True:
            with engine.begin() as conn:
                job = admin.get_job(conn, args.id, payload_chars=1)
                if job is None:
                    raise UserError(f"no job with id {args.id}", code=1)
                lines, dropped = _read(conn, args.id, args.attempt)
            fresh: list[LogLine] = []
            for attempt in sorted({x.attempt for x in lines}):
                mine = [x for x in lines if x.attempt == attempt]
                start = max(0, printed.get(attempt, 0) - dropped.get(attempt, 0))
                fresh += mine[start:]
                printed[attempt] = dropped.get(attempt, 0) + len(mine)
            if not args.follow:
                emit_lines(fresh, dropped, as_json=args.json)
                return 0
            emit_lines(fresh, {}, as_json=args.json)
            if str(job["status"]) in _FINISHED:
                return 0
            time.sleep(args.interval.total_seconds())
    finally:
        engine.dispose()
