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
   (``_dummy_sampler_run``, 5866-5926: bf16 logits, their fp32 copy, probabilities and
   exponential noise, ``SAMPLER_BYTES_PER_LOGIT`` = 14 bytes a logit) while the forward pass's
   hidden states are still held. The profiler counts one torch peak above what stays allocated
   (``transient_peak_headroom``, mem_utils.py:318-321), so the budget takes the larger of the
   forward pass and the sampler, not their sum. The forward pass: ``tokens x (2 x hidden + the
   widest layer) x 2 bytes`` (``layer_width``: attention's qkv and output, MLA's q and
   up-projected k/v, a dense MLP's gate_up and activation outputs, the fused MoE's two
   workspaces at the full token count, which 0.33.0 no longer chunks).
5. **CUDA graphs**: unless ``enforce_eager``, ``profile_cudagraph_memory`` captures the first two
   graphs of each mode and estimates ``first + per_graph x (graphs - 1)`` (gpu_model_runner.py:
   6268-6360), and the estimate is taken from the budget because
   ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS`` defaults to 1 (vllm/envs.py:2219-2220;
   gpu_worker.py:707-757). The capture sizes are 1, 2, 4, 8..248 by 8 and 256.. by 16 up to
   ``min(2 x max_num_seqs, 512)`` (1024 on compute capability 10.x: B200, GB200, B300, GB300;
   ``gpus.datacenter_blackwell``) (vllm/config/vllm.py:2403-2411, 2463-2465), PIECEWISE
   for each and FULL for those up to ``max_num_seqs`` (FULL_AND_PIECEWISE, the default). Here:
   ``CUDAGRAPH_BYTES_PER_GRAPH x graphs``.
6. **Non-torch memory** inside the budget: ``non_kv_cache_memory = total_consumed +
   transient_peak_headroom`` (mem_utils.py:312-321), ``total_consumed`` being the free memory the
   init snapshot saw less the free memory after the profile. The snapshot is taken after the CUDA
   context, NCCL's and custom all-reduce's buffers and the cuBLAS handles exist
   (gpu_worker.py:500-544), so none of those is in the budget at any TP; what is left beyond the
   weights (point 3) and the profile's peak (point 4) is what the profile loads outside PyTorch
   (CUDA modules, attention workspaces) and the runner's persistent buffers: ``NON_TORCH_BYTES``,
   0.04 GiB. (vLLM up to 0.10 took the snapshot before NCCL, so its logs' non-torch line holds
   NCCL's buffers at TP > 1.)
7. **KV left** = budget - weights - activation peak - CUDA graphs - non-torch
   (gpu_worker.py:753-757), in whole pages: ``num_blocks = available // bytes_per_block``
   (vllm/v1/core/kv_cache_planning.py:681); a hybrid model's block id costs its layout's page
   (catalog/kv_groups.py).

``kv_cache_memory`` replaces the profiled figure (``kv_cache_memory_bytes``: vLLM still runs the
profile, then reserves exactly that, ignoring ``gpu_memory_utilization``, gpu_worker.py:656-681).
``num_gpu_blocks_override`` replaces the block count whatever the memory says
(kv_cache_planning.py:242-248, 682; and 1510-1530, which plans against ``override x
bytes_per_block``); with both, vLLM applies the override last, and so does this module.

Every term but two is derived from vLLM 0.33.0's code: CUDAGRAPH_BYTES_PER_GRAPH is read off a
public log's capture (0.72 GiB for 102 graphs) and NON_TORCH_BYTES off the non-torch line of the
V1 logs at TP 1 (benchmarks/data/vllm_kv_pool_points.csv; nothing is fitted to a KV figure;
docs/memory.md has the error tables and the fitted constant this replaced). Multimodal models
(ModelSpec.vision): the vision tower's bf16 weights join point 3, and point 4's peak becomes the
largest of the tower's forward pass on the dummy images and the text peak with their outputs
held (``encoder_bytes``); ``language_model_only`` (vLLM's ``--language-model-only``, or every
``--limit-mm-per-prompt`` modality at 0) drops both. Not modelled: speculative drafters, KV
connectors' buffers (LMCache's vLLM connector stages chunks in one GPU buffer of ``2 x layers x
256 tokens x KV heads per rank x head_dim`` in the KV dtype, tens of MB: lmcache/v1/
gpu_connector.py, ``VLLMPagedMemGPUConnectorV2``), the frontend's multimodal GPU reservation
(``mm_ipc_gpu_memory_gb``, 0 by default: vllm/multimodal/gpu_ipc_memory.py:155-260).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from ...errors import ConfigError
from ...catalog.gpus import datacenter_blackwell, gpu_catalog

