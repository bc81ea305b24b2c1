"""Facts the docs state that the code can check: they went stale once (issue #20, item 15)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.revisions import pgqueue_head, pgqueue_revisions

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_a_head_named_in_the_docs_is_the_real_head() -> None:
    named = {
        (path.name, found)
        for path in DOCS
        for found in re.findall(r"(pgqueue_\d{4}) \(pgqueue\) \(head\)", path.read_text("utf-8"))
    }
    assert {name for name in named if name[1] != pgqueue_head()} == set()


def test_revisions_the_docs_name_exist() -> None:
    known = set(pgqueue_revisions())
    named = {
        (path.name, found)
        for path in DOCS
        for found in re.findall(r"\bpgqueue_\d{4}\b", path.read_text("utf-8"))
    }
    assert {name for name in named if name[1] not in known} == set()


def test_embedding_points_at_the_asyncio_handlers_and_autogenerate_needs_the_heads() -> None:
    text = (ROOT / "docs" / "embedding.md").read_text("utf-8")
    assert "There is no asyncio worker" not in text
    assert "worker.md#asyncio-handlers" in text
    assert "## asyncio handlers" in (ROOT / "docs" / "worker.md").read_text("utf-8")
    recipe = text[text.index("## Your first revision") : text.index("## Autogenerate")]
    assert recipe.index("alembic upgrade heads") < recipe.index("--autogenerate")


def test_ci_runs_the_readmes_test_command_once_and_its_documented_passes() -> None:
    """CI calls the README's install-and-test command verbatim, once, and the pytest passes the
    README's "Run the tests" names; a marker the docs name is one pytest knows."""
    readme = (ROOT / "README.md").read_text("utf-8")
    found = re.search(r"# install and run the tests.*\n(.+&& pytest)\n", readme)
    assert found is not None
    command = found.group(1)
    script = (ROOT / ".ci" / "run").read_text("utf-8")
    assert script.count(f'{command} "$@"') == 1
    assert script.count("readme_tests ") == 1  # called once; the PG 18 pass reuses its venv
    section = readme[readme.index("### Run the tests") :]
    fast_loop = re.search(r'\npytest -n \d+ -m "([^"]+)"\n', section)
    assert fast_loop is not None
    pyproject = (ROOT / "pyproject.toml").read_text("utf-8")
    declared = set(re.findall(r'^    "([a-z]+): ', pyproject, re.M))
    assert set(re.findall(r"[a-z]+", fast_loop.group(1))) - {"not", "and", "or"} <= declared
    assert "-m server" in section
    assert re.search(r"pytest -n 2 -m server --durations=25\n", script)
    assert {"db", "slow", "processes", "server"} <= declared
