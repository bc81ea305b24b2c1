"""Two doors (#30): the users' repository and the worker's store, and the thin old path of the
statements. A worker's function that drifts back into the repository, or SQL written again at
``pgqueue/statements.py``, fails here."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pgqueue
import pgqueue.statements
from pgqueue import repository
from pgqueue._sql import statements
from pgqueue._worker import store

#: The worker's batched statements and its row: in the store, never in the users' repository.
WORKER_NAMES = {
    "complete_many",
    "complete_many_with_results",
    "complete_with_result",
    "declare_periodic",
    "extend_leases",
    "extend_leases_with_progress",
    "fail_many",
    "fire_periodic",
    "refresh_periodic",
    "register_worker",
    "release_many",
    "set_local_lock_timeout",
    "settled_among",
    "snooze_many",
    "unregister_worker",
}


def _functions(module: object) -> set[str]:
    return {
        name
        for name, value in vars(module).items()
        if inspect.isfunction(value) and value.__module__ == getattr(module, "__name__", None)
    }


def test_the_store_holds_the_workers_statements_and_the_repository_none_of_them() -> None:
    assert _functions(store) >= WORKER_NAMES
    assert not _functions(repository) & WORKER_NAMES
    assert not set(repository.__all__) & WORKER_NAMES


def test_the_repository_all_names_every_public_function_and_exists() -> None:
    public = {n for n in _functions(repository) if not n.startswith("_")}
    assert public <= set(repository.__all__)
    assert all(hasattr(repository, name) for name in repository.__all__)


def test_the_old_statements_path_only_imports_and_names() -> None:
    """``pgqueue/statements.py``: imports, ``__all__`` and its docstring, nothing defined."""
    path = Path(pgqueue.statements.__file__)
    tree = ast.parse(path.read_text(encoding="utf-8"))
    kinds = set()
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # the docstring
        targets = node.targets if isinstance(node, ast.Assign) else []
        assert [t.id for t in targets if isinstance(t, ast.Name)] == ["__all__"], ast.dump(node)
        kinds.add("__all__")
    assert kinds == {"__all__"}
    for name in pgqueue.statements.__all__:
        assert getattr(pgqueue.statements, name) is getattr(
            statements, name, None
        ) or name.endswith("REGISTER_WORKER")
    assert set(statements.__all__) <= set(pgqueue.statements.__all__)
