"""Plain-text rendering of results for the terminal: run summaries, budgets, table columns."""

from __future__ import annotations

from ..policies.registry import get_policy

def metrics_summary(m: dict) -> str:
    pct = m["request_hit_rate_percentiles"]
    money = m["money"]
    speed = m["ideal_prefill_speedup"]
    lines = [
        "speedup   ideal prefill speedup " + ("infinite" if speed is None else f"{speed:.2f}x") + " = 1/(1 - hit rate)",
        f"requests  per-request hit rate p50 {100 * pct['p50']:.1f}%, p90 {100 * pct['p90']:.1f}%, p99 {100 * pct['p99']:.1f}% "
        "(each request counted once)",
        f"cost      input USD {money['cost_without_cache']:,.2f} without cache, {money['cost_with_cache']:,.2f} with it, "
        f"saved {money['saved']:,.2f} (at USD {money['price_hit_per_million']} hit / {money['price_miss_per_million']} miss "
        "per million tokens)",
    ]
    if "prefill_flops_saved" in m:
        lines.append(f"compute   prefill FLOPs saved ~ {m['prefill_flops_saved']:.3g} "
                     f"(2 x {m['active_params']:,} active parameters x hit tokens)")
    return "\n".join(lines)


def over_time_table(windows: list[dict]) -> str:
    from .table import format_table

    if windows and "first_request" in windows[0]:
        rows = [dict(w, span=f"requests {w['first_request']}-{w['last_request']}") for w in windows]
    else:
        rows = [dict(w, span=f"{w['start_s']:,.0f}-{w['end_s']:,.0f} s") for w in windows]
    return "hit rate over time (token-weighted per window):\n" + format_table(
        rows, [("span", "window"), ("requests", "requests"), ("hit_tokens", "hit tokens"), ("prompt_tokens", "prompt tokens"),
               ("hit_rate", "hit rate %")])


def semantics_lines(report, budget) -> list[str]:
    """What a hit means for the model: hybrid (every layer group must serve it) or full."""
    model = (budget or {}).get("model")
    hybrid = report.kv_semantics
    if hybrid:
        groups = budget['kv_layout'] if budget else ', '.join(g['kind'] for g in hybrid['groups'])
        if hybrid["engine"] == "sglang":
            return [f"kv        hybrid semantics: SGLang 0.5.23's UnifiedRadixCache over {model or 'the given groups'}'s "
                    f"layer groups ({groups}); a match must end where every component (window KV, Mamba state) is "
                    "live; --kv-semantics full replays every layer as full attention"]
        return [f"kv        hybrid semantics: vLLM 0.33.0's hybrid manager over {model or 'the given groups'}'s layer "
                f"groups ({groups}); a hit "
                "is the longest prefix every group can serve; sliding-window and Mamba groups cache only what a hit at "
                "a prompt's end or a shared prefix needs (prefix_cache_retention_interval "
                f"{hybrid['retention']}); --kv-semantics full replays every layer as full attention"] + _block_note(budget)
    if model:
        from ..analysis.models import get_model

        if get_model(model).is_hybrid:
            return [f"kv        full semantics: every layer of {model} treated as full attention (its sliding-window, "
                    "chunked-local or Mamba groups are not modelled; --policy vllm --kv-semantics hybrid models them)"]
    return []


def _block_note(budget) -> list[str]:
    vllm_bs = (budget or {}).get("vllm_block_size")
    if not vllm_bs or vllm_bs == budget["block_size"]:
        return []
    return [f"          vLLM 0.33.0 would use {vllm_bs}-token blocks for {budget['model']} (an attention page must hold "
            f"a Mamba state); this trace's hash ids are {budget['block_size']}-token blocks, so hits and states are "
            f"counted at {budget['block_size']}: re-hash a token log with kvreplay hash --block-size {vllm_bs} for "
            "vLLM's own granularity"]


def run_summary(trace, report, budget=None) -> str:
    params = ", ".join(f"{k}={v}" for k, v in report.params.items())
    sizes = ", ".join(f"{k}={v}" for k, v in report.sizes.items())
    detail = "; ".join(x for x in (params, sizes) if x)
    lines = [
        f"trace     {trace.source}: {len(trace):,} requests, {trace.total_prompt_tokens:,} prompt tokens, "
        f"{trace.num_accesses:,} block accesses, {trace.num_blocks:,} unique blocks",
        f"policy    {report.policy}" + (f" ({detail})" if detail else ""),
        *semantics_lines(report, budget),
        f"cache     {report.cache_capacity_blocks:,} blocks x {report.block_size} tokens" + budget_summary(budget),
        f"window    {report.window}",
        f"hits      {report.total_hit_tokens:,} of {report.total_prompt_tokens:,} prompt tokens = "
        f"{100 * report.hit_rate:.2f}% (token-weighted)",
        f"final     {report.final_cache_blocks:,} blocks resident",
        "counters  " + ", ".join(f"{k}={v:,}" for k, v in report.counters.items()),
    ]
    lines += explanations(trace, report) + get_policy(report.policy).notes(report)
    if report.invalid_records:
        inv = report.invalid_records
        lines.append(f"skipped   {inv['count']:,} invalid records (first lines: {', '.join(map(str, inv['first_lines']))})")
    if report.block_size_mismatches:
        miss = report.block_size_mismatches
        lines.append(f"misfit    {miss['count']:,} of {report.num_requests:,} requests have a number of hash ids that does not "
                     f"fit their input_length at {report.block_size}-token blocks (first requests, 0-based: "
                     f"{', '.join(map(str, miss['first_requests']))}); their hits are capped at input_length")
    return "\n".join(lines)


