"""A plan's chosen deployments served again (`kvreplay report --plan`): each load's best, with the
plan's model, GPUs, TP, instances, router, policy, tiers, load, warm-up and time model, and its
band's three runs; judged as the plan judged it (the same SLOs, windows and band end), so the
report shows the deployment it recommends, and says whether it still meets the SLOs.
"""

from __future__ import annotations

from ..errors import ConfigError
from .slo import MIN_WINDOW_REQUESTS, SLO, judge


def deployment_of(plan: dict, best: dict) -> dict:
    """simulate()'s keywords for one chosen configuration of `plan` (a plan's JSON)."""
    opts = dict(plan.get("run_options") or {})
    odd = {k: v for k, v in opts.items() if isinstance(v, dict)}
    if odd:
        raise ConfigError(f"--plan: its runs used {', '.join(sorted(odd))} given as Python objects, which a report "
                          "cannot serve again; plan with named options (kvreplay plan) to report it")
    opts.setdefault("time_model", "roofline")
    return dict(policy=best["policy_asked"], model=plan["model"], gpu=best["gpu"], tp=best["tp"],
                **({"pp": best["pp"]} if best.get("pp", 1) > 1 else {}), instances=best["instances"], router=best["router"],
                tiers=None if best["tiers"] == "none" else best["tiers"], warmup=plan.get("warmup_spec", "auto"),
                **opts)


def unrecorded_utilization(plan: dict) -> str | None:
    """Why a vLLM-style plan's pools may differ when served again: it does not record the GPU memory
    utilization they were sized at (a plan of a kvreplay before plans recorded it, sized at that
    kvreplay's default, 0.9 before vLLM 0.33.0's 0.92 was followed); None when it does, or for
    another style."""
    from .timing.memory import vllm_utilization

    opts = plan.get("run_options") or {}
    if opts.get("engine_style", "vllm") != "vllm" or opts.get("gpu_memory_utilization") is not None:
        return None
    return (f"the plan does not record the GPU memory utilization its pools were sized at (a plan of an older "
            f"kvreplay, sized at its default, 0.9 before vLLM 0.33.0's 0.92 was followed): served again and deployed "
            f"at {vllm_utilization(None):g}, so its pools may be larger than the plan's; plan again to judge them")


def serve_plan(trace, plan: dict, progress=None) -> list[dict]:
    """Per load of `plan`: its chosen deployment served again (None where no configuration met the
    SLOs), the run's summary over the judged requests, and the SLO verdict at the band end the plan
    judged at and at the centre, with whether it agrees with the plan's. progress: a
    kvreplay.progress callback, told ``(done, total, "plan's loads served again")``."""
    from ..progress import tell
    from .plan import load_arguments
    from .simulate import simulate

    if "model" not in plan:
        raise ConfigError("--plan: written by an older kvreplay (it does not name its model); plan again")
    slo = SLO(**plan["slo_limits"])
    window_s, min_requests = plan.get("window_s"), plan.get("min_window_requests", MIN_WINDOW_REQUESTS)
    out = []
    stage = "plan's loads served again"
    tell(progress, 0, len(plan["loads"]), stage)
    for block in plan["loads"]:
        best = block["best"]
        row = {"load_kind": block["load_kind"], "load": block["load"], "best": best}
        if best is None:
            out.append(row)
            tell(progress, len(out), len(plan["loads"]), stage)
            continue
        kw = deployment_of(plan, best)
        load = {k: v for k, v in load_arguments((block["load_kind"], block["load"])).items() if v is not None}
        r = simulate(trace, **kw, **load)
        runs = (r.band or {}).get("runs") or {}
        judged_run = runs.get("high", r) if plan["judged_at"] == "pessimistic" else r
        verdict = judge(judged_run, slo, window_s, min_requests)
        centre = judge(r, slo, window_s, min_requests)
        judged_at = "pessimistic end of the band" if "high" in runs and plan["judged_at"] == "pessimistic" \
            else best["judged_at"]
        if "high" in runs and plan["judged_at"] == "pessimistic" and r.closed is not None:
            verdict, judged_at = _worst(verdict, centre, judge(runs["low"], slo, window_s, min_requests))
        planned = best.get("binding") or {}
        got = verdict["binding"] or {}
        row.update(report=r, summary=r.summary(), verdict=verdict, centre_verdict=centre, judged_at=judged_at,
                   matches_plan=bool(verdict["meets"] == best["meets"] and abs(got.get("value_s", 0.0)
                                                                             - planned.get("value_s", 0.0)) < 1e-9))
        out.append(row)
        tell(progress, len(out), len(plan["loads"]), stage)
    return out


def _worst(high: dict, centre: dict, low: dict) -> tuple[dict, str]:
    """A closed loop's verdict as plan judges it pessimistically (plan._worst_end): the worst of
    its band's three runs, meeting the SLOs only when all three do; and the words for it."""
    from .plan import END_TEXT, WORST_TEXT

    ends = {"high": high, "centre": centre, "low": low}
    key = lambda e: (not ends[e]["meets"], -float("inf") if ends[e]["binding"] is None  # noqa: E731
                     else ends[e]["binding"]["ratio"])
    worst = max(ends, key=key)
    return {**ends[worst], "meets": all(v["meets"] for v in ends.values())}, WORST_TEXT.format(END_TEXT[worst])
