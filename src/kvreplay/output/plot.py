"""Pictures with matplotlib: hit rate vs capacity, hit rate over time, per-request spread.

Figures are built with matplotlib's object API (no pyplot, so no global state and no display
needed) and written atomically; the HTML report embeds the same figures as inline SVG.
"""

from __future__ import annotations

import io
import os

from ..errors import ConfigError

FORMATS = {".png": "png", ".svg": "svg", ".pdf": "pdf"}
GIB = 2 ** 30


def _figure(width: float = 7.5, height: float = 4.2):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    return fig, fig.add_subplot()


def _finish(fig, ax, title: str, legend: bool, which: str = "major"):
    ax.grid(True, which=which, alpha=0.3)
    if title:
        ax.set_title(title, fontsize=10)
    if legend:
        ax.legend(fontsize=8)
    return fig


def _label(row: dict) -> str:
    params = row.get("params") or {}
    if isinstance(params, dict):
        params = ", ".join(f"{k}={v}" for k, v in params.items())
    name = row["policy"] + (f" ({params})" if params else "")
    return f"{row['trace']}: {name}" if row.get("trace") else name


def curves_figure(results: list[dict], *, title: str = "", bytes_per_block: int | None = None, capacity_note: str = ""):
    """Hit rate vs capacity: one line per policy (and parameter set, and trace), log x axis.

    Rows with policy ``infinite`` become a horizontal line (the ceiling any cache of any
    size reaches on this trace); ``belady`` (offline MIN) is drawn dashed. With
    `bytes_per_block`, the x axis is the KV memory in GiB instead of blocks.
    """
    fig, ax = _figure()
    lines: dict[str, list[tuple[float, float]]] = {}
    ceilings: dict[str, float] = {}
    for row in results:
        if row["policy"] == "infinite":
            ceilings[row.get("trace") or ""] = row["hit_rate"]
            continue
        x = row["cache_capacity_blocks"] * (bytes_per_block / GIB if bytes_per_block else 1)
        lines.setdefault(_label(row), []).append((x, 100 * row["hit_rate"]))
    for label, points in lines.items():
        points.sort()
        style = "--" if label.split(": ")[-1].startswith("belady") else "-"
        ax.plot([p[0] for p in points], [p[1] for p in points], style, marker="o", markersize=3, label=label)
    for trace, rate in ceilings.items():
        ax.axhline(100 * rate, color="0.35", linestyle=":", label=f"{trace + ': ' if trace else ''}infinite cache ({100 * rate:.1f}%)")
    ax.set_xscale("log")
    unit = "KV cache (GiB)" if bytes_per_block else "cache capacity (blocks)"
    ax.set_xlabel(unit + (f", {capacity_note}" if capacity_note else ""))
    ax.set_ylabel("hit rate (% of prompt tokens)")
    ax.set_ylim(bottom=0)
    return _finish(fig, ax, title, legend=bool(lines or ceilings), which="both")


def over_time_figure(series: dict[str, list[dict]], *, title: str = "", x: str = "requests"):
    """Token-weighted hit rate per window (from analysis.metrics.over_time), one line per label."""
    fig, ax = _figure(7.5, 3.4)
    for label, windows in series.items():
        if x == "requests":
            xs = [w["last_request"] for w in windows]
        else:
            xs = [w["end_s"] for w in windows]
        ax.plot(xs, [100 * w["hit_rate"] for w in windows], label=label, linewidth=1.2)
    ax.set_xlabel("request number (end of window)" if x == "requests" else "trace time (s, end of window)")
    ax.set_ylabel("hit rate (%)")
    ax.set_ylim(bottom=0)
    return _finish(fig, ax, title, legend=bool(series))


def request_histogram_figure(rates: dict, *, title: str = ""):
    """Distribution of per-request hit rates (each request counts once), one outline per label."""
    import numpy as np

    fig, ax = _figure(7.5, 3.4)
    bins = np.linspace(0, 100, 21)
    for label, values in rates.items():
        ax.hist(100 * np.asarray(values), bins=bins, histtype="step", linewidth=1.4, label=label)
    ax.set_xlabel("hit rate of one request (% of its prompt tokens)")
    ax.set_ylabel("requests")
    return _finish(fig, ax, title, legend=bool(rates))


def figure_bytes(fig, fmt: str) -> bytes:
    buf = io.BytesIO()
    kwargs = {"metadata": {"Date": None}} if fmt == "svg" else {}  # no timestamp inside the file
    fig.savefig(buf, format=fmt, dpi=120, **kwargs)
    return buf.getvalue()


def save_figure(fig, path: str) -> None:
    """Write the figure to `path` (format from the extension), atomically."""
    from ..files import write_atomic

    fmt = FORMATS.get(os.path.splitext(path)[1].lower())
    if fmt is None:
        raise ConfigError(f"--plot {path}: the name must end in {', '.join(FORMATS)}")
    write_atomic(path, figure_bytes(fig, fmt))


def check_plot_path(path: str | None) -> None:
    """Fail before a long run, not after it."""
    if path and os.path.splitext(path)[1].lower() not in FORMATS:
        raise ConfigError(f"--plot {path}: the name must end in {', '.join(FORMATS)}")
