"""The command as real processes: the console script and both ``python -m`` spellings start,
parse and reach the database. Everything else in this tier runs in process
(``tests/cli/inprocess.py``); signals, ``--processes`` and serving have real processes where
they are tested (``test_web``, ``test_doctor``, ``test_worker_startup``)."""

from __future__ import annotations

import sys
from pathlib import Path

from sqlalchemy.engine import URL

import pgqueue
from tests.cli.conftest import plain, run_pgqueue_process

#: The ``pgqueue`` script pip installed beside this interpreter (``[project.scripts]``).
CONSOLE_SCRIPT = str(Path(sys.executable).with_name("pgqueue"))


def test_the_console_script_and_python_m_print_the_version() -> None:
    expected = f"pgqueue {pgqueue.__version__}\n"
    for command in (
        (CONSOLE_SCRIPT,),
        (sys.executable, "-m", "pgqueue"),
        (sys.executable, "-m", "pgqueue.cli"),
    ):
        result = run_pgqueue_process("--version", command=command)
        assert (result.code, result.out, result.err) == (0, expected, ""), command


def test_the_console_script_enqueues_and_lists_with_the_url_from_the_environment(
    db_url: URL,
) -> None:
    env = {"PGQUEUE_DATABASE_URL": plain(db_url)}
    enqueued = run_pgqueue_process(
        "enqueue", "emails", '{"to": 42}', env=env, command=(CONSOLE_SCRIPT,)
    )
    assert (enqueued.code, enqueued.out, enqueued.err) == (0, "1\n", "")
    listed = run_pgqueue_process("list", "--json", env=env)
    assert listed.code == 0, listed.err
    assert [(job["id"], job["queue"], job["payload"]) for job in listed.json()] == [
        (1, "emails", {"to": 42})
    ]
    usage = run_pgqueue_process("list", "--status", "lost", command=(CONSOLE_SCRIPT,))
    assert usage.code == 2
    assert usage.err.startswith("usage: pgqueue list ")
