"""`kvreplay plan --plot`: cost against TTFT p90 for every run the search made, one panel per
load, with the Pareto frontier, the SLO's limit and the chosen deployment."""

from __future__ import annotations

from ..serving.plan_rows import load_text
from .plan import WHERE
from .plot import _figure, series_style


def _y(p: dict) -> float | None:
    """The TTFT p90 a probe is judged on: its worst window's when the plan has a TTFT SLO."""
    v = p.get("worst_window_ttft_p90_s")
    return p["ttft_p90_s"] if v is None else v


def frontier(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The points no other point beats on both cost and TTFT (lower is better), by cost."""
    out, best = [], float("inf")
    for x, y in sorted(points):
        if y < best:
            out.append((x, y))
            best = y
    return out


def pareto_figure(result: dict, *, title: str = ""):
    from matplotlib.figure import Figure

    blocks = result["loads"]
    fig = Figure(figsize=(7.5, 3.6 * len(blocks)), layout="constrained") if len(blocks) > 1 else _figure()[0]
    axes = fig.subplots(len(blocks), 1, squeeze=False)[:, 0] if len(blocks) > 1 else [fig.axes[0]]
    limit = result["slo_limits"].get("ttft_p90_s")
    for ax, block in zip(axes, blocks):
        _panel(ax, block, limit)
    handles, labels = [], []
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    fig.legend(handles, labels, loc="outside lower center", ncols=2, fontsize=8, frameon=False)
    fig.suptitle(title or f"cost against TTFT p90 for {result['slo']};\njudged at {WHERE[result['judged_at']]}",
                 fontsize=10)
    return fig


def _panel(ax, block: dict, limit: float | None) -> None:
    probes = [p for p in block["probes"] if _y(p) is not None]
    groups = sorted({f"{p['gpu']} x{p['tp']}, tiers {p['tiers']}" for p in probes})
    for i, g in enumerate(groups):
        style = series_style(i)
        mine = [p for p in probes if f"{p['gpu']} x{p['tp']}, tiers {p['tiers']}" == g]
        for meets in (True, False):
            pts = [(p["cost_per_hour"], _y(p)) for p in mine if p["meets"] == meets]
            if pts:
                ax.scatter(*zip(*pts), color=style["color"], marker=style["marker"], s=28,
                           facecolors=style["color"] if meets else "none", label=g if meets or not any(
                               p["meets"] for p in mine) else None, zorder=3)
    front = frontier([(p["cost_per_hour"], _y(p)) for p in probes])
    if front:
        ax.step(*zip(*front), where="post", color="0.4", linewidth=1, label="Pareto frontier", zorder=2)
    if limit is not None:
        ax.axhline(limit, color="#d62728", linestyle="--", linewidth=1, label=f"SLO: TTFT p90 {limit:g} s", zorder=1)
    best = block["best"]
    if best is not None:
        y = (best.get("worst_window_s") or {}).get("TTFT p90", best["ttft_p90_s"])
        ax.scatter([best["cost_per_hour"]], [y], marker="*", s=220, color="gold", edgecolors="black", zorder=4,
                   label="chosen (cheapest meeting every SLO)")
        ax.annotate(f"{best['instances']} x {best['tp']} x {best['gpu']}, {best['cost_per_hour']:,.0f} USD/h",
                    (best["cost_per_hour"], y), xytext=(8, 8), textcoords="offset points", fontsize=8)
    what = load_text(block["load_kind"], block["load"])
    ax.set_title(f"{what}: {len(probes)} runs (filled: meets every SLO; hollow: misses)", fontsize=9)
    ax.set_xlabel("cost, USD per hour")
    ax.set_ylabel("TTFT p90, worst window (s)" if limit is not None else "TTFT p90, whole trace (s)")
    ax.set_yscale("log")
    ax.grid(True, alpha=0.3)
