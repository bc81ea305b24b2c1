"""``pgqueue enqueue --task`` (#22): a call of a task, by its import path or by its name alone."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.engine import URL

from tests.cli.conftest import Result, plain

Cli = Callable[..., Result]

APP = """\
    import pgqueue

    registry = pgqueue.Registry()

    @registry.task(queue="emails", max_attempts=3, priority=2)
    def send_email(user_id: int, *, template: str = "welcome") -> str:
        return f"{user_id}:{template}"

    not_a_task = 42
"""


@pytest.fixture
def app(tmp_path: Path) -> str:
    package = tmp_path / "myapp"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "tasks.py").write_text(textwrap.dedent(APP))
    return str(tmp_path)


def _jobs(db: Engine) -> list[Any]:
    with db.connect() as conn:
        return list(
            conn.execute(
                text(
                    "SELECT id, queue, task, payload, priority, max_attempts FROM jobs ORDER BY id"
                )
            )
        )


@pytest.mark.parametrize("path", ["myapp.tasks.send_email", "myapp.tasks:send_email"])
def test_a_task_is_enqueued_by_its_import_path(cli: Cli, db: Engine, app: str, path: str) -> None:
    done = cli("enqueue", "--task", path, "[42]", '{"template": "reset"}', cwd=app)
    assert done.code == 0, done.err
    (job,) = _jobs(db)
    assert int(done.out) == job.id
    assert (job.queue, job.task, job.priority, job.max_attempts) == (
        "emails",
        "myapp.tasks.send_email",
        2,
        3,
    )
    assert job.payload == {"args": [42], "kwargs": {"template": "reset"}}


@pytest.mark.parametrize("path", ["myapp.tasks.send_email", "myapp.tasks:send_email"])
def test_the_console_script_imports_both_forms_from_the_current_folder(
    db_url: URL, db: Engine, app: str, path: str
) -> None:
    """The installed ``pgqueue`` script, not ``python -m`` (which puts the current folder on
    ``sys.path`` itself): the dotted form looked the module up before the folder was there."""
    script = os.path.join(os.path.dirname(sys.executable), "pgqueue")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PGQUEUE_DATABASE_URL")}
    done = subprocess.run(
        [script, "enqueue", "--task", path, "[42]", "--url", plain(db_url)],
        capture_output=True, text=True, timeout=120, env=env, cwd=app, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    (job,) = _jobs(db)
    assert int(done.stdout) == job.id
    assert (job.queue, job.task) == ("emails", "myapp.tasks.send_email")


def test_flags_override_the_tasks_defaults_and_kwargs_are_optional(
    cli: Cli, db: Engine, app: str
) -> None:
    done = cli(
        "enqueue", "--task", "myapp.tasks.send_email", "[7]", "--queue", "urgent",
        "--priority", "9", "--max-attempts", "1", "--json", cwd=app,
    )  # fmt: skip
    assert done.code == 0, done.err
    assert done.json()["inserted"] is True
    (job,) = _jobs(db)
    assert (job.queue, job.priority, job.max_attempts) == ("urgent", 9, 1)
    assert job.payload == {"args": [7], "kwargs": {}}


def test_by_name_enqueues_without_importing(cli: Cli, db: Engine, tmp_path: Path) -> None:
    done = cli(
        "enqueue", "--task", "elsewhere.reports.build", "--by-name", "--queue", "reports",
        "[1, 2]", '{"month": "may"}', cwd=str(tmp_path),
    )  # fmt: skip
    assert done.code == 0, done.err
    (job,) = _jobs(db)
    assert (job.queue, job.task) == ("reports", "elsewhere.reports.build")
    assert job.payload == {"args": [1, 2], "kwargs": {"month": "may"}}


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--task", "myapp.tasks.send_email", '"x"'], "must be a JSON array"),
        (["--task", "myapp.tasks.send_email", "[1]", "[2]"], "must be a JSON object"),
        (["--task", "myapp.tasks.send_email", "[1"], "not valid JSON"),
        (["--task", "myapp.tasks.send_email", "[1, 2]"], "too many positional arguments"),
        (["--task", "myapp.tasks.send_email", "[1]", '{"templat": 1}'], "unexpected keyword"),
        (["--task", "myapp.tasks.not_a_task", "[1]"], "expected a pgqueue.Task"),
        (["--task", "nowhere.at.all", "[1]"], "cannot import the task"),
        (["--task", "myapp.tasks:missing", "[1]"], "has no attribute"),
        (["emails", "--by-name"], "go with --task"),
        (["emails"], "give the job's JSON payload"),
    ],
)
def test_a_bad_task_call_is_one_line_and_writes_nothing(
    cli: Cli, db: Engine, app: str, argv: list[str], says: str
) -> None:
    done = cli("enqueue", *argv, cwd=app)
    assert done.code != 0
    assert says in done.err
    assert "Traceback" not in done.err
    assert _jobs(db) == []