def explanations(trace, report) -> list[str]:
    """Lines that explain surprising but correct figures, where they appear."""
    lines = []
    n = report.oversize_requests
    if n:
        measured = report.num_requests - report.warmup_requests
        lines.append(
            f"oversize  {n:,} of {measured:,} requests ({100 * n / measured:.1f}%) need more than the cache's "
            f"{report.cache_capacity_blocks:,} blocks (ceil(input_length / block_size)): a serving engine could not run "
            "them (radix refuses them, vllm holds the whole cache, other policies let them evict their own blocks); "
            "size the cache for the longest prompt, or read these hits with care")
    cap = report.cache_capacity_blocks
    below = get_policy(report.policy).below_capacity
    if report.final_cache_blocks < 0.9 * cap and trace.num_blocks >= cap and below:
        lines.append(f"note      {report.final_cache_blocks:,} of {cap:,} blocks resident at the end "
                     f"({100 * report.final_cache_blocks / cap:.0f}%): {below}")
    return lines


def budget_summary(budget) -> str:
    """The run summary's byte budget, after the block count (empty without one)."""
    if budget is None:
        return ""
    from ..analysis.models import budget_text, format_bytes

    point = budget["capacities"][0]
    asked = f"; budget {point['requested']} = {point['budget_bytes']:,} B" if "requested" in point else ""
    return f" = {format_bytes(point['cache_bytes'])} ({point['cache_bytes']:,} B) of KV{asked}\n          {budget_text(budget)}"


def with_budget(rows: list[dict], columns, budget):
    """Terminal table rows and columns with each capacity's KV size ("16 GiB") next to its block
    count. For people only: CSV, JSON and Parquet carry kv_bytes (an integer) and kv_gib."""
    if budget is None:
        return rows, columns
    from ..analysis.models import format_bytes

    per_block = budget["bytes_per_block"]
    rows = [dict(r, kv_size=format_bytes(r["cache_capacity_blocks"] * per_block)) for r in rows]
    at = [key for key, _ in columns].index("cache_capacity_blocks") + 1
    return rows, list(columns[:at]) + [("kv_size", "KV bytes")] + list(columns[at:])


def budget_heading(budget) -> str:
    from ..analysis.models import budget_text, get_model

    if budget is None:
        return ""
    text = "\n" + budget_text(budget)
    if budget.get("kv_semantics") == "hybrid":
        from ..catalog.kv_groups import ENGINES

        text += (f"\nkv semantics: hybrid ({ENGINES[budget['kv_engine']]}: a hit is the longest prefix every layer "
                 "group serves)")
    elif budget.get("model") and get_model(budget["model"]).is_hybrid:
        text += ("\nkv semantics: full (every layer as full attention; --policies vllm replays vLLM's hybrid manager "
                 "over the model's layer groups)")
    return text


def full_semantics_note(model) -> str | None:
    """For a hybrid `model` replayed with every layer as full attention (mrc, report): what that
    leaves out and which command replays its groups. None for a model with one kind of layer."""
    from ..catalog.kv_groups import resolve_semantics
    from ..analysis.models import get_model

    if model is None or not get_model(model).is_hybrid:
        return None
    spec = get_model(model)
    kinds = ", ".join(sorted({g["kind"] for g in spec.kv_groups}))
    if resolve_semantics(spec.name, None) == "full":  # Llama 4: vLLM 0.33.0's own default
        return (f"{spec.name} has {kinds} layer groups. vLLM 0.33.0 serves its chunked-local layers as full "
                "attention unless VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1, as every replay here does.")
    return (f"{spec.name} has {kinds} layer groups, but every replay here (and simulation, in a report) serves every "
            f"layer as full attention (its KV bytes and its hits). `kvreplay run --model {spec.name}` and `kvreplay "
            f"sweep --policies vllm --model {spec.name}` replay vLLM's hybrid manager over its groups, and `kvreplay "
            f"simulate --model {spec.name}` serves them with it (docs/policies.md, 'Hybrid models').")


SWEEP_COLUMNS = [
    ("policy", "policy"), ("params", "params"), ("cache_capacity_blocks", "capacity"),
    ("total_hit_tokens", "hit tokens"), ("total_prompt_tokens", "prompt tokens"),
    ("hit_rate", "hit rate %"), ("first_use_share", "first use %"), ("evicted_share", "evicted %"),
    ("behind_hole_share", "behind hole %"), ("final_cache_blocks", "final blocks"),
]


MRC_COLUMNS = [
    ("cache_capacity_blocks", "capacity"), ("total_hit_tokens", "hit tokens"), ("total_prompt_tokens", "prompt tokens"),
    ("hit_rate", "hit rate %"), ("final_cache_blocks", "final blocks"), ("admissions", "admissions"),
]
