"""Pipeline parallelism's memory, as vLLM 0.33.0 splits a model over ``--pipeline-parallel-size``
stages (every file below is vLLM 0.33.0's).

- **Layers per stage**: ``get_pp_indices`` (vllm/distributed/utils.py:198-240) gives each stage
  ``layers // P`` decoder layers; the ``layers % P`` left over go one each to the stages before
  the last, from the second-to-last backwards (225-230). ``make_layers``
  (vllm/model_executor/models/utils.py:886-916) builds only a stage's own layers.
- **Weights**: a stage loads its layers' weights (split over its TP ranks as without PP); the
  embedding only on the first stage, and on the last too when the embeddings are tied; the
  final norm and the LM head only on the last (vllm/model_executor/models/llama.py:377-397,
  502-517). A multimodal model's vision tower runs where the inputs are embedded: the first stage
  (gpu_model_runner.py:3272-3283).
- **The profile run** (gpu_model_runner.py:6131-6141): every stage runs the forward pass over its
  layers at ``max_num_batched_tokens`` (the same per-token peak, ``memory.forward_bytes``); only
  the last runs the dummy sampler. A stage after the first holds the tensors it receives, hidden
  states and residual, ``2 x max_num_batched_tokens x hidden`` bf16, allocated in the profile's
  ``_dummy_run`` (5737-5745; models/utils.py:955-966) and kept.
- **KV**: a GPU holds the KV of its stage's layers only (its KV cache spec lists them), so a
  token's bytes per GPU are ``kv_bytes_per_token_per_gpu x stage layers / layers``.
- **The pool**: every worker computes its own block count, ``available // bytes_per_block``,
  and then all take the smallest (``get_kv_cache_configs``,
  vllm/v1/core/kv_cache_planning.py:1560-1598): the scheduler's one pool is the minimum over
  the stages.

Approximated: a stage's share of the per-layer weights and KV is its fraction of the decoder
layers (exact for a uniform stack; a model with dense and MoE layers, or sliding and full
layers, mixed unevenly across stages is off by the mix), and each stage captures the same CUDA
graphs and keeps the same non-torch memory as a GPU without PP.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass, replace

from ...errors import ConfigError
from .memory import MemoryBudget, weight_parts

#: the weight parts that scale with the stage's layers (memory.weight_parts)
LAYER_PARTS = ("experts", "dense", "replicated")


def check_pp(pp) -> int:
    """A pipeline-parallel degree: a whole number >= 1 (ConfigError naming --pp otherwise)."""
    if isinstance(pp, bool) or not hasattr(pp, "__index__") or int(pp) < 1:
        raise ConfigError(f"pp (--pp, --pipeline-parallel-size) must be a whole number >= 1, got {pp!r}")
    return int(pp)


def stage_layers(num_layers: int, pp: int) -> list[int]:
    """Decoder layers on each of `pp` stages, as ``get_pp_indices`` splits them."""
    pp = check_pp(pp)
    if pp > num_layers:
        raise ConfigError(f"pp={pp} stages for a model of {num_layers} layers: at most {num_layers}")
    parts = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):
        parts[-i] += 1
    return parts


def stage_weight_parts(spec, dtype: str, tp: int, pp: int, stage: int, gpu_name: str = "",
                       language_model_only: bool = False) -> dict:
    """The weights one TP rank of stage `stage` (0-based) of `pp` loads, bytes, by part."""
    parts = weight_parts(spec, dtype, tp, gpu_name, language_model_only)
    if pp == 1:
        return parts
    layers = stage_layers(spec.num_layers, pp)
    share = layers[stage] / spec.num_layers
    first, last = stage == 0, stage == pp - 1
    out = {k: (v * share if k in LAYER_PARTS else v) for k, v in parts.items()}
    out["embedding"] = parts["embedding"] if first or (last and spec.tie_word_embeddings) else 0.0
    out["lm_head"] = parts["lm_head"] if last else 0.0
    out["vision"] = parts["vision"] if first else 0.0
    return out


@dataclass(frozen=True)
class Stage:
    """One pipeline stage's GPU: its layers, its budget and the KV blocks it could hold."""

    stage: int
    layers: int
    budget: MemoryBudget
    kv_bytes_per_token_per_gpu: float
    blocks: int

    def to_dict(self) -> dict:
        b = self.budget
        return {"stage": self.stage, "layers": self.layers, "weight_bytes": b.weight_bytes,
                "peak_bytes": b.peak_bytes, "kv_bytes_available": b.kv_bytes_available,
                "kv_bytes_per_token_per_gpu": self.kv_bytes_per_token_per_gpu, "blocks": self.blocks}


def stage_budget(base: MemoryBudget, spec, dtype: str, tp: int, pp: int, stage: int, gpu_name: str,
                 kv_cache_memory: int | None) -> MemoryBudget:
    """`base` (memory.memory_budget, the budget without PP) as stage `stage` of `pp` has it."""
    if pp == 1:
        return base
    first, last = stage == 0, stage == pp - 1
    weights = sum(stage_weight_parts(spec, dtype, tp, pp, stage, gpu_name, base.language_model_only).values())
    received = 0.0 if first else 2.0 * 2 * base.max_num_batched_tokens * (spec.hidden_size or 0)
    b = replace(base, weight_bytes=weights, activation_bytes=base.activation_bytes + received,
                sampler_bytes=base.sampler_bytes + received if last else 0.0,
                encoder_bytes=base.encoder_bytes if first else 0.0,
                encoder_output_bytes=base.encoder_output_bytes if first else 0.0,
                encoder_items=base.encoder_items if first else 0)
    available = b.profiled_kv_bytes if kv_cache_memory is None else float(kv_cache_memory)
    return MemoryBudget(**{**asdict(b), "kv_bytes_available": available})


