"""The in-process runner (``tests/cli/inprocess.py``) gives each call a fresh process's state and
leaves the test process as it found it; a few of its answers checked against a real process."""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import Engine, text

import pgqueue
from tests.cli import inprocess
from tests.cli.conftest import Result, run_pgqueue, run_pgqueue_process

Cli = Callable[..., Result]

#: A task's module that writes down what it saw while it was imported, and has no task.
PROBE_APP = """\
import json, logging, os, signal, sys, time
from pathlib import Path

signal.signal(signal.SIGUSR1, lambda signum, frame: None)  # a handler the call never puts back

root = logging.getLogger()
Path(__file__).with_name("seen.json").write_text(json.dumps({
    "cwd": os.getcwd(),
    "path0": sys.path[0],
    "url": os.environ.get("PGQUEUE_DATABASE_URL"),
    "probe": os.environ.get("PROBE"),
    "tzname": list(time.tzname),
    "root_handlers": len(root.handlers),
    "root_level": root.level,
    "argv0": sys.argv[0],
}))
"""


def _state() -> dict[str, object]:
    """What a call must leave as it was."""
    root = logging.getLogger()
    return {
        "environ": dict(os.environ),
        "cwd": os.getcwd(),
        "path": list(sys.path),
        "argv": list(sys.argv),
        "signals": {sig: signal.getsignal(sig) for sig in inprocess.SIGNALS},
        "root": (list(root.handlers), root.level),
        "worker_log": logging.getLogger("pgqueue.worker").level,
        "tzname": time.tzname,
        "threads": set(threading.enumerate()),
        "stdout": (sys.stdout, sys.stderr),
    }


def test_a_call_sees_a_fresh_process_and_leaves_this_one_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "probe_app.py").write_text(PROBE_APP)
    monkeypatch.setenv("PGQUEUE_DATABASE_URL", "postgresql://nobody@127.0.0.1:1/outer")
    monkeypatch.delenv("PROBE", raising=False)
    before = _state()
    result = run_pgqueue(
        "enqueue",
        "--task",
        "probe_app:task",
        "[]",
        env={"PROBE": "1", "TZ": "America/New_York"},
        cwd=tmp_path,
    )
    assert result == Result(2, "", "pgqueue: error: 'probe_app' has no attribute 'task'\n")
    seen = json.loads((tmp_path / "seen.json").read_text())
    assert seen == {
        "cwd": str(tmp_path),
        "path0": str(tmp_path),
        "url": None,  # the test process's is not the call's
        "probe": "1",
        "tzname": ["EST", "EDT"],
        "root_handlers": 0,  # pytest's capture handlers set aside
        "root_level": logging.WARNING,
        "argv0": str(Path(pgqueue.__file__).with_name("__main__.py")),
    }
    assert _state() == before
    assert "probe_app" not in sys.modules


def test_a_module_of_the_same_name_in_two_directories_is_imported_fresh(tmp_path: Path) -> None:
    found = []
    for name in ("first", "second"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "same_app.py").write_text(f"handlers = {{'{name}': print}}\n")
        result = run_pgqueue(
            "worker", "same_app:handlers", "--queues", "nope", cwd=str(tmp_path / name)
        )
        assert result.code == 2
        found.append(result.err)
    assert "(it has: first)" in found[0]
    assert "(it has: second)" in found[1]
    assert "same_app" not in sys.modules


def test_exit_codes_of_argparse_and_of_main() -> None:
    usage = run_pgqueue("list", "--status", "lost")
    assert usage.code == 2
    assert usage.out == ""
    assert usage.err.startswith("usage: pgqueue list ")
    assert "argument --status: invalid choice: 'lost'" in usage.err
    assert run_pgqueue("--version") == Result(0, f"pgqueue {pgqueue.__version__}\n", "")
    assert run_pgqueue("--help").code == 0
    assert run_pgqueue("stats").code == 2  # main's own return value


def test_a_worker_run_restores_signals_and_logging_and_closes_its_connections(
    cli: Cli, db: Engine, tmp_path: Path
) -> None:
    """``pgqueue worker --burst`` installs stop-signal handlers, configures logging at INFO and
    builds an engine: none of it survives the call."""
    (tmp_path / "burst_app.py").write_text("handlers = {'q': lambda job: None}\n")
    with db.begin() as conn:
        pgqueue.enqueue(conn, {}, queue="q")
    before = _state()
    result = cli("worker", "burst_app:handlers", "--burst", cwd=str(tmp_path))
    assert result.code == 0, result.err
    assert " INFO pgqueue.worker: " in result.err  # logging.basicConfig wrote to the call's stderr
    assert _state() == before
    deadline = time.monotonic() + 10  # a closed connection's backend may take a moment to exit
    while _worker_connections(db) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _worker_connections(db) == 0


def _worker_connections(db: Engine) -> int:
    with db.connect() as conn:
        return int(
            conn.execute(
                text(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                    "AND starts_with(application_name, 'pgqueue-worker:')"
                )
            ).scalar_one()
        )


def test_a_thread_left_running_fails_the_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "thread_app.py").write_text(
        textwrap.dedent(
            """
            import threading, time
            threading.Thread(target=time.sleep, args=(1.0,), name="left-behind").start()
            """
        )
    )
    monkeypatch.setattr(inprocess, "THREAD_GRACE", 0.1)
    before = _state()
    with pytest.raises(AssertionError, match="left threads running: \\['left-behind'\\]"):
        run_pgqueue("worker", "thread_app:handlers", cwd=str(tmp_path))
    (left,) = [t for t in threading.enumerate() if t.name == "left-behind"]
    before["threads"].add(left)  # type: ignore[attr-defined]
    assert _state() == before  # everything else was put back all the same
    left.join(10)


@pytest.mark.parametrize(
    "argv",
    [
        ["--version"],
        ["list", "--status", "lost"],
        ["stats", "--url", "mysql://x:s3cret@example.com/db"],
        ["migrate", "--sql"],
    ],
    ids=["version", "usage-error", "bad-url", "offline-sql"],
)
def test_an_in_process_call_answers_as_a_real_process_does(argv: list[str]) -> None:
    assert run_pgqueue(*argv) == run_pgqueue_process(*argv)
