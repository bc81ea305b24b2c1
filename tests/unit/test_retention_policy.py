"""Retention's values, checks and statements (#31 items 3 and 5), without a database: bad input
is refused before any statement is built, with the argument named; the statements say what the
plan and the lock rely on."""

from __future__ import annotations

import dataclasses
import math
from datetime import timedelta
from typing import Any

import pytest

import pgqueue
import pgqueue.aio
from pgqueue import InvalidArgumentError, InvalidArgumentTypeError, Retention
from pgqueue._sql import retention_calls, retention_statements
from pgqueue.doctor import retention_findings
from pgqueue.retention_policy import DEFAULT_DONE, DEFAULT_FAILED, check_retention, retention_of
from tests.unit.test_statements import sql

DAY = timedelta(days=1)


def test_the_built_in_defaults_are_7_and_30_days() -> None:
    assert (timedelta(days=7), timedelta(days=30)) == (DEFAULT_DONE, DEFAULT_FAILED)
    assert Retention(None).text == "done 7d, failed 30d"
    assert Retention("q", None, timedelta(hours=36)).text == "done never, failed 36h"
    with pytest.raises(dataclasses.FrozenInstanceError):
        Retention(None).done = None  # type: ignore[misc]


def test_check_retention_keeps_what_is_given_and_leaves_out_what_is_not() -> None:
    assert check_retention(None, DAY, ..., {}).kinds == {"done": DAY}
    assert check_retention(None, DAY, ..., {}).row == ""
    change = check_retention("mail", ..., None, {})
    assert (change.row, change.kinds) == ("mail", {"failed": None})
    assert check_retention("mail", 90, 1.5, {}).kinds == {
        "done": timedelta(seconds=90),
        "failed": timedelta(seconds=1.5),
    }


@pytest.mark.parametrize(
    ("queue", "done", "failed", "unknown", "error", "argument"),
    [
        (None, 0, ..., {}, InvalidArgumentError, "done"),
        (None, timedelta(0), ..., {}, InvalidArgumentError, "done"),
        (None, ..., -1, {}, InvalidArgumentError, "failed"),
        (None, ..., timedelta(microseconds=-1), {}, InvalidArgumentError, "failed"),
        (None, math.nan, ..., {}, InvalidArgumentError, "done"),
        (None, math.inf, ..., {}, InvalidArgumentError, "done"),
        (None, pgqueue.MAX_DURATION + timedelta(1), ..., {}, InvalidArgumentError, "done"),
        (None, "7d", ..., {}, InvalidArgumentTypeError, "done"),
        (None, True, ..., {}, InvalidArgumentTypeError, "done"),
        (None, DAY, ..., {"cancelled": DAY}, InvalidArgumentError, "cancelled"),
        (None, ..., ..., {}, InvalidArgumentError, "done"),
        ("", DAY, ..., {}, InvalidArgumentError, "queue"),
        ("\u3000", DAY, ..., {}, InvalidArgumentError, "queue"),
        ("a,b", DAY, ..., {}, InvalidArgumentError, "queue"),
        (7, DAY, ..., {}, InvalidArgumentTypeError, "queue"),
    ],
)
def test_bad_input_is_refused_before_any_statement(
    queue: Any,
    done: Any,
    failed: Any,
    unknown: dict[str, Any],
    error: type[Exception],
    argument: str,
) -> None:
    plan = retention_calls.set_retention(queue, done, failed, unknown)
    with pytest.raises(error) as caught:
        next(plan)  # the first statement is built only after every check
    assert caught.value.argument == argument  # type: ignore[attr-defined]
    assert isinstance(caught.value, pgqueue.PgQueueError)


def test_an_unknown_kind_names_the_kinds() -> None:
    with pytest.raises(InvalidArgumentError, match="the kinds are done and failed"):
        check_retention(None, ..., ..., {"cancelled": DAY})


