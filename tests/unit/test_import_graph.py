"""The package's layering, stated and kept: no circle, no import up a layer.

The worker was split into components that import each other's types; a circle among them works or
breaks depending on which module is imported first. The graph is read from the source with
:mod:`ast`, counting imports inside functions and ``if TYPE_CHECKING:`` blocks too, so a circle is
caught even where today's import order happens to hide it.

The layers (:data:`LAYERS`) say what stands on what: each module may import its own layer and the
ones below, never one above, and a new module must be given a layer. The longest import chain can
be measured the way #21 counts it (imports that run, ``TYPE_CHECKING`` ones left out:
:func:`counted_graph`, :func:`longest_chain`), but it is not capped (#30): a chain is as long as
the wiring through imports makes it, and no figure is worth a module-global seam.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import pgqueue

PACKAGE_DIR = Path(pgqueue.__file__).parent

#: The only modules allowed to import the worker: the public ``pgqueue.Worker`` and the commands
#: that run one (``pgqueue worker``, ``pgqueue demo``). The components get their types from
#: ``pgqueue.jobs`` and ``pgqueue._worker.window``.
WORKER_IMPORTERS = {"pgqueue", "pgqueue.cli.worker", "pgqueue.demo"}

#: The only modules outside ``pgqueue._worker`` that reach into the worker's machinery: the worker
#: that builds it, ``pgqueue.testing`` (``drain`` runs handlers through its executors, so tests and
#: production agree) and the process supervisor (the stop-signal handlers, shared with a run).
MACHINERY_IMPORTERS = {"pgqueue.worker", "pgqueue.testing", "pgqueue.cli.supervisor"}

#: The worker's loops, each on a thread of its own: they meet in the runtime (or call a callback
#: they were handed) and never import one another; nor do the executors, which
#: ``pgqueue.testing.drain`` shares with no loop running.
WORKER_LOOPS = {
    f"pgqueue._worker.{name}"
    for name in (
        "claimer",
        "completer",
        "event_loop",
        "heartbeat",
        "scheduler",
        "threads",
        "watchdog",
    )
}

#: The only modules inside the package that import the package itself (its ``__init__``, which
#: loads the worker and every public module), each for ``__version__`` alone. Everything else
#: imports what it uses from the module that defines it.
PACKAGE_IMPORTERS = {"pgqueue.cli": "--version", "pgqueue.contrib.otel": "the tracer's version"}

#: Bottom up: a module may import modules of its own layer and of the layers below it, never of a
#: layer above. Names are inside ``pgqueue``: ``name.*`` is that package and everything in it, a
#: plain name that module, ``__init__`` the package itself.
LAYERS: tuple[tuple[str, str], ...] = (
    ("values: the errors, the table, the results", "errors models results storage"),
    ("the ground floor: helpers that know nothing of jobs (imports errors only)", "_base.*"),
    (
        "definitions users build, and their checks",
        "schema periodic retry_policy retention_policy enqueue_options flow",
    ),
    (
        "SQL as data and its two runners, grants and revisions",
        "statements _sql.* admin grants migrations.*",
    ),
    (
        "the runners and services on a connection",
        "repository pooler listener health doctor waiting durable",
    ),
    (
        "the producers' door on the runners: tasks, chains and groups, the async twins, and what"
        " a handler is given",
        "tasks workflows aio jobs hooks",
    ),
    ("the worker's machinery (not the worker, the package, the CLI, the dashboard)", "_worker.*"),
    ("the worker, and the test helpers that run handlers as it does", "worker testing"),
    (
        "the public package and what builds on it",
        "__init__ demo contrib contrib.prometheus contrib.otel contrib.django"
        " contrib.django._bridge contrib.django._compat contrib.django.apps"
        " contrib.django.backend contrib.django.checks contrib.django.runner",
    ),
    (
        "the faces: the command line, the dashboard, and Django's management commands and"
        " mounted dashboard (which run them)",
        "__main__ cli.* web.* contrib.django.dashboard contrib.django.management.*",
    ),
)

#: What the process supervisor and the health server may import: the supervisor never builds an
#: engine or a worker (its children do), and the probes know the worker only as a ``Probe``.
NARROW_MODULES = {
    # and the bound of its processes, checked by the function every bound of the host shares
    "pgqueue.cli.supervisor": {
        "pgqueue.health",
        "pgqueue._worker.signals",
        "pgqueue._base.validation",
    },
    "pgqueue._worker.signals": set(),
    "pgqueue.health": {"pgqueue._base.urls", "pgqueue._base.validation"},
    "pgqueue._worker.pulse": set(),
}

#: Scripts, not libraries: importing them runs them.
SCRIPTS = {
    "pgqueue.__main__": "runs the command line",
    "pgqueue.cli.__main__": "runs the command line",
    "pgqueue.migrations.env": "runs inside an Alembic EnvironmentContext only",
}

#: Optional integrations and the package each needs (every module of pgqueue.web needs Starlette:
#: importing one runs the package's ``__init__`` first).
EXTRAS = {
    "pgqueue.contrib.prometheus": "prometheus_client",
    "pgqueue.contrib.otel": "opentelemetry",
    **{
        module: "django"
        for module in (
            ".".join(p.relative_to(PACKAGE_DIR.parent).with_suffix("").parts).removesuffix(
                ".__init__"
            )
            for p in (PACKAGE_DIR / "contrib" / "django").rglob("*.py")
        )
        if module != "pgqueue.contrib.django"  # its __init__ imports nothing of Django
    },
    **{
        module: "starlette"
        for module in (
            ".".join(p.relative_to(PACKAGE_DIR.parent).with_suffix("").parts).removesuffix(
                ".__init__"
            )
            for p in (PACKAGE_DIR / "web").glob("*.py")
        )
    },
}


# -- the graph -------------------------------------------------------------------------------------


def module_files(package_dir: Path) -> dict[str, Path]:
    """Every module of the package by dotted name (a package's ``__init__`` is the package)."""
    root = package_dir.parent
    found: dict[str, Path] = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def known_names(package_dir: Path, modules: dict[str, Path]) -> set[str]:
    """Modules plus every folder (a namespace package such as ``migrations.versions``)."""
    root = package_dir.parent
    folders = {
        ".".join(p.relative_to(root).parts)
        for p in [package_dir, *package_dir.rglob("*")]
        if p.is_dir() and p.name != "__pycache__"
    }
    return set(modules) | folders


def _is_type_checking(node: ast.AST) -> bool:
    """``if TYPE_CHECKING:`` or ``if typing.TYPE_CHECKING:``."""
    if not isinstance(node, ast.If):
        return False
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, *, type_checking: bool) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement anywhere: top level, functions, ``try``, and ``if TYPE_CHECKING:``
    blocks unless ``type_checking`` is false (then only their ``else`` counts)."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        if not type_checking and _is_type_checking(node):
            assert isinstance(node, ast.If)
            stack.extend(node.orelse)
        else:
            stack.extend(ast.iter_child_nodes(node))


