"""`kvreplay plan`'s rows: one per configuration tried at a load, with its verdict and why it lost
(plan.py searches; this file says what each search found).

Verdicts: ``meets`` (the cheapest is ``chosen``; the others cost more), ``misses`` (searched to its
end: --max-instances, or requests it cannot serve), ``unreachable`` (a floor that holds on any
number of instances is above a limit: floors.py), ``pruned`` (even the fewest instances it could
still need cost at least the best found), ``unfit`` (vLLM would not start the model on its GPUs:
fit.py) and ``skipped`` (no price). Rows are sorted by cost, those without one last.
"""

from __future__ import annotations

import math


VERDICT_ORDER = {"meets": 0, "misses": 1, "unreachable": 2, "pruned": 3, "unfit": 4, "skipped": 5}


def load_text(kind: str, value: float) -> str:
    """A plan's load in words: "load x2", "Poisson 3 requests/s", "32 concurrent sessions"."""
    if kind == "speedup":
        return f"load x{value:g}"
    if kind == "rate":
        return f"Poisson {value:g} requests/s"
    return f"{int(value):,} concurrent sessions"


def config_columns(c) -> dict:
    return {"config": c.text(), "gpu": c.gpu, "tp": c.tp, "tiers": c.tiers or "none", "router": c.router,
            "policy": c.policy or "vllm", "policy_asked": c.policy}


def pruned(c, instances: int, per_instance: float, best: float, missed_at: int | None = None,
           binding: dict | None = None) -> dict:
    """A configuration stopped on cost: at `instances`, the fewest it could still need (it missed
    at `missed_at`, the most below the best's cost, in `binding`'s window)."""
    return {**config_columns(c), "verdict": "pruned", "pruned_by": "cost", "instances": instances,
            "gpus": instances * c.tp, "cost_per_hour": per_instance * instances, "missed_at": missed_at,
            "binding": binding, "why": _pruned_why(missed_at, binding, instances, per_instance * instances, best)}


def _pruned_why(missed_at, binding, instances: int, cost: float, best: float) -> str:
    missed = (f"it misses at {_count(missed_at)} ({binding_text(binding)}), and " if missed_at is not None else "")
    return (f"{missed}{_count(instances)}, the fewest it could still need, cost {cost:,.2f} USD/h, not below the "
            f"best ({best:,.2f} USD/h)")


def _count(n: int) -> str:
    return f"{n} instance" + ("" if n == 1 else "s")


def unreachable(c, per_instance: float, floor: dict) -> dict:
    return {**config_columns(c), "verdict": "unreachable", "pruned_by": "floor", "instances": None,
            "cost_per_hour": per_instance, "floor": floor, "binding": floor,
            "why": floor_text(c.gpu, c.tp, floor)}


def floor_text(gpu: str, tp: int, floor: dict) -> str:
    """Why no instance count can pass: the floor's window and value."""
    what = {"TTFT p90": "TTFT p90", "TPOT p90": "TPOT p90", "E2E p99": "end-to-end p99"}[floor["objective"]]
    hit = ("the longest prefix earlier arrivals touched" if floor.get("hit") == "earlier arrivals"
           else "the longest prefix any other request holds")
    return (f"{what} cannot go below {floor['value_s']:.3g} s on {gpu} x{tp} in {window_text(floor)}: each request's "
            f"prefill alone on an idle instance, with every prefix hit an infinite cache could give ({hit}), no "
            f"queue and no other request in its steps, at the {floor['judged_at']} (limit {floor['limit_s']:g} s); "
            "more instances cannot help")


def window_text(b: dict) -> str:
    """"the window 300-600 s (1,020 requests)", or merged windows."""
    merged = b.get("windows_merged", 1)
    span = f"{b['window_start_s']:,.0f}-{b['window_end_s']:,.0f} s"
    return (f"the window {span} ({b['requests']:,} requests" + (f", {merged} windows merged" if merged > 1 else "")
            + ")")


def binding_text(b: dict | None) -> str:
    if not b:
        return "no finished request to judge"
    return f"{b['objective']} {b['value_s']:.3g} s against {b['limit_s']:g} s in {window_text(b)}"


