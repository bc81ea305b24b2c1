"""The API twins of ``--processes`` and ``--concurrency``: a worker's threads and coroutines and
a supervisor's processes are refused above the machine's bound unless ``force_bounds=True``."""

from __future__ import annotations

import os

import pytest
from sqlalchemy import create_engine

from pgqueue import InvalidArgumentError, Worker
from pgqueue._base.validation import (
    MAX_ASYNC_CONCURRENCY,
    MAX_THREADS,
    PROCESSES_PER_CPU,
    max_processes,
)
from pgqueue.cli.supervisor import SupervisorOptions

ENGINE = create_engine("postgresql+psycopg://u@h/d")  # never connects: nothing here runs
HANDLERS = {"q": lambda job: None}


def test_the_bounds_are_derived_from_the_machine() -> None:
    assert max_processes() == PROCESSES_PER_CPU * (os.cpu_count() or 1) == 4 * (os.cpu_count() or 1)
    assert MAX_THREADS == 1000
    assert MAX_ASYNC_CONCURRENCY == 10_000


@pytest.mark.parametrize(
    ("option", "most"),
    [("concurrency", MAX_THREADS), ("async_concurrency", MAX_ASYNC_CONCURRENCY)],
)
def test_a_worker_over_its_bound_is_refused_unless_forced(option: str, most: int) -> None:
    assert getattr(Worker(ENGINE, HANDLERS, **{option: most}), option) == most
    with pytest.raises(InvalidArgumentError, match="force_bounds=True") as raised:
        Worker(ENGINE, HANDLERS, **{option: most + 1})
    assert raised.value.argument == option
    assert f"more than {most}" in str(raised.value)
    forced = Worker(ENGINE, HANDLERS, **{option: most + 1}, force_bounds=True)
    assert getattr(forced, option) == most + 1


def test_force_bounds_is_a_bool() -> None:
    with pytest.raises(TypeError, match="force_bounds"):
        Worker(ENGINE, HANDLERS, force_bounds="yes")  # type: ignore[arg-type]


def test_a_supervisor_over_its_bound_is_refused_unless_forced() -> None:
    assert SupervisorOptions(processes=max_processes()).processes == max_processes()
    with pytest.raises(InvalidArgumentError, match="force_bounds=True") as raised:
        SupervisorOptions(processes=max_processes() + 1)
    assert raised.value.argument == "processes"
    assert SupervisorOptions(processes=1000, force_bounds=True).processes == 1000