def _deepest_known(name: str, known: set[str]) -> str | None:
    """``import a.b.c`` depends on ``a.b.c``; fall back to the longest prefix that is a module."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in known:
            return candidate
        parts.pop()
    return None


def _targets(
    node: ast.Import | ast.ImportFrom, module: str, is_package: bool, known: set[str]
) -> Iterator[str]:
    """The package's modules one import statement names."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            target = _deepest_known(alias.name, known)
            if target is not None:
                yield target
        return
    if node.level:  # relative: from the module's own package, one level up per extra dot
        package = module.split(".") if is_package else module.split(".")[:-1]
        base_parts = package[: len(package) - (node.level - 1)]
        base = ".".join([*base_parts, *([node.module] if node.module else [])])
    else:
        base = node.module or ""
    for alias in node.names:
        # ``from pgqueue import jobs`` names the module pgqueue.jobs; ``from pgqueue import
        # Worker`` names an attribute of pgqueue itself.
        submodule = f"{base}.{alias.name}"
        target = submodule if submodule in known else _deepest_known(base, known)
        if target is not None:
            yield target


def import_graph(package_dir: Path, *, type_checking: bool = True) -> dict[str, set[str]]:
    """``{module: modules of the same package it imports}`` (self-imports left out).

    ``type_checking=False`` leaves out the imports under ``if TYPE_CHECKING:``, which never run.
    """
    modules = module_files(package_dir)
    known = known_names(package_dir, modules)
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        is_package = path.name == "__init__.py"
        graph[module] = {
            target
            for node in _imports(tree, type_checking=type_checking)
            for target in _targets(node, module, is_package, known)
            if target != module
        }
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle as a path ``[a, b, ..., a]``, or ``None`` (depth-first, deterministic)."""
    done: set[str] = set()
    for start in sorted(graph):
        if start in done:
            continue
        path: list[str] = [start]
        on_path = {start}
        stack = [iter(sorted(graph.get(start, ())))]
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                stack.pop()
                done.add(path[-1])
                on_path.discard(path.pop())
                continue
            if nxt in on_path:
                return [*path[path.index(nxt) :], nxt]
            if nxt in done:
                continue
            path.append(nxt)
            on_path.add(nxt)
            stack.append(iter(sorted(graph.get(nxt, ()))))
    return None


def layer_of(module: str) -> int | None:
    """The index in :data:`LAYERS` of the layer that holds ``module`` (``None``: no layer)."""
    found = []
    for index, (_, members) in enumerate(LAYERS):
        for member in members.split():
            name = "pgqueue" if member == "__init__" else f"pgqueue.{member.removesuffix('.*')}"
            if module == name or (member.endswith(".*") and module.startswith(name + ".")):
                found.append(index)
    assert len(found) <= 1, (module, found)
    return found[0] if found else None


def upward_imports(
    graph: dict[str, set[str]], layer: Callable[[str], int | None]
) -> list[tuple[str, str]]:
    """Every ``(importer, imported)`` where the imported module stands on a higher layer."""
    return sorted(
        (module, target)
        for module, targets in graph.items()
        for target in targets
        if (mine := layer(module)) is not None
        and (theirs := layer(target)) is not None
        and theirs > mine
    )


def longest_chain(graph: dict[str, set[str]]) -> list[str]:
    """The longest path of modules ``a -> b -> ...`` in a graph without circles (#21's depth)."""
    below: dict[str, list[str]] = {}

    def chain_from(module: str) -> list[str]:
        if module not in below:
            below[module] = [module]  # a circle cannot make it longer: find_cycle reports it
            down = [chain_from(t) for t in sorted(graph.get(module, ()))]
            below[module] = [module, *max(down, key=len, default=[])]
        return below[module]

    return max((chain_from(m) for m in sorted(graph)), key=len, default=[])


def counted_graph(package_dir: Path) -> dict[str, set[str]]:
    """The graph as #21 counts it: imports that run (function-level ones too, ``TYPE_CHECKING``
    ones not), the frozen revisions in ``migrations/versions`` left out."""
    versions = f"{package_dir.name}.migrations.versions"
    return {
        module: {t for t in targets if t != versions and not t.startswith(versions + ".")}
        for module, targets in import_graph(package_dir, type_checking=False).items()
        if not module.startswith(versions + ".")
    }


def test_the_package_has_no_import_cycle() -> None:
    """A circle makes some import orders fail with a partly initialised module."""
    graph = import_graph(PACKAGE_DIR)
    assert "pgqueue.worker" in graph
    assert "pgqueue._worker.window" in graph
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_only_the_package_and_its_commands_import_the_worker() -> None:
    """Components depending on the worker would pull it in, and circle back through it."""
    graph = import_graph(PACKAGE_DIR)
    importers = {module for module, targets in graph.items() if "pgqueue.worker" in targets}
    assert importers <= WORKER_IMPORTERS, sorted(importers - WORKER_IMPORTERS)


def test_every_module_has_a_layer_and_imports_none_above_it() -> None:
    """A lower layer that imports a higher one is how circles start: the SQL layer that knows the
    worker, the repository that imports worker code, a component that reaches for the CLI."""
    graph = import_graph(PACKAGE_DIR)
    unplaced = sorted(m for m in graph if layer_of(m) is None)
    assert not unplaced, f"give these modules a layer in LAYERS: {unplaced}"
    upward = [
        f"{module} ({LAYERS[layer_of(module) or 0][0]}) imports {target} "
        f"({LAYERS[layer_of(target) or 0][0]})"
        for module, target in upward_imports(graph, layer_of)
    ]
    assert not upward, "\n".join(upward)


def test_only_the_worker_its_test_helpers_and_the_supervisor_use_its_machinery() -> None:
    """``pgqueue._worker`` is one object's parts: the CLI, the dashboard, the repository and the
    integrations see the worker through :class:`pgqueue.Worker` and :mod:`pgqueue.jobs`."""
    graph = import_graph(PACKAGE_DIR)
    importers = {
        module
        for module, targets in graph.items()
        if not module.startswith("pgqueue._worker")
        and any(t.startswith("pgqueue._worker.") for t in targets)
    }
    assert importers <= MACHINERY_IMPORTERS, sorted(importers - MACHINERY_IMPORTERS)


def test_the_worker_loops_meet_in_the_runtime_not_in_each_others_modules() -> None:
    """A lane that imports the claimer, or the executors that import the completer, tie parts
    together that only share the runtime's lock and window."""
    graph = import_graph(PACKAGE_DIR)
    assert set(graph) >= WORKER_LOOPS
    ties = [
        (module, sorted(graph[module] & WORKER_LOOPS))
        for module in sorted({*WORKER_LOOPS, "pgqueue._worker.executors"})
        if graph[module] & WORKER_LOOPS
    ]
    assert not ties, ties


def test_the_ground_floor_imports_only_errors_and_itself() -> None:
    """Everything may import ``pgqueue._base``, so it may import nothing that imports back."""
    graph = import_graph(PACKAGE_DIR)
    ground = {m: t for m, t in graph.items() if m.startswith("pgqueue._base")}
    assert "pgqueue._base.urls" in ground
    for module, targets in ground.items():
        others = {t for t in targets if t != "pgqueue.errors" and not t.startswith("pgqueue._base")}
        assert not others, (module, sorted(others))


def test_no_module_imports_the_whole_package_but_for_its_version() -> None:
    """``from pgqueue import X`` inside the package runs the whole ``__init__`` (the worker and
    everything public): a module imports ``X`` from the module that defines it."""
    graph = import_graph(PACKAGE_DIR)
    importers = {module for module, targets in graph.items() if "pgqueue" in targets}
    assert importers <= set(PACKAGE_IMPORTERS), sorted(importers - set(PACKAGE_IMPORTERS))


def test_the_supervisor_and_the_probes_stay_narrow() -> None:
    """The supervisor imports no worker, engine or target: a child's crash is not its crash."""
    graph = import_graph(PACKAGE_DIR)
    for module, allowed in NARROW_MODULES.items():
        assert graph[module] <= allowed, (module, sorted(graph[module] - allowed))


# -- the checker itself ----------------------------------------------------------------------------


def write_package(root: Path, files: dict[str, str]) -> Path:
    for name, source in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source), encoding="utf-8")
    return root / "pkg"


