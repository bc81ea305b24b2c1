"""Fresh test databases, made ahead of the tests and cleared or dropped behind them.

Creating a database from the migrated template and dropping it costs the server about 0.3 s and
0.5 s here, and each asks for a checkpoint, which every test process then queues behind: most of
the suite's time went there. So :class:`Clones` does that work on a thread of its own, and gives
a database back to the tests only in the state of a fresh clone:

- behind a test, its database is **renamed** (a process the test left behind cannot reach it
  under its old name), every table but ``alembic_version`` truncated with its sequences restarted,
  the statistics counters reset, and its catalog compared with a fresh clone's (one
  :data:`FINGERPRINT`: every relation, column, default, index, constraint, trigger, function, type,
  schema, privilege, storage option, sequence position, planner statistic and database setting
  outside the system catalogs, plus the revision it is at). Equal, it is used again; different (a
  test changed the schema, vacuumed, analyzed, granted...), it is dropped and a new clone made;
- only on a server whose autovacuum is off (the machine's CI server): with autovacuum on, when it
  visits a table depends on counters a reused database would not share with a fresh one, so there
  every test gets a new clone.

One thread per test process (each xdist worker has its own); a server briefly down (the restart
tests) is waited for.
"""

from __future__ import annotations

import queue
import threading
import time
import uuid
from collections.abc import Callable
from typing import Protocol, TypeVar

import psycopg
from psycopg import sql

T = TypeVar("T")

