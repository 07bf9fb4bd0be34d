"""`kvreplay plan`'s table: per load, the cheapest configuration meeting the SLOs and its runners-up."""

from __future__ import annotations

from .serving import seconds_text, trace_name
from .table import format_table


def _row(r: dict, rank: str) -> dict:
    b = r.get("binding") or {}
    return {"rank": rank, "gpu": f"{r['instances']} x {r['tp']} x {r['gpu']}", "tiers": r["tiers"], "router": r["router"],
            "policy": r["policy"], "cost": f"{r['cost_per_hour']:,.2f}",
            "in": "-" if r["usd_per_million_input"] is None else f"{r['usd_per_million_input']:,.3f}",
            "out": "-" if r["usd_per_million_output"] is None else f"{r['usd_per_million_output']:,.2f}",
            "good": "-" if r["goodput_per_s"] is None else f"{r['goodput_per_s']:,.3f}",
            "binding": (f"{b.get('objective')} {seconds_text(b.get('value_s', 0))} / {seconds_text(b.get('limit_s', 0))} "
                        f"(window from {seconds_text(b.get('window_start_s', 0))})" if b else "-"),
            "centre": "-" if r.get("instances_at_centre") is None else str(r["instances_at_centre"]),
            "hit": f"{100 * r['hit_rate']:.2f}",
            "att": "-" if r["attainment"] is None else f"{100 * r['attainment']:.1f}"}


WHERE = {"pessimistic": "the pessimistic end of the time model's band (where it has one)",
         "centre": "the centre of the time model's band"}
COLUMNS = [("rank", ""), ("gpu", "instances x TP x GPU"), ("centre", "at band centre"), ("tiers", "tiers"),
           ("router", "router"), ("policy", "policy"),
           ("cost", "USD/h"), ("in", "USD/M input"), ("out", "USD/M output"), ("hit", "hit rate %"),
           ("good", "goodput req/s"), ("att", "SLO met %"),
           ("binding", "binding objective (worst window)")]


def tier_verdict(v: dict) -> str:
    """What a passing tier does against HBM only: the GPUs it saves, and the USD/h either way."""
    gpus = f"{v['gpus_saved']:,} GPU{'' if v['gpus_saved'] == 1 else 's'}"
    if v["saves_per_hour"] >= 0:
        return f"saves {gpus} and {v['saves_per_hour']:,.2f} USD/h"
    return f"saves {gpus} and costs {-v['saves_per_hour']:,.2f} USD/h more"


def tier_line(t: dict) -> str:
    v = t["versus_none"]
    head = f"tiers {t['tiers']} on {t['config'].split(',')[0]}: "
    if v is None:
        return head + f"{t['instances']} instances, {t['cost_per_hour']:,.2f} USD/h (HBM only did not pass)"
    if not t["meets"]:
        return head + (f"misses the SLOs at the {t['instances']} instances HBM only needs (TTFT p90 "
                       f"{seconds_text(t['ttft_p90_s'])} against {seconds_text(v['ttft_p90_s'])}): it saves no GPU")
    return head + (f"{t['instances']} instances at {t['cost_per_hour']:,.2f} USD/h against {v['instances']} without "
                   f"tiers at {v['cost_per_hour']:,.2f}: {tier_verdict(v)}; TTFT p90 "
                   f"{seconds_text(v['ttft_p90_with_tiers_s'])} against {seconds_text(v['ttft_p90_s'])} (whole trace)")


def plan_text(trace, result: dict) -> str:
    lines = [f"plan       {trace_name(trace)}: the cheapest deployment meeting {result['slo']} in every window, "
             f"judged at {WHERE[result['judged_at']]}; {result['pricing']} prices",
             f"search     {result['runs']:,} simulations, {result['cache_hits']:,} answered from memory"
             + (f", {result['disk_hits']:,} from {result['cache_dir']}" if result.get("cache_dir") else "")
             + (" (configurations searched in parallel: none pruned)" if result.get("parallel") else "") + "; "
             + ("monotonicity held on every run (more instances never missed an SLO fewer met)"
                if not result["monotonicity_violations"] else
                f"{len(result['monotonicity_violations'])} monotonicity violations: "
                + "; ".join(f"{v['config']} at {v['load']:g} ({v['load_kind']}) passes at {v['passes_at']} but fails at {v['fails_at']}"
                            for v in result["monotonicity_violations"][:3]))]
    note = result.get("kv_semantics")
    if note:  # a hybrid model: its configurations' semantics (a warning when they serve it as full attention)
        lines.append(("semantics  " if note["semantics"] == "hybrid" else "warning    KV semantics: ") + note["text"])
    lines += [f"warning    calibration: {text}" for text in result.get("calibration_warnings") or ()]
    for block in result["loads"]:
        lines.append("")
        what = f"load x{block['load']:g}" if block["load_kind"] == "speedup" else f"Poisson {block['load']:g} requests/s"
        head = f"{what}: {block['evaluated']} configurations searched, {block['pruned']} pruned " \
               "(even their fewest possible instances cost more than the best)"
        lines.append(head + (f", {len(block['skipped'])} skipped" if block["skipped"] else ""))
        if block["best"] is None:
            c = block.get("closest")
            lines.append("  no configuration meets the SLOs" + (f"; closest: {c['config']} at {c['instances']} "
                                                                  f"instances: {c['why']}" if c else ""))
        else:
            rows = [_row(block["best"], "best")] + [_row(r, str(k + 2)) for k, r in enumerate(block["runners_up"])]
            lines.append(format_table(rows, COLUMNS))
            best = block["best"]
            lines.append(f"  judged {best['judged_at']}; windows of {seconds_text(best['window_s'])}; prices: "
                         + "; ".join(f"{k} {v}" for k, v in best["price_sources"].items()))
            if best.get("cache_saved_per_hour") is not None:
                lines.append(f"  the prefix cache saves about {best['cache_saved_per_hour']:,.2f} USD/h of prefill "
                             f"(hit tokens x {1e6 * best['prefill_seconds_per_token']:.1f} us per token in a full "
                             "prefill step x the instance's price)")
        for t in block["tier_economics"]:
            lines.append("  " + tier_line(t))
        for s in block["skipped"]:
            lines.append(f"  skipped {s['config']}: {s['reason']}")
    return "\n".join(lines)