def test_the_checker_finds_a_cycle_hidden_in_functions_and_type_checking(tmp_path: Path) -> None:
    """A checker that never fails proves nothing: it must see every kind of import."""
    package = write_package(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from pkg import b\n",
            "pkg/b.py": """\
                from typing import TYPE_CHECKING
                if TYPE_CHECKING:
                    from pkg.c import Thing
                """,
            "pkg/c.py": """\
                def late():
                    from . import a
                """,
        },
    )
    graph = import_graph(package)
    assert graph == {
        "pkg": set(),
        "pkg.a": {"pkg.b"},
        "pkg.b": {"pkg.c"},
        "pkg.c": {"pkg.a"},
    }
    assert find_cycle(graph) == ["pkg.a", "pkg.b", "pkg.c", "pkg.a"]


def test_the_checker_finds_a_cycle_through_a_subpackage_init(tmp_path: Path) -> None:
    """A submodule may import its package, unless the package's ``__init__`` imports it back."""
    files = {
        "pkg/__init__.py": "",
        "pkg/contrib/__init__.py": "",
        "pkg/contrib/x.py": "from pkg.contrib import helper\nfrom .. import util\n",
        "pkg/util.py": "",
    }
    package = write_package(tmp_path, files)
    graph = import_graph(package)
    assert graph["pkg.contrib.x"] == {"pkg.contrib", "pkg.util"}  # helper: an attribute
    assert find_cycle(graph) is None

    (tmp_path / "pkg/contrib/__init__.py").write_text("import pkg.contrib.x\n", encoding="utf-8")
    cycle = find_cycle(import_graph(package))
    assert cycle == ["pkg.contrib", "pkg.contrib.x", "pkg.contrib"]