#: Everything a test can change in a database that a truncate does not undo, as one digest.
#: Temporary schemas are left out (sessions make them and they are harmless); so are the system
#: catalogs' own sizes, which change with any use.
FINGERPRINT = """
WITH user_ns AS (
    SELECT oid, nspname FROM pg_namespace
    WHERE nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast')
      AND nspname NOT LIKE 'pg_temp_%' AND nspname NOT LIKE 'pg_toast_temp_%'
), lines AS (
    SELECT 'schema ' || nspname || ' ' || pg_get_userbyid(n.nspowner) || ' '
        || coalesce(n.nspacl::text, '') AS line
    FROM pg_namespace n WHERE n.oid IN (SELECT oid FROM user_ns)
    UNION ALL
    SELECT 'class ' || u.nspname || '.' || c.relname || ' ' || c.relkind::text || ' '
        || pg_get_userbyid(c.relowner) || ' ' || coalesce(c.relacl::text, '') || ' '
        || coalesce(c.reloptions::text, '') || ' ' || c.relpersistence::text || ' ' || c.relpages
        || ' ' || c.reltuples || ' ' || c.relallvisible || ' ' || c.relrowsecurity || ' '
        || c.relreplident::text || ' ' || coalesce(pg_get_viewdef(c.oid), '')
    FROM pg_class c JOIN user_ns u ON u.oid = c.relnamespace
    UNION ALL
    SELECT 'column ' || c.oid::regclass::text || '.' || a.attname || ' '
        || format_type(a.atttypid, a.atttypmod) || ' ' || a.attnotnull || ' '
        || a.attisdropped || ' ' || coalesce(a.attstattarget::text, '-') || ' '
        || coalesce(a.attacl::text, '') || ' '
        || coalesce(pg_get_expr(d.adbin, d.adrelid), '') || ' ' || a.attstorage::text
    FROM pg_attribute a
    JOIN pg_class c ON c.oid = a.attrelid JOIN user_ns u ON u.oid = c.relnamespace
    LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
    WHERE a.attnum > 0
    UNION ALL
    SELECT 'index ' || pg_get_indexdef(i.indexrelid) || ' ' || i.indisvalid || ' '
        || i.indisready || ' ' || i.indisclustered
    FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN user_ns u ON u.oid = c.relnamespace
    UNION ALL
    SELECT 'constraint ' || co.conrelid::regclass::text || ' ' || co.conname || ' '
        || pg_get_constraintdef(co.oid) || ' ' || co.convalidated
    FROM pg_constraint co JOIN user_ns u ON u.oid = co.connamespace
    UNION ALL
    SELECT 'trigger ' || pg_get_triggerdef(t.oid) || ' ' || t.tgenabled::text
    FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid JOIN user_ns u ON u.oid = c.relnamespace
    UNION ALL
    SELECT 'function ' || u.nspname || '.' || p.proname || '(' || pg_get_function_arguments(p.oid)
        || ') ' || md5(p.prosrc) || ' ' || pg_get_userbyid(p.proowner) || ' '
        || coalesce(p.proacl::text, '') || ' ' || coalesce(p.proconfig::text, '') || ' '
        || p.provolatile::text || ' ' || p.prosecdef
    FROM pg_proc p JOIN user_ns u ON u.oid = p.pronamespace
    UNION ALL
    SELECT 'type ' || u.nspname || '.' || t.typname || ' ' || t.typtype::text
    FROM pg_type t JOIN user_ns u ON u.oid = t.typnamespace
    UNION ALL
    SELECT 'sequence ' || schemaname || '.' || sequencename || ' '
        || coalesce(last_value::text, '-') || ' ' || start_value || ' ' || increment_by
    FROM pg_sequences
    UNION ALL
    SELECT 'statistic ' || s.starelid::regclass::text || ' ' || s.staattnum
    FROM pg_statistic s
    JOIN pg_class c ON c.oid = s.starelid JOIN user_ns u ON u.oid = c.relnamespace
    UNION ALL
    SELECT 'policy ' || polname || ' ' || polrelid::regclass::text FROM pg_policy
    UNION ALL
    SELECT 'rule ' || r.rulename || ' ' || r.ev_class::regclass::text
    FROM pg_rewrite r JOIN pg_class c ON c.oid = r.ev_class JOIN user_ns u ON u.oid = c.relnamespace
    WHERE r.rulename <> '_RETURN'
    UNION ALL
    SELECT 'extension ' || extname || ' ' || extversion FROM pg_extension
    UNION ALL
    SELECT 'event trigger ' || evtname || ' ' || evtenabled::text FROM pg_event_trigger
    UNION ALL
    SELECT 'default acl ' || defaclrole::regrole::text || ' ' || defaclacl::text FROM pg_default_acl
    UNION ALL
    SELECT 'extended statistic ' || stxname FROM pg_statistic_ext
    UNION ALL
    SELECT 'large objects ' || count(*) FROM pg_largeobject_metadata
    UNION ALL
    SELECT 'publication ' || pubname FROM pg_publication
    UNION ALL
    SELECT 'prepared ' || gid FROM pg_prepared_xacts WHERE database = current_database()
    UNION ALL
    SELECT 'setting ' || coalesce(setrole::regrole::text, '-') || ' ' || setconfig::text
    FROM pg_db_role_setting WHERE setdatabase = (
        SELECT oid FROM pg_database WHERE datname = current_database())
    UNION ALL
    SELECT 'database ' || pg_get_userbyid(datdba) || ' ' || coalesce(datacl::text, '') || ' '
        || datconnlimit || ' ' || datallowconn || ' ' || datistemplate
    FROM pg_database WHERE datname = current_database()
    UNION ALL
    SELECT 'revision ' || coalesce(
        (SELECT string_agg(version_num, ',' ORDER BY version_num) FROM public.alembic_version),
        '-')
    WHERE to_regclass('public.alembic_version') IS NOT NULL
)
SELECT md5(string_agg(line, E'\\n' ORDER BY line)) FROM lines
"""

#: Every table outside the system catalogs but the revision table, for one TRUNCATE.
TABLES = """
SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind::text IN ('r', 'p') AND NOT c.relispartition AND c.relname <> 'alembic_version'
  AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast')
  AND n.nspname NOT LIKE 'pg_temp_%' AND n.nspname NOT LIKE 'pg_toast_temp_%'
"""


class Server(Protocol):
    """What :class:`Clones` needs of the tests' server."""

    def admin(self) -> psycopg.Connection[tuple[object, ...]]:
        """An autocommit session on the maintenance database."""
        ...

    def connect(self, name: str) -> psycopg.Connection[tuple[object, ...]]:
        """An autocommit session on database ``name``."""
        ...


def create(server: Server, name: str, template: str | None) -> None:
    statement = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
    if template is not None:
        statement = sql.SQL("{} TEMPLATE {}").format(statement, sql.Identifier(template))
    with server.admin() as admin:
        admin.execute(statement)


def drop(server: Server, name: str) -> None:
    with server.admin() as admin:
        statement = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
        admin.execute(statement.format(sql.Identifier(name)))


def fresh_name(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:12]}"


