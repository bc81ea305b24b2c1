"""The dashboard inside the project: mounted in its ASGI app for staff users only, and
``manage.py pgqueue_web``."""

from __future__ import annotations

import socket
import time
import urllib.request
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.contrib.sessions.backends.db import SessionStore
from django.core.asgi import get_asgi_application
from django.core.management import call_command
from django_project import HERE, stop
from djapp import tasks
from sqlalchemy import Engine
from starlette.testclient import TestClient

from pgqueue.contrib.django.dashboard import with_dashboard


def _session_of(user: Any) -> str:
    session = SessionStore()
    session["_auth_user_id"] = str(user.pk)
    session["_auth_user_backend"] = "django.contrib.auth.backends.ModelBackend"
    session["_auth_user_hash"] = user.get_session_auth_hash()
    session.save()
    return str(session.session_key)


def test_mounted_dashboard_is_for_staff_only(project: Any, engine: Engine) -> None:
    call_command("migrate", "auth", verbosity=0)
    call_command("migrate", "sessions", verbosity=0)
    staff = User.objects.create_user("ops", password="x", is_staff=True)
    plain = User.objects.create_user("bob", password="x")
    tasks.add.enqueue(1, 2)
    app = with_dashboard(get_asgi_application(), prefix="/pgqueue", engine=engine)
    with TestClient(app, base_url="http://localhost") as client:
        assert client.get("/hello/").text == "hello from django"
        anonymous = client.get("/pgqueue/", follow_redirects=False)
        assert anonymous.status_code == 302
        assert anonymous.headers["location"] == "/accounts/login/?next=/pgqueue/"
        client.cookies.set("sessionid", _session_of(plain))
        assert client.get("/pgqueue/").status_code == 403
        client.cookies.set("sessionid", _session_of(staff))
        page = client.get("/pgqueue/")
        assert page.status_code == 200
        assert "default" in page.text  # the queue of the job enqueued above
        assert client.get("/pgqueue/jobs?queue=default").status_code == 200


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.processes
def test_manage_py_pgqueue_web_serves_the_dashboard(project: Any) -> None:
    import subprocess
    import sys

    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "manage.py", "pgqueue_web", "--port", str(port)],
        cwd=HERE,
        env=project.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2) as answer:
                    assert answer.status == 200
                    assert "pgqueue" in answer.read().decode()
                    break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(stop(server)) from None
                time.sleep(0.1)
    finally:
        stop(server)
