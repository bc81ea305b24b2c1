"""URLs, masking, exit codes and one-line errors, before any command does real work."""

from __future__ import annotations

import pytest
from sqlalchemy.engine import URL

from pgqueue.cli import main
from tests.cli.conftest import plain, run_pgqueue

SECRET = "s3cr3t-Pa55word"
CLOSED_PORT_URL = f"postgresql://alice:{SECRET}@127.0.0.1:1/nowhere"

COMMANDS = [
    "demo",
    "migrate",
    "worker",
    "enqueue",
    "list",
    "show",
    "stats",
    "workers",
    "doctor",
    "reap",
    "purge",
    "retry",
    "cancel",
    "unblock",
    "web",
]


def test_version_and_help(capsys: pytest.CaptureFixture[str]) -> None:
    version = run_pgqueue("--version")
    assert version.code == 0
    assert version.out.startswith("pgqueue ")
    top = run_pgqueue("--help")
    assert top.code == 0
    for command in COMMANDS:
        assert command in top.out
    # Every subcommand's help, in process: the parser is the same one the script builds.
    for command in COMMANDS:
        with pytest.raises(SystemExit) as exited:
            main([command, "--help"])
        assert exited.value.code == 0
        assert "--url" in capsys.readouterr().out


def test_refused_connection_is_one_masked_line() -> None:
    for args in (["stats"], ["list", "--json"], ["doctor"], ["enqueue", "q", "{}"]):
        result = run_pgqueue(*args, "--url", CLOSED_PORT_URL)
        assert result.code == 2
        assert SECRET not in result.out + result.err
        assert "Traceback" not in result.err
        lines = result.err.strip().splitlines()
        assert len(lines) == 1
        assert "cannot connect" in lines[0]
        assert "alice:***@127.0.0.1:1" in lines[0]


def test_password_from_the_environment_is_masked_too() -> None:
    result = run_pgqueue("stats", env={"PGQUEUE_DATABASE_URL": CLOSED_PORT_URL})
    assert result.code == 2
    assert SECRET not in result.out + result.err
    assert "***" in result.err


def test_url_before_or_after_the_subcommand(db_url: URL) -> None:
    before = run_pgqueue("--url", plain(db_url), "enqueue", "emails", "{}")
    after = run_pgqueue("enqueue", "emails", "{}", "--url", plain(db_url))
    from_env = run_pgqueue("enqueue", "emails", "{}", env={"PGQUEUE_DATABASE_URL": plain(db_url)})
    assert (before.code, after.code, from_env.code) == (0, 0, 0)
    assert [int(r.out) for r in (before, after, from_env)] == [1, 2, 3]


def test_no_url_and_bad_urls() -> None:
    missing = run_pgqueue("stats")
    assert missing.code == 2
    assert "PGQUEUE_DATABASE_URL" in missing.err
    for bad in ("not a url", "mysql://x:y@localhost/db"):
        result = run_pgqueue("stats", "--url", bad)
        assert result.code == 2, result.err
        assert "Traceback" not in result.err
        assert len(result.err.strip().splitlines()) == 1


def test_missing_schema_says_run_migrate(empty_db_url: URL) -> None:
    url = plain(empty_db_url)
    for args in (["list"], ["stats"], ["enqueue", "q", "{}"], ["reap"], ["cancel", "1"]):
        result = run_pgqueue(*args, "--url", url)
        assert result.code == 2, args
        assert "pgqueue migrate" in result.err
        assert "Traceback" not in result.err
    doctor = run_pgqueue("doctor", "--json", "--url", url)
    assert doctor.code == 2
    assert doctor.json()["findings"][0]["fix"] == "run `pgqueue migrate`"
    migrated = run_pgqueue("migrate", "--url", url)
    assert migrated.code == 0, migrated.err
    assert run_pgqueue("list", "--url", url).code == 0
    assert run_pgqueue("doctor", "--url", url).code == 0


def test_migrate_sql_needs_no_server() -> None:
    result = run_pgqueue("migrate", "--sql")
    assert result.code == 0, result.err
    assert "CREATE TABLE jobs" in result.out
    assert "CREATE TRIGGER jobs_notify" in result.out


def test_usage_errors_exit_2() -> None:
    assert run_pgqueue("purge", "--older-than", "soon", "--url", CLOSED_PORT_URL).code == 2
    assert run_pgqueue("list", "--status", "lost", "--url", CLOSED_PORT_URL).code == 2
    assert run_pgqueue("nonsense").code == 2
