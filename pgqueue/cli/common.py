"""What every ``pgqueue`` command shares: user errors, argument types, output, connection.

Output goes through :func:`emit` and :func:`note` so that no line printed shows a password.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import re
import sys
import traceback
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

from sqlalchemy import Connection, Engine, create_engine
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import URL

from pgqueue._base import durations as _durations
from pgqueue._base.readable import Unreadable
from pgqueue._base.text import psql_table
from pgqueue._base.urls import error_line, mask_text, mask_url, mask_value, to_sqlalchemy_url
from pgqueue._base.validation import (
    MAX_BIGINT,
    MAX_INT32,
    MAX_PORT,
    MIN_BIGINT,
    check_port,
    is_ascii_digits,
)
from pgqueue._sql.driver_errors import DriverError, classify, driver_exception
from pgqueue.errors import PgQueueError
from pgqueue.schema import SCHEMA_ENV_VAR, check_schema, use_schema

ENV_URL = "PGQUEUE_DATABASE_URL"
# C0 and C1 control characters: shown as a blank, on one line.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
APPLICATION_NAME = "pgqueue-cli"

log = logging.getLogger("pgqueue.cli")


class UserError(PgQueueError):
    """A problem the user can fix; printed as one line on stderr, exit code 2 by default."""

    def __init__(self, message: str, *, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


def parse_duration(value: str) -> timedelta:
    """``7d``, ``5m``, ``30s``, ``1h``, ``250ms`` or plain seconds (``1.5``) as a timedelta."""
    try:
        return _durations.parse_duration(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def tcp_port(value: str, *, lowest: int) -> int:
    """A port typed on the command line, from ``lowest`` to 65535 (checked as the API checks it)."""
    try:
        if not is_ascii_digits(value):
            raise ValueError(value)
        return check_port("port", int(value), lowest=lowest)
    except ValueError:  # not a number, or out of range
        raise argparse.ArgumentTypeError(
            f"expected a TCP port from {lowest} to {MAX_PORT}, got {value!r}"
        ) from None


def positive_int(value: str) -> int:
    """A count: 1 to the largest PostgreSQL ``integer`` (2147483647), in ASCII digits."""
    number = int(value) if is_ascii_digits(value) else 0
    if not 1 <= number <= MAX_INT32:
        raise argparse.ArgumentTypeError(
            f"expected a positive integer of at most {MAX_INT32}, got {value!r}"
        )
    return number


def job_id(value: str) -> int:
    """A job id: an integer a ``bigint`` holds, in ASCII digits; anything else is refused before
    any SQL."""
    number = int(value) if is_ascii_digits(value) else None
    if number is None or not MIN_BIGINT <= number <= MAX_BIGINT:
        raise argparse.ArgumentTypeError(
            f"expected a job id (an integer of at most {MAX_BIGINT}), got {value!r}"
        )
    return number


# -- output ----------------------------------------------------------------------------------------


def json_default(value: object) -> object:
    if isinstance(value, Unreadable):
        return {"unreadable": value.text, "problem": value.problem}
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, Decimal):
        return float(value)
    return str(value)


def emit(text: str = "") -> None:
    """Print one line of output on stdout, passwords masked."""
    sys.stdout.write(mask_text(text) + "\n")


def emit_json(data: object) -> None:
    """Print ``data`` as indented JSON on stdout, passwords masked in every string of it
    (:func:`~pgqueue._base.urls.mask_value`), so the text printed is valid JSON of the same
    structure; never masked again as text, which could not tell a JSON quote from a password's."""
    masked = mask_value(data)
    text = json.dumps(masked, indent=2, default=lambda v: mask_value(json_default(v)))
    sys.stdout.write(text + "\n")


def note(text: str) -> None:
    """A progress or diagnostic line on stderr, passwords masked."""
    sys.stderr.write(mask_text(text) + "\n")
    sys.stderr.flush()