def test_sync_and_async_signatures_agree() -> None:
    import inspect

    for name in ("set_retention", "retention"):
        sync = inspect.signature(getattr(pgqueue, name))
        twin = inspect.signature(getattr(pgqueue.aio, name))
        assert list(sync.parameters) == list(twin.parameters), name
        assert [p.default for p in sync.parameters.values()] == [
            p.default for p in twin.parameters.values()
        ], name


def test_a_queue_without_its_own_takes_the_defaults_values() -> None:
    entries = [Retention(None, DAY, None, inherited=("done",)), Retention("mail", None, DAY)]
    assert retention_of(entries, "mail") == Retention("mail", None, DAY)
    assert retention_of(entries, "api") == Retention("api", DAY, None, inherited=("done", "failed"))
    assert retention_of([], "api") == Retention("api", inherited=("done", "failed"))


def test_the_take_locks_the_queues_row_without_waiting_and_moves_pruned_at() -> None:
    text = sql(retention_statements.TAKE)
    assert "FOR UPDATE SKIP LOCKED" in text
    assert "SET pruned_at=now(), pruned_by=" in text
    assert "jobs_retention.pruned_at <= now() - %(interval)s" in text
    # The built-ins are literals of the statement, the default row a literal key.
    assert "interval '604800 seconds'" in text
    assert "interval '2592000 seconds'" in text
    assert "retention_default.queue = ''" in text


def test_the_prune_is_one_batch_of_one_queue_and_status_by_the_index_order() -> None:
    text = sql(retention_statements.prune_statement("failed"))
    assert text.startswith("DELETE FROM jobs WHERE jobs.id = ANY (array((SELECT jobs.id FROM jobs")
    assert "jobs.queue = %(queue_name)s" in text
    assert "jobs.status = 'failed'" in text  # a literal: the partial index's planning
    assert "jobs.finished_at < now() - %(kept)s" in text
    assert "ORDER BY jobs.finished_at LIMIT 1000 FOR UPDATE SKIP LOCKED" in text
    assert "NOT jobs.has_dependents OR (SELECT 1 FROM jobs_dependencies" in text
    assert "dependent.status IN ('queued', 'running') LIMIT 1) IS NULL" in text
    assert retention_statements.PRUNE_BATCH == 1000


def test_a_set_writes_only_the_kinds_given() -> None:
    text = sql(retention_statements.set_statement(frozenset({"failed"})))
    assert "ON CONFLICT (queue) DO UPDATE SET failed = %(failed)s, failed_set = true" in text
    assert "done" not in text.split("ON CONFLICT")[1]


def test_doctor_warns_per_queue_and_says_ok_without_rows() -> None:
    (ok,) = retention_findings([])
    assert (ok.check, ok.severity) == ("retention", "ok")
    from datetime import datetime, timezone

    at = datetime(2026, 1, 1, tzinfo=timezone.utc)
    rows = [
        {"queue": "mail", "kind": "done", "jobs": 3, "oldest": at},
        {"queue": "mail", "kind": "failed", "jobs": 1, "oldest": at - DAY},
    ]
    (warning,) = retention_findings(rows)
    assert warning.severity == "warning"
    assert warning.message.startswith("queue 'mail': 3 done, 1 failed job(s) more than a day")
    assert "2025-12-31T00:00:00+00:00" in warning.message
    assert "serves queue 'mail' with pruning on" in warning.fix


def test_doctor_shows_an_oldest_time_python_cannot_hold_as_stored() -> None:
    from datetime import datetime, timezone

    from pgqueue._base.readable import Unreadable

    odd = Unreadable("-infinity", "outside the years 1 to 9999 of Python's datetime")
    at = datetime(2026, 1, 1, tzinfo=timezone.utc)
    rows = [
        {"queue": "q", "kind": "done", "jobs": 1, "oldest": at},
        {"queue": "q", "kind": "failed", "jobs": 1, "oldest": odd},
    ]
    (warning,) = retention_findings(rows)
    assert "oldest finished unreadable (outside the years 1 to 9999" in warning.message
    assert [d["oldest"] for d in warning.details] == ["2026-01-01T00:00:00+00:00", str(odd)]
