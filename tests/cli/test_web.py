"""``pgqueue web``: one-line errors before serving, then a real server until Ctrl-C."""

from __future__ import annotations

import base64
import http.client
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import Any

import psycopg
from sqlalchemy.engine import URL

from pgqueue._base.urls import to_libpq_url
from tests.cli.conftest import plain, run_pgqueue

SECRET = "s3cr3t-Pa55word"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_bad_credentials_are_one_line_exit_2(db_url: URL) -> None:
    bad = run_pgqueue("web", "--url", plain(db_url), "--auth", "nocolon")
    assert bad.code == 2
    assert bad.err.strip() == (
        "pgqueue: error: --auth must be USER:PASSWORD (auth: expected USER:PASSWORD "
        "(no colon found))"
    )
    from_env = run_pgqueue("web", "--url", plain(db_url), env={"PGQUEUE_WEB_AUTH": "ops:"})
    assert from_env.code == 2
    assert "PGQUEUE_WEB_AUTH must be USER:PASSWORD" in from_env.err
    assert len(from_env.err.strip().splitlines()) == 1


def test_no_schema_no_server_and_a_bad_port_exit_2_with_the_password_masked(
    empty_db_url: URL,
) -> None:
    url = plain(empty_db_url.set(password=SECRET))
    no_schema = run_pgqueue("web", "--url", url)
    assert no_schema.code == 2
    assert "has no pgqueue schema" in no_schema.err
    assert "run `pgqueue migrate` first" in no_schema.err
    refused = run_pgqueue("web", "--url", f"postgresql://alice:{SECRET}@127.0.0.1:1/nowhere")
    assert refused.code == 2
    assert "cannot connect to the database" in refused.err
    for result in (no_schema, refused):
        assert SECRET not in result.err + result.out
        assert len(result.err.strip().splitlines()) == 1
    port = run_pgqueue("web", "--url", url, "--port", "0")
    assert port.code == 2
    assert "expected a TCP port from 1 to 65535" in port.err


def test_a_port_in_use_is_one_line_exit_2(db_url: URL) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_pgqueue("web", "--url", plain(db_url), "--port", str(port))
    assert result.code == 2
    assert result.err.startswith(f"pgqueue: error: cannot listen on 127.0.0.1:{port}: ")
    assert len(result.err.strip().splitlines()) == 1


def test_serves_on_localhost_with_auth_until_interrupted(db_url: URL) -> None:
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k != "PGQUEUE_DATABASE_URL"}
    env["PGQUEUE_WEB_AUTH"] = "ops:pw"
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "pgqueue", "web", "--read-only", "--port", str(port)),
            *("--url", plain(db_url.set(password=SECRET))),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                status, _ = _get(base + "/", None)
                break
            except OSError:
                assert proc.poll() is None, proc.communicate()
                assert time.monotonic() < deadline, "pgqueue web did not start within 30 s"
                time.sleep(0.1)
        assert status == 401
        status, text = _get(base + "/", ("ops", "pw"))
        assert status == 200
        assert 'method="post"' not in text
        assert "read-only" in text
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert f"on http://127.0.0.1:{port}/ (read-only, basic auth)" in err
    assert SECRET not in out + err
    assert '"GET / HTTP/1.1" 401' in out  # uvicorn's access log
    assert err.rstrip().endswith("pgqueue web: stopped")


def _get(url: str, auth: tuple[str, str] | None) -> tuple[int, str]:
    """One GET with the standard library: (status, body); HTTP errors are answers too."""
    request = urllib.request.Request(url)
    if auth is not None:
        token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, error.read().decode()


def _raw(port: int, method: str, path: str, headers: dict[str, str], body: str = "") -> Any:
    """One request with exactly these headers (``Host`` included): the response, read."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        for name, value in headers.items():
            conn.putheader(name, value)
        if body:
            conn.putheader("Content-Type", "application/x-www-form-urlencoded")
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body.encode() or None)
        response = conn.getresponse()
        response.text = response.read().decode()  # type: ignore[attr-defined]
        return response
    finally:
        conn.close()


def test_a_rebinding_page_gets_no_page_and_changes_nothing(db_url: URL) -> None:
    """The issue's setup: 127.0.0.1, writable, no auth; a page of attacker.example resolved to
    127.0.0.1 gets a 400, and its POST with a valid token a 403."""
    url = plain(db_url)
    libpq = to_libpq_url(db_url)
    with psycopg.connect(libpq, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO jobs (queue, payload, status, attempts, max_attempts) "
            "VALUES ('q', '{}', 'failed', 1, 1)"
        )
        (job_id,) = conn.execute("SELECT max(id) FROM jobs").fetchone() or (None,)
    port = _free_port()
    env = {
        k: v for k, v in os.environ.items() if k not in ("PGQUEUE_DATABASE_URL", "PGQUEUE_WEB_AUTH")
    }
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "pgqueue", "web", "--port", str(port), "--url", url),
            *("--allowed-host", "queue.example.com"),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                _raw(port, "GET", "/", {"Host": f"127.0.0.1:{port}"})
                break
            except OSError:
                assert proc.poll() is None, proc.communicate()
                assert time.monotonic() < deadline, "pgqueue web did not start within 30 s"
                time.sleep(0.1)
        foreign = _raw(port, "GET", "/", {"Host": f"attacker.example:{port}"})
        assert foreign.status == 400
        assert foreign.getheader("set-cookie") is None
        assert "csrf_token" not in foreign.text
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", "queue.example.com"):
            assert _raw(port, "GET", "/", {"Host": host}).status == 200, host
        page = _raw(port, "GET", f"/jobs/{job_id}", {"Host": f"127.0.0.1:{port}"})
        cookie = page.getheader("set-cookie").split(";")[0]
        token = re.search(r'name="csrf_token" value="([^"]+)"', page.text).group(1)
        form = f"csrf_token={token}"
        headers = {"Host": f"127.0.0.1:{port}", "Cookie": cookie}
        attack = {**headers, "Origin": f"http://attacker.example:{port}"}
        assert _raw(port, "POST", f"/jobs/{job_id}/retry", attack, form).status == 403
        with psycopg.connect(libpq) as conn:
            status = conn.execute("SELECT status FROM jobs WHERE id = %s", (job_id,)).fetchone()
        assert status == ("failed",)
        same = {**headers, "Origin": f"http://127.0.0.1:{port}"}
        assert _raw(port, "POST", f"/jobs/{job_id}/retry", same, form).status == 303
        with psycopg.connect(libpq) as conn:
            status = conn.execute("SELECT status FROM jobs WHERE id = %s", (job_id,)).fetchone()
        assert status == ("queued",)
    finally:
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err


def test_a_bad_allowed_host_is_one_line_exit_2(db_url: URL) -> None:
    result = run_pgqueue("web", "--url", plain(db_url), "--allowed-host", "example.com:8080")
    assert result.code == 2
    assert result.err.startswith("pgqueue: error: --allowed-host: allowed_hosts: ")
    assert len(result.err.strip().splitlines()) == 1