def summarise(load: tuple, block: dict, unfit: list, runners_up: int) -> dict:
    """One load's block of the plan: the best, its runners-up, every configuration's row sorted
    by cost with its verdict and why, tier economics, the probes behind the plot, and (when none
    passes) the closest miss."""
    results = block["results"]
    passing = sorted((r for r in results if r["meets"]), key=lambda r: r["cost_per_hour"])
    best = passing[0] if passing else None
    for r in block["pruned"]:  # said against the final best (never above the one it was pruned against)
        if best is not None and r.get("missed_at") is not None:
            r["why"] = _pruned_why(r["missed_at"], r["binding"], r["instances"], r["cost_per_hour"],
                                   best["cost_per_hour"])
        elif best is not None:
            r["why"] = _pruned_why(None, None, r["instances"], r["cost_per_hour"], best["cost_per_hour"])
    for r in results:
        r["chosen"] = r is best
        r["verdict"] = "meets" if r["meets"] else "misses"
        r["why"] = _why_meets(r, best) if r["meets"] else why_misses(r)
    rows = results + block["pruned"] + block["unreachable"]
    rows += [{**config_columns(c), "verdict": "unfit", "why": reason} for c, reason in unfit]
    rows += [{**config_columns(k["config"]), "verdict": "skipped", "why": k["reason"]} for k in block["skipped"]]
    rows.sort(key=lambda r: (r.get("cost_per_hour") is None, r.get("cost_per_hour") or 0.0,
                             VERDICT_ORDER[r["verdict"]]))
    counts = {v: sum(1 for r in rows if r["verdict"] == v) for v in VERDICT_ORDER}
    out = {"load_kind": load[0], "load": load[1], "best": best, "runners_up": passing[1:1 + runners_up],
           "counts": counts, "pruned": counts["pruned"], "evaluated": len(results),
           "skipped": [{"config": k["config"].text(), "reason": k["reason"]} for k in block["skipped"]],
           "tier_economics": tier_economics(results), "tried": rows,
           "probes": sorted(block["probes"], key=lambda p: (p["config"], p["instances"]))}
    if best is None:
        out["closest"] = closest(results, block["unreachable"])
    return out


def _why_meets(r: dict, best: dict) -> str:
    if r is best:
        return (f"the cheapest that meets every SLO, at {_count(r['instances'])} ({r['judged_at']}): "
                + binding_text(r["binding"]))
    return (f"meets at {_count(r['instances'])} for {r['cost_per_hour']:,.2f} USD/h, "
            f"{r['cost_per_hour'] - best['cost_per_hour']:,.2f} USD/h more than the chosen")


def why_misses(r: dict) -> str:
    if r["unserved_requests"]:
        parts = []
        if r.get("refused_context"):
            parts.append(f"{r['refused_context']:,} refused at arrival (prompt + outputs past max_model_len)")
        if r.get("rejected"):
            parts.append(f"{r['rejected']:,} rejected (they never fit an instance's pool)")
        return (f"{r['unserved_requests']:,} requests cannot be served at all on {r['gpu']} x{r['tp']} ("
                + ("; ".join(parts) or "past the pool or max_model_len") + "): more instances do not help")
    floor = r.get("floor_in_binding_s")
    why = (f"; no instance count goes below {floor:.3g} s in that window (its floor), so more instances may or may "
           "not reach the limit" if floor is not None else "; the trace's peak may need more instances")
    return f"at {r['instances']} instances (--max-instances) it still misses: " + binding_text(r["binding"]) + why


def tier_economics(results: list) -> list:
    """Per searched configuration with tiers: what it costs against the same GPU, TP, router and
    policy without them (the GPUs the tier saves and their price, and the TTFT each gets). A tiered
    configuration is searched up to its HBM-only twin's count, so one that misses there saves none."""
    plain = {(r["gpu"], r["tp"], r["router"], r["policy_asked"]): r for r in results
             if r["tiers"] == "none" and r["meets"]}
    out = []
    for r in results:
        if r["tiers"] == "none":
            continue
        base = plain.get((r["gpu"], r["tp"], r["router"], r["policy_asked"]))
        if base is None and not r["meets"]:
            continue
        row = {"config": r["config"], "tiers": r["tiers"], "instances": r["instances"], "meets": r["meets"],
               "cost_per_hour": r["cost_per_hour"], "ttft_p90_s": r["ttft_p90_s"]}
        if base is None:
            row["versus_none"] = None  # HBM only did not pass, or was pruned before it was searched
        else:
            saved = base["gpus"] - r["gpus"] if r["meets"] else 0
            row["versus_none"] = {"instances": base["instances"], "cost_per_hour": base["cost_per_hour"],
                                  "gpus_saved": saved,
                                  "saves_per_hour": base["cost_per_hour"] - r["cost_per_hour"] if r["meets"] else None,
                                  "ttft_p90_s": base["ttft_p90_s"], "ttft_p90_with_tiers_s": r["ttft_p90_s"],
                                  "same_instances": r["instances"] == base["instances"]}
        out.append(row)
    return out


def closest(results: list, unreachable: list) -> dict | None:
    """No configuration met the SLOs: the nearest miss among those searched (fewest unserved, then
    the smallest ratio to its limit), else the unreachable one with the lowest floor."""
    if results:
        return min(results, key=lambda r: (r["unserved_requests"], (r["binding"] or {}).get("ratio", math.inf)))
    if unreachable:
        return min(unreachable, key=lambda r: r["floor"]["ratio"])
    return None
