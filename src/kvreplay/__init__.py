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
    if serving:
        from .serving.simulate import deployment_focus

        kwargs = deployment_focus(trace, kwargs, serving)  # the GPU pool as the operating point, vllm on the curve
    data = collect(trace, **kwargs)
    from .output.summary import full_semantics_note

    data["kv_semantics_note"] = full_semantics_note(model or (serving or {}).get("model"))
    if serving:
        from .serving.simulate import serving_section

        data["serving"] = serving_section(trace, block_size=kwargs.get("block_size"), **serving)
    if plan is not None:
        data["plan"] = plan
    return render(data, title=title, zoom=zoom)


__all__ = [
    "load_trace", "replay", "sweep", "mrc", "stats", "simulate", "plan", "SLO", "report_html", "Trace", "Report",
    "SimReport",
    "POLICIES",
    "KvreplayError", "TraceError", "ConfigError", "InvariantError", "MissingDependencyError",
]
