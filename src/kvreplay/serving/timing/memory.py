"""The memory budget vLLM 0.33.0 gives its KV pool on one GPU, term by term.

vLLM sizes the pool once, at start-up, in ``Worker.determine_available_memory``
(vllm/v1/worker/gpu_worker.py:641-818, every file below is vLLM 0.33.0's):

1. **Total memory** as the device reports it: ``MemorySnapshot.measure`` reads
   ``torch.accelerator.get_memory_info`` (vllm/utils/mem_utils.py:130-145), the
   ``torch.cuda.get_device_properties().total_memory`` figure; an H100 80GB reports 79.22 GiB
   (85.06e9 bytes), not 80e9 (gpus.json ``total_memory_bytes``, each with its public source).
2. **x utilization**: ``request_memory`` asks for ``ceil(total_memory x gpu_memory_utilization)``
   (vllm/v1/worker/utils.py:724-726), the budget of everything vLLM allocates. It applies to the
   total, not to the free memory, and the snapshot is taken after NCCL's buffers and the cuBLAS
   handles exist (gpu_worker.py:500-544), so those come out of the ``1 - utilization`` left over,
   not out of the budget.
3. **Weights** as loaded on each TP rank (``Model loading took X GiB``,
   gpu_model_runner.py:5076-5089): ``weight_parts`` below. Linear layers at the weights dtype
   (fp8 block-scaled checkpoints add a float32 scale per 128 x 128 block; int4 is group-128 GPTQ/AWQ
   with a bf16 scale and a 4-bit zero per group, mxfp4 4.25 bits a weight on the experts only);
   the embedding and an untied LM head stay bf16 and are split over the ranks after the vocabulary
   is padded to a multiple of 64 (vllm/model_executor/layers/vocab_parallel_embedding.py:36,
   95-97, 289); MLA's q_a / kv_a projections and the MoE router are replicated on every rank; KV
   heads are replicated when tp > kv_heads; the rotary cos/sin cache is max_position x head_dim
   bf16 values.
4. **Activation peak** of the profile run: ``profile_run`` (gpu_model_runner.py:6072-6145) runs
   the model on ``max_num_batched_tokens`` dummy tokens (``_dummy_run``, 6132) and the sampler on
   ``min(max_num_seqs, max_num_batched_tokens)`` rows of fp32 logits at the vocabulary size
   (``_dummy_sampler_run``, 5866-5926: logits, probabilities, top-k/top-p sorts). The profiler
   counts the torch peak above what stays allocated (``transient_peak_headroom``,
   mem_utils.py:318-321). Here: ``ACTIVATION_SCALE x tokens x (4 x hidden + widest per-token
   intermediate) x 2 bytes`` (the widest of the MLP's gate/up and down inputs, attention's q, k, v
   and output, and the fused-MoE workspaces of ``experts_per_token`` experts) plus
   ``SAMPLER_COPIES x rows x padded vocabulary x 4 bytes``.
5. **CUDA graphs**: unless ``enforce_eager``, ``profile_cudagraph_memory`` captures the first two
   graphs of each mode and estimates ``first + per_graph x (graphs - 1)`` (gpu_model_runner.py:
   6268-6360), and the estimate is taken from the budget because
   ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS`` defaults to 1 (vllm/envs.py:2219-2220;
   gpu_worker.py:707-757). The capture sizes are 1, 2, 4, 8..248 by 8 and 256.. by 16 up to
   ``min(2 x max_num_seqs, 512)`` (1024 on B200) (vllm/config/vllm.py:2403-2411), PIECEWISE
   for each and FULL for those up to ``max_num_seqs`` (FULL_AND_PIECEWISE, the default). Here:
   ``CUDAGRAPH_BYTES_PER_GRAPH x graphs``.
6. **Non-torch memory** inside the budget: what ``total_consumed`` (init free - free after the
   profile, mem_utils.py:312-317) holds beyond the weights (kernels' modules, workspaces, the
   attention backend's buffers): ``NON_TORCH_BYTES``. NCCL's buffers grow with TP but sit before
   the snapshot (point 2): outside the budget in 0.33.0.
7. **KV left** = budget - weights - activation peak - CUDA graphs - non-torch
   (gpu_worker.py:753-757), in whole pages: ``num_blocks = available // bytes_per_block``
   (vllm/v1/core/kv_cache_planning.py:681); a hybrid model's block id costs its layout's page
   (analysis/kv_groups.py).

``kv_cache_memory`` replaces the profiled figure (``kv_cache_memory_bytes``: vLLM still runs the
profile, then reserves exactly that, ignoring ``gpu_memory_utilization``, gpu_worker.py:656-681).
``num_gpu_blocks_override`` replaces the block count whatever the memory says
(kv_cache_planning.py:242-248, 682; and 1510-1530, which plans against ``override x
bytes_per_block``); with both, vLLM applies the override last, and so does this module.

The constants (ACTIVATION_SCALE, SAMPLER_COPIES, CUDAGRAPH_BYTES_PER_GRAPH, NON_TORCH_BYTES)
are fitted on public vLLM start-up logs by ``python benchmarks/kv_pool.py --fit``
(benchmarks/data/vllm_kv_pool_points.csv; docs/memory.md has the error table).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from ...errors import ConfigError

GiB = 1 << 30
MiB = 1 << 20

#: Fitted on the public logs (benchmarks/kv_pool.py --fit; docs/memory.md).
ACTIVATION_SCALE = 0.5
SAMPLER_COPIES = 0.5
CUDAGRAPH_BYTES_PER_GRAPH = 7 * MiB
NON_TORCH_BYTES = int(2.38 * GiB)

VOCAB_PADDING = 64  # vocab_parallel_embedding.py:36
FP8_BLOCK_SCALE = 4 / (128 * 128)  # a float32 scale per 128 x 128 block, per weight
INT4_GROUP_BYTES = 0.5 + (2 + 0.5) / 128  # 4-bit values, a bf16 scale and a 4-bit zero per 128
MXFP4_BYTES = 4.25 / 8  # 4-bit values with a shared 8-bit scale per 32


def linear_bytes(dtype: str, checkpoint: str | None) -> float:
    """Bytes per weight of a quantised linear layer at `dtype` (the checkpoint's scales included)."""
    if dtype == "fp8":
        return 1 + (FP8_BLOCK_SCALE if checkpoint == "fp8-block" else 0.0)
    if dtype == "int4":
        return MXFP4_BYTES if checkpoint == "mxfp4" else INT4_GROUP_BYTES
    return 2.0


def weight_parts(spec, dtype: str, tp: int, gpu_name: str = "") -> dict:
    """The weights one TP rank loads, in bytes, by part (see the module docstring, point 3). An
    mxfp4 checkpoint's experts are padded for the MoE kernel: the intermediate size to 128 and the
    hidden size to 256 (Marlin, Hopper and older) or 128 (Blackwell's CUTLASS/FlashInfer kernels)
    (vllm/model_executor/layers/fused_moe/oracle/mxfp4.py:837-879)."""
    hidden = spec.hidden_size or 0
    vocab = math.ceil((spec.vocab_size or 0) / VOCAB_PADDING) * VOCAB_PADDING
    embedding = vocab * hidden
    lm_head = 0 if spec.tie_word_embeddings else embedding
    body = max(spec.total_params - (spec.vocab_size or 0) * hidden * (1 if spec.tie_word_embeddings else 2), 0)
    experts = spec.stored_expert_params
    if experts and dtype == "int4" and spec.checkpoint_weights == "mxfp4":
        inter, align = spec.moe["expert_intermediate"], 128 if gpu_name.upper().startswith("B200") else 256
        experts *= (math.ceil(inter / 128) * 128 * math.ceil(hidden / align) * align) / (inter * hidden)
    router = spec.moe["experts"] * spec.moe["layers"] * hidden if spec.moe else 0
    replicated = spec.num_layers * spec.mla_gemm_shapes(1)[0][0] * hidden if spec.mla and hidden else 0
    kv_heads = spec.num_kv_heads if spec.attention != "mla" else 0
    kv_extra = (spec.num_layers * 2 * spec.head_dim * hidden * (max(1, kv_heads / tp) - kv_heads / tp)
                if kv_heads and tp > kv_heads else 0.0)
    per_weight = linear_bytes(dtype, spec.checkpoint_weights)
    # gpt-oss's mxfp4 checkpoint quantises its experts only (attention, router stay bf16)
    dense_bytes = 2.0 if (dtype == "int4" and spec.checkpoint_weights == "mxfp4") else per_weight
    dense = max(body - experts - router - replicated, 0)
    return {
        "embedding": 2.0 * math.ceil(embedding / tp),
        "lm_head": 2.0 * math.ceil(lm_head / tp),
        "experts": per_weight * experts / tp,
        "dense": dense_bytes * dense / tp + dense_bytes * kv_extra,
        "replicated": dense_bytes * replicated + 2.0 * router,
        "rotary_cache": 2.0 * (spec.max_model_len or 0) * spec.head_dim if spec.attention != "mla" else
        2.0 * (spec.max_model_len or 0) * (spec.qk_rope_head_dim or 0),
    }


def activation_width(spec, tp: int) -> int:
    """Elements one token holds at the profile run's peak (4 x hidden + the widest intermediate)."""
    hidden = spec.hidden_size or 0
    widths = [2 * (spec.num_attention_heads + spec.num_kv_heads) * spec.head_dim // tp]
    if spec.intermediate_size:
        widths.append(3 * spec.intermediate_size // tp)
    if spec.moe:
        widths.append(spec.moe["experts_per_token"] * (3 * spec.moe["expert_intermediate"] // tp + hidden))
    return 4 * hidden + max(widths)


def sampler_rows(max_num_batched_tokens: int, max_num_seqs: int) -> int:
    return min(max_num_seqs, max_num_batched_tokens)


def activation_bytes(spec, tp: int, max_num_batched_tokens: int, max_num_seqs: int, *,
                     scale: float = None, copies: float = None) -> tuple[float, float]:
    """(forward, sampler) peaks of the profile run, bytes (module docstring, point 4)."""
    scale = ACTIVATION_SCALE if scale is None else scale
    copies = SAMPLER_COPIES if copies is None else copies
    vocab = math.ceil((spec.vocab_size or 0) / VOCAB_PADDING) * VOCAB_PADDING
    forward = scale * max_num_batched_tokens * activation_width(spec, tp) * 2.0
    sampler = copies * sampler_rows(max_num_batched_tokens, max_num_seqs) * vocab * 4.0
    return forward, sampler


def capture_sizes(max_num_seqs: int, gpu_name: str = "") -> list[int]:
    """vLLM 0.33.0's default CUDA graph capture sizes (vllm/config/vllm.py:2403-2411)."""
    ceiling = 1024 if gpu_name.upper().startswith("B200") else 512
    top = min(2 * max_num_seqs, ceiling)
    sizes = [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, top + 1, 16))
    return [s for s in sizes if s <= top]


def cudagraph_graphs(max_num_seqs: int, gpu_name: str = "", enforce_eager: bool = False) -> int:
    """Graphs FULL_AND_PIECEWISE captures: every size PIECEWISE, those up to max_num_seqs FULL."""
    if enforce_eager:
        return 0
    sizes = capture_sizes(max_num_seqs, gpu_name)
    return len(sizes) + sum(1 for s in sizes if s <= max_num_seqs)


@dataclass(frozen=True)
class MemoryBudget:
    """One GPU's budget, bytes: what vLLM 0.33.0 leaves its KV pool (module docstring)."""

    total_memory_bytes: int
    gpu_memory_utilization: float
    requested_bytes: int
    weight_bytes: float
    activation_bytes: float
    sampler_bytes: float
    cudagraph_bytes: float
    cudagraph_graphs: int
    non_torch_bytes: float
    kv_bytes_available: float
    max_num_batched_tokens: int
    max_num_seqs: int
    enforce_eager: bool
    kv_cache_memory_bytes: int | None = None

    @property
    def profiled_kv_bytes(self) -> float:
        """What the profile leaves (before kv_cache_memory replaces it)."""
        return (self.requested_bytes - self.weight_bytes - self.activation_bytes - self.sampler_bytes
                - self.cudagraph_bytes - self.non_torch_bytes)

    def to_dict(self) -> dict:
        return asdict(self)


def memory_budget(spec, gpu, tp: int, gpu_memory_utilization: float, dtype: str, *,
                  max_num_batched_tokens: int = 8192, max_num_seqs: int = 256, enforce_eager: bool = False,
                  kv_cache_memory: int | None = None, total_memory_bytes: int | None = None) -> MemoryBudget:
    """The budget of one GPU (every argument already checked; capacity.kv_capacity checks them)."""
    total = int(gpu.memory_bytes if total_memory_bytes is None else total_memory_bytes)
    requested = math.ceil(total * gpu_memory_utilization)
    weights = sum(weight_parts(spec, dtype, tp, gpu.name).values())
    forward, sampler = activation_bytes(spec, tp, max_num_batched_tokens, max_num_seqs)
    graphs = cudagraph_graphs(max_num_seqs, gpu.name, enforce_eager)
    cudagraph = CUDAGRAPH_BYTES_PER_GRAPH * graphs
    budget = MemoryBudget(total, float(gpu_memory_utilization), requested, weights, forward, sampler, cudagraph,
                          graphs, float(NON_TORCH_BYTES), 0.0, int(max_num_batched_tokens), int(max_num_seqs),
                          bool(enforce_eager), kv_cache_memory)
    available = budget.profiled_kv_bytes if kv_cache_memory is None else float(kv_cache_memory)
    return MemoryBudget(**{**asdict(budget), "kv_bytes_available": available})


def check_positive_int(label: str, value, *, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) and not (hasattr(value, "__index__")):
        raise ConfigError(f"{label} must be a whole number >= {minimum}, got {value!r}")
    value = int(value)
    if value < minimum:
        raise ConfigError(f"{label} must be a whole number >= {minimum}, got {value!r}")
    return value