class Clones:
    """Databases for one test process: see the module's docstring."""

    AHEAD = 2  # databases kept ready
    PATIENCE = 120.0  # seconds a step keeps retrying a server that does not answer

    def __init__(self, server: Server, prefix: str, template: str | None) -> None:
        self._server, self._prefix, self._template = server, prefix, template
        self._ready: queue.Queue[str | BaseException] = queue.Queue()
        self._work: queue.Queue[str | None] = queue.Queue()  # "": make one; a name: recycle it
        self._fresh: str | None = None  # the fingerprint of a fresh clone, once known
        self.recycle = template is not None and self._autovacuum_off()
        #: How many databases were used again, and how many dropped for a difference.
        self.reused = self.dropped = 0
        self._thread = threading.Thread(target=self._run, name=f"clones-{prefix}", daemon=True)
        for _ in range(self.AHEAD):
            self._work.put("")
        self._thread.start()

    def take(self) -> str:
        """A database in the state of a fresh clone, for this test alone."""
        got = self._ready.get(timeout=2 * self.PATIENCE)
        if isinstance(got, BaseException):
            raise RuntimeError("making a test database failed") from got
        return got

    def give_back(self, name: str) -> None:
        """The test is over: its database is cleared for another test, or dropped and replaced."""
        self._work.put(name)

    def settle(self) -> None:
        """Wait until every database given back is cleared or replaced (for the clones' tests)."""
        self._work.join()

    def close(self) -> None:
        """Drop every database still here (the session's end)."""
        self._work.put(None)
        self._thread.join()
        while not self._ready.empty():
            left = self._ready.get_nowait()
            if isinstance(left, str):
                drop(self._server, left)

    # -- the thread -------------------------------------------------------------------------------

    def _run(self) -> None:
        while (item := self._work.get()) is not None:
            try:
                again = self._cleared(item) if item and self.recycle else None
                if again is None:
                    if item:  # IF EXISTS: gone already when it was renamed
                        self._patiently(lambda: drop(self._server, item))
                    again = self._patiently(self._made)
                self._ready.put(again)
            except BaseException as exc:  # handed to the test that asks for the next database
                self._ready.put(exc)
            finally:
                self._work.task_done()

    def _made(self) -> str:
        name = fresh_name(self._prefix)
        create(self._server, name, self._template)
        if self.recycle and self._fresh is None:
            self._fresh = self._clear(name)  # a fresh clone's digest, after the same clearing
        return name

    def _cleared(self, name: str) -> str | None:
        """``name``, used by a test, under a new name and cleared when it then matches a fresh
        clone; ``None`` (and dropped) when it does not."""
        new = fresh_name(self._prefix)
        try:
            if not self._renamed(name, new):
                return None
            digest = self._clear(new)
        except psycopg.Error:
            digest = None
        if digest is not None and digest == self._fresh:
            self.reused += 1
            return new
        self.dropped += 1
        self._patiently(lambda: drop(self._server, new))
        return None

    def _renamed(self, name: str, new: str) -> bool:
        """Every session on ``name`` ended, and the database renamed ``new`` (nobody can reach it
        under its old name any more); False when sessions keep coming back."""
        rename = sql.SQL("ALTER DATABASE {} RENAME TO {}").format(
            sql.Identifier(name), sql.Identifier(new)
        )
        with self._server.admin() as admin:
            for _ in range(50):
                admin.execute(
                    "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity "
                    "WHERE datname = %s AND pid <> pg_backend_pid()",
                    (name,),
                )
                try:
                    admin.execute(rename)
                    return True
                except psycopg.errors.ObjectInUse:
                    time.sleep(0.05)  # a process reconnected in between: terminate it too
        return False

    def _clear(self, name: str) -> str:
        """Truncate every table but the revision's, reset the statistics counters, and return the
        database's :data:`FINGERPRINT`."""
        with self._server.connect(name) as conn:
            tables = [sql.Identifier(schema, table) for schema, table in conn.execute(TABLES)]
            if tables:
                truncate = sql.SQL("TRUNCATE {} RESTART IDENTITY CASCADE")
                conn.execute(truncate.format(sql.SQL(", ").join(tables)))
            conn.execute("SELECT pg_stat_reset()")
            found = conn.execute(FINGERPRINT).fetchone()
        assert found is not None
        return str(found[0])

    def _autovacuum_off(self) -> bool:
        with self._server.admin() as admin:
            found = admin.execute("SHOW autovacuum").fetchone()
        return found is not None and found[0] == "off"

    def _patiently(self, step: Callable[[], T]) -> T:
        deadline = time.monotonic() + self.PATIENCE
        while True:
            try:
                return step()
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