class _NoteHandler(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        note(f"pgqueue: {record.levelname.lower()}: {record.getMessage()}")


@contextmanager
def warnings_noted(logger: str) -> Iterator[None]:
    """While the block runs, the WARNING (and worse) records of ``logger`` are lines on stderr
    (``pgqueue: warning: ...``, masked like every line), and nowhere else: a command that
    configures no logging still shows what the library warns of."""
    target = logging.getLogger(logger)
    handler = _NoteHandler(logging.WARNING)
    propagate = target.propagate
    target.addHandler(handler)
    target.propagate = False
    try:
        yield
    finally:
        target.removeHandler(handler)
        target.propagate = propagate


def cell(value: object, width: int = 0) -> str:
    """A value as one line of text (cut to ``width`` characters when given); times in UTC,
    saying so, as the dashboard shows them."""
    if value is None:
        return "-"
    if isinstance(value, datetime):
        return value.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    if isinstance(value, float):
        return f"{value:.1f}"
    if isinstance(value, Unreadable) and width:
        value = f"unreadable: {value.text}"  # a table's cell; the note on stderr says why
    # Masked before it is cut: a URL cut before its '@' would no longer look like one.
    text = _CONTROL.sub(" ", mask_text(str(value)))  # a newline or a tab would break the table
    return text if not width or len(text) <= width else text[: width - 1] + "…"


def note_unreadable(jobs: Sequence[Mapping[str, Any]]) -> None:
    """Say on stderr which values of which jobs could not be loaded (:class:`Unreadable`)."""
    for job in jobs:
        for key, value in job.items():
            if isinstance(value, Unreadable):
                problem = f"{key} cannot be loaded ({value.problem})"
                note(f"job {job.get('id')}: {problem}: shown as the server's text")


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """Print rows as a psql-style table."""
    emit(psql_table(headers, [[cell(v, 48) for v in row] for row in rows]))


# -- connection ----------------------------------------------------------------------------------


def database_url(args: argparse.Namespace, *, required: bool = True) -> str | None:
    """``--url``, else ``PGQUEUE_DATABASE_URL``; a user error when neither is set."""
    url: str | None = getattr(args, "url", None) or os.environ.get(ENV_URL) or None
    if url is None and required:
        raise UserError(
            f"no database URL: pass --url postgresql://user@host/dbname or set {ENV_URL}"
        )
    return url


def schema_arg(args: argparse.Namespace) -> str | None:
    """``--schema``, else ``PGQUEUE_SCHEMA``, else the default placement (``public.jobs``)."""
    schema: str | None = getattr(args, "schema", None) or os.environ.get(SCHEMA_ENV_VAR) or None
    if schema is None:
        return None
    try:
        return check_schema(schema)
    except PgQueueError as exc:
        raise UserError(f"--schema {exc}") from exc


def postgres_url(url: str, *, what: str = "database URL") -> URL:
    """``url`` parsed as a PostgreSQL URL, or a user error naming ``what`` (``--listen-url``)."""
    try:
        parsed = to_sqlalchemy_url(url)
    except sa_exc.ArgumentError as exc:
        raise UserError(
            f"invalid {what} {mask_url(url)!r}: expected postgresql://user:password@host:5432/dbname"
        ) from exc
    if parsed.get_backend_name() != "postgresql":
        raise UserError(
            f"{what} {mask_url(url)!r} is not a PostgreSQL URL: pgqueue needs "
            "postgresql://user:password@host:5432/dbname"
        )
    return parsed


def report_cause(exc: BaseException, *, verbose: bool) -> None:
    """The traceback behind a one-line error: on stderr with ``--verbose``, else at DEBUG.

    Start-up errors print one line; what raised it (an import-time exception in the user's
    module, say) stays one flag away, passwords masked like every other line.
    """
    cause = exc.__cause__ or (None if isinstance(exc, UserError) else exc)
    if cause is None:  # a problem pgqueue found itself: the line says it all
        return
    log.debug("%s", error_line(exc), exc_info=cause)
    if verbose:
        lines = traceback.format_exception(type(cause), cause, cause.__traceback__)
        sys.stderr.write(mask_text("".join(lines)))
        sys.stderr.flush()


def make_engine(
    url: str,
    *,
    schema: str | None = None,
    application_name: str = APPLICATION_NAME,
    **kwargs: Any,
) -> Engine:
    """An engine for the URL (``postgresql://`` mapped to psycopg), named in pg_stat_activity
    (``application_name``, unless the URL sets one).

    With ``schema``, pgqueue's table is mapped there (:func:`pgqueue.use_schema`) and the schema
    leads the search path, so the catalog queries of ``stats`` and ``doctor`` find it too.
    """
    parsed = postgres_url(url)
    connect_args: dict[str, Any] = {"connect_timeout": 10}
    if "application_name" not in parsed.query:
        connect_args["application_name"] = application_name
    if schema is not None:
        connect_args["options"] = f"-c search_path={schema},public"
    try:
        return use_schema(create_engine(parsed, connect_args=connect_args, **kwargs), schema)
    except (sa_exc.ArgumentError, sa_exc.NoSuchModuleError, ImportError) as exc:
        raise UserError(f"invalid database URL {mask_url(url)!r}: {exc}") from exc


@contextmanager
def transaction(args: argparse.Namespace) -> Iterator[Connection]:
    """One short transaction on the command's database, committed on success."""
    engine = make_engine(database_url(args) or "", schema=schema_arg(args))
    try:
        with engine.begin() as conn:
            yield conn
    finally:
        engine.dispose()


def translate_error(exc: BaseException, url: str | None) -> str | None:
    """One line naming the problem and its fix for the database errors users cause."""
    kind = classify(exc)
    if kind is None:
        return None
    where = f" ({mask_url(url)})" if url else ""
    first_line = error_line(driver_exception(exc))
    if kind is DriverError.NO_SCHEMA:
        return (
            f"the database{where} has no pgqueue schema ({first_line}): run `pgqueue migrate` first"
        )
    if kind is DriverError.DENIED:
        return f"permission denied{where}: {first_line}; grant this role that privilege"
    if kind is DriverError.OPERATIONAL:
        return (
            f"cannot connect to the database{where}: {first_line}; check --url or {ENV_URL} "
            "and that the server is running"
        )
    return f"database error{where}: {first_line}"


def split_target(spec: str) -> tuple[str, str]:
    """``module:attr`` as ``(module, attr)``, or a user error."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise UserError(f"expected module:attr (e.g. myapp.jobs:registry), got {spec!r}")
    return module_name, attr


def put_cwd_on_path() -> None:
    """The current directory first on ``sys.path``, as ``python -m`` has it: the user's code in
    the folder the command runs in is importable (the ``pgqueue`` script alone puts its own
    folder there). Called before any module of the user's is looked up or imported."""
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())


def load_target(spec: str) -> object:
    """Import ``module:attr`` (the current directory first on ``sys.path``, like ``python -m``).

    Whatever the module raises while it is imported (an ``ImportError``, a ``SyntaxError``, its
    own ``RuntimeError("config missing")``, even ``sys.exit``) is a user error naming it.
    """
    module_name, attr = split_target(spec)
    put_cwd_on_path()
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UserError(f"cannot import {module_name!r}: {error_line(exc)}") from exc
    except (Exception, SystemExit) as exc:
        raise UserError(
            f"cannot import {module_name!r}: {type(exc).__name__}: {error_line(exc)}"
        ) from exc
    target: object = module
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError as exc:
            raise UserError(f"{module_name!r} has no attribute {attr!r}") from exc
    return target
