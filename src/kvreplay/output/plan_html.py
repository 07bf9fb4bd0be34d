"""`kvreplay report --plan FILE.json`: the plan's section of the HTML report (per load, its chosen
deployment served again and judged; every configuration tried with its verdict and why; tier
economics; the cost-vs-TTFT plot)."""

from __future__ import annotations

import html

from ..serving.plan_check import unrecorded_utilization
from ..serving.plan_rows import load_text
from .plan import WHERE, band_cell, binding_cell, counts_text, tier_verdict
from .serving import denominators, keeps_up_cell, seconds_text



def _stages(r: dict) -> str:
    """ "2 stages &times; " for a row with pipeline stages (its pp checked a whole number by the schema)."""
    return f"{int(r['pp'])} stages &times; " if r.get("pp", 1) > 1 else ""

def plan_section(result: dict, svg, table, served: list | None = None, not_served: str | None = None) -> list[str]:
    """The section's HTML parts; `svg(fig)` inlines a figure, `table(headers, rows, numeric,
    raw_headers)` writes a table (output/html.py's); `served`: plan_check.serve_plan's rows."""
    from .plan_plot import pareto_figure

    esc = html.escape
    out = [f"<h2>Plan: the cheapest deployment meeting {esc(result['slo'])}</h2>",
           f"<p class=\"note\">From <code>kvreplay plan</code> on this trace (digest {esc(result['trace_digest'])}, "
           f"checked), for {esc(str(result.get('model')))}. Every SLO must hold in every window of the judged span "
           f"(warm-up <code>--warmup {esc(str(result.get('warmup_spec', 'auto')))}</code>: each run's first arrivals are "
           f"served, not judged; windows with fewer than {esc(str(result.get('min_window_requests', 50)))} requests are "
           "merged); "
           f"judged at {esc(WHERE[result['judged_at']])}; {esc(result['pricing'])} prices. The search made "
           f"{_n(result['runs'], ',')} simulations ({_n(result['cache_hits'], ',')} answered from memory, "
           f"{_n(result['disk_hits'], ',')} from a "
           "cache directory); "
           + ("monotonicity (more instances never miss what fewer met) held on every run." if not
              result["monotonicity_violations"] else
              f"{esc(str(len(result['monotonicity_violations'])))} runs broke monotonicity (see the plan's JSON).")
           + " docs/plan.md has every rule.</p>"]
    if result.get("kv_semantics"):
        out.append(f"<p class=\"note\" data-note=\"plan-kv-semantics\"><b>KV semantics.</b> "
                   f"{esc(result['kv_semantics']['text'])}</p>")
    if result.get("calibration_warnings"):
        out.append("<p class=\"note\" data-note=\"plan-calibration\"><b>Time model.</b> Where the calibrated roofline "
                   "leaves what it was checked on: " + "; ".join(esc(w) for w in result["calibration_warnings"]) + ".</p>")
    unrecorded = unrecorded_utilization(result)
    if unrecorded:
        out.append(f"<p class=\"note\" data-note=\"plan-utilization\"><b>Pools.</b> {esc(unrecorded[0].upper() + unrecorded[1:])}.</p>")
    if served:
        out += _served_block(served, table)
    elif not_served:
        out.append(f"<p class=\"note\" data-note=\"plan-not-served\"><b>Not served again.</b> {esc(not_served)}</p>")
    if result.get("capacity"):
        out.append("<p data-note=\"plan-capacity\"><b>Capacity in concurrent sessions.</b> "
                   + "; ".join(esc(c["text"]) for c in result["capacity"]) + ".</p>")
    for block in result["loads"]:
        out += _load_block(block, table)
    out.append(f"<div class=\"figure\">{svg(pareto_figure(result))}</div>")
    return out