GiB = 1 << 30
MiB = 1 << 20

#: vLLM 0.33.0's default ``gpu_memory_utilization`` (vllm/config/cache.py:215, ``Field(default=0.92,
#: gt=0, le=1)``; 0.92 since vLLM 0.20.0, config/cache.py:66 there, 0.9 before): the budget of a
#: vLLM-style pool whose utilization is not given (config.resolve).
VLLM_GPU_MEMORY_UTILIZATION = 0.92


def vllm_utilization(value: float | None) -> float:
    """The utilization a vLLM-style pool is sized at: `value`, or vLLM 0.33.0's default when None
    (not given)."""
    return VLLM_GPU_MEMORY_UTILIZATION if value is None else value

#: The dummy sampler run's bytes per logit in vLLM 0.33.0: the model's bf16 logits (2), the
#: sampler's fp32 copy (4, v1/sample/sampler.py:158), the probabilities (4) and the exponential
#: noise (4) of the PyTorch-native path its second call takes (topk_topp_sampler.py:292-313,
#: 606-628); top-k/top-p run in place in Triton (topk_topp_sampler.py:501-521).
SAMPLER_BYTES_PER_LOGIT = 14
#: A CUDA graph's share of the estimate (one PIECEWISE or FULL graph), from vLLM 0.21+ logs'
#: "Estimated CUDA graph memory" lines (benchmarks/data/vllm_kv_pool_points.csv).
CUDAGRAPH_BYTES_PER_GRAPH = 7 * MiB
#: What the profile leaves allocated outside PyTorch after the start-up snapshot (CUDA modules
#: loaded lazily, attention workspaces) with the runner's persistent buffers. The snapshot vLLM
#: subtracts from is taken after the CUDA context, NCCL's and custom all-reduce's buffers and the
#: cuBLAS handles (gpu_worker.py:500-544; ``non_kv_cache_memory``, mem_utils.py:312-321; the CUDA
#: graphs apart, gpu_worker.py:707-757), so none of them is in the budget. The V1 logs that print
#: it at TP 1 say 0.02 and 0.06 GiB ("... GiB for non-torch memory"): their mean, 0.04 GiB.
#: (It replaced a constant fitted on four logs, 1.59 GiB, that absorbed what they left unexplained:
#: ``python benchmarks/kv_pool.py --fit``; docs/memory.md compares the two.)
NON_TORCH_BYTES = int(0.04 * GiB)

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


def attention_params(spec) -> int:
    """Parameters of the attention projections over the layers (q, k, v and o; MLA's projections)."""
    if spec.mla:
        return spec.mla_projection_params
    layers = spec.kv_layers if spec.kv_groups else spec.num_layers
    q, kv = spec.num_attention_heads * spec.head_dim, spec.num_kv_heads * spec.head_dim
    return layers * (spec.hidden_size or 0) * (2 * q + 2 * kv)