def test_the_checker_resolves_each_import_form(tmp_path: Path) -> None:
    """Attributes resolve to their module, submodules to themselves, other packages to nothing."""
    package = write_package(
        tmp_path,
        {
            "pkg/__init__.py": "from pkg.a import A\nfrom pkg import sub\nimport os\n",
            "pkg/a.py": "import pkg.sub.deep as d\nfrom pkg import a\nfrom .sub import deep\n",
            "pkg/sub/__init__.py": "from .. import A\nfrom . import deep\n",
            "pkg/sub/deep.py": "from ..a import A\nimport pkg\n",
        },
    )
    assert import_graph(package) == {
        "pkg": {"pkg.a", "pkg.sub"},
        "pkg.a": {"pkg.sub.deep"},  # ``from pkg import a`` in pkg.a is a self-import
        "pkg.sub": {"pkg", "pkg.sub.deep"},
        "pkg.sub.deep": {"pkg.a", "pkg"},
    }


def test_the_counted_graph_leaves_type_checking_imports_and_revisions_out(tmp_path: Path) -> None:
    """The depth counts what runs: a function's import yes, a ``TYPE_CHECKING`` one no, except
    in its ``else``; the frozen revisions are no part of the layering."""
    package = write_package(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": """\
                import typing
                if typing.TYPE_CHECKING:
                    from pkg import b
                else:
                    from pkg import c
                def late():
                    from pkg import d
                """,
            "pkg/b.py": "",
            "pkg/c.py": "",
            "pkg/d.py": "",
            "pkg/migrations/__init__.py": "",
            "pkg/migrations/versions/r1.py": "from pkg import a\n",
        },
    )
    assert import_graph(package)["pkg.a"] == {"pkg.b", "pkg.c", "pkg.d"}
    counted = counted_graph(package)
    assert counted["pkg.a"] == {"pkg.c", "pkg.d"}
    assert "pkg.migrations.versions.r1" not in counted


def test_longest_chain_on_small_graphs() -> None:
    """The chain counts modules, not edges, and takes the longest way through a diamond."""
    assert longest_chain({}) == []
    assert longest_chain({"a": set()}) == ["a"]
    graph = {"a": {"b", "c"}, "b": {"d"}, "c": {"e"}, "e": {"d"}, "d": set()}
    assert longest_chain(graph) == ["a", "c", "e", "d"]


def test_upward_imports_name_each_wrong_way_edge() -> None:
    """A module may import its own layer and the ones below; one edge up is reported."""
    layers = {"low": 0, "low2": 0, "mid": 1, "high": 2}
    graph = {"low": {"low2", "mid"}, "low2": set(), "mid": {"low"}, "high": {"mid", "other"}}
    assert upward_imports(graph, layers.get) == [("low", "mid")]


def test_layers_match_packages_and_exact_names() -> None:
    """``pgqueue._worker.*`` holds the folder and its modules; ``pgqueue`` is the ``__init__``."""
    assert layer_of("pgqueue._worker") == layer_of("pgqueue._worker.claimer")
    assert layer_of("pgqueue") != layer_of("pgqueue.errors")
    assert layer_of("pgqueue.cli") == layer_of("pgqueue.cli.worker")
    assert layer_of("pgqueue.workers") is None  # a prefix is not a package
    assert layer_of("pgqueue._worker") > layer_of("pgqueue.repository")  # type: ignore[operator]


def test_find_cycle_on_small_graphs() -> None:
    """Diamonds are fine; self-loops and long circles are reported with their path."""
    assert find_cycle({"a": {"b", "c"}, "b": {"d"}, "c": {"d"}, "d": set()}) is None
    assert find_cycle({"a": {"a"}}) == ["a", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"d"}, "d": {"b"}}) == ["b", "c", "d", "b"]


# -- every module imports alone --------------------------------------------------------------------


def _importable_modules() -> list[str]:
    return [m for m in sorted(module_files(PACKAGE_DIR)) if m not in SCRIPTS]


#: Imports each module of a package first, in a child forked from one preloaded interpreter.
IMPORT_ALONE = Path(__file__).with_name("import_alone.py")


def preload_names(package_dir: Path) -> list[str]:
    """What the package's modules import from outside it when they run (the standard library
    and third-party libraries): the helper imports these before it forks, never the package."""
    package = package_dir.name
    names: set[str] = set()
    for path in module_files(package_dir).values():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in _imports(tree, type_checking=False):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif node.level == 0 and node.module:
                names.add(node.module)
    return sorted(n for n in names if n != package and not n.startswith(f"{package}."))


def import_each_first(
    package_dir: Path, modules: list[str], *, path: tuple[Path, ...] = ()
) -> dict[str, Any]:
    """``tests/unit/import_alone.py`` on ``modules``: the package's modules that ``import
    package`` loads, the modules checked one by one, and each failure's last line."""
    request = {
        "package": package_dir.name,
        "modules": modules,
        "preload": preload_names(package_dir),
        "path": [str(p) for p in path],
    }
    run = _import_alone(request)
    assert run.returncode == 0, run.stderr
    answer: dict[str, Any] = json.loads(run.stdout)
    return answer


