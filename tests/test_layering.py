"""Imports follow the data flow, one way: a module imports only its own layer or the layers below,
and no two modules import each other, directly or around a loop. Imports inside functions count
(a function-local import only hides a cycle, it does not remove it)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "kvreplay"

# Lowest first. A module of one layer may import any module of the same or an earlier layer.
LAYERS = (
    ("errors", "version"),
    ("native", "files", "plugins", "data", "tables", "units", "progress", "checks"),
    ("catalog",),
    ("trace",),
    ("hybrid",),
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


# ---- the C sources, checked the same way ----------------------------------------------------------
#
# A C module is a file's path without its suffix: a header and the .c of the same name are one
# module (engine/driver.h and driver.c). It depends on what it #includes and on the files that
# define the functions it calls (a call to a function a file defines `static` stays in that file).
# include/ holds the headers every layer shares: the lowest layer, with native.c. Cycles are checked
# between files and between directories (serving/kernel and serving/routing).

C_KEYWORDS = {"if", "for", "while", "switch", "return", "sizeof", "defined", "do", "else", "_Static_assert",
              "__attribute__", "__builtin_expect", "offsetof"}


def c_module(path: Path, root: Path = SRC) -> str:
    return path.relative_to(root).with_suffix("").as_posix()


def c_layer(module: str) -> str:
    """include/kv -> "native" (the shared headers); serving/kernel/loop -> "serving"; native -> "native"."""
    top = module.split("/")[0]
    return "native" if top in ("include", "native") else top


def c_parse(path: Path) -> tuple[list[str], set[str], set[str], set[str]]:
    """(the files it #includes, as written; the functions it defines for other files; those it
    defines static; the names it calls)."""
    raw = path.read_text()
    includes = re.findall(r'^\s*#\s*include\s+"([^"]+)"', raw, re.M)
    text = re.sub(r"/\*.*?\*/", " ", raw, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    text = re.sub(r'"(\\.|[^"\\\n])*"', '""', text)
    text = re.sub(r"'(\\.|[^'\\\n])*'", "''", text)
    text = "\n".join("" if line.lstrip().startswith("#") else line for line in text.splitlines())
    tokens = re.findall(r"[A-Za-z_]\w*|[{}();]", text)
    exported, private, calls, statement, depth = set(), set(), set(), [], 0
    for k, token in enumerate(tokens):
        if token == "{":
            # at file level, `name ( ... ) {` defines name
            if depth == 0 and "(" in statement and statement[-1] == ")" and statement.index("(") > 0:
                name = statement[statement.index("(") - 1]
                if name not in C_KEYWORDS:
                    (private if "static" in statement[:statement.index("(")] else exported).add(name)
            depth += 1
            statement = []
        elif token in ("}", ";"):
            depth -= token == "}"
            statement = []
        else:
            statement.append(token)
            if depth and token == "(" and k and tokens[k - 1] not in C_KEYWORDS and tokens[k - 1][0].isalpha():
                calls.add(tokens[k - 1])
    return includes, exported, private, calls


def c_graph(root: Path = SRC) -> dict[str, set[str]]:
    """module -> the modules it includes or calls."""
    paths = sorted([*root.rglob("*.c"), *root.rglob("*.h")])
    parsed = {p: c_parse(p) for p in paths}
    definer = {name: c_module(p, root) for p, (_, exported, _, _) in parsed.items() for name in exported}
    edges: dict[str, set[str]] = {}
    for p, (includes, _, private, calls) in parsed.items():
        me = c_module(p, root)
        found = edges.setdefault(me, set())
        found.update(c_module((p.parent / inc).resolve(), root.resolve()) for inc in includes)
        found.update(definer[name] for name in calls - private if name in definer)
        found.discard(me)
    return edges


def test_every_c_file_has_a_layer():
    assert {c_layer(m) for m in c_graph()} <= set(RANK)


def test_the_c_graph_sees_the_kernel():
    # (a check of the check: the loop includes sim.h and calls the schedulers, a scheduler the queues)
    edges = c_graph()
    assert {"serving/kernel/sim", "serving/kernel/vllm", "serving/kernel/batch"} <= edges["serving/kernel/loop"]
    assert "serving/kernel/queues" in edges["serving/kernel/vllm"]
    assert "include/policy" in edges["policies/lru"]


def test_no_upward_c_dependencies():
    upward = sorted(f"{a} -> {b}" for a, targets in c_graph().items() for b in targets
                    if RANK[c_layer(b)] > RANK[c_layer(a)])
    assert upward == []


def test_no_c_cycles():
    assert cycles(c_graph()) == []


def test_no_c_cycles_between_directories():
    # serving/kernel calls routers only through their table (kernel/route.h, as the driver calls a
    # policy's KvPolicy); the routers read the kernel's state. (What the check does not read: data
    # references, such as the kernel's lookup of the routers' table kv_routers, routing/registry.c.)
    edges: dict[str, set[str]] = {}
    for a, targets in c_graph().items():
        edges.setdefault(a.rpartition("/")[0], set()).update(b.rpartition("/")[0] for b in targets)
    for a, targets in edges.items():
        targets.discard(a)
    assert "serving/kernel" in edges["serving/routing"]
    assert cycles(edges) == []


def test_the_c_check_reads_calls_and_includes(tmp_path):
    (tmp_path / "include").mkdir()
    (tmp_path / "serving").mkdir()
    (tmp_path / "include" / "kv.h").write_text("/* a(); */\nint shared(int x);\n")
    (tmp_path / "serving" / "a.c").write_text(
        '#include "../include/kv.h"\nstatic int helper(int x) { return x; }\n'
        'int a_call(int x) {\n    if (x) return b_call(x);\n    return helper(shared(x));\n}\n')
    (tmp_path / "serving" / "b.c").write_text(
        'static int helper(int x) { return -x; }\nint b_call(int x) { return a_call(helper(x)); }\n')
    (tmp_path / "include" / "kv.c").write_text("int shared(int x) { return x; }\n")
    edges = c_graph(tmp_path)
    assert edges["serving/a"] == {"include/kv", "serving/b"}
    assert edges["serving/b"] == {"serving/a"}  # (its own static helper, not a.c's)
    assert cycles(edges) == [["serving/a", "serving/b"]]


# ---- the hybrid engines: the kernel drives them through their table only --------------------------
#
# vLLM's hybrid KV cache coordinator and SGLang's UnifiedRadixCache live in hybrid/ and fill one
# table (hybrid/engine.h HybridEngine); the serving kernel calls them through it, as it calls a
# policy through its KvPolicy. No serving file calls a function an engine defines (its internals:
# hy_*, rh_*) nor includes an engine's own header.

ENGINE_PREFIXES = ("hy_", "rh_")


def engine_internal_calls(root: Path = SRC) -> list[str]:
    """Every call from a serving/ file to a function an engine file (hybrid/) defines, or named with
    an engine's internal prefix, and every include of an engine header other than its table."""
    parsed = {p: c_parse(p) for p in sorted([*root.rglob("*.c"), *root.rglob("*.h")])}
    internal = {name for p, (_, exported, _, _) in parsed.items() if c_module(p, root).startswith("hybrid/")
                for name in exported}
    found = []
    for p, (includes, _, private, calls) in parsed.items():
        me = c_module(p, root)
        if not me.startswith("serving/"):
            continue
        found += [f"{me} calls {name}" for name in sorted(calls - private)
                  if name in internal or name.startswith(ENGINE_PREFIXES)]
        found += [f"{me} includes {inc}" for inc in includes
                  if "hybrid/" in inc and not inc.endswith("hybrid/engine.h")
                  or inc.endswith(("policies/hybrid.h", "policies/radix_hybrid.h"))]
    return found


