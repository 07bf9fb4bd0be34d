"""Imports follow the data flow, one way: a module imports only its own layer or the layers below,
and no two modules import each other, directly or around a loop. Imports inside functions count
(a function-local import only hides a cycle, it does not remove it)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "kvreplay"

# Lowest first. A module of one layer may import any module of the same or an earlier layer.
LAYERS = (
    ("errors", "version"),
    ("native", "files", "plugins", "data", "tables", "units", "progress", "checks"),
    ("catalog",),
    ("trace",),
    ("policies",),
    ("engine",),
    ("analysis",),
    ("serving",),
    ("output",),
    ("__init__",),  # the public API: kvreplay/__init__.py
    ("cli",),
)
RANK = {name: i for i, layer in enumerate(LAYERS) for name in layer}


def module_name(path: Path, root: Path = SRC.parent) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, modules: set[str], root: Path = SRC.parent) -> set[str]:
    """Every kvreplay module `path` imports, anywhere in the file."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                full = f"{target}.{alias.name}"
                found.add(full if full in modules else target)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {m for m in found if m in modules and m != name}


def layer_of(module: str) -> str:
    """kvreplay -> "__init__"; kvreplay.trace.model -> "trace"; kvreplay.cli -> "cli"."""
    parts = module.split(".")
    return "__init__" if len(parts) == 1 else parts[1]


def graph() -> dict[str, set[str]]:
    paths = sorted(SRC.rglob("*.py"))
    modules = {module_name(p) for p in paths}
    return {module_name(p): imports_of(p, modules) for p in paths}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
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
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_every_module_has_a_layer():
    assert {layer_of(m) for m in graph()} <= set(RANK)


def test_no_upward_imports():
    upward = sorted(f"{a} imports {b}" for a, targets in graph().items() for b in targets
                    if RANK[layer_of(b)] > RANK[layer_of(a)])
    assert upward == []


def test_no_import_cycles():
    assert cycles(graph()) == []


@pytest.mark.parametrize("edges, expected", [
    ({"a": {"b"}, "b": {"a"}, "c": set()}, [["a", "b"]]),
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, [["a", "b", "c"]]),
    ({"a": {"b"}, "b": set()}, []),
])
def test_the_cycle_check_finds_cycles(edges, expected):
    assert cycles(edges) == expected


def test_function_local_imports_count(tmp_path):
    # An import inside a function is still an import: mrc -> sweep -> executors -> mrc was a
    # cycle hidden that way.
    path = tmp_path / "kvreplay" / "analysis" / "mrc.py"
    path.parent.mkdir(parents=True)
    path.write_text("def curve():\n    from .sweep import auto_capacities\n    return auto_capacities\n")
    modules = {"kvreplay.analysis.mrc", "kvreplay.analysis.sweep", "kvreplay.analysis.stats"}
    assert imports_of(path, modules, root=tmp_path) == {"kvreplay.analysis.sweep"}
