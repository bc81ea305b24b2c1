"""``pgqueue grants``: identifiers are quoted, never spliced; bad names are refused."""

from __future__ import annotations

import pytest

from pgqueue import InvalidArgumentError
from pgqueue.cli import main
from pgqueue.grants import grants_sql


def test_names_are_quoted_identifiers() -> None:
    out = grants_sql(worker='w"; DROP TABLE jobs; --', producer="Prod", schema="pgq")
    assert out.splitlines() == [
        'GRANT USAGE ON SCHEMA "pgq" TO "Prod";',
        "GRANT INSERT, SELECT (id, queue, unique_key, status, result, last_error, progress, "
        'finished_at, task, attempts, cancelled_at, expired_at) ON "pgq".jobs TO "Prod";',
        'GRANT USAGE ON SCHEMA "pgq" TO "w""; DROP TABLE jobs; --";',
        'GRANT SELECT, INSERT, UPDATE ON "pgq".jobs, "pgq".jobs_periodic '
        'TO "w""; DROP TABLE jobs; --";',
        'GRANT SELECT, INSERT, UPDATE, DELETE ON "pgq".jobs_workers TO "w""; DROP TABLE jobs; --";',
        'GRANT SELECT, UPDATE ON "pgq".jobs_queues TO "w""; DROP TABLE jobs; --";',
        'GRANT SELECT, INSERT, UPDATE ON "pgq".jobs_dependencies TO "w""; DROP TABLE jobs; --";',
        'GRANT DELETE ON "pgq".jobs TO "w""; DROP TABLE jobs; --";',
        'GRANT SELECT, INSERT, UPDATE ON "pgq".jobs_retention TO "w""; DROP TABLE jobs; --";',
        'GRANT SELECT, INSERT, UPDATE, DELETE ON "pgq".jobs_logs TO "w""; DROP TABLE jobs; --";',
    ]


def test_producer_reads_only_what_a_unique_enqueue_and_a_wait_need() -> None:
    """``RETURNING id``; the ``ON CONFLICT`` arbiter's columns and predicate and the key holder's
    lookup (``queue``, ``unique_key``, ``status``); what ``fetch_result`` reads (``result``,
    ``last_error``, ...); never the payload, headers or the attempt history."""
    (usage, grant) = grants_sql(producer="p").splitlines()
    assert usage == 'GRANT USAGE ON SCHEMA "public" TO "p";'
    assert grant == (
        "GRANT INSERT, SELECT (id, queue, unique_key, status, result, last_error, progress, "
        'finished_at, task, attempts, cancelled_at, expired_at) ON "public".jobs TO "p";'
    )
    for hidden in ("payload", "headers", "errors"):
        assert hidden not in grant.replace("last_error", "")
    assert "UPDATE" not in grant
    assert "DELETE" not in grant


def test_producer_of_dependencies_gets_the_columns_the_enqueue_writes() -> None:
    """Opt-in: the columns :data:`ATTACH` reads and writes, and the edges; never the payload."""
    lines = grants_sql(producer="p", dependencies=True).splitlines()
    assert lines[2] == (
        "GRANT SELECT (has_dependents, waiting_on, run_at, status, last_error, finished_at, "
        "cancelled_at), UPDATE (has_dependents, waiting_on, run_at, status, last_error, "
        'finished_at, cancelled_at) ON "public".jobs TO "p";'
    )
    assert lines[3] == 'GRANT SELECT, INSERT ON "public".jobs_dependencies TO "p";'
    assert "payload" not in "".join(lines)


def test_monitor_gets_pg_monitor_and_read_access() -> None:
    out = grants_sql(monitor="mon")
    assert (
        'GRANT SELECT ON "public".jobs, "public".jobs_periodic, "public".jobs_workers, '
        '"public".jobs_queues, "public".jobs_dependencies, "public".jobs_retention, '
        '"public".jobs_logs, "public".alembic_version TO "mon";' in out
    )
    assert 'GRANT pg_monitor TO "mon";' in out


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"worker": ""},
        {"worker": "x" * 64},
        {"producer": "a\x00b"},
        {"worker": "w", "schema": "a-b"},
    ],
)
def test_bad_arguments_are_refused(kwargs: dict[str, str]) -> None:
    with pytest.raises(InvalidArgumentError):
        grants_sql(**kwargs)


def test_command_prints_the_sql(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["grants", "--role-worker", "w", "--role-producer", "p"]) == 0
    assert capsys.readouterr().out == grants_sql(worker="w", producer="p")
    assert main(["grants"]) == 2
    assert main(["grants", "--role-worker", "w", "--schema", "no such"]) == 2
