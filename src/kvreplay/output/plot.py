"""Pictures with matplotlib: hit rate vs capacity, hit rate over time, per-request spread.

Figures are built with matplotlib's object API (no pyplot, so no global state and no display
needed) and written atomically; the HTML report embeds the same figures as inline SVG.

Readability rules every figure follows:

- Each series has its own colour *and* its own marker (`series_style`): `PALETTE` holds 20
  colours at least 23 CIELAB units apart (27 among the first 14; 10 is plainly visible),
  so a dozen policies never share a colour, and the markers tell series apart in grey print.
  Series i gets the same style in every figure, so a policy looks the same on every chart of
  the report. Bounds (belady) are dashed; the infinite-cache ceiling is a grey dotted line.
- The legend sits outside the axes (right of them), never over the data.
- A log capacity axis is labelled with plain numbers: 16, 32, 64 GiB (powers of two) or
  100, 1,000, 10,000 blocks, never 2x10^1.
- When the policies' points crowd the bottom of the plot under a high ceiling (every policy
  below a quarter of the top at two or more capacities), `curves_figure` adds a second panel
  that zooms on that band (``zoom="auto"``; ``zoom=(lo, hi)`` in percent to choose the band,
  ``zoom=False`` for none); the zoomed band is shaded on the main panel.
- The per-request histogram draws one small panel per series (shared axes) instead of
  overlapping outlines.
"""

from __future__ import annotations

import io
import math
import os
import textwrap

from ..errors import ConfigError

FORMATS = {".png": "png", ".svg": "svg", ".pdf": "pdf"}
GIB = 2 ** 30

# matplotlib's tab10 without its grey (the ceiling line is grey), then black, then colours from
# tab20b, Dark2, Set1 and Accent picked greedily for the largest CIELAB distance to those before.
PALETTE = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#000000",
    "#637939", "#f0027f", "#a6761d", "#1b9e77", "#fc8d62", "#e7969c", "#393b79", "#9c9ede", "#7b4173", "#bf5b17",
)
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "h", "*", "p", "d")
# After 20 series the colours come round again with another line style: (colour, marker, line
# style) stays unique for the first 260 series.
LINESTYLES = ("-", (0, (5, 1.5, 1, 1.5)), (0, (1, 1.2)))
CEILING_COLOR = "0.35"
LEGEND_WRAP = 34  # characters per legend line


