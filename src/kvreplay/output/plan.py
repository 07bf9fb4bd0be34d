"""`kvreplay plan`'s table: per load, every configuration tried, cheapest first, with its verdict,
the instances it needs at each end of the time model's band, the binding window and why it lost."""

from __future__ import annotations

from ..serving.plan_rows import load_text
from ..serving.timing.memory import VLLM_GPU_MEMORY_UTILIZATION
from .serving import seconds_text, trace_name
from .table import format_table


def band_cell(r: dict) -> str:
    """"7 / 8 / 11": the fewest instances at the band's optimistic end, centre and pessimistic end."""
    b = r.get("instances_band")
    if not b:
        return "-"
    return " / ".join("-" if b[k] is None else str(b[k]) for k in ("low", "centre", "high"))


def binding_cell(b: dict | None) -> str:
    if not b:
        return "-"
    merged = b.get("windows_merged", 1)
    return (f"{b['objective']} {seconds_text(b['value_s'])} / {seconds_text(b['limit_s'])}, "
            f"{b['window_start_s']:,.0f}-{b['window_end_s']:,.0f} s, {b['requests']:,} req"
            + (f" ({merged} windows)" if merged > 1 else ""))


def shape(r: dict) -> str:
    """One instance's GPUs: "8 x H100", or with pipeline stages "2 stages x 8 x H100"."""
    stages = f"{r['pp']} stages x " if r.get("pp", 1) > 1 else ""
    return f"{stages}{r['tp']} x {r['gpu']}"


def _row(r: dict, rank: str) -> dict:
    n = r.get("instances")
    searched = r["verdict"] in ("meets", "misses")
    return {"rank": rank, "verdict": "chosen" if rank == "best" else r["verdict"],
            "gpu": f"{'-' if n is None else n} x {shape(r)}",
            "tiers": r["tiers"], "router": r["router"], "policy": r["policy"],
            "cost": "-" if r.get("cost_per_hour") is None else f"{r['cost_per_hour']:,.2f}",
            "band": band_cell(r),
            "in": "-" if not searched or r["usd_per_million_input"] is None else f"{r['usd_per_million_input']:,.3f}",
            "hit": f"{100 * r['hit_rate']:.2f}" if searched else "-",
            "good": "-" if not searched or r["goodput_per_s"] is None else f"{r['goodput_per_s']:,.3f}",
            "att": "-" if not searched or r["attainment"] is None else f"{100 * r['attainment']:.1f}",
            "binding": (f"at {r['missed_at']}: " if r.get("missed_at") else "") + binding_cell(r.get("binding"))}


WHERE = {"pessimistic": "the pessimistic end of the time model's band (where it has one)",
         "centre": "the centre of the time model's band"}
COLUMNS = [("rank", ""), ("verdict", "verdict"), ("gpu", "instances x TP x GPU"),
           ("band", "instances low / centre / high"), ("tiers", "tiers"), ("router", "router"), ("policy", "policy"),
           ("cost", "USD/h"), ("in", "USD/M input"), ("hit", "hit rate %"), ("good", "goodput req/s"),
           ("att", "SLO met %"), ("binding", "binding window (objective value / limit, window, requests)")]


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
                   f"{seconds_text(v['ttft_p90_with_tiers_s'])} against {seconds_text(v['ttft_p90_s'])} (judged span)")


def counts_text(block: dict) -> str:
    c = block["counts"]
    words = {"meets": ("meets the SLOs", "meet the SLOs"),
             "misses": ("misses at the most instances searched", "miss at the most instances searched"),
             "unreachable": ("cannot meet them on any number of instances",) * 2, "pruned": ("pruned on cost",) * 2,
             "unfit": ("unfit (vLLM would not start the model)",) * 2, "skipped": ("skipped",) * 2}
    total = sum(c.values())
    return (f"{total} configuration{'' if total == 1 else 's'} tried: "
            + ", ".join(f"{c[k]} {words[k][c[k] != 1]}" for k in words if c[k]))


def judged_text(result: dict, block: dict) -> str:
    """The warm-up and the windows of the chosen (or closest) run, in words."""
    r = block["best"] or block.get("closest") or {}
    warm = r.get("warmup")
    lines = []
    if r.get("judged_requests") is not None:
        lines.append(f"  judged     {r['judged_requests']:,} requests arriving from {r['judged_start_s']:,.0f} s; "
                     + (f"warm-up {warm['text']}" if warm else "no warm-up: judged from an empty cache"))
    for name, text in (r.get("window_grouping") or {}).items():
        lines.append(f"  windows    {name}: {text}")
    return "\n".join(lines)