def stages(base: MemoryBudget, spec, dtype: str, tp: int, pp: int, gpu_name: str, per_token: float,
           block_size: int, kv_cache_memory: int | None) -> list[Stage]:
    """Every stage's budget and blocks; `per_token` is the KV bytes a token takes per GPU with
    every layer (models.kv_bytes_per_token_per_gpu)."""
    out = []
    for i, n in enumerate(stage_layers(spec.num_layers, pp)):
        b = stage_budget(base, spec, dtype, tp, pp, i, gpu_name, kv_cache_memory)
        token = per_token * n / spec.num_layers
        out.append(Stage(i, n, b, token, int(b.kv_bytes_available // (token * block_size))))
    return out


#: GPUs in one server (HGX/DGX: 8); stages whose GPUs span servers send over the scale-out network
GPUS_PER_NODE = 8
#: Scale-out bandwidth per GPU, one direction: one 400 Gb/s NDR InfiniBand / ConnectX-7 port per GPU
#: (NVIDIA DGX H100/H200 and DGX B200 user guides: "8x single-port ConnectX-7, 400 Gb/s"), 50e9 B/s
SCALE_OUT_BYTES_PER_S = 400e9 / 8


def send_bytes_per_token(spec, tp: int) -> float:
    """Bytes one GPU sends to the next stage per token: the hidden states and the residual
    (``make_empty_intermediate_tensors``, llama.py:399; models/utils.py:955-966), bf16, each TP
    rank sending its 1/tp slice (``isend_tensor_dict`` with ``all_gather_group`` the TP group,
    vllm/distributed/parallel_state.py:1197-1223; gpu_worker.py:1384-1387)."""
    return 2 * 2.0 * (spec.hidden_size or 0) / tp


def hop_seconds_per_token(spec, gpu, tp: int, pp: int) -> float:
    """One stage-to-stage hop per token: the 1/tp slice over the inter-stage link (the GPU's
    scale-up link when all tp x pp GPUs sit in one server, else SCALE_OUT_BYTES_PER_S), then the
    receiving stage's all-gather of the other slices over its scale-up link."""
    link = gpu.link_bytes_per_s if tp * pp <= GPUS_PER_NODE else min(SCALE_OUT_BYTES_PER_S, gpu.link_bytes_per_s)
    part = send_bytes_per_token(spec, tp)
    return part / link + (part * (tp - 1) / gpu.link_bytes_per_s if tp > 1 else 0.0)


def pipelined(tm, pp: int):
    """The roofline time model `tm` (of all the model's layers on `tp` GPUs) as a `pp`-stage pipeline
    runs one batch: the stages' rooflines over layers/P each, in sequence, sum to `tm`'s step, and
    the batch crosses P - 1 hops (``hop_seconds_per_token`` x its tokens). vLLM 0.33.0 keeps P
    batches in flight (``max_concurrent_batches`` = P, vllm/config/vllm.py:588-598; the batch
    queue, v1/engine/core.py:208-214, 708-780), but a running request sits in at most one of them
    (scheduler.py:539, ``num_output_placeholders``) and every step schedules all that are ready, so
    a set of decoding requests travels as one batch with the other P - 1 slots idle (the bubble).
    The simulator's kernel runs one batch at a time, which is that schedule; what it leaves out
    is a second batch formed from requests that arrive while one is in flight (vLLM would start it
    on stage 0 at once: the kernel waits for the step's end), so under load the time is an upper
    bound. The hop is added per token to the elementwise bytes (its coefficient scaled so it costs
    ``hop_seconds_per_token``), which both the Python and the C step read; the band's scale applies
    to it as to every term; no per-hop latency is added. pp == 1, or a model already pipelined
    over `pp` stages, returns `tm` itself."""
    if pp == getattr(tm, "pp", 1):
        return tm
    if getattr(tm, "pp", 1) > 1:
        raise ConfigError(f"the time model runs {tm.pp} pipeline stages, not pp={pp}")
    if not hasattr(tm, "ew_bytes_per_token") or not getattr(tm, "ew_kernels", 0):
        raise ConfigError("pp (--pp) needs the calibrated roofline time model (--time-model roofline)")
    out = copy.copy(tm)
    hop = hop_seconds_per_token(tm.model, tm.gpu, tm.tp, pp)
    out.pp, out.pp_hop_s_per_token = pp, hop
    out.ew_bytes_per_token = tm.ew_bytes_per_token + (pp - 1) * hop * tm.bandwidth * tm.c["e_ew"]
    return out


__all__ = ["Stage", "check_pp", "hop_seconds_per_token", "pipelined", "send_bytes_per_token", "stage_budget", "stage_layers", "stage_weight_parts", "stages"]