def series_style(i: int, *, bound: bool = False) -> dict:
    """Colour, marker and line style of the i-th series (0-based); `bound` series are dashed."""
    return {"color": PALETTE[i % len(PALETTE)], "marker": MARKERS[i % len(MARKERS)],
            "linestyle": "--" if bound else LINESTYLES[(i // len(PALETTE)) % len(LINESTYLES)]}


def _figure(width: float = 7.5, height: float = 4.2):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    return fig, fig.add_subplot()


def _legend(fig, axes) -> None:
    """One legend for the figure, outside the axes on the right (never over a line)."""
    handles, labels, seen = [], [], set()
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            if label not in seen:
                seen.add(label)
                handles.append(handle)
                labels.append(label)
    if handles:
        fig.legend(handles, [textwrap.fill(label, LEGEND_WRAP, subsequent_indent="  ") for label in labels],
                   loc="outside right upper", fontsize=8, frameon=False)


def _finish(fig, ax, title: str, legend: bool, which: str = "major"):
    ax.grid(True, which=which, alpha=0.3)
    if title:
        fig.suptitle(title, fontsize=10)
    if legend:
        _legend(fig, fig.axes)
    return fig


def _label(row: dict, with_trace: bool | None = None) -> str:
    """A row's series name: policy (parameters), prefixed with its trace's file name when
    `with_trace` (default: whenever the row names a trace; `curve_labels` decides for a set)."""
    params = row.get("params") or {}
    if isinstance(params, dict):
        params = ", ".join(f"{k}={v}" for k, v in params.items())
    else:
        params = str(params).replace(";", ", ")
    name = row["policy"] + (f" ({params})" if params else "")
    trace = row.get("trace")
    if with_trace is None:
        with_trace = bool(trace)
    return f"{os.path.basename(str(trace).rstrip(os.sep)) or trace}: {name}" if with_trace and trace else name


def curve_labels(results: list[dict]) -> list[str]:
    """Series names of `results`, row by row: the trace is named only when the rows come from
    more than one trace (a single trace's name belongs in the title, not on every line)."""
    several = len({r.get("trace") for r in results if r.get("trace")}) > 1
    return [_label(r, several) for r in results]


def _plain(value: float) -> str:
    """A tick label without exponents: 16, 0.5, 0.125, 1,000."""
    if value >= 1:
        return f"{value:,.0f}" if abs(value - round(value)) < 1e-9 * value else f"{value:,.3g}"
    return f"{value:.4g}"


def capacity_ticks(lo: float, hi: float, *, gib: bool, most: int = 9) -> list[float]:
    """Tick positions for a log capacity axis spanning [lo, hi]: powers of two for GiB
    (0.5, 1, 2, 4, ... 64), 1-2-5 steps or powers of ten for blocks; thinned to at most `most`
    (every 2nd, 4th, ... power, so the steps stay even); at least two ticks (the ends when no
    round number falls inside)."""
    if not (lo > 0 and hi >= lo and math.isfinite(hi)):
        return []
    eps = 1e-9
    if gib:
        powers = [2.0 ** k for k in range(math.floor(math.log2(lo) - eps), math.ceil(math.log2(hi) + eps) + 1)]
        ticks = [t for t in powers if lo * (1 - eps) <= t <= hi * (1 + eps)]
    else:
        decades = range(math.floor(math.log10(lo) - eps), math.ceil(math.log10(hi) + eps) + 1)
        ticks = [m * 10.0 ** k for k in decades for m in (1, 2, 5) if lo * (1 - eps) <= m * 10.0 ** k <= hi * (1 + eps)]
        if len(ticks) > most:
            ticks = [t for t in ticks if round(t / 10 ** math.floor(math.log10(t) + eps)) == 1]
    if len(ticks) > most:
        step = math.ceil(len(ticks) / most)
        ticks = ticks[::step]
    if len(ticks) < 2:
        ticks = sorted({lo, hi, *ticks})
    return ticks


def _capacity_axis(ax, xs: list[float], *, gib: bool) -> None:
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    ax.set_xscale("log")
    if not xs:
        return
    ticks = capacity_ticks(min(xs), max(xs), gib=gib)
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: _plain(v)))
    ax.xaxis.set_minor_formatter(NullFormatter())


def zoom_band(series: dict[str, list[tuple[float, float]]], top: float, bounds: set[str] = frozenset()):
    """The low band worth a zoom panel, as (x_lo, x_hi, y_lo, y_hi), or None.

    `series` maps a label to its (x, hit rate %) points; `top` is the main panel's top (the
    ceiling or the highest point). A band exists when at two or more x values every series
    (bounds left out) lies below a quarter of `top`: the policies then crowd the bottom of the
    main panel. The band spans those x values and the y range of their points, padded."""
    practical = {label: dict(points) for label, points in series.items() if label not in bounds and points}
    if len(practical) < 1 or top <= 0:
        return None
    xs = sorted(set().union(*(p.keys() for p in practical.values())))
    low_xs = [x for x in xs if all(p.get(x, 0.0) <= top / 4 for p in practical.values())]
    if len(low_xs) < 2:
        return None
    values = [p[x] for p in practical.values() for x in low_xs if x in p]
    lo, hi = min(values), max(values)
    if hi <= 0:
        return None  # nothing but zeros down there: no band to look at
    pad = max(0.08 * (hi - lo), 0.25)
    y_lo = 0.0 if lo < 0.3 * hi else max(0.0, lo - pad)
    return low_xs[0], low_xs[-1], y_lo, hi + pad


def curves_figure(results: list[dict], *, title: str = "", bytes_per_block: int | None = None, capacity_note: str = "",
                  zoom="auto"):
    """Hit rate vs capacity: one line per policy (and parameter set, and trace), log x axis.

    Rows with policy ``infinite`` become a horizontal line (the ceiling any cache of any
    size reaches on this trace); ``belady`` (offline MIN) is drawn dashed. With
    `bytes_per_block`, the x axis is the KV memory in GiB instead of blocks. `zoom`: "auto"
    (a second panel on the low band when the policies crowd it, see `zoom_band`), False
    (never), or (lo, hi): a second panel showing hit rates lo..hi percent.
    """
    lines: dict[str, list[tuple[float, float]]] = {}
    ceilings: dict[str, float] = {}
    bounds: set[str] = set()
    several = len({r.get("trace") for r in results if r.get("trace")}) > 1
    for row, label in zip(results, curve_labels(results)):
        if row["policy"] == "infinite":
            trace = row.get("trace") if several else ""
            ceilings[os.path.basename(str(trace).rstrip(os.sep)) if trace else ""] = row["hit_rate"]
            continue
        x = row["cache_capacity_blocks"] * (bytes_per_block / GIB if bytes_per_block else 1)
        lines.setdefault(label, []).append((x, 100 * row["hit_rate"]))
        if row["policy"] == "belady":
            bounds.add(label)
    for points in lines.values():
        points.sort()
    xs = sorted({p[0] for points in lines.values() for p in points})
    top = max([100 * r for r in ceilings.values()] + [p[1] for points in lines.values() for p in points] + [0.0])
    band = _zoom(zoom, lines, top, bounds, xs)

    from matplotlib.figure import Figure

    fig = Figure(figsize=(9.0, 6.4 if band else 4.4), layout="constrained")
    if band:
        ax, zax = fig.subplots(2, 1, height_ratios=(1.5, 1))
    else:
        ax, zax = fig.add_subplot(), None
    unit = "KV cache (GiB)" if bytes_per_block else "cache capacity (blocks)"
    for panel in [ax] + ([zax] if zax is not None else []):
        for i, (label, points) in enumerate(lines.items()):
            style = series_style(i, bound=label in bounds)
            line, = panel.plot([p[0] for p in points], [p[1] for p in points], markersize=4, linewidth=1.4,
                               label=label, **style)
            line.set_gid(f"curve-series-{i}" if panel is ax else f"curve-zoom-series-{i}")
        for trace, rate in ceilings.items():
            panel.axhline(100 * rate, color=CEILING_COLOR, linestyle=":", linewidth=1.4,
                          label=f"{trace + ': ' if trace else ''}infinite cache ({100 * rate:.1f}%)")
        _capacity_axis(panel, xs, gib=bool(bytes_per_block))
        panel.set_xlabel(unit + (f", {capacity_note}" if capacity_note else ""))
        panel.grid(True, which="major", alpha=0.3)
        panel.grid(True, which="minor", alpha=0.12)
    ax.set_ylabel("hit rate (% of prompt tokens)")
    ax.set_ylim(bottom=0, top=top * 1.06 if top > 0 else None)
    if zax is not None:
        from matplotlib.patches import Rectangle

        x_lo, x_hi, y_lo, y_hi = band
        zax.set_ylim(y_lo, y_hi)
        _capacity_axis(zax, [x for x in xs if x_lo <= x <= x_hi], gib=bool(bytes_per_block))
        zax.set_xlim(x_lo / 1.15, x_hi * 1.15)
        zax.set_ylabel("hit rate (%), zoomed")
        zax.set_title(f"zoom: hit rates {y_lo:.1f}-{y_hi:.1f}% (the band shaded above)", fontsize=9)
        ax.add_patch(Rectangle((x_lo / 1.15, y_lo), x_hi * 1.15 - x_lo / 1.15, y_hi - y_lo, facecolor="0.5",
                               alpha=0.12, edgecolor="0.4", linewidth=0.6, zorder=0.5))
    if title:
        fig.suptitle(title, fontsize=10)
    if lines or ceilings:
        _legend(fig, [ax])
    return fig


def _zoom(zoom, lines, top, bounds, xs):
    if zoom is False or zoom is None or not lines:
        return None
    if isinstance(zoom, str):
        if zoom != "auto":
            raise ConfigError(f"zoom must be 'auto', False or (lo, hi) in percent, got {zoom!r}")
        return zoom_band(lines, top, bounds)
    try:
        y_lo, y_hi = (float(v) for v in zoom)
    except (TypeError, ValueError):
        raise ConfigError(f"zoom must be 'auto', False or (lo, hi) in percent, got {zoom!r}") from None
    if not (0 <= y_lo < y_hi <= 100):
        raise ConfigError(f"zoom band must satisfy 0 <= lo < hi <= 100 (percent), got {zoom!r}")
    inside = [p[0] for points in lines.values() for p in points if y_lo <= p[1] <= y_hi]
    if not inside:
        return xs[0], xs[-1], y_lo, y_hi
    return min(inside), max(inside), y_lo, y_hi


def _style_index(styles: dict | None, label: str, i: int) -> int:
    return styles.get(label, i) if styles else i


def over_time_figure(series: dict[str, list[dict]], *, title: str = "", x: str = "requests", styles: dict | None = None):
    """Token-weighted hit rate per window (from analysis.metrics.over_time), one line per label.
    `styles` maps a label to its `series_style` index (default: its position), so a policy
    keeps the colour it has on another chart."""
    fig, ax = _figure(9.0, 3.6)
    for i, (label, windows) in enumerate(series.items()):
        if x == "requests":
            xs = [w["last_request"] for w in windows]
        else:
            xs = [w["end_s"] for w in windows]
        k = _style_index(styles, label, i)
        every = max(1, len(xs) // 12)  # enough markers to tell the lines apart, not so many they hide them
        line, = ax.plot(xs, [100 * w["hit_rate"] for w in windows], label=label, linewidth=1.3, markersize=4,
                        markevery=every, **series_style(k))
        line.set_gid(f"time-series-{k}")
    ax.set_xlabel("request number (end of window)" if x == "requests" else "trace time (s, end of window)")
    ax.set_ylabel("hit rate (%)")
    ax.set_ylim(bottom=0)
    return _finish(fig, ax, title, legend=bool(series))


def request_histogram_figure(rates: dict, *, title: str = "", styles: dict | None = None):
    """Distribution of per-request hit rates (each request counts once): one small panel per
    label (up to three a row), all on the same axes (20 bins of 5 points), filled in the
    label's series colour; each panel's title gives the median request. `styles` as for
    `over_time_figure`."""
    import numpy as np
    from matplotlib.figure import Figure

    labels = list(rates)
    n = max(1, len(labels))
    cols = min(n, 3)
    rows = math.ceil(n / cols)
    fig = Figure(figsize=(9.0, 0.7 + 2.3 * rows), layout="constrained")
    axes = fig.subplots(rows, cols, sharex=True, sharey=True, squeeze=False).ravel()
    bins = np.linspace(0, 100, 21)
    for i, label in enumerate(labels):
        ax = axes[i]
        values = 100 * np.asarray(rates[label], dtype=float)
        k = _style_index(styles, label, i)
        color = series_style(k)["color"]
        _, _, patches = ax.hist(values, bins=bins, histtype="stepfilled", facecolor=color, alpha=0.75,
                                edgecolor=color, linewidth=1.0, label=label)
        for patch in patches:
            patch.set_gid(f"hist-series-{k}")
        median = f"median {np.percentile(values, 50, method='lower'):.1f}%" if values.size else "no requests"
        ax.set_title(f"{textwrap.shorten(label, 40, placeholder='...')}: {median}", fontsize=9)
        ax.grid(True, alpha=0.3)
        ax.set_xlim(0, 100)
    for ax in axes[len(labels):]:
        ax.set_visible(False)
    for ax in axes[(rows - 1) * cols:]:
        ax.set_xlabel("hit rate of one request (%)")
    for ax in axes[::cols]:
        ax.set_ylabel("requests")
    if title:
        fig.suptitle(title, fontsize=10)
    return fig


def figure_bytes(fig, fmt: str) -> bytes:
    """The figure's file: the same figure gives the same bytes (SVG and PDF without a date, SVG ids
    from a fixed salt instead of random ones), so a report or plot changes only when its content does."""
    import matplotlib

    buf = io.BytesIO()
    kwargs = {"metadata": {"Date": None}} if fmt == "svg" else {}
    kwargs = {"metadata": {"CreationDate": None}} if fmt == "pdf" else kwargs
    with matplotlib.rc_context({"svg.hashsalt": "kvreplay"}):
        fig.savefig(buf, format=fmt, dpi=120, **kwargs)
    return buf.getvalue()


def plot_bytes(fig, path: str) -> bytes:
    """The figure rendered in `path`'s format (from its extension)."""
    fmt = FORMATS.get(os.path.splitext(path)[1].lower())
    if fmt is None:
        raise ConfigError(f"--plot {path}: the name must end in {', '.join(FORMATS)}")
    return figure_bytes(fig, fmt)


def save_figure(fig, path: str) -> None:
    """Write the figure to `path` (format from the extension), atomically."""
    from ..files import write_atomic

    write_atomic(path, plot_bytes(fig, path))


def check_plot_path(path: str | None) -> None:
    """Fail before a long run, not after it."""
    if path and os.path.splitext(path)[1].lower() not in FORMATS:
        raise ConfigError(f"--plot {path}: the name must end in {', '.join(FORMATS)}")


def _deployment_text(report) -> str:
    """What a serving plot's title names: GPU, instances, router, tiers, policy, scheduler, load."""
    tm = report.time_model or {}
    parts = []
    if tm.get("gpu"):
        parts.append(f"{tm.get('model', '')} on {tm.get('tp', 1)} x {tm['gpu']}".strip())
    if report.instances > 1:
        parts.append(f"{report.instances} instances, router {report.router}")
    if report.tiers is not None:
        parts.append("tiers " + " + ".join(row["name"] for row in report.tiers["tiers"]))
    parts.append(f"{report.policy}, {report.scheduler['style']}-style scheduler")
    arr = report.arrivals or {}
    if arr.get("kind") in ("closed", "open_sessions"):
        parts.append(f"{arr['sessions']:,} concurrent sessions" if arr.get("sessions") else "closed loop")
    else:
        parts.append(f"Poisson {arr['rate_per_s']:g}/s" if arr.get("kind") == "poisson"
                     else f"load x{arr.get('speedup', 1.0):g}")
    return "; ".join(parts)


def serving_figure(report, *, title: str = ""):
    """`kvreplay simulate --plot`: the TTFT CDF, and over simulated time the cumulative hit rate,
    the running and waiting requests, and the KV blocks running requests hold."""
    import numpy as np
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10.0, 6.4), layout="constrained")
    axes = fig.subplots(2, 2)
    ok = report.finished
    ttft = np.sort(report.ttft_s[ok])
    ax = axes[0, 0]
    if ttft.size:
        ax.step(ttft, np.arange(1, ttft.size + 1) / ttft.size * 100, where="post", color=PALETTE[0], linewidth=1.4)
        if ttft[-1] > 0 and ttft[0] > 0 and ttft[-1] / ttft[0] > 100:
            ax.set_xscale("log")
        from ..serving.report import nearest_rank

        for p, color in ((50, PALETTE[1]), (90, PALETTE[3])):
            v = nearest_rank(ttft, p)
            ax.axvline(v, color=color, linestyle="--", linewidth=1, label=f"p{p} {v:,.3g} s")
        ax.legend(loc="lower right", fontsize=8)
    ax.set_xlabel("TTFT (s)")
    ax.set_ylabel("requests (%)")
    ax.set_title("time to first token", fontsize=9)
    cols = report.series_columns()
    to_axis, from_axis, gaps = _busy_axis(cols["time_s"]) if len(cols["time_s"]) else (None, None, [])
    t = to_axis(cols["time_s"]) if gaps else cols["time_s"]  # idle gaps compressed (marked on each panel)
    time_label = "simulated time" + (" (h:mm:ss; idle gaps compressed, shaded)" if gaps else " (s)")
    ax = axes[0, 1]
    ax.plot(t, 100 * cols["cumulative_hit_rate"], color=PALETTE[2], linewidth=1.3, label="under concurrency")
    if report.sequential_hit_rate is not None:
        ax.axhline(100 * report.sequential_hit_rate, color=CEILING_COLOR, linestyle=":", linewidth=1.2,
                   label="sequential replay (whole trace)")
    ax.set_ylim(bottom=0)
    ax.set_xlabel(time_label)
    ax.set_ylabel("hit rate so far (%)")
    ax.set_title("hit rate of the requests scheduled so far (token-weighted)", fontsize=9)
    ax.legend(loc="lower right", fontsize=8)
    # the engine's state, sampled at steps: averaged (line) and its peak (shade) per time bin
    mid, running = _binned(t, cols["running"])
    _, waiting = _binned(t, cols["waiting"])
    # the series sums every instance's held blocks: as a share of all their pools together
    _, held = _binned(t, 100.0 * cols["running_kv_blocks"] / (report.capacity_blocks * max(report.instances, 1)))
    ax = axes[1, 0]
    for (mean, peak), color, label in ((running, PALETTE[0], "running"), (waiting, PALETTE[3], "waiting")):
        ax.fill_between(mid, mean, peak, color=color, alpha=0.2, linewidth=0)
        ax.plot(mid, mean, color=color, linewidth=1.2, label=f"{label} (mean; shade: peak)")
    ax.set_xlabel(time_label)
    ax.set_ylabel("requests")
    ax.set_title("requests in the engine", fontsize=9)
    ax.legend(loc="upper left", fontsize=8)
    ax = axes[1, 1]
    ax.fill_between(mid, held[0], held[1], color=PALETTE[4], alpha=0.2, linewidth=0)
    ax.plot(mid, held[0], color=PALETTE[4], linewidth=1.2, label="mean (shade: peak)")
    ax.set_ylim(0, 105)
    ax.legend(loc="lower right", fontsize=8)
    ax.set_xlabel(time_label)
    ax.set_ylabel("pool held by running requests (%)")
    unit = "block ids" if (report.kv_semantics or {}).get("semantics") == "hybrid" else "blocks"  # (vLLM's hybrid layout)
    pools = (f"{report.instances} pools of {report.capacity_blocks:,} {unit} together" if report.instances > 1
             else f"{report.capacity_blocks:,} {unit}")
    ax.set_title(f"running KV ({pools}, {report.block_size} tokens each"
                 + (", hybrid layer groups" if unit == "block ids" else "") + ")", fontsize=9)
    for a in axes.flat:
        a.grid(True, alpha=0.3)
    for a in (axes[0, 1], axes[1, 0], axes[1, 1]):
        _mark_gaps(a, to_axis, from_axis, gaps)
    head = f"{title}: " if title else ""
    fig.suptitle(f"{head}{_deployment_text(report)}, whole trace", fontsize=10)
    return fig


