"""Advice that follows from the numbers: at most three sentences, each with its figure, each
derived from the miss account, the headroom or a replay that checks it (docs/metrics.md,
"Advice").

Every candidate sentence concerns some missed tokens; the three that concern the most are kept,
in that order. The candidates and their figures:

- first uses (compulsory misses): their share of the missed tokens, when at least 25%;
- a cache twice as large: the hit rate of a replay at 2x the capacity (same policy), when it
  gains at least half a point, with the share of the evicted tokens whose reuse distance is
  within 2x the capacity;
- the eviction order: belady at the same capacity (the headroom's policy gap), when at least 2
  points;
- holes: the tokens that sat in the cache behind an earlier miss, with the stranded share of the
  pool (mean over the samples), when at least 1% of the misses;
- partial blocks, namespaces, layer groups, concurrency: their share of the missed tokens, when
  at least 5%.
"""

from __future__ import annotations

from ..engine.replay import replay

MAX_SENTENCES = 3


def _share(part: int, whole: int) -> float:
    return 100 * part / whole if whole else 0.0


def advice(trace, report, *, headroom: dict | None = None, engine: str = "compiled", totals: dict | None = None,
           stranded_mean: float | None = None, stranded_by_policy: dict | None = None) -> list[str]:
    """At most three sentences for `report` (a replay of `trace` with its miss account). totals:
    the account's totals to use (default: the report's). stranded_by_policy: policy -> its mean
    stranded share (%) at the same capacity (the HTML report's policies): the holes' sentence
    compares them."""
    account = report.misses
    if account is None:
        return []
    totals = totals or account.totals()
    missed = sum(totals.values())
    if missed == 0:
        return []
    cap = report.cache_capacity_blocks
    out: list[tuple[int, str]] = []
    first = totals["first_use"]
    if _share(first, missed) >= 25:
        out.append((first, f"{_share(first, missed):.0f}% of the missed tokens are first uses (content never seen "
                           "before): no cache size helps them"))
    if totals["evicted"] and report.policy not in ("infinite",):
        bigger = replay(trace, report.policy, 2 * cap, report.block_size, engine=engine, miss_account=False,
                        warmup_fraction=0.0, **report.params)
        window = slice(report.warmup_requests, None)
        gain = int(bigger.hit_tokens[window].sum()) - report.total_hit_tokens
        points = _share(gain, report.total_prompt_tokens)
        if points >= 0.5:
            within = account.evicted["reuse_distance_within"]["2x"]
            out.append((gain, f"a 2x cache ({2 * cap:,} blocks) recovers {points:.1f} points "
                              f"({100 * report.hit_rate:.1f}% -> {100 * (report.hit_rate + points / 100):.1f}%, a replay "
                              f"of {report.policy} at that size); {_share(within, totals['evicted']):.0f}% of the evicted "
                              "tokens had a reuse distance within 2x the capacity"))
    if headroom is not None and headroom["gaps"]["policy"]["points"] >= 2:
        gap = headroom["gaps"]["policy"]
        out.append((gap["tokens"], f"belady's eviction order at the same {cap:,} blocks reaches "
                                   f"{100 * headroom['levels']['belady']['hit_rate']:.1f}%: {gap['points']:.1f} points "
                                   f"are {report.policy}'s order, not the cache's size"))
    hole = totals["behind_hole"]
    if _share(hole, missed) >= 1:
        text = f"{_share(hole, missed):.1f}% of the missed tokens sat in the cache behind an earlier miss"
        if stranded_by_policy and len(stranded_by_policy) > 1:
            ranked = sorted(stranded_by_policy.items(), key=lambda kv: -kv[1])
            text += "; on average " + ", ".join(f"{v:.0f}% of the pool is stranded under {k}" if i == 0 else
                                                f"{v:.0f}% under {k}" for i, (k, v) in enumerate(ranked))
        elif stranded_mean is not None:
            text += f", and {stranded_mean:.0f}% of the pool is stranded on average under {report.policy}"
        out.append((hole, text + ": a chain-aware order (vllm, lru-tail: a request's tail evicted first) keeps "
                                 "prefixes whole"))
    for cause, text in (("partial_block", "are partial last blocks the engine never serves"),
                        ("namespace", "are content cached under another namespace: sharing it across namespaces "
                                      "would hit"),
                        ("layer_groups", "were held by full attention but not by a sliding-window or Mamba group"),
                        ("concurrency", "hit in the sequential replay but not under load: more KV memory per "
                                        "running request, or less load, gets them back")):
        if cause not in account.not_measured and _share(totals.get(cause, 0), missed) >= 5:
            out.append((totals[cause], f"{_share(totals[cause], missed):.0f}% of the missed tokens {text}"))
    out.sort(key=lambda item: -item[0])
    return [text[0].upper() + text[1:] + "." for _, text in out[:MAX_SENTENCES]]


def stranded_mean(report) -> float | None:
    """The mean stranded share of the capacity over the account's samples, in percent."""
    samples = report.misses.stranded if report.misses is not None else None
    if not samples or not samples["stranded_blocks"]:
        return None
    s = samples["stranded_blocks"]
    return 100 * sum(s) / len(s) / report.cache_capacity_blocks
