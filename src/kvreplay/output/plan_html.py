"""`kvreplay report --plan FILE.json`: the plan's section of the HTML report (the cheapest
deployment per load, its runners-up, tier economics, and the cost-vs-TTFT plot)."""

from __future__ import annotations

import html

from .plan import WHERE, tier_verdict
from .serving import seconds_text


def plan_section(result: dict, svg, table) -> list[str]:
    """The section's HTML parts; `svg(fig)` inlines a figure, `table(headers, rows, numeric,
    raw_headers)` writes a table (output/html.py's)."""
    from .plan_plot import pareto_figure

    esc = html.escape
    out = [f"<h2>Plan: the cheapest deployment meeting {esc(result['slo'])}</h2>",
           f"<p class=\"note\">From <code>kvreplay plan</code> on this trace (digest {esc(result['trace_digest'])}, "
           f"checked). Every SLO must hold in every window of arrivals; judged at {esc(WHERE[result['judged_at']])}; "
           f"{esc(result['pricing'])} prices. The search made {result['runs']:,} simulations "
           f"({result['cache_hits']:,} answered from memory, {result['disk_hits']:,} from a cache directory); "
           + ("monotonicity (more instances never miss what fewer met) held on every run." if not
              result["monotonicity_violations"] else
              f"{len(result['monotonicity_violations'])} runs broke monotonicity (see the plan's JSON).")
           + " docs/plan.md has every rule.</p>"]
    if result.get("kv_semantics"):
        out.append(f"<p class=\"note\" data-note=\"plan-kv-semantics\"><b>KV semantics.</b> "
                   f"{esc(result['kv_semantics']['text'])}</p>")
    if result.get("calibration_warnings"):
        out.append("<p class=\"note\" data-note=\"plan-calibration\"><b>Time model.</b> Where the calibrated roofline "
                   "leaves what it was checked on: " + "; ".join(esc(w) for w in result["calibration_warnings"]) + ".</p>")
    for block in result["loads"]:
        out += _load_block(block, table)
    out.append(f"<div class=\"figure\">{svg(pareto_figure(result))}</div>")
    return out


def _load_block(block: dict, table) -> list[str]:
    esc = html.escape
    what = f"load &times;{block['load']:g}" if block["load_kind"] == "speedup" else \
        f"Poisson {block['load']:g} requests/s"
    out = [f"<h3>{what}</h3>",
           f"<p class=\"note\">{block['evaluated']} configurations searched, {block['pruned']} pruned (even their "
           f"fewest possible instances cost more than the best), {len(block['skipped'])} skipped.</p>"]
    if block["best"] is None:
        c = block.get("closest")
        out.append("<p><b>No configuration meets the SLOs.</b>" + (
            f" Closest: {esc(c['config'])} at {c['instances']} instances: {esc(c['why'])}.</p>" if c else "</p>"))
        return out
    rows = []
    for rank, r in [("best", block["best"])] + [(str(k + 2), r) for k, r in enumerate(block["runners_up"])]:
        b = r.get("binding") or {}
        rows.append([rank, f"{r['instances']} &times; {r['tp']} &times; {esc(r['gpu'])}",
                     "-" if r.get("instances_at_centre") is None else str(r["instances_at_centre"]), esc(r["tiers"]),
                     esc(r["router"]), esc(r["policy"]), f"{r['cost_per_hour']:,.2f}",
                     "-" if r["usd_per_million_input"] is None else f"{r['usd_per_million_input']:,.3f}",
                     f"{100 * r['hit_rate']:.2f}%",
                     f"{esc(str(b.get('objective')))} {seconds_text(b.get('value_s', 0))} / "
                     f"{seconds_text(b.get('limit_s', 0))} (from {seconds_text(b.get('window_start_s', 0))})"])
    out.append(table(["", "instances &times; TP &times; GPU", "at band centre", "tiers", "router", "policy", "USD/h",
                       "USD/M input", "hit rate", "binding objective (worst window)"], rows,
                      [False, False, True, False, False, False, True, True, True, False], raw_headers=True))
    for t in block["tier_economics"]:
        v = t["versus_none"]
        if v is None:
            continue
        verdict = (tier_verdict(v) if t["meets"] else
                   f"misses the SLOs at the {t['instances']} instances HBM only needs, so it saves no GPU")
        out.append(f"<p class=\"note\">Tier <code>{esc(t['tiers'])}</code> on {esc(t['config'].split(',')[0])}: "
                   f"{verdict}; TTFT p90 {seconds_text(v['ttft_p90_with_tiers_s'])} against "
                   f"{seconds_text(v['ttft_p90_s'])} without it (whole trace).</p>")
    return out