def _busy_axis(t, *, gap_share: float = 0.05, keep_share: float = 0.03):
    """A time axis with the idle gaps compressed: gaps between samples (steps) longer than
    `gap_share` of the span and 20 times the samples' median spacing are each drawn `keep_share`
    of the busy time wide. (to_axis(t),
    from_axis(x), gaps [(start, end), ...] in seconds); without such gaps both maps are the identity."""
    import numpy as np

    t = np.sort(np.asarray(t, dtype=float))
    span = float(t[-1] - t[0]) if t.size > 1 else 0.0
    gaps = []
    if span > 0:
        d = np.diff(t)
        long = d > max(gap_share * span, 20 * float(np.median(d)))  # (not the samples' own spacing)
        gaps = [(float(t[i]), float(t[i + 1])) for i in np.flatnonzero(long)]
    busy = span - sum(b - a for a, b in gaps)
    src, dst = [float(t[0]) if t.size else 0.0], [float(t[0]) if t.size else 0.0]
    for a, b in gaps:
        dst.append(dst[-1] + (a - src[-1]))
        src.append(a)
        dst.append(dst[-1] + max(keep_share * busy, 1e-9))
        src.append(b)
    if t.size:
        dst.append(dst[-1] + (float(t[-1]) - src[-1]))
        src.append(float(t[-1]))
    src_a, dst_a = np.array(src), np.array(dst)
    if len(src_a) < 2 or not gaps:
        return (lambda x: np.asarray(x, dtype=float)), (lambda x: np.asarray(x, dtype=float)), []
    return (lambda x: np.interp(x, src_a, dst_a)), (lambda x: np.interp(x, dst_a, src_a)), gaps


