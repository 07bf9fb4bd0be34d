"""The statistics every check of benchmarks/calibrate*.py reports of its measured / predicted
ratios (a step's, a kernel's or a silicon run's): one definition, so the tables and the bands the
package ships are computed alike."""

from __future__ import annotations

import numpy as np


def ratio_stats(ratios) -> dict:
    """cases, the error (MAPE of predicted against measured: mean |1 / ratio - 1|), the median,
    least and greatest ratio, and the 5th-95th percentile band (the bands the package ships)."""
    r = np.asarray(ratios, dtype=float)
    return {"cases": int(len(r)), "mape": float(np.mean(np.abs(1 / r - 1))), "median_ratio": float(np.median(r)),
            "min_ratio": float(r.min()), "max_ratio": float(r.max()),
            "band": [float(np.percentile(r, 5)), float(np.percentile(r, 95))]}


def spread(checks) -> dict:
    """key -> [lowest low, highest high] of the ``band`` each of `checks` (dicts of key -> a
    ratio_stats) gives that key, keys in the order first met: a GPU without measurements of its own
    takes the spread of the checks on GPUs the fit never saw."""
    out = {}
    for check in checks:
        for key, v in check.items():
            lo, hi = out.get(key, (np.inf, -np.inf))
            out[key] = (min(lo, v["band"][0]), max(hi, v["band"][1]))
    return {k: [float(lo), float(hi)] for k, (lo, hi) in out.items()}


#: the columns of ratio_cells
RATIO_COLUMNS = (("cases", True), ("error (MAPE)", True), ("measured / predicted, median [range]", False),
                 ("5-95% band", False))


def ratio_cells(v: dict) -> list[str]:
    """A ratio_stats' cells as the tables print them: cases, error, median [range], 5-95% band."""
    return [str(v["cases"]), f"{100 * v['mape']:.1f}%", f"{v['median_ratio']:.2f} [{v['min_ratio']:.2f}-{v['max_ratio']:.2f}]",
            f"{v['band'][0]:.2f}-{v['band'][1]:.2f}"]


def print_table(title: str, columns, rows):
    """A markdown table after its title: `columns` (header, right-aligned?), `rows` lists of cells."""
    print(f"\n{title}\n")
    print("| " + " | ".join(c for c, _ in columns) + " |")
    print("| " + " | ".join("---:" if right else "---" for _, right in columns) + " |")
    for row in rows:
        print("| " + " | ".join(row) + " |")


def run_arguments(argv, doc: str, extract_help: str):
    """A held-out runs benchmark's options (benchmarks/llmservingsim.py, published_runs.py): --extract
    (rebuild its data from the source's git directory) and --runs (a comma-separated selection)."""
    import argparse

    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--extract", metavar="GIT", help=extract_help)
    ap.add_argument("--runs", help="comma-separated run names (default: all)")
    return ap.parse_args(argv)


def selected_runs(asked: str | None, known: list) -> list | None:
    """The run names --runs asks for, in its order (every one of `known` without it); None, the
    unknown ones named on stderr, when it asks for a run `known` lacks."""
    import sys

    names = asked.split(",") if asked else list(known)
    unknown = [n for n in names if n not in known]
    if unknown:
        print(f"--runs: unknown run {', '.join(unknown)} (known: {', '.join(known)})", file=sys.stderr)
        return None
    return names