def plan_text(trace, result: dict) -> str:
    lines = [f"plan       {trace_name(trace)}: the cheapest deployment meeting {result['slo']} in every window of "
             f"the judged span, judged at {WHERE[result['judged_at']]}; {result['pricing']} prices",
             f"warm-up    --warmup {result.get('warmup_spec', 'auto')}: each run serves its first arrivals without "
             "judging them (the cache and queues warm up as in production); --warmup 0 judges a cold start",
             *([f"arrivals   {result['arrivals']}"] if result.get("arrivals") else []),
             f"search     {result['runs']:,} simulations, {result['cache_hits']:,} answered from memory"
             + (f", {result['disk_hits']:,} from {result['cache_dir']}" if result.get("cache_dir") else "")
             + (" (configurations searched in parallel: none pruned on cost)" if result.get("parallel") else "") + "; "
             + ("monotonicity held on every run (more instances never missed an SLO fewer met)"
                if not result["monotonicity_violations"] else
                f"{len(result['monotonicity_violations'])} monotonicity violations: "
                + "; ".join(f"{v['config']} at {v['load']:g} ({v['load_kind']}) passes at {v['passes_at']} but fails at {v['fails_at']}"
                            for v in result["monotonicity_violations"][:3]))]
    util = (result.get("run_options") or {}).get("gpu_memory_utilization")
    if util is not None:
        lines.append(f"pools      each instance's KV pool as vLLM 0.33.0 sizes it at --gpu-memory-utilization {util:g}"
                     + (" (its default)" if util == VLLM_GPU_MEMORY_UTILIZATION else ""))
    note = result.get("kv_semantics")
    if note:  # a hybrid model: its configurations' semantics (a warning when they serve it as full attention)
        lines.append(("semantics  " if note["semantics"] == "hybrid" else "warning    KV semantics: ") + note["text"])
    lines += [f"warning    calibration: {text}" for text in result.get("calibration_warnings") or ()]
    for block in result["loads"]:
        lines.append("")
        what = load_text(block["load_kind"], block["load"])
        lines.append(f"{what}: {counts_text(block)}")
        if block["load_kind"] == "sessions":
            lines.append("  floors     none: a closed loop's arrivals are its run's, so no bound holds before it; every "
                         "configuration is searched")
        lines += _load_lines(block)
        judged = judged_text(result, block)
        if judged:
            lines.append(judged)
    if result.get("capacity"):
        lines.append("")
        lines += [f"capacity   {c['text']}" for c in result["capacity"]]
    return "\n".join(lines)


def _load_lines(block: dict) -> list[str]:
    lines = []
    best = block["best"]
    if best is None:
        c = block.get("closest")
        lines.append("  no configuration meets the SLOs" + (f"; closest: {c['config']}: {c['why']}" if c else ""))
    ranked = [_row(r, "best" if r.get("chosen") else str(k + 1)) for k, r in enumerate(block["tried"])]
    lines.append(format_table(ranked, COLUMNS))
    if best is not None:
        lines.append(f"  chosen     {best['instances']} x {shape(best)} ({best['gpus']} GPU"
                     f"{'' if best['gpus'] == 1 else 's'}), "
                     f"{best['cost_per_hour']:,.2f} USD/h; judged at the {best['judged_at']}"
                     + (f"; at the band's optimistic end {best['instances_at_low']}, centre {best['instances_at_centre']}"
                        f", pessimistic end {best['instances_at_high'] if best['instances_at_high'] is not None else 'over --max-instances'}"
                        " instances" if best.get("instances_band") else ""))
        lines.append(f"  prices     " + "; ".join(f"{k} {v}" for k, v in best["price_sources"].items()))
        if best.get("cache_saved_per_hour") is not None:
            lines.append(f"  cache      the prefix cache saves about {best['cache_saved_per_hour']:,.2f} USD/h of prefill "
                         f"(hit tokens x {1e6 * best['prefill_seconds_per_token']:.1f} us per token in a full "
                         "prefill step x the instance's price)")
    for t in block["tier_economics"]:
        lines.append("  " + tier_line(t))
    lines.append("  why:")
    for k, r in enumerate(block["tried"]):
        lines.append(f"  {k + 1:>3}  {r['config']}: {r['why']}")
    return lines