def _mark_gaps(ax, to_axis, from_axis, gaps) -> None:
    """Shade each compressed idle gap, say how long it was, and label ticks in real seconds."""
    from matplotlib.ticker import FuncFormatter

    for a, b in gaps:
        x0, x1 = float(to_axis(a)), float(to_axis(b))
        ax.axvspan(x0, x1, color="0.85", linewidth=0)
        ax.text((x0 + x1) / 2, 0.5, f"idle {_duration(b - a)}", transform=ax.get_xaxis_transform(), rotation=90,
                ha="center", va="center", fontsize=7, color="0.35")
    if gaps:
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(5))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: _clock(float(from_axis(x)))))


def _clock(seconds: float) -> str:
    """h:mm:ss of simulated time (the ticks of an axis whose gaps are compressed)."""
    whole = max(int(round(seconds)), 0)
    return f"{whole // 3600}:{whole // 60 % 60:02d}:{whole % 60:02d}"


def _duration(seconds: float) -> str:
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("min", 60.0)):
        if seconds >= size:
            return f"{seconds / size:.3g} {unit}"
    return f"{seconds:.3g} s"


def _binned(t, values, bins: int = 150):
    """Sampled values in `bins` equal time bins: (bin centres, (mean, peak)); empty bins dropped."""
    import numpy as np

    t = np.asarray(t, dtype=float)
    v = np.asarray(values, dtype=float)
    if t.size == 0:
        return t, (v, v)
    edges = np.linspace(t.min(), t.max() + 1e-9, bins + 1)
    which = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, bins - 1)
    count = np.bincount(which, minlength=bins)
    total = np.bincount(which, weights=v, minlength=bins)
    peak = np.full(bins, -np.inf)
    np.maximum.at(peak, which, v)
    keep = count > 0
    return ((edges[:-1] + edges[1:]) / 2)[keep], ((total / np.maximum(count, 1))[keep], peak[keep])


