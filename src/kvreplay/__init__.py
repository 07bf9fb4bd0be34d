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

import os as _os
import sys as _sys

from . import native as _native
from .errors import ConfigError as _ConfigError

try:
    _native.lib()  # the compiled core: built by pip install (its absence or a stale build is said once)
except _ConfigError as _e:
    if _os.path.basename(_sys.argv[0]) == "kvreplay" or _sys.argv[:1] == ["-m"]:
        print(f"kvreplay: {_e}", file=_sys.stderr)  # the command: one line, no traceback
        raise SystemExit(2) from None
    raise

from .analysis.sweep import sweep
from .engine.replay import replay
from .errors import ConfigError, InvariantError, KvreplayError, MissingDependencyError, TraceError
from .engine.report import Report
from .policies.registry import POLICIES
from .serving.plan import plan
from .serving.report import SimReport
from .serving.slo import SLO
from .serving.simulate import simulate
from .trace import Trace, load_trace
from .version import __version__  # noqa: F401 - kvreplay.__version__



def __getattr__(name):
    """mrc and stats are compiled with numba, which is imported when they are first used."""
    if name == "mrc":
        from .analysis.mrc import mrc

        return mrc
    if name == "stats":
        from .analysis.stats import stats

        return stats
    raise AttributeError(f"module 'kvreplay' has no attribute {name!r}")


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

        data["serving"] = serving_section(trace, block_size=kwargs.get("block_size"), progress=kwargs.get("progress"),
                                          **serving)
    if plan is not None:
        data["plan"] = plan
    return render(data, title=title, zoom=zoom)


__all__ = [
    "load_trace", "replay", "sweep", "mrc", "stats", "simulate", "plan", "SLO", "report_html", "Trace", "Report",
    "SimReport",
    "POLICIES",
    "KvreplayError", "TraceError", "ConfigError", "InvariantError", "MissingDependencyError",
]