def _served_block(served: list, table) -> list[str]:
    """Each load's chosen deployment, served again here, and judged as the plan judged it."""
    esc = html.escape
    rows = []
    for row in served:
        what = html.escape(load_text(row["load_kind"], row["load"]))
        best = row["best"]
        if best is None:
            rows.append([what, "no configuration met the SLOs", "", "", "", "", "", ""])
            continue
        s, v = row["summary"], row["verdict"]
        band = s.get("latency_band_s") or {}
        p90 = seconds_text(s["latency_s"]["ttft"]["p90"])
        if band:
            lo, hi = band["ttft"]["p90"]
            p90 += f" [{seconds_text(lo)} - {seconds_text(hi)}]"
        r = {"finished": s["finished"], "judged_requests": s["requests"], "refused_context": s["refused_context"],
             "rejected": s["rejected"]}
        verdict = ("<b>meets</b>" if v["meets"] else "<b>MISSES</b>") + f" at the {esc(row['judged_at'])}: " + \
            esc(binding_cell(v["binding"])) + ("" if row["matches_plan"] else " (<b>differs from the plan's run</b>)")
        k = s["keeps_up"]
        rows.append([what, f"{esc(str(best['instances']))} &times; {_stages(best)}{esc(str(best['tp']))} &times; {esc(best['gpu'])}, "
                           f"{esc(best['router'])}, {esc(best['policy'])}, tiers {esc(best['tiers'])}",
                     esc(p90), esc(f"{100 * s['hit_rate']:.2f}%"), esc(denominators(r)),
                     keeps_up_cell({"stable": k["keeps_up"], "stable_at_centre": k.get("centre_keeps_up")}), verdict])
    out = ["<h3>The chosen deployments, served again</h3>",
           "<p class=\"note\" data-note=\"plan-served\">Each load's cheapest deployment, simulated here with the plan's "
           "model, GPUs, TP, instances, router, policy, tiers, load and warm-up, at the band's two ends and its centre; "
           "judged with the plan's SLOs and windows at the end it judged at. Figures over the finished judged requests "
           "(after the warm-up); refused requests are past max_model_len, rejected ones never fit a pool.</p>"]
    out.append(table(["load", "deployment", "TTFT p90 [band]", "hit rate", "finished of judged (refused, rejected)",
                      "keeps up", "SLOs"], rows, [False, False, True, True, True, False, False], raw_headers=True))
    return out


def _load_block(block: dict, table) -> list[str]:
    esc = html.escape
    what = html.escape(load_text(block["load_kind"], block["load"]))
    out = [f"<h3>{what}</h3>", f"<p class=\"note\">{esc(counts_text(block))}.</p>"]
    if block["best"] is None:
        c = block.get("closest")
        out.append("<p><b>No configuration meets the SLOs.</b>" + (
            f" Closest: {esc(c['config'])}: {esc(c['why'])}.</p>" if c else "</p>"))
    rows = []
    for k, r in enumerate(block["tried"]):
        n = r.get("instances")
        searched = r["verdict"] in ("meets", "misses")
        rows.append(["chosen" if r.get("chosen") else esc(r["verdict"]),
                     f"{esc('-' if n is None else str(n))} &times; {_stages(r)}{esc(str(r['tp']))} &times; {esc(r['gpu'])}",
                     esc(band_cell(r)),
                     esc(r["tiers"]), esc(r["router"]), esc(r["policy"]),
                     "-" if r.get("cost_per_hour") is None else esc(f"{r['cost_per_hour']:,.2f}"),
                     esc(f"{100 * r['hit_rate']:.2f}%") if searched else "-", esc(r["why"])])
    out.append(table(["verdict", "instances &times; TP &times; GPU", "instances low / centre / high", "tiers", "router",
                      "policy", "USD/h", "hit rate", "why"], rows,
                     [False, False, True, False, False, False, True, True, False], raw_headers=True))
    for t in block["tier_economics"]:
        v = t["versus_none"]
        if v is None:
            continue
        verdict = esc(tier_verdict(v) if t["meets"] else
                      f"misses the SLOs at the {t['instances']} instances HBM only needs, so it saves no GPU")
        out.append(f"<p class=\"note\">Tier <code>{esc(t['tiers'])}</code> on {esc(t['config'].split(',')[0])}: "
                   f"{verdict}; TTFT p90 {esc(_seconds(v['ttft_p90_with_tiers_s']))} against "
                   f"{esc(_seconds(v['ttft_p90_s']))} without it (judged span).</p>")
    return out


def _n(x, spec: str) -> str:
    """A number formatted and escaped (a plan is untrusted: nothing reaches the page unescaped)."""
    return html.escape(format(x, spec))


def _seconds(x) -> str:
    return "-" if x is None else seconds_text(x)