def _config_label(config: dict, varies: list[str]) -> str:
    """A load-plot series' label: the configuration fields that differ between series."""
    text = {"policy": lambda v: str(v), "capacity_blocks": lambda v: f"{v:,} blocks",
            "instances": lambda v: f"{v} instance" + ("s" if v != 1 else ""), "router": lambda v: f"router {v}",
            "tiers": lambda v: "HBM only" if v in (None, "none") else f"tiers {v}"}
    return ", ".join(text[k](config[k]) for k in varies)


def load_figure(rows: list[dict], *, title: str = ""):
    """`kvreplay simulate --speedups/--rates --plot`: TTFT p50 and p90 against load, and the hit
    rate under concurrency against load (its sequential value dotted): one series, with its own colour
    and marker, per configuration (policy, pool, instances, router, tiers), labelled by what differs."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10.0, 4.0), layout="constrained")
    ax_t, ax_h = fig.subplots(1, 2)
    keys = ("policy", "capacity_blocks", "instances", "router", "tiers")
    groups: dict = {}
    for r in rows:  # one series per configuration
        groups.setdefault(tuple(r.get(k) for k in keys), []).append(r)
    varies = [k for i, k in enumerate(keys) if len({g[i] for g in groups}) > 1] or ["policy", "capacity_blocks"]
    kind = rows[0]["load_kind"] if rows else "speedup"
    for i, (config, rs) in enumerate(groups.items()):
        style = series_style(i)
        rs = sorted(rs, key=lambda r: r["load"])
        xs = [r["load"] for r in rs]
        label = _config_label(dict(zip(keys, config)), varies)
        ax_t.plot(xs, [r["ttft_p50_s"] for r in rs], label=f"{label} p50", linewidth=1.3, **style)
        if all(r.get("ttft_p50_low_s") is not None for r in rs):  # the calibrated roofline's band
            ax_t.fill_between(xs, [r["ttft_p50_low_s"] for r in rs], [r["ttft_p50_high_s"] for r in rs],
                              color=style["color"], alpha=0.15, linewidth=0)
        ax_t.plot(xs, [r["ttft_p90_s"] for r in rs], label=f"{label} p90", linewidth=1.0, alpha=0.7,
                  color=style["color"], marker=style["marker"], linestyle="--")
        if kind == "sessions" and all(r.get("ttft_p90_low_s") is not None for r in rs):  # (p90 is what plans judge)
            ax_t.fill_between(xs, [r["ttft_p90_low_s"] for r in rs], [r["ttft_p90_high_s"] for r in rs],
                              color=style["color"], alpha=0.10, linewidth=0, hatch="//")
        ax_h.plot(xs, [100 * r["hit_rate"] for r in rs], label=label, linewidth=1.3, **style)
        if rs[0]["sequential_hit_rate"] is not None:
            ax_h.axhline(100 * rs[0]["sequential_hit_rate"], color=style["color"], linestyle=":", linewidth=1)
    xlabel = {"speedup": "load (x the trace's arrival rate)", "rate": "arrival rate (requests/s)",
              "sessions": "concurrent sessions (closed loop)"}[kind]
    for ax in (ax_t, ax_h):
        ax.set_xlabel(xlabel)
        ax.grid(True, alpha=0.3)
    ax_t.set_yscale("log")
    ax_t.set_ylabel("TTFT (s)")
    banded = any(r.get("ttft_p50_low_s") is not None for r in rows)
    ax_t.set_title("TTFT p50 (solid) and p90 (dashed)" + ("; shaded: p50's calibration band" if banded else "")
                   + ("; hatched: p90's" if banded and kind == "sessions" else ""), fontsize=9)
    ax_h.set_ylabel("hit rate (%)")
    ax_h.set_ylim(bottom=0)
    ax_h.set_title("hit rate under concurrency (dotted: sequential replay)", fontsize=9)
    ax_h.legend(loc="center left", bbox_to_anchor=(1.02, 0.5), fontsize=8, frameon=False)
    fig.suptitle(f"{title}: TTFT and hit rate against load, whole trace" if title else
                 "TTFT and hit rate against load, whole trace", fontsize=10)
    return fig
