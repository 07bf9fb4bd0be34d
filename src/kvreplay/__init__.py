"""kvreplay: replay LLM request traces through a KV prefix cache and count the prompt tokens it saves.

Public API::

    trace = kvreplay.load_trace("conversation_trace.jsonl")
    report = kvreplay.replay(trace, policy="s3fifo", capacity=4096)
    report.total_hit_tokens, report.hit_rate, report.to_dict()
    results = kvreplay.sweep(trace, capacities=[1000, 4096], policies=["s3fifo", "lru"])
    curve = kvreplay.mrc(trace, capacities="auto")   # exact LRU curve, one pass
    results.to_pandas(), curve.to_polars(), report.to_pandas()   # tidy tables (docs/formats.md)
    sim = kvreplay.simulate(trace, "vllm", model="Llama-3.1-8B", gpu="H100", time_model="roofline")
    sim.summary()["latency_s"]["ttft"], sim.hit_rate   # serving: TTFT, hit rate under concurrency
    p = kvreplay.plan(trace, model="Llama-3.1-8B", slo=kvreplay.SLO(ttft_p90_s=2.0), gpus=["H100", "H200"])
    p["loads"][0]["best"], p.to_pandas()   # the cheapest deployment meeting the SLO; every try
"""

from .errors import ConfigError, InvariantError, KvreplayError, MissingDependencyError, TraceError
from .version import __version__  # noqa: F401 - kvreplay.__version__

# The public API, imported on first use: `import kvreplay` costs next to nothing, and a command
# imports only what it runs (numpy, the trace readers, the policy it replays, the simulator).
_LAZY = {
    "load_trace": "trace", "Trace": "trace", "replay": "engine.replay", "Report": "engine.report",
    "sweep": "analysis.sweep", "mrc": "analysis.mrc", "stats": "analysis.stats", "POLICIES": "policies.registry",
    "simulate": "serving.simulate", "plan": "serving.plan", "SimReport": "serving.report", "SLO": "serving.slo",
}


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'kvreplay' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


def report_html(trace, **kwargs) -> str:
    """The HTML report of `trace` (``kvreplay report``): keyword arguments as for
    `analysis.overview.collect`, plus `title` and `zoom` (see `output.html.render`)."""
    from .analysis.overview import collect
    from .output.html import render

    title = kwargs.pop("title", None)  # default: "kvreplay report: FILE NAME" (never the directories)
    zoom = kwargs.pop("zoom", "auto")  # the curve's zoom panel: "auto", False or (lo, hi) percent
    serving = kwargs.pop("serving", None)  # serving.simulate.serving_section's keywords (gpu, model, ...)
    plan = kwargs.pop("plan", None)  # a plan (kvreplay.plan's result, or load_plan of its JSON) for its section
    model = kwargs.pop("model", None)  # the model the byte budget is for: a hybrid one's semantics are stated
    rank = kwargs.pop("rank_served", True)  # rank the policies under serving too (with a serving section or plan)
    progress = kwargs.get("progress")
    if plan is not None:
        from .serving.plan_schema import check_document

        plan = check_document(plan)  # (a plan is untrusted input: every field a page shows is checked)
    deployment = _deployment(serving, plan)
    if deployment:
        from .serving.simulate import deployment_focus

        kwargs = deployment_focus(trace, kwargs, deployment)  # the GPU pool as the operating point, vllm on the curve
    data = collect(trace, **kwargs)
    from .output.summary import full_semantics_note

    data["kv_semantics_note"] = full_semantics_note(model or (deployment or {}).get("model"))
    if serving:
        from .serving.simulate import serving_section

        data["serving"] = serving_section(trace, block_size=kwargs.get("block_size"), progress=kwargs.get("progress"),
                                          **serving)
    if plan is not None:
        from .errors import ConfigError
        from .serving.plan_check import serve_plan

        data["plan"] = plan
        try:
            data["plan_served"] = serve_plan(trace, plan, progress=progress)
        except ConfigError as e:  # (a plan made in Python with objects for options: shown, not served again)
            data["plan_served_note"] = str(e)
            rank = rank and serving is not None
    if deployment and rank:
        from .serving.ranking import served_ranking

        data["ranking"] = served_ranking(trace, kwargs["policies"], block_size=kwargs.get("block_size"),
                                         progress=progress, **deployment["ranking"])
    return render(data, title=title, zoom=zoom)


def _deployment(serving: dict | None, plan: dict | None) -> dict | None:
    """The deployment a report centres on: its serving section's, else the plan's first chosen one
    (its pool is the curves' operating point; its policies are ranked under serving on it)."""
    if serving:
        return {**serving, "ranking": {k: serving[k] for k in ("model", "gpu", "tp", "pp", "instances", "router", "tiers",
                                                               "time_model", "weights_dtype") if k in serving}
                | {"load": (("sessions", max(serving["sessions"])) if serving.get("sessions")
                            else ("speedup", max(serving.get("speedups") or [1.0]))),
                   "warmup": serving.get("warmup", "auto"), "arrivals": serving.get("arrivals"),
                   "think_time": serving.get("think_time"), "seed": serving.get("seed", 0)}}
    if plan is None:
        return None
    block = next((b for b in plan["loads"] if b["best"] is not None), None)
    if block is None:
        return None
    best, opts = block["best"], plan.get("run_options") or {}
    weights = opts.get("weights_dtype", "bf16")
    time_model = opts.get("time_model", "roofline")
    pp = best.get("pp", 1)
    return {"gpu": best["gpu"], "model": plan["model"], "tp": best["tp"], "pp": pp, "weights_dtype": weights,
            "policy": best["policy"],
            "ranking": {"model": plan["model"], "gpu": best["gpu"], "tp": best["tp"], "pp": pp, "instances": best["instances"],
                        "router": best["router"], "tiers": None if best["tiers"] == "none" else best["tiers"],
                        "time_model": time_model if isinstance(time_model, str) else "roofline",
                        "weights_dtype": weights, "load": (block["load_kind"], block["load"]),
                        "warmup": plan.get("warmup_spec", "auto")}}


__all__ = [
    "load_trace", "replay", "sweep", "mrc", "stats", "simulate", "plan", "SLO", "report_html", "Trace", "Report",
    "SimReport",
    "POLICIES",
    "KvreplayError", "TraceError", "ConfigError", "InvariantError", "MissingDependencyError",
]
