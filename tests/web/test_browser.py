"""The dashboard in a real browser: headless Chromium (Debian's package) driven by Playwright.

Skipped, with the reason, where Playwright or a system Chromium is missing (``.ci/run`` installs
Chromium; Playwright's own browser download is never used). The app is mounted under ``/queue``
in a Starlette service served by uvicorn on a free port, in a thread stopped at the end.

``PGQUEUE_SCREENSHOT=docs/img/web-overview.png`` writes the README's screenshot there; otherwise
it goes to a temporary directory, so every run still makes one.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, text
from starlette.applications import Starlette
from starlette.routing import Mount

import pgqueue
from pgqueue._worker import store
from pgqueue.web import create_app
from tests.web.conftest import failed_job, row

pytestmark = pytest.mark.slow

CHROMIUM = next(
    (p for p in (shutil.which("chromium"), "/usr/bin/chromium") if p and os.path.exists(p)), None
)
if importlib.util.find_spec("playwright") is None:
    pytest.skip("playwright is not installed (pip install -e '.[dev]')", allow_module_level=True)
if CHROMIUM is None:
    pytest.skip(
        "no system Chromium (apt-get install chromium; .ci/run installs it)",
        allow_module_level=True,
    )

from playwright.sync_api import Browser, Page, expect, sync_playwright  # noqa: E402

#: The buttons of the actions, which a read-only dashboard never shows.
ACTION_BUTTONS = re.compile("retry|cancel|purge|pause|resume", re.IGNORECASE)
#: Bound on every wait for the page (the machine may be busy with other tests).
WAIT_MS = 20_000


@contextmanager
def serving(app: Any) -> Iterator[str]:
    """uvicorn in a thread on a free port of 127.0.0.1; the base URL while it runs."""
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(app, log_level="warning", lifespan="off", access_log=False)
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while not server.started:
            assert thread.is_alive(), "uvicorn exited at start-up"
            assert time.monotonic() < deadline, "uvicorn did not start within 20 s"
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=20)
        sock.close()
    assert not thread.is_alive(), "uvicorn did not stop within 20 s"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield launched
        finally:
            launched.close()


def _service(engine: Engine, **options: Any) -> Starlette:
    return Starlette(routes=[Mount("/queue", app=create_app(engine, refresh_seconds=1, **options))])


def _history(engine: Engine) -> None:
    """Jobs finished over the last hour, so the chart has something to draw."""
    with engine.begin() as conn:
        pgqueue.enqueue_many(conn, [{"n": i} for i in range(240)], queue="email")
        pgqueue.enqueue_many(conn, [{"n": i} for i in range(90)], queue="thumbs")
        for queue in ("email", "thumbs"):
            while claimed := pgqueue.claim(conn, queue=queue, limit=100):
                store.complete_many(conn, [(j.id, j.attempts) for j in claimed])
        conn.execute(
            text(
                "UPDATE jobs SET finished_at = now() - make_interval(mins => "
                "((id * 7919) % 60)::int, secs => (id % 50)::float8)"
            )
        )
        pgqueue.enqueue_many(conn, [{"to": i} for i in range(12)], queue="email")
        pgqueue.enqueue_many(conn, [{"size": i} for i in range(3)], queue="thumbs")


def _count(page: Page, queue: str, name: str) -> Any:
    return page.locator(f'tr[data-queue="{queue}"] td[data-count="{name}"]')


def test_overview_failed_job_retry_and_live_refresh(
    engine: Engine, browser: Browser, tmp_path: Path
) -> None:
    _history(engine)
    failed = failed_job(engine, queue="email", error="SMTP 550: <mailbox unavailable>")
    with serving(_service(engine)) as base:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(base + "/queue/")
        # The overview lists the queues with their counts.
        expect(_count(page, "email", "ready")).to_have_text("12", timeout=WAIT_MS)
        expect(_count(page, "email", "failed")).to_have_text("1")
        expect(_count(page, "email", "done")).to_have_text("240")
        expect(_count(page, "thumbs", "ready")).to_have_text("3")
        expect(page.locator('figure[data-queue="email"] rect.done').first).to_be_visible()
        # Ready depth is sampled at each refresh: a line once the page refreshed itself.
        with engine.begin() as conn:
            pgqueue.enqueue_many(conn, [{}] * 5, queue="email")
        expect(_count(page, "email", "ready")).to_have_text("17", timeout=WAIT_MS)
        expect(page.locator('figure[data-queue="email"] polyline.depth')).to_have_count(
            1, timeout=WAIT_MS
        )
        shot = Path(os.environ.get("PGQUEUE_SCREENSHOT") or tmp_path / "web-overview.png")
        page.screenshot(path=str(shot), full_page=True)
        assert shot.stat().st_size > 10_000

        # Clicking the failed count, then the job, shows its error (as text).
        _count(page, "email", "failed").get_by_role("link").click()
        page.get_by_role("link", name=str(failed), exact=True).click()
        expect(page.locator("#last-error")).to_have_text(
            "SMTP 550: <mailbox unavailable>", timeout=WAIT_MS
        )
        # Clicking retry requeues it.
        page.get_by_role("button", name="Retry now").click()
        expect(page.locator(".message")).to_contain_text("Job requeued", timeout=WAIT_MS)
        assert row(engine, failed)["status"] == "queued"

        # The overview updates by itself after a job is enqueued: no reload.
        page.goto(base + "/queue/")
        page.evaluate("window.pgqueueNoReload = true")
        with engine.begin() as conn:
            pgqueue.enqueue(conn, {}, queue="late_arrival")
        expect(_count(page, "late_arrival", "ready")).to_have_text("1", timeout=WAIT_MS)
        assert page.evaluate("window.pgqueueNoReload") is True
        page.close()


def test_read_only_shows_no_buttons_behind_basic_auth(engine: Engine, browser: Browser) -> None:
    failed = failed_job(engine, queue="email", error="boom")
    with serving(_service(engine, read_only=True, auth="ops:pw")) as base:
        # Without credentials: 401 (headless Chromium fails such a navigation outright, so ask
        # with the context's own HTTP client).
        anonymous = browser.new_context()
        assert anonymous.request.get(base + "/queue/").status == 401
        anonymous.close()
        context = browser.new_context(http_credentials={"username": "ops", "password": "pw"})
        page = context.new_page()
        for path in ("/queue/", f"/queue/jobs/{failed}", "/queue/jobs?status=failed"):
            page.goto(base + path)
            expect(page.locator(".badge")).to_have_text("read-only", timeout=WAIT_MS)
            # No action button (the job list's GET filter keeps its "Show"), no POST form.
            assert page.get_by_role("button", name=ACTION_BUTTONS).count() == 0, path
            assert page.locator('form[method="post"]').count() == 0, path
            assert page.locator("button").count() == (1 if "/jobs?" in path else 0), path
        expect(page.locator("#last-error")).to_have_count(0)
        page.goto(base + f"/queue/jobs/{failed}")
        expect(page.locator("#last-error")).to_have_text("boom")
        context.close()


#: A queue name with no place to break (queue names may be up to 7,999 bytes).
LONG_QUEUE = "tenant_" + "x" * 300


def _no_horizontal_scroll(page: Page) -> None:
    wide = page.evaluate("document.documentElement.scrollWidth")
    assert wide <= page.viewport_size["width"], (page.url, wide)  # type: ignore[index]


def test_long_queue_names_wrap_bulk_retry_and_a_purge_that_asks(
    engine: Engine, browser: Browser
) -> None:
    failed = [failed_job(engine, queue=LONG_QUEUE, error="boom") for _ in range(2)]
    with engine.begin() as conn:
        pgqueue.enqueue_many(conn, [{}] * 3, queue=LONG_QUEUE)
        while claimed := pgqueue.claim(conn, queue=LONG_QUEUE, limit=10):
            store.complete_many(conn, [(j.id, j.attempts) for j in claimed])
        conn.execute(text("UPDATE jobs SET created_at = now() - interval '3 days'"))
        conn.execute(
            text("INSERT INTO jobs_workers (name, host, pid, queues) VALUES ('w', 'h', 1, :q)"),
            {"q": [LONG_QUEUE]},
        )
    with serving(_service(engine)) as base:
        page = browser.new_page(viewport={"width": 1024, "height": 800})
        page.goto(base + "/queue/")
        expect(_count(page, LONG_QUEUE, "failed")).to_have_text("2", timeout=WAIT_MS)
        _no_horizontal_scroll(page)
        page.goto(base + f"/queue/jobs/{failed[0]}")
        _no_horizontal_scroll(page)

        # Bulk retry: "select all" (the script shows it), then the button.
        page.goto(base + "/queue/jobs?status=failed")
        _no_horizontal_scroll(page)
        page.locator("input[data-select-all]").check()
        expect(page.locator('input[name="job_id"]:checked')).to_have_count(2)
        page.get_by_role("button", name="Retry selected").click()
        expect(page.locator(".message")).to_contain_text(
            "2 of the selected job(s) requeued", timeout=WAIT_MS
        )
        assert [row(engine, i)["status"] for i in failed] == ["queued", "queued"]

        # Purge asks first, on a page of its own; only its button deletes.
        page.goto(base + "/queue/")
        queue_row = page.locator(f'tr[data-queue="{LONG_QUEUE}"]')
        queue_row.locator('input[name="older_than"]').fill("2d")
        queue_row.get_by_role("button", name="Purge").click()
        expect(page.locator("h1")).to_contain_text("Purge the done jobs of", timeout=WAIT_MS)
        _no_horizontal_scroll(page)
        with engine.connect() as conn:
            done = conn.execute(text("SELECT count(*) FROM jobs WHERE status = 'done'"))
            assert done.scalar_one() == 3
        page.get_by_role("button", name="Delete them").click()
        expect(page.locator(".message")).to_contain_text("3 done job(s) deleted", timeout=WAIT_MS)
        page.close()
