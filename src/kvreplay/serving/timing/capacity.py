"""The KV pool an engine allocates on its GPUs after the weights (vLLM's sizing)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from ...analysis.models import get_model
from ...errors import ConfigError
from ...units import parse_size
from ...catalog.gpus import check_weights_dtype, get_gpu
from .memory import VLLM_GPU_MEMORY_UTILIZATION, GiB, ProfileRun, check_positive_int, memory_budget, weight_parts
from .pipeline import check_pp, stages
from .models import _check_fraction, _check_tp, _weight_bytes, kv_bytes_per_token_per_gpu


@dataclass(frozen=True)
class KVCapacity:
    """How ``kv_capacity_blocks`` got its number (every figure per GPU, bytes): the budget of
    memory.py term by term, then the blocks."""

    model: str
    gpu: str
    tp: int
    block_size: int
    gpu_memory_utilization: float
    total_memory_bytes: int
    usable_bytes: float  # the requested budget: ceil(total x utilization)
    weight_bytes_per_gpu: float
    kv_bytes_available: float
    kv_bytes_per_token_per_gpu: float
    blocks: int
    weights_dtype: str = "bf16"
    activation_peak_bytes: float = 0.0  # the forward pass at max_num_batched_tokens
    sampler_peak_bytes: float = 0.0  # the sampler's dummy run (the budget takes the larger of the two)
    cudagraph_bytes: float = 0.0
    cudagraph_graphs: int = 0
    non_torch_bytes: float = 0.0
    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 256
    enforce_eager: bool = False
    kv_cache_memory_bytes: int | None = None  # given: replaces the profiled figure
    num_gpu_blocks_override: int | None = None  # given: replaces the block count
    profiled_kv_bytes: float = 0.0  # what the profile leaves, before either replaces it
    encoder_peak_bytes: float = 0.0  # a multimodal model's vision tower on the dummy images
    encoder_output_bytes: float = 0.0  # their outputs, held through the text peak
    encoder_items: int = 0
    language_model_only: bool = False
    peak_bytes: float = 0.0  # the profile run's one peak (memory.MemoryBudget.peak_bytes)
    pp: int = 1  # pipeline stages: with pp > 1 every figure above is the limiting stage's
    stages: tuple = ()  # pp > 1: each stage's figures (pipeline.Stage.to_dict)
    dp: int = 1  # data-parallel ranks (each with this pool on its own tp GPUs)
    expert_parallel: bool = False
    expert_gpus: int = 0  # an MoE's routed experts split over these GPUs (0: no MoE)
    expert_bytes_per_gpu: float = 0.0  # of weight_bytes_per_gpu, the routed experts'

    @property
    def tokens(self) -> int:
        return self.blocks * self.block_size

    def to_dict(self) -> dict:
        out = {**asdict(self), "tokens": self.tokens}
        if self.pp == 1:  # (a pool without stages reads as before pipeline parallelism existed)
            del out["pp"], out["stages"]
        if self.dp == 1 and not self.expert_parallel:  # (nor one without data or expert parallelism)
            for key in ("dp", "expert_parallel", "expert_gpus", "expert_bytes_per_gpu"):
                del out[key]
        return out


def _pool_options(max_num_batched_tokens, max_num_seqs, kv_cache_memory, num_gpu_blocks_override, enforce_eager,
                  language_model_only=False):
    tokens = check_positive_int("max_num_batched_tokens (--max-num-batched-tokens)", max_num_batched_tokens)
    seqs = check_positive_int("max_num_seqs (--max-num-seqs)", max_num_seqs)
    for name, flag in (("enforce_eager", enforce_eager), ("language_model_only", language_model_only)):
        if not isinstance(flag, bool):
            raise ConfigError(f"{name} must be True or False, got {flag!r}")
    kv_memory = None
    if kv_cache_memory is not None:
        try:
            kv_memory = parse_size(kv_cache_memory)
        except ConfigError as e:
            raise ConfigError(f"kv_cache_memory (--kv-cache-memory): {e}") from None
    override = None
    if num_gpu_blocks_override is not None:
        override = check_positive_int("num_gpu_blocks_override (--num-gpu-blocks-override)", num_gpu_blocks_override)
    return tokens, seqs, kv_memory, override


@dataclass(frozen=True)
class PoolOptions:
    """kv_capacity's options beyond the model, GPU, TP, block size and utilization (vLLM's flags of
    the same names)."""

    dtype: str = "bf16"
    kv_dtype: str = "bf16"
    total_memory_bytes: int | None = None
    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 256
    enforce_eager: bool = False
    kv_cache_memory: object = None
    num_gpu_blocks_override: int | None = None
    language_model_only: bool = False
    pp: int = 1
    dp: int = 1
    expert_parallel: bool = False

    @classmethod
    def of(cls, options: dict, what: str = "kv_capacity") -> "PoolOptions":
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(options) - known)
        if unknown:
            raise ConfigError(f"{what}: unknown option {unknown[0]!r} (known: {', '.join(sorted(known))})")
        return cls(**options)


def kv_capacity(model, gpu, tp: int = 1, block_size: int = 16,
                gpu_memory_utilization: float = VLLM_GPU_MEMORY_UTILIZATION, **options) -> KVCapacity:
    """The KV pool vLLM 0.33.0 allocates per GPU, as ``KVCapacity`` (memory.py has the budget:
    total memory x utilization - weights - activation peak - CUDA graphs - non-torch); keyword
    options: PoolOptions' fields (an unknown one is refused, named). `dtype` is
    the weights dtype (bf16, fp16, fp8, int4: ``--weights-dtype``), refused where the GPU cannot
    run it (gpus.check_weights_dtype). `kv_cache_memory` (bytes or a size, "20GiB") replaces the
    profiled figure and ignores the utilization, as vLLM's ``kv_cache_memory_bytes``;
    `num_gpu_blocks_override` replaces the block count, applied last as vLLM does.
    `language_model_only`: a multimodal model served as text only (vLLM's ``--language-model-only``):
    no vision tower loaded, no encoder profiled (refused for a text-only model, where it would
    change nothing). `pp`: pipeline stages (vLLM's ``--pipeline-parallel-size``), each on its own
    `tp` GPUs with its layers' weights and KV; the pool is the smallest stage's (pipeline.py)."""
    o = PoolOptions.of(options)
    spec = get_model(model)
    g = get_gpu(gpu)
    dtype = check_weights_dtype(o.dtype, g)
    tp = _check_tp(tp)
    pp = check_pp(o.pp)
    language_model_only, enforce_eager = o.language_model_only, o.enforce_eager
    if isinstance(block_size, bool) or not isinstance(block_size, (int, np.integer)) or block_size < 1:
        raise ConfigError(f"block_size must be a whole number >= 1, got {block_size!r}")
    util = _check_fraction("gpu_memory_utilization", gpu_memory_utilization)
    tokens, seqs, kv_memory, override = _pool_options(o.max_num_batched_tokens, o.max_num_seqs, o.kv_cache_memory,
                                                      o.num_gpu_blocks_override, enforce_eager, language_model_only)
    if language_model_only and not spec.vision:
        raise ConfigError(f"language_model_only (--language-model-only) turns a multimodal model's vision tower off; "
                          f"{spec.name} has none")
    total = None if o.total_memory_bytes is None else check_positive_int("total_memory_bytes", o.total_memory_bytes)
    dp = check_positive_int("dp (--dp, --data-parallel-size)", o.dp)
    if not isinstance(o.expert_parallel, bool):
        raise ConfigError(f"expert_parallel must be True or False, got {o.expert_parallel!r}")
    if dp > 1 and pp > 1:
        raise ConfigError("dp (--dp) with pipeline stages (--pp) is not simulated: drop one of them")
    expert_gpus = dp * tp if spec.moe else 0  # (data parallelism splits the experts over every rank's GPUs)
    b = memory_budget(spec, g, tp, util, ProfileRun(dtype, tokens, seqs, enforce_eager, kv_memory, total,
                                                    language_model_only, expert_gpus or None, o.expert_parallel))
    per_token = kv_bytes_per_token_per_gpu(spec, tp, o.kv_dtype)
    parts = stages(b, spec, dtype, tp, pp, g.name, per_token, block_size, kv_memory) if pp > 1 else ()
    where = f"tp={tp}" + (f" x pp={pp}" if pp > 1 else "")
    if parts:  # the pool is the smallest stage's (kv_cache_planning.py:1583-1598)
        if override is None:
            for s in parts:
                _check_room(spec, g, f"{where} (stage {s.stage}: {s.layers} layers)", util, dtype, s.budget)
        limiting = min(parts, key=lambda s: s.blocks)
        b, per_token = limiting.budget, limiting.kv_bytes_per_token_per_gpu
    available = b.kv_bytes_available
    if override is not None:
        blocks = override
    else:
        _check_room(spec, g, where, util, dtype, b)
        blocks = int(available // (per_token * block_size))
        if blocks < 1:
            raise ConfigError(f"{spec.name} on {g.name} x {where}: {available / GiB:.3f} GiB left for KV "
                              f"holds no {block_size}-token block")
    return KVCapacity(spec.name, g.name, tp, int(block_size), util, b.total_memory_bytes, float(b.requested_bytes),
                      b.weight_bytes, available, per_token, int(blocks), dtype, b.activation_bytes, b.sampler_bytes,
                      b.cudagraph_bytes, b.cudagraph_graphs, b.non_torch_bytes, tokens, seqs, bool(enforce_eager),
                      kv_memory, override, b.profiled_kv_bytes, b.encoder_bytes, b.encoder_output_bytes,
                      b.encoder_items, bool(language_model_only), b.peak_bytes, pp,
                      tuple(s.to_dict() for s in parts), dp, o.expert_parallel, expert_gpus,
                      weight_parts(spec, dtype, tp, g.name, language_model_only, expert_gpus or None,
                                   o.expert_parallel)["experts"])


def _check_room(spec, g, where, util, dtype, b) -> None:
    """A ConfigError when the weights (or the weights and the profile's peaks) leave no KV room;
    `where` names the parallelism ("tp=8", or "tp=8 x pp=2 (stage 0: 63 layers)")."""
    if b.kv_cache_memory_bytes is not None:
        return
    if b.weight_bytes >= b.requested_bytes:
        smaller = [d for d in ("fp8", "int4") if _weight_bytes(d) < _weight_bytes(dtype)]
        hint = f", or use smaller weights (--weights-dtype {' or '.join(smaller)})" if smaller else ""
        note = spec.checkpoint_note() if spec.checkpoint_weights_dtype != dtype else None
        raise ConfigError(f"{spec.name} at {dtype} over {where} needs {b.weight_bytes / GiB:.1f} GiB of weights per "
                          f"GPU, more than the {b.requested_bytes / GiB:.1f} GiB a {g.name} gives at "
                          f"gpu_memory_utilization={util}: raise tp or pp or the utilization{hint}"
                          + (f". {note}" if note else ""))
    if b.kv_bytes_available <= 0:
        raise ConfigError(f"{spec.name} on {g.name} x {where}: the weights ({b.weight_bytes / GiB:.2f} GiB), the "
                          f"profile run's peak ({b.peak_bytes / GiB:.2f} GiB at "
                          f"max_num_batched_tokens={b.max_num_batched_tokens}, max_num_seqs={b.max_num_seqs}), CUDA "
                          f"graphs ({b.cudagraph_bytes / GiB:.2f} GiB) and non-torch memory "
                          f"({b.non_torch_bytes / GiB:.2f} GiB) leave no KV room in the {b.requested_bytes / GiB:.2f} GiB "
                          f"budget: raise tp or pp or the utilization, or lower --max-num-batched-tokens / --max-num-seqs")


def kv_capacity_blocks(model, gpu, tp: int = 1, block_size: int = 16,
                       gpu_memory_utilization: float = VLLM_GPU_MEMORY_UTILIZATION, **options) -> int:
    """KV blocks vLLM 0.33.0 allocates on each GPU: ``floor(KV left / (kv_bytes_per_token_per_gpu x
    block_size))``, KV left being the budget of memory.py (total memory as the device reports it x
    gpu_memory_utilization - weights per rank - the profile run's activation and sampler peaks -
    CUDA graphs - non-torch memory). The block count is the same on every TP rank. Sliding-window
    layers are counted in full (an engine without a hybrid allocator; serving/semantics.py lays a
    hybrid model out). Keyword options: those of ``kv_capacity``.
    """
    return kv_capacity(model, gpu, tp, block_size, gpu_memory_utilization, **options).blocks