def mxfp4_alignment(gpu_name: str) -> tuple[int, int]:
    """What an mxfp4 MoE's (intermediate size per rank, hidden size) are rounded up to on `gpu_name`,
    by the backend vLLM 0.33.0 picks for gpt-oss (``_get_priority_backends_for_gpt_oss``,
    fused_moe/oracle/mxfp4.py:402-436; the rounding, 837-916):

    - compute capability 10.x (B200, GB200, B300, GB300): 128 and 256, FlashInfer's TRT-LLM MoE
      being first in that order and supported on the 10.x family (experts/trtllm_mxfp4_moe.py:
      121-123; its rounding, oracle/mxfp4.py:871-873);
    - 9.x (H100, H200, H20): the TRITON backend (triton_kernels' matmul_ogs, which supports SM90
      to SM12x: experts/gpt_oss_triton_kernels_moe.py:41-53) rounds the intermediate size to 64
      (oracle/mxfp4.py:915-916), and the Hopper weight layout it swizzles into
      (``_swizzle_mxfp4``, quantization/utils/mxfp4_utils.py:65-140) pads the hidden size to
      256: gpt-oss-120b loads 64.38 GiB on one H100 and gpt-oss-20b 13.47 in vLLM 0.14.1
      (benchmarks/data/vllm_kv_pool_points.csv: 2,880 -> 3,072 on the experts; this module
      gives 64.51 and 13.43);
    - AMD (MI300X, MI325X, MI355X): 256 and 256, the ROCm rounding for an activation other than
      SiLU/SiTU (gpt-oss's is SwiGLU-OAI; oracle/mxfp4.py:880-910);
    - older or unknown (A100, L40S, L4, RTX cards: Marlin, oracle/mxfp4.py:867-872): 128 and 256
      (gpt-oss-20b on an A100: 13.72 GiB printed, 13.66 here)."""
    name = str(gpu_name).strip().lower()
    cc = next((g.compute_capability for g in gpu_catalog()
               if name in (g.name.lower(), *(a.lower() for a in g.aliases))), "")
    if cc.startswith("9."):
        return 64, 256
    if cc.startswith("gfx"):
        return 256, 256
    return 128, 256


def weight_parts(spec, dtype: str, tp: int, gpu_name: str = "", language_model_only: bool = False,
                 expert_gpus: int | None = None, expert_parallel: bool = False) -> dict:
    """The weights one TP rank loads, in bytes, by part (see the module docstring, point 3). An
    mxfp4 checkpoint's experts are padded for the MoE kernel (``mxfp4_alignment``) from the
    intermediate size of a rank (``intermediate_size_per_partition``, the width over the TP
    ranks: 720 at TP 4 for gpt-oss; ``maybe_roundup_sizes``, quantization/mxfp4.py:183-198); the
    padding is memory the experts take, not parameters taken from the rest of the model
    (attention and the router stay bf16). A multimodal model's vision
    tower is loaded in bf16 (vLLM builds it without the quant config) and split over the ranks
    (``mm_encoder_tp_mode`` "weights", the default), unless ``language_model_only``, which skips it
    (``_mark_tower_model``, models/interfaces.py:347-395). A model whose quantized checkpoints keep
    attention in bf16 (ModelSpec.quantized_keeps_bf16) has its attention at 2 bytes a weight.
    Data parallelism splits the routed experts over its DP x TP GPUs (`expert_gpus`; None: tp),
    each expert's width or, under `expert_parallel`, whole experts (serving/dataparallel.py)."""
    expert_gpus = expert_gpus or tp
    hidden = spec.hidden_size or 0
    vocab = math.ceil((spec.vocab_size or 0) / VOCAB_PADDING) * VOCAB_PADDING
    embedding = vocab * hidden
    lm_head = 0 if spec.tie_word_embeddings else embedding
    vision = spec.vision["params"] if spec.vision else 0
    body = max(spec.total_params - (spec.vocab_size or 0) * hidden * (1 if spec.tie_word_embeddings else 2)
               - (vision if spec.vision_in_total_params else 0), 0)
    experts = spec.stored_expert_params
    router = spec.moe["experts"] * spec.moe["layers"] * hidden if spec.moe else 0
    replicated = spec.num_layers * spec.mla_gemm_shapes(1)[0][0] * hidden if spec.mla and hidden else 0
    dense = max(body - experts - router - replicated, 0)
    if experts and dtype == "int4" and spec.checkpoint_weights == "mxfp4":
        inter = spec.moe["expert_intermediate"] / (1 if expert_parallel else expert_gpus)
        inter_align, hidden_align = mxfp4_alignment(gpu_name)
        experts *= (math.ceil(inter / inter_align) * inter_align * math.ceil(hidden / hidden_align) * hidden_align
                    / (inter * hidden))
    kv_heads = spec.num_kv_heads if spec.attention != "mla" else 0
    kv_extra = (spec.num_layers * 2 * spec.head_dim * hidden * (max(1, kv_heads / tp) - kv_heads / tp)
                if kv_heads and tp > kv_heads else 0.0)
    per_weight = linear_bytes(dtype, spec.checkpoint_weights)
    # gpt-oss's mxfp4 checkpoint quantises its experts only (attention, router stay bf16)
    dense_bytes = 2.0 if (dtype == "int4" and spec.checkpoint_weights == "mxfp4") else per_weight
    kept = attention_params(spec) if dtype in ("fp8", "int4") and "attention" in spec.quantized_keeps_bf16 else 0
    return {
        "embedding": 2.0 * math.ceil(embedding / tp),
        "lm_head": 2.0 * math.ceil(lm_head / tp),
        "experts": per_weight * experts / expert_gpus,
        "dense": (dense_bytes * (dense - kept) + 2.0 * kept) / tp + (2.0 if kept else dense_bytes) * kv_extra,
        "vision": 0.0 if language_model_only else 2.0 * vision / tp,
        "replicated": dense_bytes * replicated + 2.0 * router,
        "rotary_cache": 2.0 * (spec.max_model_len or 0) * spec.head_dim if spec.attention != "mla" else
        2.0 * (spec.max_model_len or 0) * (spec.qk_rope_head_dim or 0),
    }


