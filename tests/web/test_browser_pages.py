"""The pages of #34 in a real browser (the system Chromium, as ``test_browser``): one line per
queue at 1,280 px and no name broken mid-word, a running job's elapsed time, progress bar and
Cancel button in view, and the log lines a handler wrote, at 1,024 px without horizontal scroll."""

from __future__ import annotations

import logging
import threading
from datetime import timedelta

import pytest

# test_browser skips this module too where Playwright or Chromium is missing.
from playwright.sync_api import Browser, expect
from sqlalchemy import Engine

import pgqueue
import pgqueue.testing
from tests.web.conftest import failed_job
from tests.web.test_browser import WAIT_MS, _no_horizontal_scroll, _service, browser, serving

pytestmark = pytest.mark.slow

__all__ = ["browser"]  # the module-scoped fixture of test_browser, shared

#: Seven queues, as the issue counted them on a 900 px screen; one long dotted name.
QUEUES = [
    "email",
    "thumbnails",
    "notifications_push",
    "billing.invoices.monthly",
    "tenant-42.reports",
    "webhooks",
    "search_index",
]


def test_overview_is_one_line_per_queue_and_breaks_no_name(
    engine: Engine, browser: Browser
) -> None:
    with engine.begin() as conn:
        for queue in QUEUES:
            pgqueue.enqueue_many(conn, [{}] * 3, queue=queue)
    failed_job(engine, queue="email")
    with serving(_service(engine)) as base:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(base + "/queue/")
        expect(page.locator("tr[data-queue]")).to_have_count(len(QUEUES), timeout=WAIT_MS)
        heights = page.evaluate(
            "[...document.querySelectorAll('tr[data-queue]')].map(r => r.offsetHeight)"
        )
        line = page.evaluate(
            "parseFloat(getComputedStyle(document.querySelector('tr[data-queue] td')).lineHeight)"
        )
        # One line: a row is its text's line plus the cell's padding and the buttons' borders.
        assert max(heights) <= line + 24, (heights, line)
        # Each name on one line: every box of its link on the same line.
        boxes = page.evaluate(
            "[...document.querySelectorAll('tr[data-queue] th a')].map(a => [a.textContent, "
            "new Set([...a.getClientRects()].filter(r => r.width).map(r => Math.round(r.top)))"
            ".size])"
        )
        assert all(n == 1 for _, n in boxes), boxes
        _no_horizontal_scroll(page)
        page.set_viewport_size({"width": 1024, "height": 800})
        _no_horizontal_scroll(page)
        page.close()


def test_running_job_page_shows_elapsed_progress_cancel_and_its_logs(
    engine: Engine, browser: Browser
) -> None:
    logger = logging.getLogger("tests.browser_pages")
    logger.setLevel(logging.INFO)
    release = threading.Event()

    def handler(job: pgqueue.JobContext) -> None:
        job.log("resizing <img>", width=640)
        logger.info("fetched %d bytes", 1234)
        job.set_progress({"done": 3, "total": 4})
        release.wait(30)

    with engine.begin() as conn:
        job_id = pgqueue.enqueue(conn, {}, queue="thumbs")
    worker = pgqueue.Worker(
        engine,
        {"thumbs": handler},
        lease=timedelta(seconds=1.5),
        poll_interval=0.05,
        listen=False,
        install_signal_handlers=False,
    )
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        with serving(_service(engine)) as base:
            page = browser.new_page(viewport={"width": 1024, "height": 768})
            # The heartbeat writes the progress and the lines of the running job.
            for _ in range(200):
                page.goto(base + f"/queue/jobs/{job_id}")
                if page.locator("#progress-bar").count() and page.locator("table.log tr").count():
                    break
                page.wait_for_timeout(100)
            expect(page.locator("h1 .status")).to_have_text("running")
            expect(page.locator("#elapsed")).to_contain_text("s")
            expect(page.locator("#progress-bar progress")).to_have_attribute("value", "0.7500")
            expect(page.locator("#progress-bar")).to_contain_text("3 / 4")
            cancel = page.get_by_role("button", name="Cancel")
            box = cancel.bounding_box()
            assert box is not None
            assert box["y"] + box["height"] <= 768, box  # in view without scrolling
            lines = page.locator("table.log tbody tr")
            expect(lines).to_have_count(2)
            expect(lines.nth(0)).to_contain_text("resizing <img>")
            expect(lines.nth(0)).to_contain_text('"width": 640')
            expect(lines.nth(1)).to_contain_text("fetched 1234 bytes")
            expect(lines.nth(1)).to_contain_text("tests.browser_pages")
            _no_horizontal_scroll(page)
            release.set()
            # Failed for good: says so rather than "none yet"; cancelled has a list of its own.
            failed = failed_job(engine, queue="other")
            page.goto(base + f"/queue/jobs/{failed}")
            expect(page.locator("#result")).to_have_text("none: the job failed for good")
            page.get_by_role("link", name="Cancelled", exact=True).click()
            expect(page.locator("h1")).to_contain_text("cancelled")
            _no_horizontal_scroll(page)
            page.close()
    finally:
        release.set()
        worker.stop()
        thread.join(30)


registry = pgqueue.Registry()


@registry.task(queue="flow")
def step(n: int) -> int:
    return n


def test_the_graph_of_a_chain_and_a_group_and_the_new_pages_fit(
    engine: Engine, browser: Browser
) -> None:
    """A 3-step chain whose last step the 10 members of a group wait for, and the group's
    ``then``: 14 boxes, coloured by state, each a link; the new pages fit 1,024 px."""
    with engine.begin() as conn:
        chained = pgqueue.chain(conn, step.s(1), step.s(2), step.s(3))
        grouped = pgqueue.group(
            conn, [step.s(i).options(depends_on=[chained[-1]]) for i in range(10)], then=step.s(0)
        )
    pgqueue.testing.drain(engine, registry, max_jobs=1)  # the chain's first step is done
    with serving(_service(engine)) as base:
        page = browser.new_page(viewport={"width": 1024, "height": 768})
        page.goto(base + f"/queue/jobs/{chained[0]}")
        page.get_by_role("link", name="its graph").click()
        nodes = page.locator("#graph a.node")
        expect(nodes).to_have_count(14, timeout=WAIT_MS)
        fills = page.evaluate(
            "Object.fromEntries([...document.querySelectorAll('#graph a.node')].map(a => "
            "[a.dataset.job, [a.dataset.status, getComputedStyle(a.querySelector('rect')).fill]]))"
        )
        assert fills[str(chained[0])][0] == "done"
        assert fills[str(chained[1])][0] == "queued"
        assert fills[str(grouped.then)][0] == "waiting"
        colours = {status: fill for status, fill in fills.values()}
        assert len(set(colours.values())) == len(colours) == 3, colours  # one colour per state
        assert page.locator("#graph line.edge").count() == 2 + 10 + 10
        _no_horizontal_scroll(page)
        page.locator(f'#graph a.node[data-job="{grouped.then}"]').click()
        expect(page.locator("h1")).to_contain_text(f"Job {grouped.then}", timeout=WAIT_MS)
        for path in ("/queue/queues/flow", "/queue/periodic"):
            page.goto(base + path)
            expect(page.locator("h1")).to_be_visible(timeout=WAIT_MS)
            _no_horizontal_scroll(page)
        page.close()