def _import_alone(request: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(IMPORT_ALONE)],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_every_module_imports_alone_in_a_fresh_interpreter() -> None:
    """Import order decides whether a circle bites: each module must work as the first import.

    ``import pgqueue.X`` first runs ``pgqueue/__init__`` in full, so for every module that
    ``import pgqueue`` already loads, the first import is the same run as ``import pgqueue``
    itself; one child checks those, and every other module gets a child of that one, starting
    from where the package's import left it (``tests/unit/import_alone.py``).
    """
    missing_extras = [m for m, dep in EXTRAS.items() if importlib.util.find_spec(dep) is None]
    modules = [m for m in _importable_modules() if m not in missing_extras]
    answer = import_each_first(PACKAGE_DIR, modules)
    loaded_by_package = set(answer["loaded_by_package"])
    assert "pgqueue.worker" in loaded_by_package
    assert not answer["failures"], answer["failures"]
    covered = loaded_by_package | set(answer["checked"])
    assert covered >= set(_importable_modules()) - set(missing_extras)
    if missing_extras:
        pytest.skip(f"optional packages missing, not imported: {missing_extras}")


def test_the_helper_catches_a_circle_that_bites_in_one_import_order(tmp_path: Path) -> None:
    """``pkg.b`` imports fine first (it completes ``pkg.a`` on the way), ``pkg.a`` does not: its
    circle through ``pkg.b`` finds it half run. A check that imported both in one interpreter,
    ``pkg.b`` first, would pass; each first in a child of its own, ``pkg.a`` fails."""
    package = write_package(
        tmp_path,
        {
            "pkg/__init__.py": "from pkg import fine\n",
            "pkg/fine.py": "import json\n",
            "pkg/a.py": "import pkg.b\n\nX = 1\n",
            "pkg/b.py": "from pkg.a import X\n",
        },
    )
    answer = import_each_first(package, ["pkg", "pkg.a", "pkg.b", "pkg.fine"], path=(tmp_path,))
    assert answer["loaded_by_package"] == ["pkg", "pkg.fine"]
    assert answer["checked"] == ["pkg.a", "pkg.b"]
    assert answer["failures"] == {
        "pkg.a": "ImportError: cannot import name 'X' from partially initialized module 'pkg.a' "
        f"(most likely due to a circular import) ({package / 'a.py'})"
    }


