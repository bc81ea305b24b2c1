"""``pgqueue worker`` start-up errors: one line naming the problem, exit 2, with one process or a
supervisor of two; the traceback only with ``--verbose`` (and in the log at DEBUG)."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest
from sqlalchemy.engine import URL

from pgqueue.cli import main
from tests.cli.conftest import Result, plain, run_pgqueue, run_pgqueue_process

SECRET = "s3cr3t-startup"

#: Modules that fail while they are imported, each its own way.
BROKEN_MODULES = {
    "raises_app": 'raise RuntimeError("config missing")\n',
    "syntax_app": "def broken(:\n    pass\n",
    "imports_app": "import no_such_dependency_here\nhandlers = {}\n",
    "exits_app": 'import sys\nsys.exit("no settings file")\n',
    "fine_app": "handlers = {'q': lambda job: None}\n",
}

#: A supervisor's own log records, the only other lines it prints.
SUPERVISOR_LOG = re.compile(r"^\d{4}-\d\d-\d\d [\d:,]+ INFO \[supervisor pid \d+\] ")


@pytest.fixture
def apps(tmp_path: Path) -> Path:
    for name, source in BROKEN_MODULES.items():
        (tmp_path / f"{name}.py").write_text(source)
    return tmp_path


def _run(processes: int, *args: str, cwd: str) -> Result:
    """``pgqueue worker ... --processes N``: one process in this one; a supervisor as a real
    process, so that its children, which print to that process's stderr, are heard."""
    run = run_pgqueue if processes == 1 else run_pgqueue_process
    return run(*args, "--processes", str(processes), cwd=cwd)


def _one_error_line(result: Result, processes: int) -> str:
    """The one ``pgqueue: error:`` line; every other line is the supervisor's log."""
    lines = (result.out + result.err).strip().splitlines()
    errors = [line for line in lines if line.startswith("pgqueue: error: ")]
    assert len(errors) == 1, lines
    assert lines[-1] == errors[0], lines
    assert "Traceback" not in result.out + result.err
    assert SECRET not in result.out + result.err
    if processes == 1:
        assert lines == errors
    else:
        others = lines[:-1]
        assert all(SUPERVISOR_LOG.match(line) for line in others), others
    return errors[0].removeprefix("pgqueue: error: ")


CASES = [
    ("raises_app:handlers", [], "cannot import 'raises_app': RuntimeError: config missing"),
    (
        "syntax_app:handlers",
        [],
        "cannot import 'syntax_app': SyntaxError: invalid syntax (syntax_app.py, line 1)",
    ),
    ("imports_app:handlers", [], "cannot import 'imports_app': No module named 'no_such_depend"),
    ("exits_app:handlers", [], "cannot import 'exits_app': SystemExit: no settings file"),
    ("fine_app:missing", [], "'fine_app' has no attribute 'missing'"),
    ("fine_app", [], "expected module:attr (e.g. myapp.jobs:registry), got 'fine_app'"),
    (
        "fine_app:handlers",
        ["--listen-url", "notaurl"],
        "invalid --listen-url 'notaurl': expected postgresql://",
    ),
    (
        "fine_app:handlers",
        ["--listen-url", f"http://bob:{SECRET}@example.com/db"],
        "--listen-url 'http://bob:***@example.com/db' is not a PostgreSQL URL",
    ),
    ("fine_app:handlers", ["--queues", "nope"], "no handler for queue(s) nope in fine_app"),
]


CASE_IDS = [
    "runtime-error",
    "syntax-error",
    "import-error",
    "sys-exit",
    "no-attribute",
    "no-colon",
    "listen-url-unparsable",
    "listen-url-not-postgres",
    "unknown-queue",
]


@pytest.mark.parametrize("processes", [1, 2])
@pytest.mark.parametrize(("target", "options", "message"), CASES, ids=CASE_IDS)
def test_a_start_up_error_is_one_line_and_exit_2(
    apps: Path, db_url: URL, processes: int, target: str, options: list[str], message: str
) -> None:
    url = plain(db_url.set(password=SECRET))
    result = _run(processes, "worker", target, *options, "--url", url, cwd=str(apps))
    assert result.code == 2, result.out + result.err
    line = _one_error_line(result, processes)
    if processes == 2 and not options and ":" in target:
        # The children found it (they import the target): the supervisor names the first.
        assert re.match(r"worker \d failed at start-up: ", line), line
    assert message in line, line


@pytest.mark.parametrize("processes", [1, 2])
def test_a_database_without_the_schema_is_a_start_up_error(
    apps: Path, empty_db_url: URL, processes: int
) -> None:
    url = plain(empty_db_url.set(password=SECRET))
    result = _run(processes, "worker", "fine_app:handlers", "--url", url, cwd=str(apps))
    assert result.code == 2, result.out + result.err
    line = _one_error_line(result, processes)
    assert "has no pgqueue schema (no table jobs): run `pgqueue migrate` first" in line
    assert f"{empty_db_url.database}" in line


def test_a_bad_database_url_is_refused_before_the_supervisor_starts(apps: Path) -> None:
    result = run_pgqueue(
        "worker", "fine_app:handlers", "--processes", "2", "--url", "mysql://x@y/z", cwd=str(apps)
    )
    assert result.code == 2
    assert _one_error_line(result, 1) == (
        "database URL 'mysql://x@y/z' is not a PostgreSQL URL: pgqueue needs "
        "postgresql://user:***@host:5432/dbname"
    )


@pytest.mark.parametrize("processes", [1, 2])
def test_verbose_prints_the_traceback_too(apps: Path, db_url: URL, processes: int) -> None:
    result = _run(
        processes,
        "worker",
        "raises_app:handlers",
        "--verbose",
        "--url",
        plain(db_url),
        cwd=str(apps),
    )
    assert result.code == 2
    assert "Traceback (most recent call last)" in result.err
    assert 'raise RuntimeError("config missing")' in result.err
    assert result.err.strip().splitlines()[-1].startswith("pgqueue: error: ")


def test_the_traceback_is_in_the_log_at_debug(
    apps: Path,
    db_url: URL,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(apps)
    monkeypatch.syspath_prepend(str(apps))
    with caplog.at_level(logging.DEBUG, logger="pgqueue.cli"):
        code = main(["worker", "raises_app:handlers", "--url", plain(db_url)])
    assert code == 2
    (record,) = [r for r in caplog.records if r.name == "pgqueue.cli"]
    assert record.levelno == logging.DEBUG
    assert record.exc_info is not None
    assert isinstance(record.exc_info[1], RuntimeError)
    err = capsys.readouterr().err
    assert err == "pgqueue: error: cannot import 'raises_app': RuntimeError: config missing\n"
