"""The code of docs/tasks.md and docs/from-celery.md runs (#22): every block marked
``<!-- example: producer -->`` is executed against a fresh database, as module ``myapp.tasks``
with ``engine`` defined; a page must keep at least the blocks it has today."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from sqlalchemy import Engine, text

import pgqueue.testing

ROOT = Path(__file__).resolve().parents[2]
PAGES = {"tasks.md": 1, "from-celery.md": 3}
_BLOCK = re.compile(r"<!-- example: (\w[\w-]*) -->\n```python\n(.*?)\n```", re.S)


def examples(page: str) -> list[tuple[str, str]]:
    return _BLOCK.findall((ROOT / "docs" / page).read_text("utf-8"))


@pytest.mark.parametrize(
    ("page", "index"),
    [(page, i) for page, count in PAGES.items() for i in range(count)],
)
def test_a_docs_example_runs(engine: Engine, page: str, index: int) -> None:
    blocks = examples(page)
    assert len(blocks) >= PAGES[page]
    kind, source = blocks[index]
    assert kind == "producer"  # what this branch can run: no worker needed
    namespace = {"__name__": "myapp.tasks", "engine": engine, "pgqueue": pgqueue}
    exec(compile(source, f"docs/{page}[{index}]", "exec"), namespace)
    with engine.connect() as conn:
        tasks = conn.execute(text("SELECT DISTINCT task FROM jobs")).scalars().all()
    assert all(t is not None and t.startswith("myapp.tasks.") for t in tasks)
    if ".enqueue(" in source:  # its jobs are task calls, named after the example's module
        assert tasks


def test_every_example_is_counted() -> None:
    """A block added to a page is run too (raise its count in PAGES)."""
    assert {page: len(examples(page)) for page in PAGES} == PAGES