def test_the_helper_refuses_to_preload_the_package_itself(tmp_path: Path) -> None:
    """A preloaded module of the package would already be there when each child starts."""
    write_package(tmp_path, {"pkg/__init__.py": "", "pkg/fine.py": "import json\n"})
    request = {
        "package": "pkg",
        "modules": ["pkg"],
        "preload": ["pkg.fine"],
        "path": [str(tmp_path)],
    }
    run = _import_alone(request)
    assert run.returncode == 2
    assert "preloading imported the package itself: ['pkg', 'pkg.fine']" in run.stderr
    assert run.stdout == ""


def test_the_preloaded_libraries_are_pgqueues_dependencies_and_never_pgqueue() -> None:
    names = preload_names(PACKAGE_DIR)
    assert {"sqlalchemy", "psycopg", "alembic", "starlette"} <= {n.split(".")[0] for n in names}
    assert not [n for n in names if n.split(".")[0] == "pgqueue"]


def test_nothing_outside_the_dashboard_imports_it() -> None:
    """The core must import without the web extra: only pgqueue.web's own modules (and the
    ``pgqueue web`` command and the Django app's mounted dashboard, lazily) may import
    pgqueue.web."""
    graph = import_graph(PACKAGE_DIR)
    importers = {
        module
        for module, targets in graph.items()
        if any(t == "pgqueue.web" or t.startswith("pgqueue.web.") for t in targets)
        and not module.startswith("pgqueue.web")
    }
    assert importers == {"pgqueue.cli.web", "pgqueue.contrib.django.dashboard"}
    assert all(not t.startswith("pgqueue.web") for t in graph["pgqueue"])
