"""Engine styles: what the simulator asks about each engine it schedules as (vLLM v1, SGLang,
TensorRT-LLM's in-flight batching), declared in one place beside the policies' own traits
(policies/base.py PolicySpec: served or not, request-level, sized per call, ...).

A style's index is the kernel's (serving/kernel/sim.h STYLE_VLLM, STYLE_SGLANG, STYLE_TRTLLM).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class EngineStyle:
    """One engine style: its name, its engine-faithful cache (the default policy), and the
    scheduler defaults where it differs from the others."""

    name: str
    policy: str
    scheduler_defaults: dict = field(default_factory=dict)


#: in the kernel's order (sim.h)
STYLES = {
    "vllm": EngineStyle("vllm", "vllm"),
    "sglang": EngineStyle("sglang", "radix"),
    # TensorRT-LLM's max_batch_size (2048) and its chunked context, off unless enabled (its LLM API's
    # enable_chunked_prefill)
    "trtllm": EngineStyle("trtllm", "trtllm", {"max_num_seqs": 2048, "chunked_prefill": False}),
}
ENGINE_STYLES = tuple(STYLES)
#: Engine-faithful default policy per engine style.
STYLE_POLICY = {name: style.policy for name, style in STYLES.items()}
#: Scheduler defaults that differ by style.
STYLE_DEFAULTS = {name: style.scheduler_defaults for name, style in STYLES.items() if style.scheduler_defaults}
