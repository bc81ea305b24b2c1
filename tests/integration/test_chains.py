"""Chains, groups and signatures of tasks (#24) on a real PostgreSQL: results travel through
``current_job().dependency_results()`` (in threads and coroutines), a chain and a group run to the
end under ``pgqueue.testing.drain`` and under a real worker in a thread, a failure fails the rest
of a chain naming the failed job, bad input writes nothing, and the aio twins do the same."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, event
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from worker_helpers import running, scalar, until

import pgqueue
import pgqueue.aio
import pgqueue.testing
from pgqueue.errors import InvalidArgumentError, InvalidArgumentTypeError, InvalidPayloadError

QUIET: dict[str, Any] = {"listen": False, "install_signal_handlers": False, "poll_interval": 0.1}

registry = pgqueue.Registry()


@registry.task(queue="steps")
def start(n: int) -> int:
    assert pgqueue.current_job().dependency_results() == {}
    return n


@registry.task(queue="steps")
def add_previous(k: int) -> int:
    (previous,) = pgqueue.current_job().dependency_results().values()
    assert previous.succeeded
    return int(previous.value) + k


@registry.task(queue="steps")
async def add_previous_async(k: int) -> int:
    await asyncio.sleep(0)
    (previous,) = pgqueue.current_job().dependency_results().values()
    return int(previous.value) + k


@registry.task(queue="fan")
def square(i: int) -> int:
    return i * i


@registry.task(queue="fan")
def cube(i: int) -> int:
    return i * i * i


@registry.task(queue="fan")
def total() -> dict[str, Any]:
    results = pgqueue.current_job().dependency_results()
    return {
        "ids": sorted(results),
        "sum": sum(r.value for r in results.values()),
        "statuses": sorted({r.status for r in results.values()}),
    }


@registry.task(queue="steps", max_attempts=1)
def boom() -> None:
    raise RuntimeError("the third step broke")


def _jobs(engine: Engine) -> int:
    return int(scalar(engine, "SELECT count(*) FROM jobs"))


def _result(engine: Engine, job_id: int) -> pgqueue.JobResult:
    with engine.connect() as conn:
        found = pgqueue.fetch_result(conn, job_id)
    assert found is not None
    return found


def test_task_options_take_depends_on(engine: Engine) -> None:
    with engine.begin() as conn:
        parent = start.enqueue(conn, 5)
        child = add_previous.options(depends_on=[parent]).enqueue(conn, 1)
        loose = add_previous.options(depends_on=[parent], on_dependency_failure="run")
        tolerant = loose.enqueue(conn, 2)
    assert scalar(engine, "SELECT waiting_on FROM jobs WHERE id = :i", i=child) == 1
    result = pgqueue.testing.drain(engine, registry)
    assert result.results == {parent: 5, child: 6, tolerant: 7}
    ran = [job.id for job in result.ran]
    assert ran.index(parent) < ran.index(child)


def test_a_signature_is_checked_when_made_and_options_return_a_new_one() -> None:
    sig = add_previous.s(3)
    assert (sig.task.name, sig.args, sig.kwargs) == (add_previous.name, (3,), {})
    bound = sig.options(priority=7)
    assert bound is not sig
    assert bound.settings["priority"] == 7
    assert sig.settings["priority"] == 0
    with pytest.raises(InvalidArgumentError, match="do not bind"):
        add_previous.s(1, 2)  # type: ignore[call-arg]
    with pytest.raises(InvalidPayloadError, match="jsonb"):
        add_previous.s(object())  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="do not bind"):
        add_previous.s(j=3)  # type: ignore[call-arg]
    with pytest.raises(InvalidPayloadError, match="levels deep"):
        add_previous.s(_nested(pgqueue.MAX_JSON_DEPTH + 1))  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="priority"):
        sig.options(priority=12)


def _nested(depth: int) -> object:
    value: object = 1
    for _ in range(depth):
        value = [value]
    return value


def test_a_chain_of_three_passes_results_through_drain(engine: Engine) -> None:
    with engine.begin() as conn:
        ids = pgqueue.chain(conn, start.s(1), add_previous.s(10), add_previous_async.s(100))
    assert len(ids) == 3
    waiting = [scalar(engine, "SELECT waiting_on FROM jobs WHERE id = :i", i=i) for i in ids]
    assert waiting == [0, 1, 1]
    result = pgqueue.testing.drain(engine, registry)
    assert [job.id for job in result.ran] == ids
    assert result.results == {ids[0]: 1, ids[1]: 11, ids[2]: 111}


def test_a_chain_of_three_runs_on_a_real_worker_in_a_thread(engine: Engine) -> None:
    with engine.begin() as conn:
        ids = pgqueue.chain(conn, start.s(2), add_previous_async.s(20), add_previous.s(200))
    worker = pgqueue.Worker(engine, registry, **QUIET)
    with running(worker):
        until(lambda: _result(engine, ids[-1]).finished, 60, "the chain's last job")
    assert [_result(engine, i).value for i in ids] == [2, 22, 222]
    assert [_result(engine, i).status for i in ids] == ["done"] * 3


def test_a_group_of_ten_then_sees_all_ten_results(engine: Engine) -> None:
    members = [square.s(i) if i % 2 else cube.s(i) for i in range(10)]
    inserts: list[str] = []

    def seen(conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
        if statement.lstrip().upper().startswith(("INSERT", "WITH")) and "jobs" in statement:
            inserts.append(statement)

    event.listen(engine, "before_cursor_execute", seen)
    try:
        with engine.begin() as conn:
            ids = pgqueue.group(conn, members, then=total.s())
    finally:
        event.remove(engine, "before_cursor_execute", seen)
    # One insert per task of the members (two), one for then (the edges are attached after it).
    assert len([s for s in inserts if "INSERT INTO jobs " in s]) == 3, inserts
    assert isinstance(ids, pgqueue.GroupIds)
    assert len(ids.members) == 10
    assert ids.then is not None
    tasks = [scalar(engine, "SELECT task FROM jobs WHERE id = :i", i=i) for i in ids.members]
    assert tasks == [square.name if i % 2 else cube.name for i in range(10)]  # input order
    assert scalar(engine, "SELECT waiting_on FROM jobs WHERE id = :i", i=ids.then) == 10
    result = pgqueue.testing.drain(engine, registry)
    ran = [job.id for job in result.ran]
    assert ran[-1] == ids.then
    assert sorted(ran[:-1]) == sorted(ids.members)
    expected = sum(i * i if i % 2 else i**3 for i in range(10))
    assert result.results[ids.then] == {
        "ids": sorted(ids.members),
        "sum": expected,
        "statuses": ["done"],
    }


def test_a_group_on_a_real_worker(engine: Engine) -> None:
    with engine.begin() as conn:
        ids = pgqueue.group(conn, [square.s(i) for i in range(10)], then=total.s())
    assert ids.then is not None
    with running(pgqueue.Worker(engine, registry, **QUIET)):
        until(lambda: _result(engine, ids.then or 0).finished, 60, "the group's then")
    assert _result(engine, ids.then).value["sum"] == sum(i * i for i in range(10))


def test_a_chain_of_five_whose_third_fails_fails_the_rest_naming_it(engine: Engine) -> None:
    with engine.begin() as conn:
        ids = pgqueue.chain(
            conn, start.s(1), add_previous.s(1), boom.s(), add_previous.s(1), add_previous.s(1)
        )
    result = pgqueue.testing.drain(engine, registry)
    assert [job.id for job in result.ran] == ids[:3]
    outcomes = [_result(engine, i) for i in ids]
    assert [r.status for r in outcomes] == ["done", "done", "failed", "failed", "failed"]
    assert "the third step broke" in (outcomes[2].error or "")
    assert [r.error for r in outcomes[3:]] == [f"dependency {ids[2]} failed"] * 2


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda c: pgqueue.group(c, []), InvalidArgumentError, "at least one"),
        (lambda c: pgqueue.group(c, [square.s(1), "x"]), InvalidArgumentTypeError, r"members\[1\]"),
        (lambda c: pgqueue.group(c, square.s(1)), InvalidArgumentTypeError, "members"),
        (lambda c: pgqueue.group(c, [square.s(1)], then=7), InvalidArgumentTypeError, "then"),
        (
            lambda c: pgqueue.group(c, [square.s(1), square.s(2).options(unique_key="k")]),
            InvalidArgumentError,
            "unique_key",
        ),
        (lambda c: pgqueue.chain(c), InvalidArgumentError, "at least one"),
        (lambda c: pgqueue.chain(c, start.s(1), total), InvalidArgumentTypeError, "signatures"),
        (
            lambda c: pgqueue.chain(c, start.s(1), total.s().options(delay=timedelta(1))),
            InvalidArgumentError,
            "run_at or delay",
        ),
        (
            lambda c: pgqueue.chain(c, start.s(1), add_previous.s(1, 2)),
            InvalidArgumentError,
            "bind",
        ),
    ],
)
def test_bad_input_writes_nothing(engine: Engine, call: Any, error: type, match: str) -> None:
    with engine.connect() as conn:
        with pytest.raises(error, match=match):
            call(conn)
        conn.commit()  # whatever the call wrote would be kept
    assert _jobs(engine) == 0
    assert int(scalar(engine, "SELECT count(*) FROM jobs_dependencies")) == 0


@pytest.mark.parametrize("kind", ["connection", "session"])
def test_the_aio_twins(engine: Engine, db_url: URL, kind: str) -> None:
    async def enqueue() -> tuple[list[int], pgqueue.GroupIds]:
        async_engine = create_async_engine(db_url)
        try:
            if kind == "session":
                async with AsyncSession(async_engine) as session, session.begin():
                    chained = await pgqueue.aio.chain(session, start.s(3), add_previous.s(30))
                    grouped = await pgqueue.aio.group(
                        session, [square.s(i) for i in range(3)], then=total.s()
                    )
            else:
                async with async_engine.begin() as conn:
                    chained = await pgqueue.aio.chain(conn, start.s(3), add_previous.s(30))
                    grouped = await pgqueue.aio.group(
                        conn, [square.s(i) for i in range(3)], then=total.s()
                    )
                async with async_engine.begin() as conn:
                    with pytest.raises(InvalidArgumentError, match="at least one"):
                        await pgqueue.aio.group(conn, [])
                    with pytest.raises(InvalidArgumentError, match="at least one"):
                        await pgqueue.aio.chain(conn)
            return chained, grouped
        finally:
            await async_engine.dispose()

    chained, grouped = asyncio.run(enqueue())
    assert _jobs(engine) == 2 + 3 + 1
    result = pgqueue.testing.drain(engine, registry)
    assert result.results[chained[1]] == 33
    assert grouped.then is not None
    assert result.results[grouped.then]["sum"] == 0 + 1 + 4


def test_drain_on_a_connection_runs_a_chain_in_its_transaction(engine: Engine) -> None:
    with engine.connect() as conn:
        ids = pgqueue.chain(conn, start.s(4), add_previous.s(40), add_previous_async.s(400))
        result = pgqueue.testing.drain(conn, registry)
        assert result.results == {ids[0]: 4, ids[1]: 44, ids[2]: 444}
        conn.rollback()
    assert _jobs(engine) == 0


def test_depends_on_given_as_a_generator_survives_a_further_options(engine: Engine) -> None:
    with engine.begin() as conn:
        parent = start.enqueue(conn, 8)
        task = add_previous.options(depends_on=(i for i in [parent])).options(priority=3)
        child = task.enqueue(conn, 1)
        (later,) = pgqueue.chain(conn, add_previous.s(1).options(depends_on=iter([child])))
    assert scalar(engine, "SELECT waiting_on FROM jobs WHERE id = :i", i=child) == 1
    assert pgqueue.testing.drain(engine, registry).results == {parent: 8, child: 9, later: 10}
