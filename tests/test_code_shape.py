"""No function grows past a screen or a long parameter list unnoticed: every function in
src/kvreplay over MAX_LINES lines or with more than MAX_PARAMS parameters (``self``/``cls`` not
counted; ``*args`` and ``**kwargs`` count one each) must be in ALLOWED with its reason, and every
entry of ALLOWED must still need to be there (so the list cannot rot)."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "kvreplay"
MAX_LINES = 80
MAX_PARAMS = 10

PUBLIC = "a public keyword API that only builds its options"

# "path/in/kvreplay.py:Qualified.name": its reason
ALLOWED = {
    "analysis/overview.py:collect": PUBLIC + " (report_html passes its keywords; the core is collect_with)",
    "analysis/sweep.py:sweep": PUBLIC + " (SweepGrid, Execution; the core is sweep_grid)",
    "engine/replay.py:replay": PUBLIC + " (ReplayOptions; the core is replay_with)",
    "trace/synth.py:synth": PUBLIC + " (Knobs; the core is synth_from)",
    "serving/simulate.py:simulate": PUBLIC + " (SimConfig.from_keywords; the core is serve; 83 of its lines "
                                             "are the keywords' documentation)",
}


def parameters(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    a = node.args
    names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
    if names and names[0] in ("self", "cls"):
        names = names[1:]
    return len(names) + (a.vararg is not None) + (a.kwarg is not None)


def functions(tree: ast.AST, prefix: str = ""):
    """(qualified name, node) of every function, nested ones named through their parents."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            name = f"{prefix}{node.name}"
            if not isinstance(node, ast.ClassDef):
                yield name, node
            yield from functions(node, f"{name}.")
        else:
            yield from functions(node, prefix)


def offenders(root: Path = SRC) -> dict[str, tuple[int, int]]:
    """{"path:name": (lines, parameters)} of every function over either limit."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        for name, node in functions(ast.parse(path.read_text(), str(path))):
            lines, params = node.end_lineno - node.lineno + 1, parameters(node)
            if lines > MAX_LINES or params > MAX_PARAMS:
                found[f"{path.relative_to(root).as_posix()}:{name}"] = (lines, params)
    return found


def test_the_walk_counts_lines_and_parameters(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES))
    (tmp_path / "m.py").write_text(
        f"def long():\n{body}\n\n"
        "def short(a, b):\n    return a\n\n"
        "class C:\n    def many(self, a, b, c, d, e, f, g, h, i, j, *k, **w):\n        pass\n"
        "    def ten(self, a, b, c, d, e, f, g, h, i, j):\n        pass\n")
    assert offenders(tmp_path) == {"m.py:long": (MAX_LINES + 1, 0), "m.py:C.many": (2, 12)}


def test_no_new_long_function():
    new = {k: v for k, v in offenders().items() if k not in ALLOWED}
    assert not new, ("functions over %d lines or %d parameters (lines, parameters): split them at a real seam, "
                     "or allow them with a reason: %s" % (MAX_LINES, MAX_PARAMS, new))


def test_allowed_entries_still_needed():
    stale = sorted(set(ALLOWED) - set(offenders()))
    assert not stale, f"no longer over a limit (or gone): drop them from ALLOWED: {stale}"
