"""The keeps-up verdict's estimates, checked by the runs they suggest (`kvreplay simulate`).

When a run does not keep up, verdict.py estimates the load and the instance count that would. An
estimate is a first guess from the busiest window's work; before one is printed, the run it
suggests is made (with the band's runs, so the check is held to the same pessimistic end as the
verdict), and the output says whether it holds.
"""

from __future__ import annotations

from ..progress import tell
from .limits import MAX_INSTANCES

STAGE = "estimates checked by running them"


def check_fix(trace, options: dict, report, progress=None) -> dict | None:
    """For `report` (simulate(trace, **options) with its load in `options`): each estimate of its
    verdict's fix, run: {"load": {...}, "instances": {...}}, each with the value tried, whether it
    keeps up (at the band's pessimistic end where there is one) and that run's verdict. None when
    the verdict has no fix. progress: a kvreplay.progress callback, told ``(done, total,
    "estimates checked by running them")``."""
    from .simulate import simulate

    fix = (report.summary()["keeps_up"] or {}).get("fix")
    if not fix:
        return None
    loads = ("speedup", "rate", "sessions")
    base = {k: v for k, v in options.items() if k not in loads}
    base["compare_sequential"] = False
    out = {}
    load = fix.get("load")
    disaggregated = options.get("prefill_instances") is not None
    sampled = report.samples is not None or report.beam is not None  # (n > 1, beam search: one instance)
    by_instances = not disaggregated and not sampled and fix["instances"] <= MAX_INSTANCES
    total = (load is not None) + by_instances
    tell(progress, 0, total, STAGE)
    if load is not None:
        key = {"--speedup": "speedup", "--rate": "rate", "--sessions": "sessions"}[load["flag"]]
        r = simulate(trace, **base, **{key: load["value"]})
        out["load"] = {**load, **_outcome(r)}
        tell(progress, 1, total, STAGE)
    if by_instances:
        ranks = "dp" if options.get("dp", 1) > 1 else "instances"  # (data parallelism: more ranks, not instances)
        r = simulate(trace, **dict(base, **{ranks: fix["instances"]}),
                     **{k: options[k] for k in loads if options.get(k) is not None})
        out["instances"] = {"value": fix["instances"], **_outcome(r)}
        tell(progress, total, total, STAGE)
    return out


def _outcome(report) -> dict:
    v = report.summary()["keeps_up"]
    return {"keeps_up": v["keeps_up"], "only_at_centre": v.get("only_at_centre", False),
            "worst_queue_p90_s": v["worst_queue_p90_s"], "worst_window_start_s": v["worst_window_start_s"],
            "allowed_queue_s": v["allowed_queue_s"], "backlog_s": v["backlog_s"]}
