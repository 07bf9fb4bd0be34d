"""Pictures of why the cache missed: the miss account as stacked bars (per policy and capacity,
per load), and the stranded blocks over time. Same rules as output/plot.py: matplotlib's object
API, the legend outside the axes; each cause has one colour and one hatch on every chart, so the
bars read in grey print too."""

from __future__ import annotations

import math

from ..engine.misses import CAUSES
from .misses import LABEL
from .plot import _finish, _figure, _legend, _style_index, series_style

#: Hits, then each cause: (colour, hatch).
COLORS = {"hit": ("#74c476", ""), "first_use": ("#bdbdbd", ""), "evicted": ("#fb6a4a", "//"),
          "behind_hole": ("#fdae6b", "\\\\"), "partial_block": ("#9e9ac8", ".."), "namespace": ("#6baed6", "xx"),
          "layer_groups": ("#c49c94", "--"), "concurrency": ("#e7ba52", "oo")}  # none of plot.PALETTE's policy colours
PARTS = ("hit",) + CAUSES


def shares(row: dict) -> dict:
    """A table row's (sweep, mrc or load sweep) prompt tokens split into hits and each measured
    cause, as percentages of its prompt tokens (None for a cause it does not measure)."""
    prompt = row.get("total_prompt_tokens") or 0
    hit = row.get("total_hit_tokens")
    out = {"hit": 100 * hit / prompt if prompt and hit is not None else 0.0}
    for c in CAUSES:
        v = row.get(f"miss_{c}_tokens")
        out[c] = None if v is None else (100 * v / prompt if prompt else 0.0)
    return out


def _stack(ax, xs, columns: list[dict], width: float, shown: list[str], gid: str) -> None:
    bottom = [0.0] * len(xs)
    for part in shown:
        heights = [col.get(part) or 0.0 for col in columns]
        color, hatch = COLORS[part]
        bars = ax.bar(xs, heights, width, bottom=bottom, color=color, hatch=hatch, edgecolor="white", linewidth=0.4,
                      label="hit" if part == "hit" else LABEL[part])
        for bar in bars:
            bar.set_gid(f"{gid}-{part}")
        bottom = [b + h for b, h in zip(bottom, heights)]


def _shown(columns: list[dict]) -> list[str]:
    """The parts any column measures, hits first."""
    return [p for p in PARTS if any(col.get(p) is not None and (p == "hit" or col.get(p)) for col in columns)
            or p in ("hit", "first_use", "evicted")]


def account_figure(rows: list[dict], *, title: str = "", capacity_text=None):
    """One panel per policy: at each capacity, a bar of the prompt tokens split into hits and each
    cause of the misses (shares, %). `rows` are sweep rows with miss_<cause>_tokens (bounds left
    out by the caller). capacity_text: capacity -> its label (default the block count)."""
    from matplotlib.figure import Figure

    labels = list(dict.fromkeys(_row_label(r) for r in rows))
    n = max(1, len(labels))
    cols = min(n, 3)
    nrows = math.ceil(n / cols)
    fig = Figure(figsize=(9.0, 0.9 + 2.6 * nrows), layout="constrained")
    axes = fig.subplots(nrows, cols, sharey=True, squeeze=False).ravel()
    shown = _shown([shares(r) for r in rows])
    for i, label in enumerate(labels):
        ax = axes[i]
        mine = sorted((r for r in rows if _row_label(r) == label), key=lambda r: r["cache_capacity_blocks"])
        xs = list(range(len(mine)))
        _stack(ax, xs, [shares(r) for r in mine], 0.7, shown, f"account-{i}")
        ax.set_xticks(xs, [(capacity_text or _blocks)(r["cache_capacity_blocks"]) for r in mine], fontsize=7,
                      rotation=30 if len(mine) > 4 else 0)
        ax.set_title(label, fontsize=9)
        ax.set_ylim(0, 100)
        ax.grid(True, axis="y", alpha=0.3)
    for ax in axes[len(labels):]:
        ax.set_visible(False)
    for ax in axes[::cols]:
        ax.set_ylabel("prompt tokens (%)")
    for ax in axes[(nrows - 1) * cols:]:
        ax.set_xlabel("capacity (blocks)" if capacity_text is None else "capacity")
    if title:
        fig.suptitle(title, fontsize=10)
    _legend(fig, [axes[0]])
    return fig


def load_account_figure(rows: list[dict], *, title: str = ""):
    """The served account per load (kvreplay report --gpu's load sweep rows): one bar per load."""
    fig, ax = _figure(7.5, 3.6)
    columns = [shares({**r, "total_prompt_tokens": r["prompt_tokens"], "total_hit_tokens": r["hit_tokens"]})
               for r in rows]
    xs = list(range(len(rows)))
    _stack(ax, xs, columns, 0.6, _shown(columns), "load-account")
    ax.set_xticks(xs, [f"x{r['load']:g}" for r in rows])
    ax.set_xlabel("load (factor on the trace's arrival rate)")
    ax.set_ylabel("prompt tokens of finished requests (%)")
    ax.set_ylim(0, 100)
    ax.grid(True, axis="y", alpha=0.3)
    if title:
        fig.suptitle(title, fontsize=10)
    _legend(fig, [ax])
    return fig


def stranded_figure(series: dict[str, dict], capacity: int, *, title: str = "", styles: dict | None = None):
    """Stranded blocks over the trace, as a share of the capacity, one line per label: `series`
    maps a label to the account's samples ({"request": [...], "stranded_blocks": [...]})."""
    fig, ax = _figure(9.0, 3.4)
    for i, (label, samples) in enumerate(series.items()):
        k = _style_index(styles, label, i)
        xs = [r + 1 for r in samples["request"]]
        ys = [100 * s / capacity for s in samples["stranded_blocks"]]
        line, = ax.plot(xs, ys, label=label, linewidth=1.3, markersize=4, markevery=max(1, len(xs) // 12),
                        **series_style(k))
        line.set_gid(f"stranded-series-{k}")
    ax.set_xlabel("request number")
    ax.set_ylabel("stranded (% of the capacity)")
    ax.set_ylim(bottom=0)
    return _finish(fig, ax, title, legend=bool(series))


def _row_label(r: dict) -> str:
    params = r.get("params") or {}
    if isinstance(params, dict) and params:
        return f"{r['policy']} ({', '.join(f'{k}={v}' for k, v in params.items())})"
    return r["policy"]


def _blocks(c: int) -> str:
    return f"{c:,}"
