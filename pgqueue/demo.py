"""``pgqueue demo``: the article's figures, reproduced on a live server in under a minute.

1. The naive claim (R4) with 8 concurrent sessions double-claims: most claims take a job another
   session already took, and some job is claimed by every session.
2. ``FOR UPDATE SKIP LOCKED`` (R6): every job done, each exactly once.
3. A claim held open in a transaction stops vacuum from removing dead rows (R9).
4. A real :class:`~pgqueue.worker.Worker` with failing handlers retried (when available).

Runs in a throwaway database, created and dropped here, on the server the URL names or on an
embedded PostgreSQL started in a temporary directory.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import TextIO

import psycopg
from psycopg import sql
from sqlalchemy import (
    Connection,
    Engine,
    Text,
    Update,
    bindparam,
    case,
    create_engine,
    func,
    select,
    text,
)
from sqlalchemy.engine import URL

import pgqueue.migrations
from pgqueue import repository
from pgqueue._base.embedded import embedded_server
from pgqueue._base.text import psql_table
from pgqueue._base.urls import mask_url, to_libpq_url, to_sqlalchemy_url
from pgqueue._sql.statements import status_literal
from pgqueue.models import JobStatus, is_live, jobs_table

#: THE BROKEN CLAIM of R4, kept only to reproduce the double-claim bug. Never use it.
#: ``UPDATE ... WHERE id = (SELECT id ... LIMIT 1)`` without a lock: under READ COMMITTED two
#: sessions both take the oldest job. Like the article's ``naive.sql``, it also marks the job done.
NAIVE_DOUBLE_CLAIMING_CLAIM: Update = (
    jobs_table.update()
    .where(
        jobs_table.c.id
        == select(jobs_table.c.id)
        .where(jobs_table.c.status == status_literal(JobStatus.QUEUED))
        .order_by(jobs_table.c.run_at)
        .limit(1)
        .scalar_subquery()
    )
    .values(
        status=bindparam("new_status", type_=Text),
        attempts=jobs_table.c.attempts + 1,
        finished_at=case((bindparam("new_status", type_=Text).in_(["done", "failed"]), func.now())),
    )
    .returning(jobs_table.c.id, jobs_table.c.attempts)
)

#: The article's run: 8 pgbench clients.
CLIENTS = 8
#: Jobs the other sessions finish while one claim is held open (the article's 2,000).
VACUUM_JOBS = 2_000
#: Longest wait for the worker of step 4, in seconds.
WORKER_TIMEOUT = 60.0


class Progress:
    """A thread-safe counter drawn on stderr: one updating line on a terminal, else a few lines."""

    def __init__(self, label: str, total: int, stream: TextIO | None = None) -> None:
        self.label, self.total, self.done = label, total, 0
        self.stream = stream if stream is not None else sys.stderr
        self._tty = self.stream.isatty()
        self._lock = threading.Lock()
        self._last_drawn = 0.0
        self._next_step = 1

    def advance(self, n: int = 1) -> None:
        """Count ``n`` more units of work and redraw when due."""
        with self._lock:
            self.done += n
            if self._tty:
                now = time.monotonic()
                if now - self._last_drawn >= 0.1 or self.done >= self.total:
                    self._last_drawn = now
                    self._draw("\r")
            elif self.done * 4 >= self._next_step * self.total:
                self._next_step = self.done * 4 // max(self.total, 1) + 1
                self._draw("")

    def _draw(self, prefix: str) -> None:
        width = 30
        filled = width * self.done // max(self.total, 1)
        bar = "#" * filled + "." * (width - filled)
        end = "" if self._tty else "\n"
        self.stream.write(f"{prefix}  {self.label:<28} [{bar}] {self.done:>6}/{self.total}{end}")
        self.stream.flush()

    def close(self) -> None:
        """End the progress line."""
        if self._tty:
            self.stream.write("\n")
            self.stream.flush()


@dataclass
class Demo:
    """One demo run on a migrated database.

    Attributes:
        engine: Engine on the throwaway database.
        url: Its URL (for the raw psycopg connection VACUUM's notices are read from).
        jobs: How many jobs steps 1 and 2 enqueue.
        out: Where the results go (progress goes to stderr).
    """

    engine: Engine
    url: URL
    jobs: int
    out: TextIO

    def say(self, line: str = "") -> None:
        """Print one line of results."""
        self.out.write(line + "\n")
        self.out.flush()

    def reset(self, count: int) -> None:
        """Empty ``jobs`` and enqueue ``count`` jobs in one transaction."""
        with self.engine.begin() as conn:
            conn.execute(text("TRUNCATE jobs RESTART IDENTITY CASCADE"))
            repository.enqueue_many(conn, ({"email": i} for i in range(count)))

    def run_sessions(
        self, label: str, sessions: int, per_session: int, step: Callable[[Connection], object]
    ) -> float:
        """``sessions`` threads, each on its own connection, run ``step`` ``per_session`` times.

        Each call is its own transaction. Returns the elapsed seconds.
        """
        progress = Progress(label, sessions * per_session)

        def session() -> None:
            with self.engine.connect() as conn:
                for _ in range(per_session):
                    with conn.begin():
                        step(conn)
                    progress.advance()

        started = time.monotonic()
        try:
            with ThreadPoolExecutor(max_workers=sessions) as pool:
                for future in [pool.submit(session) for _ in range(sessions)]:
                    future.result()
        finally:
            progress.close()
        return time.monotonic() - started

    def status_table(self) -> list[tuple[str, int, int]]:
        """The article's ``SELECT status, count(*), max(attempts) ... GROUP BY status``."""
        jobs = jobs_table
        stmt = (
            select(jobs.c.status, func.count(), func.max(jobs.c.attempts))
            .group_by(jobs.c.status)
            .order_by(jobs.c.status)
        )
        with self.engine.connect() as conn:
            return [(r[0], int(r[1]), int(r[2])) for r in conn.execute(stmt)]

    def print_status_table(self) -> dict[str, tuple[int, int]]:
        """Print the status table; return ``{status: (count, max_attempts)}``."""
        rows = self.status_table()
        self.say(
            psql_table(["status", "count", "max_attempts"], [[str(v) for v in r] for r in rows])
        )
        return {status: (count, top) for status, count, top in rows}

    def naive(self) -> None:
        """Step 1: the naive claim double-claims (R4)."""
        per = self.jobs // CLIENTS
        self.say(f"1. Naive claim: {CLIENTS} sessions x {per:,} claims over {self.jobs:,} jobs")
        self.say("   UPDATE jobs SET status = 'done', attempts = attempts + 1")
        self.say(
            "   WHERE id = (SELECT id FROM jobs WHERE status = 'queued' ORDER BY run_at LIMIT 1)"
        )
        self.reset(self.jobs)
        params = {"new_status": "done"}
        elapsed = self.run_sessions(
            "naive claims",
            CLIENTS,
            per,
            lambda conn: conn.execute(NAIVE_DOUBLE_CLAIMING_CLAIM, params),
        )
        counts = self.print_status_table()
        jobs = jobs_table
        with self.engine.connect() as conn:
            extra, repeated = conn.execute(
                select(
                    func.coalesce(func.sum(jobs.c.attempts - 1), 0),
                    func.count(),
                ).where(jobs.c.attempts > 1)
            ).one()
        done = counts.get("done", (0, 0))[0]
        self.say(
            f"   {CLIENTS * per:,} claims finished only {done:,} jobs in {elapsed:.1f} s: "
            f"{int(extra):,} emails would have gone out twice (or more);\n"
            f"   {int(repeated):,} jobs were claimed more than once, "
            f"one of them {counts.get('done', (0, 0))[1]} times (by all {CLIENTS} sessions)."
        )
        self.say()

    def skip_locked(self) -> None:
        """Step 2: ``FOR UPDATE SKIP LOCKED`` claims every job exactly once (R6)."""
        per = self.jobs // CLIENTS
        self.say(f"2. SKIP LOCKED claim (pgqueue.claim): the same {CLIENTS} x {per:,} claims")
        self.reset(self.jobs)
        empty = 0

        def step(conn: Connection) -> None:
            nonlocal empty
            claimed = repository.claim(conn, limit=1)
            for job in claimed:
                repository.complete(conn, job.id, job.attempts)
            if not claimed:
                empty += 1

        elapsed = self.run_sessions("SKIP LOCKED claims", CLIENTS, per, step)
        counts = self.print_status_table()
        done, top = counts.get("done", (0, 0))
        rate = done / elapsed if elapsed else 0.0
        verdict = "each exactly once" if top == 1 else f"max attempts {top}"
        self.say(
            f"   {done:,} jobs done in {elapsed:.1f} s ({rate:,.0f} jobs/s, one job per claim), "
            f"{verdict}."
        )
        self.say()

    def vacuum(self) -> None:
        """Step 3: one claim held open in a transaction holds back vacuum (R9)."""
        work = min(VACUUM_JOBS, self.jobs - 1)
        sessions = 4
        work -= work % sessions
        self.say(
            f"3. Vacuum: one claim held open in a transaction while {sessions} other sessions "
            f"finish {work:,} jobs"
        )
        self.reset(self.jobs)
        with self.engine.connect() as holder:
            held = holder.begin()
            job = repository.claim(holder, limit=1)[0]
            self.say(f"   session A: BEGIN; claims job {job.id}; stays idle in transaction")

            def step(conn: Connection) -> None:
                for claimed in repository.claim(conn, limit=1):
                    repository.complete(conn, claimed.id, claimed.attempts)

            self.run_sessions("other sessions' jobs", sessions, work // sessions, step)
            self.say("   (a claim and a completion each leave one dead row version behind)")
            self.say("   VACUUM (VERBOSE) jobs;")
            self.say(f"     {self.vacuum_tuples_line()}")
            held.commit()
            self.say("   session A: COMMIT;  VACUUM (VERBOSE) jobs;")
            self.say(f"     {self.vacuum_tuples_line()}")
        self.say(
            "   Keep transactions short: claim and commit, work outside any transaction (lease)."
        )
        self.say()

    def vacuum_tuples_line(self) -> str:
        """Run ``VACUUM (VERBOSE) jobs`` and return the server's ``tuples:`` line for ``jobs``."""
        notices: list[str] = []
        with psycopg.connect(to_libpq_url(self.url), autocommit=True) as conn:
            conn.add_notice_handler(lambda diag: notices.append(diag.message_primary or ""))
            conn.execute("VACUUM (VERBOSE) jobs")
        for notice in notices:
            if '.jobs"' not in notice:
                continue
            for line in notice.splitlines():
                if line.strip().startswith("tuples:"):
                    return line.strip()
        return "(the server sent no 'tuples:' line: " + " / ".join(notices)[:200] + ")"


@contextmanager
def throwaway_database(server_url: str | URL) -> Iterator[URL]:
    """Create ``pgqueue_demo_<random>`` on the server; yield its URL; drop it afterwards."""
    base = to_sqlalchemy_url(server_url)
    name = f"pgqueue_demo_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(to_libpq_url(base), autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield base.set(database=name)
    finally:
        with psycopg.connect(to_libpq_url(base), autocommit=True) as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


def run_demo(url: str | URL | None, jobs: int = 10_000, out: TextIO | None = None) -> int:
    """Run the whole demo; return the exit code (0).

    Args:
        url: A server to work on (in a throwaway database), or ``None`` for an embedded server.
        jobs: Jobs for steps 1 and 2 (the article's 10,000); at least 16.
        out: Where results go (default stdout); progress goes to stderr.
    """
    out = out if out is not None else sys.stdout
    started = time.monotonic()
    with ExitStack() as stack:
        if url is None:
            sys.stderr.write("  starting an embedded PostgreSQL in a temporary directory...\n")
            server: str | URL = stack.enter_context(embedded_server())
        else:
            server = url
        db_url = stack.enter_context(throwaway_database(server))
        out.write(f"pgqueue demo on {mask_url(db_url)} (dropped afterwards)\n")
        pgqueue.migrations.upgrade(db_url)
        # Commits skip the WAL flush wait: same locks and visibility, less waiting on the disk.
        engine = create_engine(
            db_url,
            pool_size=CLIENTS + 2,
            max_overflow=CLIENTS,
            connect_args={
                "options": "-c synchronous_commit=off",
                "application_name": "pgqueue demo",
            },
        )
        stack.callback(engine.dispose)
        with engine.connect() as conn:
            version = conn.execute(text("SHOW server_version")).scalar_one()
        out.write(f"PostgreSQL {version}, migrated to {pgqueue.migrations.HEAD}\n\n")
        demo = Demo(engine=engine, url=db_url, jobs=jobs, out=out)
        demo.naive()
        demo.skip_locked()
        demo.vacuum()
        worker_step(demo)
    out.write(f"Demo finished in {time.monotonic() - started:.1f} s.\n")
    return 0


def worker_step(demo: Demo) -> None:
    """Step 4: a real :class:`~pgqueue.worker.Worker` over sample jobs, some of them failing."""
    from pgqueue.jobs import JobContext
    from pgqueue.retry_policy import RetryPolicy
    from pgqueue.worker import Worker

    def send_email(job: JobContext) -> None:
        time.sleep(0.002)

    def make_thumbnail(job: JobContext) -> None:
        time.sleep(0.005)
        if job.payload["n"] % 3 == 0 and job.attempts == 1:
            raise TimeoutError("image service timed out (fails once, then succeeds)")

    def call_webhook(job: JobContext) -> None:
        if job.payload["n"] % 5 == 0:
            raise ConnectionError("endpoint refused the connection (always fails)")

    plan = {"emails": 200, "thumbnails": 120, "webhooks": 80}
    total = sum(plan.values())
    demo.say(
        f"4. A real pgqueue.Worker, 8 threads, over {total} jobs: "
        + ", ".join(f"{n} {q}" for q, n in plan.items())
    )
    demo.say("   every 3rd thumbnail fails once; every 5th webhook always fails (max_attempts 3);")
    demo.say("   retry base 50 ms instead of 10 s, so the retries come due within the demo")
    with demo.engine.begin() as conn:
        conn.execute(text("TRUNCATE jobs RESTART IDENTITY CASCADE"))
        for queue, count in plan.items():
            repository.enqueue_many(
                conn, ({"n": i} for i in range(count)), queue=queue, max_attempts=3
            )
    worker = Worker(
        demo.engine,
        {"emails": send_email, "thumbnails": make_thumbnail, "webhooks": call_webhook},
        concurrency=8,
        poll_interval=0.05,
        retry=RetryPolicy(base=timedelta(milliseconds=50)),
        install_signal_handlers=False,
    )
    # The worker logs each failure; here the summary tells the story.
    worker_log = logging.getLogger("pgqueue.worker")
    level = worker_log.level
    worker_log.setLevel(logging.CRITICAL)
    progress = Progress("worker jobs finished", total)
    started = time.monotonic()
    thread = threading.Thread(target=worker.run, name="pgqueue-demo-worker", daemon=True)
    thread.start()
    unfinished = is_live(jobs_table.c.status)
    try:
        while time.monotonic() - started < WORKER_TIMEOUT:
            with demo.engine.connect() as conn:
                left = conn.execute(select(func.count()).where(unfinished)).scalar_one()
            progress.advance(total - left - progress.done)
            if left == 0 or not thread.is_alive():
                break
            time.sleep(0.1)
    finally:
        elapsed = time.monotonic() - started
        worker.stop()
        thread.join(WORKER_TIMEOUT)
        worker_log.setLevel(level)
        progress.close()
    stats = worker.stats
    counts = demo.print_status_table()
    finished = counts.get("done", (0, 0))[0] + counts.get("failed", (0, 0))[0]
    demo.say(
        f"   worker: {stats.done} done, {stats.retried} retried, {stats.failed} failed "
        f"for good, in {elapsed:.1f} s ({finished / elapsed:,.0f} jobs/s with retries waiting)"
    )
    demo.say()
