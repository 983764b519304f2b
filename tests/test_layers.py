"""The import structure of the project (docs/architecture.md, "Layers"): core -> builders -> evaluator
-> pipelines -> scripts, a layer importing only from itself and the layers before it, and no circle
between modules. Every import counts, those inside functions included (they hide a dependency, they
do not remove it); the imports are read from the source with `ast`, nothing is imported."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("core", "builders", "data_cards", "evaluator", "pipelines", "scripts")
RANK = {"core": 0, "builders": 1, "data_cards": 1, "evaluator": 2, "pipelines": 3, "scripts": 4}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for layer in LAYERS for p in sorted((ROOT / layer).rglob("*.py"))}


def _imports(path: Path, name: str, known: set[str]) -> set[str]:
    """The project modules a file imports (`from a.b import c` counts as a.b.c when that is a module)."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([base] if base else []))
            targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {name: _imports(path, name, known) for name, path in modules.items()}


def _layer(module: str) -> str:
    return module.split(".")[0]


def test_no_layer_imports_a_layer_above_it():
    upward = sorted(f"{m} -> {t}" for m, targets in _graph().items() for t in targets
                    if RANK[_layer(t)] > RANK[_layer(m)])
    assert upward == []


def test_core_imports_nothing_of_the_project_but_itself():
    assert sorted(f"{m} -> {t}" for m, ts in _graph().items() if _layer(m) == "core" for t in ts
                  if _layer(t) != "core") == []


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan): each is a circle of imports."""
    import sys

    index, low, stack, on_stack, circles, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10_000))
    try:
        for v in sorted(graph):
            if v not in index:
                visit(v)
    finally:
        sys.setrecursionlimit(limit)
    return circles


def test_no_circle_between_modules():
    """Package __init__ modules that only re-export are modules like any other here: a circle through
    one is a circle."""
    assert _circles(_graph()) == []


def _by_folder(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The graph of evaluator/ read by folders: each package (evaluator/stress/, evaluator/models/...) is one node,
    each module at evaluator/'s top level another; an import between two modules is an edge between their nodes."""
    def node(module: str) -> str | None:
        parts = module.split(".")
        return ".".join(parts[:2]) if parts[0] == "evaluator" and len(parts) > 1 else None

    folders: dict[str, set[str]] = {}
    for module, targets in graph.items():
        if (source := node(module)) is not None:
            folders.setdefault(source, set()).update(t for t in map(node, targets) if t not in (None, source))
    return folders


def test_no_circle_between_evaluator_packages():
    """Read by folders, evaluator/ has floors: a package that imports another is above it, so no package imports
    back from one above it, through any module of either. A module-by-module reading misses such a climb when it
    goes through a package's `__init__` (a constant read from evaluator/stress/ by a module evaluator/stress/run.py
    imports)."""
    assert _circles(_by_folder(_graph())) == []


def test_a_climbing_import_between_evaluator_packages_is_found():
    """The check above fails on the kind of import it exists for, planted: evaluator/splits.py reading the stress
    test's config name from evaluator/stress/ (which imports splits.py), as it once did; the module-by-module
    check does not see it."""
    graph = {module: set(targets) for module, targets in _graph().items()}
    graph["evaluator.splits"].add("evaluator.stress")
    assert _circles(graph) == []
    assert any({"evaluator.splits", "evaluator.stress"} <= set(circle) for circle in _circles(_by_folder(graph)))


# Inside evaluator/: engines below, commands above. A command module implements a vlbench command; an engine
# (everything else: the tasks, models, statistics, reports, the split helpers) never imports one, so that
# a command can be moved, split or dropped without touching what it runs on. The suite is a command made
# of commands.
COMMANDS = ("evaluator.run", "evaluator.compare", "evaluator.leaderboard", "evaluator.perceptual.run",
            "evaluator.shortcuts.run", "evaluator.stress.run", "evaluator.vl_bias.run", "evaluator.harness.export",
            "evaluator.suite")


def _is_command(module: str) -> bool:
    return any(module == c or module.startswith(c + ".") for c in COMMANDS)


def test_no_engine_of_evaluator_imports_a_command():
    graph = _graph()
    assert all(c in graph for c in COMMANDS), sorted(c for c in COMMANDS if c not in graph)
    upward = sorted(f"{m} -> {t}" for m, targets in graph.items() if _layer(m) == "evaluator" and not _is_command(m)
                    for t in targets if _is_command(t))
    assert upward == []


def _named_modules(path: Path, known: set[str]) -> set[str]:
    """The project modules a file's code names in a string (an "a.b:attribute" reference imported by name):
    a dependency `importlib` would hide from the import graph. Docstrings describe, they load nothing."""
    import re

    tree = ast.parse(path.read_text(), str(path))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            for dotted in re.findall(r"\b[a-z_]+(?:\.[a-z_][a-z0-9_]*)+", node.value):
                while dotted and dotted not in known:
                    dotted = dotted.rpartition(".")[0]
                if "." in dotted or dotted in LAYERS:
                    found.add(dotted)
    return found


def test_no_layer_names_a_layer_above_it_in_a_string():
    """builders/ never names evaluator/ (the registry's task half lives in evaluator/tasks.py), nor any layer
    one above it, even as a string to import later."""
    modules = _modules()
    known = set(modules)
    upward = sorted(f"{m} -> {t}" for m, path in modules.items() for t in _named_modules(path, known)
                    if RANK[_layer(t)] > RANK[_layer(m)])
    assert upward == []