def layer_width(spec, tp: int, dtype: str = "bf16", ep: bool = False) -> float:
    """Elements (bf16) one token holds at the widest layer of the profile run's forward pass,
    besides the residual stream (vLLM 0.33.0, no chunking of the token dimension anywhere):

    - attention: the qkv projection's output and the attention output, ``(2 q + 2 kv) x head_dim
      / tp``; MLA: q (heads / tp x (nope + rope)), the up-projected k and v of the prefill path
      (heads / tp x (nope + rope + v)) and the output (heads / tp x v);
    - a dense MLP: gate_up's output and the activation's, ``3 x intermediate / tp``;
    - the fused MoE (``TritonExperts.workspace_shapes``, fused_moe/experts/triton_moe.py:240-255,
      allocated through ``_allocate_buffers`` at the full token count, modular_kernel.py:1124-1213
      and 1353-1367): workspace13 ``top_k x max(I, hidden)`` and workspace2 ``top_k x max(2 I,
      hidden)``, I the expert width per rank (the full width under expert parallelism), plus the
      router's fp32 logits (``experts x 2``) and, for fp8 weights, the quantized copies of the
      input and the activation (``(hidden + top_k x I) / 2``).
    """
    hidden = spec.hidden_size or 0
    widths = []
    if spec.attention == "mla" and spec.mla:
        m, h = spec.mla, spec.num_attention_heads / tp
        nope, rope, v = m["qk_nope_head_dim"], spec.qk_rope_head_dim or 0, m["v_head_dim"]
        widths.append(h * (nope + rope) + h * (nope + rope + v) + h * v)
    else:
        widths.append(2 * (spec.num_attention_heads + spec.num_kv_heads) * spec.head_dim / tp)
    if spec.intermediate_size:
        widths.append(3 * spec.intermediate_size / tp)
    if spec.moe:
        k, inter = spec.moe["experts_per_token"], spec.moe["expert_intermediate"] / (1 if ep else tp)
        moe = k * max(inter, hidden) + k * max(2 * inter, hidden) + 2 * spec.moe["experts"]
        if dtype == "fp8":
            moe += (hidden + k * inter) / 2
        widths.append(moe)
    return max(widths)


