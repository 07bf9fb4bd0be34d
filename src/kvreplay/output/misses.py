"""The miss account, the stranded blocks, the headroom and the advice, as terminal text (render
only: the figures come from engine/misses.py and analysis/)."""

from __future__ import annotations

from ..engine.misses import CAUSE_TEXT, CAUSES

LABEL = {"first_use": "first use", "evicted": "evicted", "behind_hole": "behind a hole",
         "partial_block": "partial block", "namespace": "namespace", "layer_groups": "layer groups",
         "concurrency": "concurrency"}


def _pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.2f}%" if whole else "-"


def misses_lines(totals: dict, not_measured: dict, prompt_tokens: int, evicted: dict | None = None,
                 detail: dict | None = None) -> list[str]:
    """The account's lines: every measured cause with its tokens and share of the prompt tokens,
    then what is not measured and why. `detail`: extra words per cause (e.g. concurrency's split)."""
    measured = [c for c in CAUSES if c not in not_measured]
    missed = sum(totals[c] for c in measured)
    lines = [f"misses    {missed:,} of {prompt_tokens:,} prompt tokens missed ({_pct(missed, prompt_tokens)}), by cause "
             "(tokens, share of the prompt tokens; docs/metrics.md, \"Why the cache missed\"):"]
    width = max(len(f"{totals[c]:,}") for c in measured) if measured else 1
    for c in measured:
        lines.append(f"          {LABEL[c]:<14} {totals[c]:>{width},} {_pct(totals[c], prompt_tokens):>7}  {CAUSE_TEXT[c]}")
        if c == "evicted" and evicted and evicted.get("tokens"):
            lines.append(" " * 26 + evicted_text(evicted))
        if detail and c in detail:
            lines.append(" " * 26 + detail[c])
    for c, why in not_measured.items():
        lines.append(f"          {LABEL[c]:<14} not measured: {why}")
    return lines


def evicted_text(evicted: dict) -> str:
    d, gone = evicted["reuse_distance_blocks"], evicted["gone_seconds"]
    within = evicted["reuse_distance_within"]
    share = lambda k: _pct(within[k], evicted["tokens"])  # noqa: E731
    return (f"reuse distance p50 {d['p50']:,.0f}, p90 {d['p90']:,.0f} blocks (an LRU cache that large keeps it); "
            f"within 1x / 2x / 4x the capacity: {share('1x')} / {share('2x')} / {share('4x')} of these tokens; "
            f"gone p50 {gone['p50']:,.0f} s, p90 {gone['p90']:,.0f} s")


def stranded_line(report) -> str | None:
    """Stranded blocks at the end and over the trace (the account's samples)."""
    samples = report.misses.stranded if report.misses is not None else None
    cap = report.cache_capacity_blocks
    text = (f"stranded  {report.stranded_blocks:,} of {report.final_cache_blocks:,} resident blocks at the end "
            f"({_pct(report.stranded_blocks, cap)} of the capacity) are unreachable: an earlier block of their chain "
            "is gone")
    if samples and samples["stranded_blocks"]:
        s = samples["stranded_blocks"]
        text += (f"; over the trace ({len(s)} samples): mean {100 * sum(s) / len(s) / cap:.1f}%, "
                 f"peak {100 * max(s) / cap:.1f}% of the capacity")
    return text


def headroom_lines(h: dict) -> list[str]:
    from ..analysis.headroom import headroom_sentence

    lv = h["levels"]
    line = (f"headroom  {headroom_sentence(h)} (ceiling: infinite cache {100 * lv['ceiling']['hit_rate']:.1f}%; "
            f"belady at this capacity {100 * lv['belady']['hit_rate']:.1f}%)")
    out = [line]
    if "prefill_gpu_seconds" in lv["ceiling"]:
        gaps = ", ".join(f"{k} {g['prefill_gpu_seconds']:,.0f}" if round(g["prefill_gpu_seconds"]) >= 0
                         else f"{k} gives back {-g['prefill_gpu_seconds']:,.0f}" for k, g in h["gaps"].items())
        yours = lv["served"] if "served" in lv else lv["policy"]
        out.append(f"          in GPU-seconds of prefill: {gaps} (your prefill {yours['prefill_gpu_seconds']:,.0f}, "
                   f"at the ceiling {lv['ceiling']['prefill_gpu_seconds']:,.0f}; {h['cost_note']})")
    return out


def advice_lines(sentences: list[str]) -> list[str]:
    return [("advice    " if i == 0 else "          ") + s for i, s in enumerate(sentences)]