def test_the_kernel_calls_no_engine_internals():
    assert engine_internal_calls() == []


def test_the_engine_check_finds_direct_calls(tmp_path):
    # (a check of the check: the kernel as it was, calling vLLM's pool and SGLang's tree directly)
    for d in ("hybrid", "serving/kernel"):
        (tmp_path / d).mkdir(parents=True)
    (tmp_path / "hybrid" / "unified_radix.c").write_text("int rh_begin(int x) { return x; }\nint tree_helper(int x) { return x; }\n")
    (tmp_path / "serving" / "kernel" / "sglang_hybrid.c").write_text(
        '#include "../../hybrid/unified_radix.h"\n#include "../../hybrid/engine.h"\n'
        "int sgh_begin(int x) { return rh_begin(x) + tree_helper(x); }\n"
        "int sgh_touch(int x) { return table->touch(x); }\n")
    (tmp_path / "serving" / "kernel" / "hybrid.c").write_text('#include "../../policies/hybrid.h"\nint hyb_admit(int x) { return hy_start(x); }\n')
    assert engine_internal_calls(tmp_path) == [
        "serving/kernel/hybrid calls hy_start", "serving/kernel/hybrid includes ../../policies/hybrid.h",
        "serving/kernel/sglang_hybrid calls rh_begin", "serving/kernel/sglang_hybrid calls tree_helper",
        "serving/kernel/sglang_hybrid includes ../../hybrid/unified_radix.h"]