def forward_bytes(spec, tp: int, tokens: int, dtype: str = "bf16") -> float:
    """The forward pass's peak at `tokens` tokens: the residual stream and the layer input
    (``2 x hidden``) beside the widest layer (``layer_width``), bf16."""
    return tokens * (2 * (spec.hidden_size or 0) + layer_width(spec, tp, dtype)) * 2.0


def sampler_rows(max_num_batched_tokens: int, max_num_seqs: int) -> int:
    """Rows of the dummy sampler run: one per dummy request, ``min(tokens, max_num_seqs)``
    (``_dummy_run``, gpu_model_runner.py:5541-5545 and 5861-5863)."""
    return min(max_num_seqs, max_num_batched_tokens)


def sampler_bytes(spec, max_num_batched_tokens: int, max_num_seqs: int, per_logit: float = None) -> float:
    """The dummy sampler run's peak: ``rows x padded vocabulary x SAMPLER_BYTES_PER_LOGIT`` plus
    the forward pass's hidden states, which ``profile_run`` still holds
    (gpu_model_runner.py:6132-6141)."""
    per_logit = SAMPLER_BYTES_PER_LOGIT if per_logit is None else per_logit
    vocab = math.ceil((spec.vocab_size or 0) / VOCAB_PADDING) * VOCAB_PADDING
    rows = sampler_rows(max_num_batched_tokens, max_num_seqs)
    return rows * vocab * per_logit + max_num_batched_tokens * (spec.hidden_size or 0) * 2.0


def activation_bytes(spec, tp: int, max_num_batched_tokens: int, max_num_seqs: int, dtype: str = "bf16",
                     per_logit: float = None) -> tuple[float, float]:
    """(forward, sampler) peaks of the profile run, bytes. The two run one after the other, so the
    budget takes the larger (``transient_peak_headroom`` is one peak, mem_utils.py:318-321)."""
    return (forward_bytes(spec, tp, max_num_batched_tokens, dtype),
            sampler_bytes(spec, max_num_batched_tokens, max_num_seqs, per_logit))


#: Images a prompt may hold unless --limit-mm-per-prompt says otherwise (config/multimodal.py:698-711)
MM_LIMIT_PER_PROMPT = 999


