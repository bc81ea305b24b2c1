"""A claimed job's payload kept as its JSON text until a handler reads it.

:mod:`pgqueue._sql.deferred_json`.

No database: the worker's replayed claim hands :meth:`JobContext.of` the ``jsonb`` text as
``bytes``; these tests build those claims by hand and read the jobs as handlers, tasks and
threads do.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import threading
from typing import Any

import pytest

from pgqueue.jobs import JobContext, fresh_payload
from pgqueue.results import ClaimedJob

NESTED: Any = {"args": [1, {"deep": [2.5, None, True, "é ✓"]}], "kwargs": {"k": "v"}}


def _claimed(payload: Any, headers: Any = None) -> ClaimedJob:
    return ClaimedJob(7, "q", payload, 1, headers)


def _as_text(value: Any) -> bytes:
    return json.dumps(value).encode()


def test_a_payload_given_as_text_is_decoded_at_the_first_read_and_kept() -> None:
    job = JobContext.of(_claimed(_as_text(NESTED)))
    first = job.payload
    assert first == NESTED
    assert job.payload is first  # kept: read again, the same object
    first["args"].append("changed by the handler")
    assert job.payload["args"][-1] == "changed by the handler"


def test_headers_given_as_text_are_decoded_at_once() -> None:
    job = JobContext.of(_claimed(_as_text([1]), headers=_as_text({"trace": "t1"})))
    assert job.headers == {"trace": "t1"}
    assert JobContext.of(_claimed(_as_text([1]))).headers is None


def test_a_decoded_payload_is_used_as_given() -> None:
    """A claim through SQLAlchemy (a call's first run, the repository) gives values: no text."""
    for value in (NESTED, "text", 42, 3.25, [1, "two"], True, None):
        job = JobContext.of(_claimed(value))
        assert job.payload == value
        assert fresh_payload(job) == value


def test_a_task_call_decodes_its_own_arguments_and_keeps_nothing() -> None:
    job = JobContext.of(_claimed(_as_text(NESTED)))
    one, two = fresh_payload(job), fresh_payload(job)
    assert one == two == NESTED
    assert one is not two  # decoded for each use, not kept
    kept = job.payload  # a read through the attribute keeps its value, and the calls use it
    assert fresh_payload(job) is kept


def test_a_job_built_by_hand_is_a_dataclass_as_before() -> None:
    job = JobContext(1, "q", {"a": 1}, 2)
    assert [f.name for f in dataclasses.fields(job)][:4] == ["id", "queue", "payload", "attempts"]
    assert dataclasses.replace(job, attempts=3).payload == {"a": 1}
    job.payload = [1, 2]
    assert job.payload == [1, 2]
    with pytest.raises(TypeError, match="payload"):
        JobContext(1, "q")  # type: ignore[call-arg]
    replaced = dataclasses.replace(JobContext.of(_claimed(_as_text(NESTED))), attempts=5)
    assert replaced.payload == NESTED
    del job.payload  # as any attribute: gone, and said so (no recursion through the class)
    with pytest.raises(AttributeError, match="payload"):
        _ = job.payload


def test_threads_reading_a_payload_at_once_get_the_one_value_the_job_keeps() -> None:
    """The first reads race (a thread switch at every few bytecodes makes it likely): without
    the job's lock two threads each decode it, and get different objects."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        _race_first_reads()
    finally:
        sys.setswitchinterval(interval)


def _race_first_reads() -> None:
    big: Any = {"rows": [{"i": i} for i in range(50)]}
    for _ in range(300):
        job = JobContext.of(_claimed(_as_text(big)))
        start = threading.Barrier(4)
        seen: list[object] = []

        def read(
            job: JobContext = job, start: threading.Barrier = start, seen: list[object] = seen
        ) -> None:
            start.wait()
            seen.append(job.payload)

        threads = [threading.Thread(target=read) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10.0)
        assert len(seen) == 4
        assert all(value is seen[0] for value in seen)
        assert seen[0] == big