def encoder_items(spec, max_num_batched_tokens: int, max_num_seqs: int) -> int:
    """Images the profile run encodes at once (``MultiModalBudget._get_max_items``,
    vllm/multimodal/encoder_budget.py:150-186): the encoder budget, ``max(max_num_batched_tokens,
    tokens per image)`` (encoder_cache_manager.py:360-380; scheduler.py:306-307), over the tokens
    one image yields, at most ``max_num_seqs x`` the images a prompt can hold."""
    per_item = spec.vision["tokens_per_item"]
    budget = max(max_num_batched_tokens, per_item)
    per_prompt = max(1, min(MM_LIMIT_PER_PROMPT, (spec.max_model_len or per_item) // per_item))
    return max(1, min(budget // per_item, max_num_seqs * per_prompt))


def encoder_bytes(spec, tp: int, max_num_batched_tokens: int, max_num_seqs: int,
                  language_model_only: bool = False) -> tuple[int, float, float]:
    """(images, the vision tower's forward peak, the encoder outputs) of the profile run's encoder
    part (``profile_run``, gpu_model_runner.py:6072-6126): vLLM encodes ``encoder_items`` dummy
    images of the largest size (``embed_multimodal``) and keeps their outputs in the encoder cache
    while the text forward pass and the sampler run after it (cleared at 6145). The tower's peak
    is the text forward pass's formula over its tokens (residual and input beside the widest layer:
    qkv and output ``4 x hidden / tp``, or the MLP's ``2 x intermediate / tp``), bf16; the outputs
    are ``images x tokens per image x the text width`` bf16. (0, 0, 0) for a text-only model, or
    with ``language_model_only`` (every modality limited to 0: no encoder budget, nothing profiled)."""
    v = spec.vision
    if not v or language_model_only:
        return 0, 0.0, 0.0
    items = encoder_items(spec, max_num_batched_tokens, max_num_seqs)
    tokens = items * v["encoder_tokens_per_item"]
    width = max(4 * v["hidden"] / tp, 2 * v["intermediate"] / tp)
    return items, tokens * (2 * v["hidden"] + width) * 2.0, items * v["tokens_per_item"] * (spec.hidden_size or 0) * 2.0


def capture_sizes(max_num_seqs: int, gpu_name: str = "") -> list[int]:
    """vLLM 0.33.0's default CUDA graph capture sizes (vllm/config/vllm.py:2403-2411)."""
    ceiling = 1024 if datacenter_blackwell(gpu_name) else 512
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
    encoder_bytes: float = 0.0  # the vision tower's forward peak on the dummy images
    encoder_output_bytes: float = 0.0  # their outputs, held through the forward pass and the sampler
    encoder_items: int = 0
    language_model_only: bool = False

    @property
    def peak_bytes(self) -> float:
        """The profile run's one peak: the vision encoder's, or the forward pass or the sampler with
        the encoder outputs still held, whichever is largest."""
        return max(self.encoder_bytes, self.encoder_output_bytes + max(self.activation_bytes, self.sampler_bytes))

    @property
    def profiled_kv_bytes(self) -> float:
        """What the profile leaves (before kv_cache_memory replaces it)."""
        return (self.requested_bytes - self.weight_bytes - self.peak_bytes - self.cudagraph_bytes
                - self.non_torch_bytes)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class ProfileRun:
    """What vLLM's start-up memory profile runs with, beyond the model, the GPU and TP: the weights
    dtype, the scheduler's token and sequence budgets, --enforce-eager, a measured KV size
    (--kv-cache-memory), the device's memory and --language-model-only (every value checked:
    capacity.kv_capacity checks them)."""

    dtype: str = "bf16"
    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 256
    enforce_eager: bool = False
    kv_cache_memory: int | None = None
    total_memory_bytes: int | None = None
    language_model_only: bool = False
    expert_gpus: int | None = None  # data parallelism: the GPUs an MoE's experts are split over (None: tp)
    expert_parallel: bool = False


def memory_budget(spec, gpu, tp: int, gpu_memory_utilization: float, run: ProfileRun) -> MemoryBudget:
    """The budget of one GPU for `run` (every argument already checked; capacity.kv_capacity checks them)."""
    total = int(gpu.memory_bytes if run.total_memory_bytes is None else run.total_memory_bytes)
    requested = math.ceil(total * gpu_memory_utilization)
    tokens, seqs, text_only = run.max_num_batched_tokens, run.max_num_seqs, run.language_model_only
    weights = sum(weight_parts(spec, run.dtype, tp, gpu.name, text_only, run.expert_gpus, run.expert_parallel).values())
    forward, sampler = activation_bytes(spec, tp, tokens, seqs, run.dtype)
    items, encoder, outputs = encoder_bytes(spec, tp, tokens, seqs, text_only)
    graphs = cudagraph_graphs(seqs, gpu.name, run.enforce_eager)
    cudagraph = CUDAGRAPH_BYTES_PER_GRAPH * graphs
    budget = MemoryBudget(total, float(gpu_memory_utilization), requested, weights, forward, sampler, cudagraph,
                          graphs, float(NON_TORCH_BYTES), 0.0, int(tokens), int(seqs), bool(run.enforce_eager),
                          run.kv_cache_memory, encoder, outputs, items, bool(text_only))
    available = budget.profiled_kv_bytes if run.kv_cache_memory is None else float(run.kv_cache_memory)
    return MemoryBudget(**{**asdict(budget), "kv_bytes_available": available})


def check_positive_int(label: str, value, *, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) and not (hasattr(value, "__index__")):
        raise ConfigError(f"{label} must be a whole number >= {minimum}, got {value!r}")
    value = int(value)
    if value < minimum:
        raise ConfigError(f"{label} must be a whole number >= {minimum}, got {value!r}")
    return value
