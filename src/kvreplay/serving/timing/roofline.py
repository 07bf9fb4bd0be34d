"""The calibrated roofline ("roofline", the default): a step as the sum of its kernels' times, each
at its own efficiency, fitted on measured GPU kernels (benchmarks/calibrate.py; the numbers and
their sources: kvreplay/data/roofline_calibration.json; docs/timing.md, "roofline").

Per GPU of a TP group, for a step of T tokens (prefill tokens + one per decode) and R logits rows
(one per request in the step):

- layer GEMMs of a dense model (``layer_gemm_shapes``: q/k/v, o, gate/up and down, each n x k
  on one GPU), one by one as the kernels were fitted: ``layers x sum(soft_max(2 x T x n x (k + k0)
  / (peak x e_gemm), (in x T x k + w x k x n + 2 x T x n) / (bw x e_weights)) + gemm_floor)``, in
  and w the input's and the weights' bytes per element (bf16 2, fp8 1, int4 weights 0.5), the
  output bf16. The tile term ``k0``: an m x n x k GEMM computes as if k were k + k0 (``gemm_k0``,
  fitted: each output tile's prologue and epilogue, which the measured tables show as a slowdown
  at small k);
- layer GEMMs of another model (MoE, MLA, Mamba hybrids, whose layers are not those four): one
  GEMM of the body, ``soft_max(2 x (body / tp + k0 x n) x T / (peak x e_gemm), weights / tp / (bw
  x e_weights)) + 4 x layers x gemm_floor`` (body: the layers' active parameters, the embedding
  and LM head left out; an MoE reads at most the experts its tokens route to, and with its
  experts apart reads the rest in bf16 under an MXFP4 checkpoint, which quantises its experts only;
  n: the GEMMs' output columns per token, ``gemm_outputs_per_token``);
- an MoE's routed experts (the catalog's ``moe``; since 2026-12-04 (5)), apart from the body
  above when the calibration has the fused MoE kernel for the weights (``moe_kernel``): per MoE
  layer ``moe_layer_time``, the kernel's compute (at least a tile of rows per active expert) and
  its active experts' weights, a floor and a cost per routed token, fitted on measured MoE kernels
  under balanced routing, times the served-routing factor of the step's tokens (SERVED_ROUTING:
  the same kernels under a served model's uneven routing, where the GPU's MoE terms are Hopper's);
- fp8 weights (W8A8, per-tensor scales as vLLM's Fp8LinearMethod runs them): the GEMMs at the fp8
  coefficients (``e_gemm_fp8``, ``e_weights_fp8``, ``gemm_floor_fp8_s``, fitted on the measured fp8
  GEMMs), their compute on ``fp8_gemm_rows(T)`` rows (above 128 rows, vLLM's sm90 fp8 kernel runs
  128-row tiles in clusters of 2, so T rounds up to a multiple of 256), at ``e_gemm_fp8_large``
  from 8,192 rows where fitted (``fp8_gemm_efficiency``), plus the activations'
  quantisation before each GEMM, ``3 bytes x T x inputs / (bw x e_quant_fp8)`` (a bf16 read and an
  fp8 write of every GEMM input element; inputs per token: ``quant_inputs_per_token``);
- the LM head on the R logits rows only: ``max(2 x vocab x hidden x R / tp / (peak x e_gemm),
  vocab x hidden x bytes / tp / (bw x e_weights)) + gemm_floor``, at bf16 whatever the weights
  (fp8 checkpoints keep lm_head in bf16: e.g. nvidia/Llama-3.1-8B-Instruct-FP8's
  hf_quant_config.json excludes it);
- prefill attention: ``layers x floor + max(4 x width / tp x keys / (peak x e x h), (KV read + q/o)
  / (bw x e_kv))``, causal keys as the raw roofline counts them, ``h`` the efficiency at the model's
  head width over the 128-wide heads ``e`` is fitted on (attn_head_efficiency: 0.769 at 64);
- decode attention: the same with its own floor and efficiencies, over the decodes' contexts,
  plus ``layers x decodes x attn_per_request_decode_s`` (a cost per request per layer); its KV read
  ``x (1 + attn_split_decode / (decodes x KV heads per GPU))``: with few (request, KV head) pairs
  FlashAttention splits each one's KV over blocks and combines them, and reads slower (the
  generation table: 1.3x at one pair, 1.04x at eight; since 2026-12-07);
- the GEMMs' compute and memory times combine as ``soft_max`` (a p-norm, ``gemm_overlap_p``:
  they overlap imperfectly near the ridge point), the LM head's too;
- TP all-reduce (tp > 1): two per layer of ``T x hidden x 2`` bytes each, as vLLM runs them
  (``allreduce_time``): its custom kernel below 8 MiB, in one stage ``latency + (tp - 1) x bytes /
  link`` (each GPU reads every peer's buffer: on 2 GPUs, and below 512 KiB on 4 or 256 KiB on 8) or
  two ``2 x latency + 2 (tp - 1) / tp x bytes / bus``, NCCL's ring above (``latency + 2 (tp - 1) / tp
  x bytes / bus``); a GPU without measurements scales its relative's link and bus by the two
  catalog link speeds. ``latency`` is the isolated kernel's, plus ``skew x log2(tp)``
  (``allreduce_skew_s``) on the first barrier: the wait for the last GPU of the group in a real
  step, which no kernel table holds, fitted on silicon serving runs;
- elementwise kernels (since 2026-12-07; ``elementwise_kernels``): what a vLLM step launches besides
  its GEMMs, attention and all-reduces: per layer two RMSNorms fused with the residual add, the
  rotary embedding, the KV-cache write and a dense MLP's SiLU-and-mul, and per step the embedding
  and the final norm, each ``ew_floor_s + bytes / (bw x e_ew)``, fitted on the GPU's measured
  elementwise kernel (vLLM's fp8 quantisation kernel, the streaming-bandwidth probe's);
- overheads: ``layers x per_layer + per_step``;
- outside the step, what the host CPU adds (the API server, the engine core's scheduling, the
  output processing, async scheduling): serving/timing/host.py, applied by simulate() and the kernel;
- MLA layers (the catalog's ``mla``; since 2026-12-05) with a calibrated MLA term: the four
  projection GEMMs one by one (``ModelSpec.mla_gemm_shapes``: fused q_a/kv_a replicated, q_b, kv_b,
  o), the rest of the body (shared experts, dense layers, router) one GEMM beside them, attention
  at the MLA kernels' widths (prefill ``heads x (nope + rope + v) / 2``, decode ``heads x (2 x
  kv_lora_rank + rope) / 2``, per FLOP-pair of ``4 x width``) and compute efficiencies, and per
  layer ``mla_floor_s + (mla_per_token_s + mla_per_head_token_s x heads / tp) x T``, and a prefill's
  cached context decompressed through kv_b (vLLM's chunked-context prefill: ``2 x kv_lora_rank x
  heads / tp x (nope + v)`` FLOPs per cached token and layer, at the GEMMs' peak and efficiency; not
  in the measured modules, which have no cached prefix);
- Mamba / linear-attention layers (Qwen3-Next's Gated DeltaNet, Nemotron-H's and Granite 4's
  Mamba-2; ``mamba_term``), not measured: each of the M layers reads and writes its fixed state
  once per request in the step, ``2 x state x R / tp`` bytes at ``e_kv_decode``, and updates it per
  token, ``6 x state / 2 x T / tp`` FLOPs (about 6 FLOPs per bf16 state element: decay, the
  rank-1 update and the read-out) at the phase's attention efficiency, plus the phase's
  attention floor per layer. Attention then runs on the attention layers only (their KV bytes
  per layer). Their projections are in the GEMMs (active parameters). The calibration's band
  does not cover this term, and the run says so.

Every memory term runs at the GPU's measured streaming bandwidth (``stream_bandwidth``), not its
datasheet peak: the efficiencies above are fractions of what a memory-bound kernel sustains on
that GPU (vLLM's fp8 quantisation kernel over shapes moving >= 256 MB, from the same kernel
database), so a GPU whose memory sustains a smaller share of its peak (an H200: 84% against an
H100's 88%) is predicted as slower. A GPU without that measurement streams at its datasheet peak
times the share measured on the GPU whose coefficients it uses.

Attention and the all-reduce run at bf16 whatever the weights' dtype; GEMMs at the weights'
compute dtype (fp8 weights: fp8 tensor cores; int4 weights are dequantised to bf16, at the bf16
coefficients).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache

from ...analysis.models import kv_dtype_bytes
from ...errors import ConfigError
from .models import RooflineTimeModel, StepBatch, _weight_bytes, eager_step, prefill_keys

#: the fitted coefficients (per GPU) and what the model is built from
COEFFICIENTS = ("e_gemm", "e_weights", "gemm_floor_s", "e_attn_prefill", "e_kv_prefill", "attn_floor_prefill_s",
                "e_attn_decode", "e_kv_decode", "attn_floor_decode_s", "allreduce_latency_s",
                "allreduce_bus_bytes_per_s", "per_layer_s", "per_step_s")
#: the fp8 GEMMs' coefficients (a GPU with FP8 tensor cores and measured fp8 GEMMs)
FP8_COEFFICIENTS = ("e_gemm_fp8", "e_weights_fp8", "gemm_floor_fp8_s", "e_quant_fp8")
#: NCCL's all-reduce above vLLM's custom kernel (messages of 8 MiB and more: a prefill's), per TP
#: degree measured (since 2026-12-07): its latency beyond the first barrier and its bus bandwidth in
#: the ring's form. NCCL does not run the ring at every degree (on NVSwitch a 128 MiB message takes
#: 0.47 ms on 2 H100s, 0.62 on 4, 0.58 on 8), so one bus bandwidth for every degree put TP 2 too fast
#: and TP 8 too slow (roofline.allreduce_time; nccl_terms interpolates between the degrees)
NCCL_TPS = (2, 4, 8)
NCCL_COEFFICIENTS = tuple(f"allreduce_nccl_{what}_tp{tp}{unit}" for tp in NCCL_TPS
                          for what, unit in (("latency", "_s"), ("bus", "_bytes_per_s")))
#: the GEMMs' shape terms (fitted; absent, each is off: no tile term, no partial-block cost, the
#: plain max of compute and memory)
SHAPE_COEFFICIENTS = {"gemm_k0": 0.0, "gemm_overlap_p": float("inf"), "gemm_k0_fp8": 0.0,
                      "fp8_partial_rows": 0.0, "gemm_overlap_p_fp8": float("inf"), "attn_per_request_decode_s": 0.0,
                      "e_gemm_fp8_large": 0.0,
                      "allreduce_skew_s": 0.0, **dict.fromkeys(("attn_split_decode",
                      "allreduce_link_bytes_per_s", "ew_floor_s", "e_ew") + NCCL_COEFFICIENTS, 0.0)}
#: the step's kernels no GEMM, attention or all-reduce table holds (since 2026-12-07): the decode
#: attention's slowdown with few (request, KV head) pairs to spread its KV read over
#: (``attn_split_decode``), the one-stage all-reduce's read of every peer's buffer
#: (``allreduce_link_bytes_per_s``), and the elementwise kernels' floor and streaming efficiency
#: (``ew_floor_s``, ``e_ew``); each 0 is off (as the calibration timed steps before them)
STEP_COEFFICIENTS = ("attn_split_decode", "allreduce_link_bytes_per_s", "ew_floor_s", "e_ew")
#: what no kernel table holds, fitted on silicon serving runs (benchmarks/calibrate_e2e.py): an
#: all-reduce's wait for the last of its GPUs, per log2(tp) (what the host CPU adds outside the
#: steps: serving/timing/host.py)
SERVING_COEFFICIENTS = ("allreduce_skew_s",)
#: the GEMMs' coefficients, bf16 and fp8 (a GPU that borrows its relative's may fit these on its own)
GEMM_COEFFICIENTS = ("e_gemm", "e_weights", "gemm_floor_s", "gemm_k0", "gemm_overlap_p", "e_gemm_fp8", "e_weights_fp8",
                     "gemm_floor_fp8_s", "gemm_k0_fp8", "fp8_partial_rows", "gemm_overlap_p_fp8", "e_quant_fp8")
PHASES = ("prefill", "decode", "mixed")
#: an MoE's routed experts run vLLM's fused MoE kernel, fitted per weights dtype on measured MoE
#: kernels (bf16: the Triton fused_moe; fp8: its block-fp8 Triton kernel; int4: Marlin's W4A16;
#: mxfp4: OpenAI's Triton kernel, for int4 weights of an MXFP4 checkpoint):
#: compute and weights efficiencies, a floor, their overlap, a cost per routed token (the tokens'
#: alignment, permutation and weighted sum), the rows each active expert computes at least (its
#: tile of rows) at most MOE_TILE_ABOVE tokens, the tile term k0, and the tile's rows above them
#: (since 2026-12-05). A calibration without them, or a model without ``moe`` in the catalog, times
#: the experts with the other GEMMs (one GEMM of the active parameters)
MOE_TERMS = ("e_gemm", "e_weights", "floor_s", "overlap_p", "per_token_s", "tile_rows", "k0", "tile_rows_large")
#: above this many tokens vLLM's fused MoE kernel runs taller tiles of rows: its default block-fp8
#: config takes BLOCK_SIZE_M 16 at M <= 64 tokens, 64 above (vLLM 0.24
#: model_executor/layers/fused_moe/fused_moe.py, get_default_config; its bf16 default steps at 32,
#: 96 and 512, and tuned configs per shape differ: the two tiles' rows are fitted, this switch is not)
MOE_TILE_ABOVE = 64
MOE_DTYPES = {"bf16": "bf16", "fp16": "bf16", "fp8": "fp8", "int4": "int4"}  # weights -> kernel
#: each MoE kernel's bytes per weight; mxfp4: int4 weights of an MXFP4 checkpoint (gpt-oss), which
#: vLLM runs with OpenAI's Triton MoE kernel, not Marlin (its scales, a byte per 32, left out as int4's)
MOE_WEIGHT_BYTES = {"bf16": 2.0, "fp8": 1.0, "int4": 0.5, "mxfp4": 0.5}


#: served routing: the MoE kernel terms are fitted on tables whose tokens are routed as evenly as
#: they can be, while a served model routes them unevenly, which the same kernels run at another
#: speed (fewer experts active in a small step: faster; a few experts holding most of a prefill's
#: rows: slower, 1.4x for gpt-oss's MXFP4 kernel at 1,024 tokens). Each kernel's time under the
#: routing aiconfigurator models a served model with (power law, alpha 1.01) over its time under
#: balanced routing, both measured on H100 (``moe/vllm/0.24.0/moe_perf.parquet``: the same kernel,
#: shape and tokens; benchmarks/calibrate_moe.py served_routing), at MOE_ROUTING_KNOTS knots of
#: 2^0 .. 2^14 tokens, each the median within half an octave; linear in log2(tokens) between them,
#: the last knot's beyond. Applied to the Hopper-era kernels these coefficients describe (a GPU whose
#: MoE terms are its own fit on other kernels, Blackwell's FlashInfer ones, keeps balanced routing)
MOE_ROUTING_KNOTS = 15
SERVED_ROUTING = {
    "bf16": (0.983, 0.985, 0.992, 0.981, 0.783, 0.792, 0.854, 0.9, 0.933, 0.966, 1.003, 1.08, 1.087, 1.08, 1.055),
    "fp8": (0.98, 0.982, 0.989, 0.993, 0.901, 0.776, 0.813, 0.862, 0.893, 0.925, 1.002, 1.05, 1.027, 1.044, 1.023),
    "int4": (0.994, 0.995, 1.0, 0.999, 0.922, 0.734, 0.69, 0.802, 1.011, 1.028, 1.107, 1.265, 1.164, 1.124, 1.037),
    "mxfp4": (0.987, 0.986, 0.981, 0.903, 0.961, 0.877, 0.959, 1.003, 1.111, 1.229, 1.366, 1.339, 1.285, 1.097, 1.069),
}


#: prefill attention at 64-wide heads (gpt-oss): FlashAttention's compute efficiency at head_dim 64 over
#: the 128-wide heads ``e_attn_prefill`` is fitted on (half the FLOPs per (query, key) pair, not half
#: the softmax and per-tile work), fitted on H100's FlashAttention 3 table (benchmarks/attention_heads.py;
#: since 2026-12-07); between 64 and 128 linear in log2(head_dim) (attn_head_efficiency)
ATTN_PREFILL_HEAD64 = 0.769


def attn_head_efficiency(head_dim) -> float:
    """The factor on ``e_attn_prefill`` at `head_dim`: ATTN_PREFILL_HEAD64 at 64 or less, 1 at 128 or
    more, linear in log2(head_dim) between (no table times the widths between)."""
    if not head_dim or head_dim >= 128:
        return 1.0
    x = min(max(math.log2(head_dim) - 6.0, 0.0), 1.0)
    return ATTN_PREFILL_HEAD64 + (1.0 - ATTN_PREFILL_HEAD64) * x


def served_routing(kernel: str, tokens) -> float:
    """The served-routing factor of MoE kernel `kernel` at a step of `tokens` tokens (SERVED_ROUTING;
    1 for a kernel without one), as step.c's moe_routing computes it."""
    knots = SERVED_ROUTING.get(kernel)
    if knots is None or tokens <= 0:
        return 1.0
    x = min(max(math.log2(tokens), 0.0), MOE_ROUTING_KNOTS - 1.0)
    i = min(int(x), MOE_ROUTING_KNOTS - 2)
    return knots[i] * (1.0 - (x - i)) + knots[i + 1] * (x - i)


def served_routing_floor(kernel: str, tokens) -> float:
    """The least served-routing factor at `tokens` tokens or more: the factor falls with the tokens
    at small counts (fewer experts active), so a step with more tokens can take less time, and a
    floor of every larger step takes the least factor ahead (step_floor)."""
    knots = SERVED_ROUTING.get(kernel)
    if knots is None:
        return 1.0
    x = min(max(math.log2(tokens), 0.0), MOE_ROUTING_KNOTS - 1.0) if tokens > 0 else 0.0
    return min([served_routing(kernel, tokens)] + list(knots[int(x) + 1:]))


def moe_kernel(weights_dtype: str, checkpoint_weights: str | None) -> str | None:
    """The MoE kernel vLLM runs for these weights (None: no calibrated one)."""
    kernel = MOE_DTYPES.get(weights_dtype)
    return "mxfp4" if kernel == "int4" and checkpoint_weights == "mxfp4" else kernel


def moe_names(kernel: str) -> tuple[str, ...]:
    """The coefficients of MoE kernel `kernel` (MOE_WEIGHT_BYTES' keys), in MOE_TERMS' order."""
    return tuple(f"moe_{t}_{kernel}" for t in MOE_TERMS)


MOE_COEFFICIENTS = tuple(n for k in MOE_WEIGHT_BYTES for n in moe_names(k))
#: a Gated DeltaNet layer (Qwen3-Next's linear attention; the catalog's ``linear_attention``),
#: fitted on vLLM's measured GDN kernels (causal conv1d and FlashInfer's chunked delta rule in
#: prefill; conv1d update and the fused recurrent rule in decode): the heads a prefill needs to fill
#: the GPU (``gdn_parallel``: with fewer requests x value heads its chunks run one after another),
#: then per phase a floor, compute and bytes efficiencies and a cost per request
GDN_TERMS = ("parallel", "floor_prefill_s", "e_prefill", "e_bytes_prefill", "per_request_prefill_s",
             "floor_decode_s", "e_decode", "e_bytes_decode", "per_request_decode_s")
GDN_COEFFICIENTS = tuple(f"gdn_{t}" for t in GDN_TERMS)
#: an MLA layer (the catalog's ``mla``: DeepSeek-V3/R1, Kimi-K2), fitted on vLLM's measured MLA
#: modules (projections and attention together): the module's floor per layer, prefill attention's
#: compute efficiency (vLLM runs prefill unabsorbed: q.k over nope + rope, then v), decode's
#: (absorbed: over the latent and rope, then the latent), and costs per token and per head and token
#: of its elementwise kernels (norms, rope, the latent's split and copies, the per-head layouts)
MLA_COEFFICIENTS = ("mla_floor_s", "mla_e_attn_prefill", "mla_e_attn_decode", "mla_per_token_s",
                    "mla_per_head_token_s")
#: the kernel families a GPU that borrows its relative's coefficients may fit on its own tables
#: nonetheless (Calibration.own_fitted): their labels and coefficients
OWN_FAMILIES = {"gemm": ("GEMM", GEMM_COEFFICIENTS), "moe": ("MoE", MOE_COEFFICIENTS), "gdn": ("GDN", GDN_COEFFICIENTS),
                "mla": ("MLA", MLA_COEFFICIENTS), "elementwise": ("elementwise", ("ew_floor_s", "e_ew"))}


def own_fitted_label(families) -> str:
    """Calibration.own_fitted as the output prints it: "GEMM/MoE/GDN/MLA/elementwise"."""
    return "/".join(OWN_FAMILIES[f][0] for f in families)


#: vLLM's sm90 fp8 GEMM for m > 128 rows: 128-row tiles in 2 x 1 clusters, so its rows run in
#: blocks of 256 (csrc/quantization/w8a8/cutlass/c3x/scaled_mm_sm90_fp8_dispatch.cuh,
#: sm90_fp8_config_default: TileShape 128 x 128 x 128, ClusterShape 2 x 1 x 1; at most 128 rows it
#: picks smaller tiles, and those GEMMs are bound by their weight reads)
FP8_TILE_ABOVE, FP8_TILE_ROWS = 128, 256


def fp8_gemm_rows(tokens, partial_rows=0.0):
    """The rows an fp8 GEMM of `tokens` rows computes (FP8_TILE_ROWS), plus up to `partial_rows`
    when its last block of rows is partial (``fp8_partial_rows``, fitted). The measured tables time
    256 j + 1 rows slower than 256 (j + 1), by about that many rows' compute; between those two
    measured points the cost falls linearly, as the composed steps interpolate them. An int, or a
    numpy array of them elementwise (benchmarks/calibrate.py's kernel tables)."""
    whole = -(-tokens // FP8_TILE_ROWS) * FP8_TILE_ROWS
    tiled = tokens > FP8_TILE_ABOVE
    empty = (whole - tokens) / (FP8_TILE_ROWS - 1.0)  # 1 at 256 j + 1 rows, 0 at 256 (j + 1)
    return tokens + tiled * (whole - tokens) + tiled * empty * partial_rows


#: the fp8 GEMM tables' rows either side of a step in throughput: H100's table runs its compute-bound
#: GEMMs of 8,192 rows and more at 0.82-0.87x the time of the efficiency fitted over every row (1,300-1,380
#: TFLOP/s at Llama-3.1-70B's shapes against 1,080-1,150 up to 4,353 rows); the tables hold no rows
#: between 4,353 and 8,192
FP8_LARGE_FROM, FP8_LARGE_AT = 4353, 8192


def fp8_gemm_efficiency(tokens, e_gemm, e_large):
    """An fp8 GEMM's compute efficiency at `tokens` rows: ``e_gemm_fp8`` up to FP8_LARGE_FROM rows,
    ``e_gemm_fp8_large`` (fitted on the rows from FP8_LARGE_AT; 0: none, e_gemm everywhere) from
    FP8_LARGE_AT, linear between the two measured points. Scalars or numpy arrays."""
    import numpy as np

    if not e_large:
        return e_gemm
    w = np.clip((tokens - FP8_LARGE_FROM) / (FP8_LARGE_AT - FP8_LARGE_FROM), 0.0, 1.0)
    return e_gemm + w * (e_large - e_gemm)


def soft_max(compute, memory, p):
    """A GEMM's time from its compute and its memory times: ``(compute^p + memory^p)^(1/p)``, the
    two overlapping imperfectly (``gemm_overlap_p``, fitted; p infinite is the plain roofline's
    max, scalars only). Scalars or, at a finite p, numpy arrays (benchmarks/calibrate.py)."""
    if p == float("inf"):
        return compute if compute > memory else memory
    return (compute ** p + memory ** p) ** (1.0 / p)


def moe_layer_time(c, tokens, hidden, inter, experts, topk, wbytes, peak, bw, ep=1):
    """One MoE layer's routed experts on one GPU of a TP group (each expert's width split by tp:
    `inter` is its share), `c` the kernel's coefficients in MOE_TERMS' order. Routing as balanced
    as it can be (each of the tokens x topk routed tokens to a distinct expert until every expert
    has some, as the kernels were timed): ``active = min(experts, tokens x topk)`` experts each
    read their ``3 x hidden x inter`` weights and compute at least a tile of rows (``tile_rows``,
    ``tile_rows_large`` above MOE_TILE_ABOVE tokens); the gate/up and down GEMMs' FLOPs with k0 more
    of K. Under expert parallelism over `ep` GPUs (data parallelism's gathered tokens: `tokens` all
    the ranks'), a GPU holds `experts` of them whole and takes 1 / ep of the routings. Scalars or
    numpy arrays (benchmarks/calibrate.py)."""
    import numpy as np

    e, ew, floor, p, per_token, tile_rows, k0, tile_large = c
    routed = tokens * topk / max(1, ep)
    active = np.minimum(experts, routed)
    rows = np.maximum(routed, active * np.where(tokens > MOE_TILE_ABOVE, tile_large, tile_rows))
    flops = 2.0 * rows * (2.0 * (hidden + k0) * inter + (inter + k0) * hidden)
    weights = active * 3.0 * hidden * inter * wbytes
    return soft_max(flops / (peak * e), weights / (bw * ew), p) + floor + per_token * routed


def gdn_layer_time(c, tokens, rows, state, act, v_heads, prefill, peak, bw):
    """One Gated DeltaNet layer on one GPU (`c` in GDN_TERMS' order; `state` its state bytes per
    request, `act` its q/k/v/output bytes per token, `v_heads` its value heads, all after the TP
    split): the state update, ``6 x state / 2`` FLOPs per token (the raw state term's count), and
    bytes, the state read and written per request and the activations per token. A prefill's
    compute is slower by ``parallel / (requests x value heads)`` when that is above 1. Scalars or
    numpy arrays (benchmarks/calibrate_gdn.py)."""
    import numpy as np

    parallel, fp, ep, bp, rp, fd, ed, bd, rd = c
    flops = 6.0 * state / 2.0 * tokens
    nbytes = 2.0 * state * rows + act * tokens
    occupancy = np.maximum(1.0, parallel / (rows * v_heads))
    pre = fp + np.maximum(flops * occupancy / (peak * ep), nbytes / (bw * bp)) + rp * rows
    dec = fd + np.maximum(flops / (peak * ed), nbytes / (bw * bd)) + rd * rows
    return np.where(prefill, pre, dec)


#: vLLM's custom all-reduce (csrc/custom_all_reduce.cuh, ``CustomAllreduce::allreduce``): on 2 GPUs,
#: and on fully connected 4 (6-8) GPUs below 512 KiB (256 KiB), one stage, each GPU reading every
#: peer's whole buffer (``cross_device_reduce_1stage``); above, two (``cross_device_reduce_2stage``:
#: a reduce-scatter, then an all-gather, each behind its own barrier). It takes messages below
#: 8 MiB and at most 8 GPUs (``custom_all_reduce.py``, ``max_size`` 8192 x 1024); NCCL the rest.
CUSTOM_AR_MAX = 8 * 2 ** 20
ONE_STAGE_BELOW = {4: 512 * 1024, 8: 256 * 1024}  # bytes, at most that many GPUs (2: always)


def nccl_terms(tp, c):
    """NCCL's all-reduce at `tp` GPUs: (its latency beyond the first barrier, its bus bandwidth),
    interpolated over log2(tp) between the degrees fitted (NCCL_TPS; clamped outside them). Without
    them (an older calibration, a PCIe GPU's own fit: 0) no latency of its own and the custom
    kernel's two-stage bus, the ring formula as before 2026-12-07. Scalars or numpy arrays."""
    import numpy as np

    buses = [c.get(f"allreduce_nccl_bus_tp{t}_bytes_per_s", 0.0) for t in NCCL_TPS]
    if min(buses) <= 0:
        return 0.0, c["allreduce_bus_bytes_per_s"]
    x, xs = np.log2(np.maximum(tp, 1)), np.log2(NCCL_TPS)
    return (np.interp(x, xs, [c[f"allreduce_nccl_latency_tp{t}_s"] for t in NCCL_TPS]), np.interp(x, xs, buses))


def nccl_time(tp, nbytes, c):
    """NCCL's all-reduce of `nbytes` over `tp` GPUs beyond the first barrier: its latency and the
    ring's bytes at its bus (nccl_terms)."""
    nccl_latency, nccl_bus = nccl_terms(tp, c)
    return nccl_latency + 2.0 * (tp - 1) / tp * nbytes / nccl_bus


def allreduce_time(tp, nbytes, latency, c):
    """One all-reduce of `nbytes` over `tp` GPUs: vLLM's custom all-reduce below CUSTOM_AR_MAX, its
    one stage ``latency + (tp - 1) x nbytes / link`` (every peer's buffer read over NVLink) or its
    two ``latency + allreduce_latency + 2 (tp - 1) / tp x nbytes / bus``; NCCL above, ``latency +
    nccl_latency + 2 (tp - 1) / tp x nbytes / nccl_bus`` at the degree's own terms (nccl_terms).
    `latency` is the first barrier's (with the serving skew), `c` the coefficients
    (``allreduce_link_bytes_per_s`` 0: every message on the ring formula, as before 2026-12-07).
    Scalars or numpy arrays (benchmarks/calibrate.py)."""
    import numpy as np

    ring = 2.0 * (tp - 1) / tp * nbytes / c["allreduce_bus_bytes_per_s"]
    link = c["allreduce_link_bytes_per_s"]
    if not link:
        return latency + ring
    nccl = nccl_time(tp, nbytes, c)
    custom = (tp <= 8) & (nbytes < CUSTOM_AR_MAX)
    one = (tp == 2) | ((tp <= 4) & (nbytes < ONE_STAGE_BELOW[4])) | ((tp <= 8) & (nbytes < ONE_STAGE_BELOW[8]))
    return latency + np.where(custom & one, (tp - 1) * nbytes / link,
                              np.where(custom, ring + c["allreduce_latency_s"], nccl))


#: the all-reduce of a layer whose q and k vLLM RMS-norms over every head (ModelSpec.qk_norm_all_reduce,
#: MiniMax-M2): each token's q and k variances, two fp32 (vLLM 0.19.0
#: model_executor/layers/mamba/linear_attn.py:82-101, MiniMaxText01RMSNormTP.forward_qk:
#: ``torch.cat([q_var, k_var], dim=-1)`` all-reduced; 0.33.0 fuses it with the norm,
#: minimax_rms_norm/rms_norm_tp.py _minimax_qk_norm_fusion, still an all-reduce a layer)
QK_NORM_BYTES_PER_TOKEN = 8.0


def allreduce_floor(tp, nbytes, latency, c):
    """A lower bound of allreduce_time for `nbytes` or more: the cheapest of the one-stage, ring and
    NCCL formulas (the custom two-stage kernel is the ring plus a latency), each growing with the bytes.
    The algorithm vLLM picks switches at sizes (CUSTOM_AR_MAX, ONE_STAGE_BELOW), so a larger
    all-reduce can take less time than a smaller one; this does not."""
    ring = 2.0 * (tp - 1) / tp * nbytes / c["allreduce_bus_bytes_per_s"]
    link = c["allreduce_link_bytes_per_s"]
    if not link:
        return latency + ring
    return latency + min(ring, (tp - 1) * nbytes / link, float(nccl_time(tp, nbytes, c)))


def elementwise_kernels(spec, tp: int, kv_per_token_gpu: float, kv_bytes: float, mla: bool, mamba_layers: int):
    """The elementwise kernels of one step on one GPU of a TP group, as vLLM 0.33's decoder layers
    launch them under torch.compile (model_executor/models/llama.py ``LlamaDecoderLayer.forward``):
    ``(kernels, bytes per token of each)`` per kind. Each layer: its input and post-attention
    RMSNorms, each fused with the residual add (``RMSNorm.forward`` with a residual: x and the
    residual read, both written, 8 x hidden bytes); on attention layers the rotary embedding of q and
    k (read and written, 4 x (heads + KV heads) / tp x head_dim bytes) and the KV-cache write
    (``Attention.forward``'s ``unified_kv_cache_update``, reshape_and_cache_flash: k and v read in
    bf16, written at the KV dtype), none on an MLA model's (its measured module holds them); a dense
    MLP's ``SiluAndMul`` (gate and up read, their product written: 6 x width / tp bytes; an MoE's
    runs inside its fused kernel). Each step: the embedding lookup (a row read and written) and the
    final norm. Mamba / linear-attention layers: their norms only (their kernels are timed apart)."""
    hidden = spec.hidden_size or 0
    if not hidden:
        return ()
    layers = spec.num_layers
    attn = 0 if mla else layers - mamba_layers
    heads, kv = spec.num_attention_heads / tp, max(1, spec.num_kv_heads // tp)
    out = [(2 * layers, 8.0 * hidden), (1, 4.0 * hidden), (1, 8.0 * hidden)]
    if attn:
        out += [(attn, 4.0 * (heads + kv) * spec.head_dim), (attn, kv_per_token_gpu * (1.0 + 2.0 / kv_bytes) / attn)]
    if layer_gemm_shapes(spec, tp):  # a dense MLP in every layer
        out.append((layers, 6.0 * spec.intermediate_size / tp))
    return tuple(out)


@dataclass(frozen=True)
class Calibration:
    """One GPU's fitted coefficients, the bands of measured/predicted ratios per phase, and where
    they come from (measured on this GPU, or borrowed from its nearest measured relative)."""

    gpu: str
    coefficients: dict
    bands: dict  # phase -> (low, high) ratio of measured to predicted step time
    measured_on: str  # the GPU whose kernels were fitted
    borrowed: bool
    fitted_range: dict  # models, tp, contexts and batches the fit saw
    bands_fp8: dict | None = None  # the same with fp8 weights (steps of the measured fp8 GEMMs)
    checked: bool = False  # borrowed, and checked on this GPU's own measured kernels (its bands)
    bands_moe: dict | None = None  # MoE kernel (bf16, fp8, int4) -> (low, high): its measured / predicted
    #: MoE kernel -> phase -> (low, high): the MoE models' steps composed from measured kernels
    bands_moe_steps: dict | None = None
    bands_gdn: dict | None = None  # prefill / decode -> (low, high): Gated DeltaNet layers' measured / predicted
    #: MoE kernel -> phase -> (low, high): DeepSeek-V3's steps composed from the measured MLA modules
    bands_mla_steps: dict | None = None
    #: borrowed and checked: the kernel families fitted on this GPU's own tables nonetheless (its
    #: GEMMs, MoE kernels, GDN and MLA terms: "gemm", "moe", "gdn", "mla"), the rest its relative's
    own_fitted: tuple = ()

    def band(self, phase: str, fp8: bool = False) -> tuple[float, float]:
        bands = self.bands_fp8 if fp8 and self.bands_fp8 else self.bands
        lo, hi = bands.get(phase, bands.get("mixed", (1.0, 1.0)))
        return float(lo), float(hi)


@lru_cache(maxsize=1)
def calibration_data() -> dict:
    from importlib.resources import files

    return json.loads(files("kvreplay.data").joinpath("roofline_calibration.json").read_text(encoding="utf-8"))


def calibration_for(gpu_name: str) -> Calibration:
    """The calibration of catalog GPU `gpu_name`: its own, or its nearest measured relative's."""
    data = calibration_data()
    gpus = data["gpus"]
    measured = gpu_name in gpus
    source = gpu_name if measured else data["relatives"].get(gpu_name)
    if source is None or source not in gpus:
        raise ConfigError(f"no roofline calibration for {gpu_name}, nor a measured relative: use "
                          "--time-model roofline-raw or a measured profile (FILE.npz / FILE.json)")
    entry = gpus[source]
    coefficients = dict(entry["coefficients"])
    bands = {p: tuple(entry["bands"][p]) for p in entry["bands"]}
    bands_fp8 = {p: tuple(v) for p, v in entry.get("bands_fp8", {}).items()} or None
    bands_moe, moe_steps, gdn = entry.get("bands_moe"), entry.get("bands_moe_steps"), entry.get("bands_gdn")
    mla = entry.get("bands_mla_steps")
    checked = data.get("relative_bands", {}).get(gpu_name)
    own = ()
    if checked:  # borrowed, and checked on this GPU's own measured kernels: their spread
        coefficients.update(checked.get("coefficients", {}))  # its GEMMs, MoE, GDN and MLA terms: its own fits
        own = tuple(f for f, (_, names) in OWN_FAMILIES.items() if set(names) & set(checked.get("coefficients", {})))
        if "gemm" in own and "e_gemm_fp8_large" not in checked["coefficients"]:
            # (the relative's large-row efficiency belongs with the relative's e_gemm_fp8, not this GPU's own:
            # GB200's own 0.987 would fall to H200's 0.941 at 8,192 rows)
            coefficients["e_gemm_fp8_large"] = 0.0
        bands = {p: tuple(v) for p, v in checked["bands"].items()}
        bands_fp8 = {p: tuple(v) for p, v in checked.get("bands_fp8", {}).items()} or None
        bands_moe = checked.get("bands_moe", data.get("transfer_bands_moe"))
        moe_steps = checked.get("bands_moe_steps", data.get("transfer_bands_moe_steps"))
        gdn = checked.get("bands_gdn", data.get("transfer_bands_gdn"))
        mla = checked.get("bands_mla_steps", data.get("transfer_bands_mla_steps"))
    elif not measured:  # borrowed: the spread of the cross-GPU check (fit on one GPU, test on another)
        bands = {p: tuple(v) for p, v in data["transfer_bands"].items()}
        bands_fp8 = None
        bands_moe, moe_steps = data.get("transfer_bands_moe"), data.get("transfer_bands_moe_steps")
        gdn, mla = data.get("transfer_bands_gdn"), data.get("transfer_bands_mla_steps")
    moe_steps = {k: {p: tuple(b) for p, b in v.items()} for k, v in (moe_steps or {}).items()} or None
    return Calibration(gpu_name, coefficients, bands, source, not measured, dict(data["fitted_range"]),
                       bands_fp8, bool(checked), {k: tuple(v) for k, v in (bands_moe or {}).items()} or None, moe_steps,
                       {p: tuple(v) for p, v in (gdn or {}).items()} or None,
                       {k: {p: tuple(b) for p, b in v.items()} for k, v in (mla or {}).items()} or None, own)


def stream_bandwidth(gpu, coefficients_from: str, probes: dict | None = None) -> tuple[float, str]:
    """The memory bandwidth the calibrated terms run at on `gpu` (a GPUSpec), bytes/s, and where it
    comes from: the GPU's own measured streaming bandwidth (`probes`, default the calibration's
    ``stream_bandwidth``), else its datasheet peak times the share of peak measured on
    `coefficients_from` (the GPU its coefficients were fitted on), else the datasheet peak."""
    probes = calibration_data().get("stream_bandwidth", {}) if probes is None else probes
    peak = gpu.bandwidth_bytes_per_s
    if gpu.name in probes:
        return float(probes[gpu.name]["bytes_per_s"]), "measured on this GPU"
    if coefficients_from in probes:
        share = float(probes[coefficients_from]["fraction_of_peak"])
        return peak * share, f"the datasheet peak x {share:.3f}, the share measured on the {coefficients_from}"
    return peak, "the datasheet peak"


def calibration_summary(gpu) -> dict | None:
    """How the calibrated roofline times `gpu` (a GPUSpec): whose coefficients, whether they were
    checked on its own measured kernels, and the memory bandwidth its terms run at (None: no
    calibration, only roofline-raw or a profile)."""
    try:
        cal = calibration_for(gpu.name)
    except ConfigError:
        return None
    bw, source = stream_bandwidth(gpu, cal.measured_on)
    moe = [k for k in MOE_WEIGHT_BYTES if set(moe_names(k)) <= set(cal.coefficients)]
    return {"coefficients_from": cal.measured_on, "own_kernels_fitted": not cal.borrowed,
            "checked_on_own_kernels": (not cal.borrowed) or cal.checked, "own_fitted": list(cal.own_fitted),
            "stream_bandwidth_gbps": bw / 1e9, "stream_bandwidth_source": source, "moe_kernels": moe,
            "mla_term": set(MLA_COEFFICIENTS) <= set(cal.coefficients)}


def gemm_outputs_per_token(spec, tp: int) -> float:
    """Output columns (n) of the layers' GEMMs one token computes on one GPU of a TP group, over
    the layers: the tile term's count (``gemm_k0``). Dense: q/k/v ((heads / tp + 2 x kv heads /
    tp) x head_dim), o (hidden), gate/up (2 x MLP width / tp) and down (hidden). Other models
    (MoE, MLA): every body GEMM taken as k = hidden, n = its parameters / hidden (an
    approximation, said in docs/timing.md)."""
    hidden = spec.hidden_size or 0
    if not hidden:
        return 0.0
    if spec.intermediate_size:
        qkv = (spec.num_attention_heads / tp + 2 * max(1.0, spec.num_kv_heads / tp)) * spec.head_dim
        return (qkv + 2.0 * hidden + 2.0 * spec.intermediate_size / tp) * spec.num_layers
    body = spec.body_params if spec.lm_head_params else spec.active_params
    return body / tp / hidden


#: how far the four layer GEMMs' parameters may be from the body's for a model to be timed GEMM by
#: GEMM (norms, biases and a vision tower's share fit within it)
LAYER_GEMMS_TOLERANCE = 0.02


def layer_gemm_shapes(spec, tp: int) -> tuple[tuple[int, int], ...]:
    """The (n, k) of each GEMM of one layer on one GPU of a TP group: q/k/v ((heads / tp + 2 x kv
    heads / tp, at least one each) x head_dim, hidden), o (hidden, heads / tp x head_dim), gate/up
    (2 x MLP width / tp, hidden) and down (hidden, MLP width / tp), as the kernels run them. Empty
    where those four do not account for the layers' parameters within LAYER_GEMMS_TOLERANCE (MoE,
    MLA, Mamba hybrids): such models are timed as one GEMM of all the body's parameters."""
    hidden, mlp, heads, d = spec.hidden_size, spec.intermediate_size, spec.num_attention_heads, spec.head_dim
    if not (hidden and mlp and heads and d) or spec.mamba_layers:
        return ()
    h, kv = heads // tp, max(1, spec.num_kv_heads // tp)
    shapes = (((h + 2 * kv) * d, hidden), (hidden, h * d), (2 * mlp // tp, hidden), (hidden, mlp // tp))
    full = ((heads + 2 * spec.num_kv_heads) * d * hidden + hidden * heads * d + 3 * hidden * mlp) * spec.num_layers
    body = spec.body_params if spec.lm_head_params else spec.active_params
    return shapes if abs(full / body - 1.0) <= LAYER_GEMMS_TOLERANCE else ()


def quant_inputs_per_token(spec, tp: int) -> float:
    """Elements of GEMM input one token quantises to fp8 on one GPU of a TP group, over the
    layers: q/k/v and gate/up read the hidden state (replicated), o and down their sharded inputs
    (attention width / tp, MLP width / tp). An MoE without a dense MLP width: 4 x hidden per
    layer (an approximation, said in docs/timing.md)."""
    hidden = spec.hidden_size or 0
    if spec.intermediate_size:
        per_layer = 2.0 * hidden + (spec.num_attention_heads * spec.head_dim + spec.intermediate_size) / tp
    else:
        per_layer = 4.0 * hidden
    return per_layer * spec.num_layers


def phase_of(batch: StepBatch) -> str:
    prefill = any(int(n) > 0 for n in batch.prefill_new)
    return "mixed" if prefill and batch.decode_context else ("prefill" if prefill else "decode")


class CalibratedRooflineTimeModel(RooflineTimeModel):
    """The roofline with each kernel at its fitted efficiency (the module docstring has the terms)."""

    name = "roofline"
    #: data parallelism over an MoE: the ranks' token exchange (timing/exchange.py; serving/dataparallel.py sets it)
    dp_exchange = None
    #: the host's kernel launches per layer of a step run without a CUDA graph, and the steps that
    #: are (more tokens than this): none unless host.with_cuda_graphs sets them (models.eager_step)
    launch_layer_s, eager_above = 0.0, math.inf

    def __init__(self, model, gpu, tp: int = 1, *, dtype: str = "bf16", kv_dtype: str = "bf16",
                 coefficients: dict | None = None, stream_bytes_per_s: float | None = None,
                 moe_routing: str = "served"):
        """`coefficients`: every one of COEFFICIENTS given (benchmarks/calibrate.py) replaces the
        shipped calibration, some of them override it. `stream_bytes_per_s`: the memory bandwidth
        the terms run at (default: stream_bandwidth of the GPU and its calibration; every
        coefficient given and no bandwidth: the datasheet peak). `moe_routing`: an MoE's tokens
        routed as a served model routes them ("served": SERVED_ROUTING, where the GPU's MoE terms
        are the Hopper kernels') or as evenly as they can be ("balanced", as the MoE tables time them)."""
        if moe_routing not in ("served", "balanced"):
            raise ConfigError(f"moe_routing must be served or balanced, got {moe_routing!r}")
        self.moe_routing = moe_routing
        super().__init__(model, gpu, tp, dtype=dtype, kv_dtype=kv_dtype)
        c = self.c = self._resolve_coefficients(dict(coefficients or {}))
        self._resolve_bandwidth(stream_bytes_per_s)
        self.scale = dict.fromkeys(PHASES, 1.0)  # a step's time x its kind's factor (see at_band)
        # in a step, an all-reduce also waits for the last of its GPUs to arrive: the isolated
        # kernel's latency plus a skew growing with log2 of the group (fitted on silicon runs)
        self.allreduce_latency_s = c["allreduce_latency_s"] + c["allreduce_skew_s"] * math.log2(max(self.tp, 1))
        wbytes = _weight_bytes(self.dtype)
        self._weights(c, wbytes)
        self._gemm_terms(c, wbytes)
        self._state_layers(c)
        self._elementwise(c)

    def _resolve_coefficients(self, coefficients: dict) -> dict:
        """The coefficients the terms use: the shipped calibration of this GPU (a relative's
        all-reduce scaled to this GPU's link speed), overridden by those given, or only those
        given when every one of COEFFICIENTS is. Sets ``calibration``."""
        unknown = sorted(set(coefficients) - set(COEFFICIENTS) - set(FP8_COEFFICIENTS) - set(SHAPE_COEFFICIENTS)
                         - set(MOE_COEFFICIENTS) - set(GDN_COEFFICIENTS) - set(MLA_COEFFICIENTS))
        if unknown:
            raise ConfigError(f"unknown roofline coefficient(s) {', '.join(unknown)} (known: {', '.join(COEFFICIENTS)})")
        if set(coefficients) >= set(COEFFICIENTS):  # every one given (benchmarks/calibrate.py fitting)
            self.calibration = Calibration(self.gpu.name, coefficients, {}, "given", False, {})
        else:
            self.calibration = calibration_for(self.gpu.name)
        c = dict(self.calibration.coefficients)
        if self.calibration.borrowed:  # the relative's all-reduce at this GPU's own link speed
            from ...catalog.gpus import get_gpu

            relative = get_gpu(self.calibration.measured_on)
            ratio = self.gpu.link_bytes_per_s / relative.link_bytes_per_s
            for k in ("allreduce_bus_bytes_per_s", "allreduce_link_bytes_per_s"):
                c[k] = c.get(k, 0.0) * ratio
            if ratio != 1.0:  # NCCL's per-degree terms are its interconnect's (B200's own NVLink 5 table at TP 8:
                # 659 GB/s, not H200's 421 x 2): another link keeps the ring at the scaled bus
                c.update(dict.fromkeys(NCCL_COEFFICIENTS, 0.0))
        from ...catalog.gpus import pcie_allreduce

        # a PCIe GPU's all-reduce: its own fit at this degree (catalog/gpus.py PCIE_ALLREDUCE)
        self.pcie_allreduce = None if self.calibration.measured_on == "given" else pcie_allreduce(self.gpu, self.tp)
        if self.pcie_allreduce is not None:  # (its own fit over every message: no NVSwitch NCCL terms)
            c.update({**dict.fromkeys(NCCL_COEFFICIENTS, 0.0),
                      **{k: v for k, v in self.pcie_allreduce[1].items() if k.startswith("allreduce_")}})
        c.update(coefficients)
        return {**SHAPE_COEFFICIENTS, **c}

    def _resolve_bandwidth(self, stream_bytes_per_s: float | None):
        """Sets ``bandwidth`` and where it came from: given, the datasheet peak (every coefficient
        given, no bandwidth), else the GPU's stream bandwidth under its calibration."""
        if stream_bytes_per_s is not None:
            self.bandwidth, self.bandwidth_source = float(stream_bytes_per_s), "given"
        elif self.calibration.measured_on == "given":  # every coefficient given, no bandwidth: the peak
            self.bandwidth, self.bandwidth_source = self.gpu.bandwidth_bytes_per_s, "the datasheet peak"
        else:
            self.bandwidth, self.bandwidth_source = stream_bandwidth(self.gpu, self.calibration.measured_on)

    def _weights(self, c: dict, wbytes: float):
        """The weights read per step: the body's (its routed experts and MLA projections apart
        when calibrated) and the LM head's (kept bf16 under fp8 weights)."""
        spec = self.model
        self.fp8 = self.dtype == "fp8"  # fp8 tensor cores (gpus.check_weights_dtype refuses a GPU without)
        head = spec.lm_head_params
        self.hidden = spec.hidden_size or 0
        self.head_params = head
        self.body_params = spec.body_params if head else spec.active_params
        stored_body = spec.total_params - head - (0 if spec.tie_word_embeddings else head)
        self.body_weight_bytes = (stored_body if head else spec.total_params) * wbytes
        self.body_wbytes = wbytes  # (an MXFP4 checkpoint's body apart from its experts: bf16, _split_experts)
        self._split_experts(c, wbytes)
        self._mla_apart(c, wbytes)
        self.active_body_weight_bytes = self.body_params * self.body_wbytes
        self.head_weight_bytes = head * (_weight_bytes("bf16") if self.fp8 else wbytes)  # fp8: lm_head kept bf16
        self.attn_peak = self.gpu.peak_flops("bf16")  # attention's, and the LM head's

    def _gemm_terms(self, c: dict, wbytes: float):
        """The GEMMs' coefficients at the weights' compute dtype, their shapes and bytes, the fp8
        inputs' quantisation and the tile term's FLOP parameters (the LM head stays at bf16)."""
        spec = self.model
        head = self.head_params
        if self.fp8 and not set(FP8_COEFFICIENTS) <= set(c):
            raise ConfigError(f"the roofline calibration of {self.calibration.measured_on} has no fp8 GEMM "
                              f"coefficients for --weights-dtype fp8 on the {self.gpu.name}: use "
                              "--time-model roofline-raw or a measured profile")
        # the GEMMs' coefficients at the weights' compute dtype; the LM head stays at bf16
        g = ("e_gemm_fp8", "e_weights_fp8", "gemm_floor_fp8_s") if self.fp8 else ("e_gemm", "e_weights", "gemm_floor_s")
        self.gemm_p = c["gemm_overlap_p_fp8" if self.fp8 else "gemm_overlap_p"]
        self.gemm_c = tuple(c[k] for k in g)
        self.gemm_e_large = c["e_gemm_fp8_large"] if self.fp8 else 0.0  # (fp8_gemm_efficiency; 0: none)
        # (the routed experts' fp8 kernel quantises its inputs itself, in its measured time)
        quant = quant_inputs_per_token(spec, self.tp) / (2.0 if self.moe else 1.0)
        if self.mla:  # the four projections' inputs and the shared expert's (hidden)
            quant = spec.num_layers * (sum(k for _, k in self.mla_shapes) + self.hidden)
        self.quant_bytes_per_token = 3.0 * quant if self.fp8 else 0.0
        # the tile term: each output tile's fixed cost, as k0 more of K (its prologue and
        # epilogue), over the body's GEMMs (gemm_outputs_per_token) and the LM head's (k = hidden)
        k0 = c["gemm_k0_fp8" if self.fp8 else "gemm_k0"]
        self.gemm_k0 = k0
        # a dense model's GEMMs one by one, each at its shape as the kernels were fitted (else one
        # GEMM of the body's parameters); their bytes: the input (fp8 after quantisation, else
        # bf16), the weights at their dtype, the bf16 output
        self.gemm_shapes = self.mla_shapes if self.mla else layer_gemm_shapes(spec, self.tp)
        self.gemm_bytes = (1.0 if self.fp8 else 2.0, wbytes, 2.0)
        outputs = self.body_params / self.tp / self.hidden if self.moe or self.mla else gemm_outputs_per_token(spec, self.tp)
        self.body_flop_params = self.body_params + self.tp * k0 * outputs
        self.head_flop_params = head * (1.0 + c["gemm_k0"] / self.hidden) if self.hidden else head

    def _state_layers(self, c: dict):
        """A model with Mamba or linear-attention layers: attention on its attention layers only,
        the state term apart, and Gated DeltaNet layers with a calibrated kernel their own term
        (gdn_layer_time)."""
        spec = self.model
        self.mamba_layers = spec.mamba_layers
        if self.mamba_layers:  # attention on the attention layers only; the state term apart
            attn_layers = spec.kv_layers
            self.layers_full = attn_layers - self.layers_sw
            self.kv_per_layer_token_gpu = self.kv_per_token_gpu / attn_layers
            self.attn_layers = attn_layers
            self.state_bytes = sum(g["layers"] * g["state_bytes"] for g in spec.kv_groups if g["kind"] == "mamba") \
                / self.mamba_layers
        else:
            self.attn_layers = spec.num_layers
        # Gated DeltaNet layers with a calibrated GDN kernel: their own term (gdn_layer_time)
        lin = spec.linear_attention or {}
        self.gdn = lin if self.mamba_layers and lin.get("kind") == "gated_deltanet" and set(GDN_COEFFICIENTS) <= set(c) \
            else None
        if self.gdn:
            self.gdn_c = tuple(c[k] for k in GDN_COEFFICIENTS)
            self.gdn_act = (2 * lin["k_heads"] * lin["head_k_dim"] + 2 * lin["v_heads"] * lin["head_v_dim"]) * 2.0 / self.tp
            self.gdn_v_heads = lin["v_heads"] / self.tp

    def _elementwise(self, c: dict):
        """The elementwise kernels (elementwise_work), and the (request, KV head) pairs per decode a
        GPU's attention spreads its KV read over (an MLA's latent: one; its term is fitted apart)."""
        spec = self.model
        kinds = elementwise_kernels(spec, self.tp, self.kv_per_token_gpu, float(kv_dtype_bytes(self.kv_dtype)), self.mla,
                                    self.mamba_layers or 0) if c["e_ew"] else ()
        self.ew_kernels = float(sum(n for n, _ in kinds))
        self.ew_bytes_per_token = sum(n * b for n, b in kinds)
        self.kv_heads_gpu = 0.0 if self.mla else float(max(1, spec.num_kv_heads // self.tp))
        # a model whose q and k vLLM norms over every head: one all-reduce more per layer under TP
        self.qk_norm_allreduces = spec.num_layers if spec.qk_norm_all_reduce and self.tp > 1 else 0

    def _split_experts(self, c: dict, wbytes: float):
        """An MoE with its experts in the catalog and a calibrated MoE kernel for its weights: its
        routed experts apart (moe_layer_time), the rest of the body (attention, router, shared
        experts, dense layers) read whole every step. Sets ``moe`` (None: not apart) and its kernel."""
        spec = self.model
        kernel = moe_kernel(self.dtype, spec.checkpoint_weights)
        self.moe = spec.moe if spec.moe and self.hidden and kernel and set(moe_names(kernel)) <= set(c) else None
        self.moe_kernel = kernel if self.moe else None
        self.dp_experts = None  # (data parallelism's experts out of the body: serving/dataparallel.py)
        self.moe_route = None
        if self.moe:
            self.moe_c = tuple(c[k] for k in moe_names(kernel))
            self.moe_peak = self.gpu.peak_flops("fp8" if kernel == "fp8" else "bf16")  # int4, mxfp4: bf16 math
            self.moe_weight_bytes = MOE_WEIGHT_BYTES[kernel]
            self.moe_inter = self.moe["expert_intermediate"] / self.tp
            self.moe_experts, self.moe_ep = self.moe["experts"], 1  # (data parallelism: dataparallel.py)
            # served routing on the kernels SERVED_ROUTING was measured on (not a GPU's own MoE fit)
            served = self.moe_routing == "served" and "moe" not in self.calibration.own_fitted
            self.moe_route = SERVED_ROUTING.get(kernel) if served else None
            self.body_params -= spec.routed_expert_params
            # an MXFP4 checkpoint (gpt-oss) quantises its experts only: vLLM runs every other linear
            # layer (attention's projections, the router) unquantised, in bf16 (vLLM 0.18.0
            # quantization/mxfp4.py:212-230, Mxfp4Config.get_quant_method: UnquantizedLinearMethod
            # for LinearBase; memory.weight_parts loads them so)
            if kernel == "mxfp4":
                self.body_wbytes = _weight_bytes("bf16")
            self.body_weight_bytes = self.body_params * self.body_wbytes

    def _mla_apart(self, c: dict, wbytes: float):
        """An MLA model with its projections in the catalog and a calibrated MLA term: the projections
        one by one (layer_gemms), the rest of the body one GEMM beside them, attention at the MLA
        kernels' widths and efficiencies, the module's floor and costs per token (terms()' ``mla``).
        Sets ``mla`` (False: the MLA is timed as the other models' attention, its projections in the
        body's one GEMM), the attention widths and efficiencies of each phase."""
        spec, tp = self.model, self.tp
        self.attn_width_prefill = self.attn_width
        # (narrower heads than the 128 it is fitted on: a smaller share at the tensor cores, ATTN_PREFILL_HEAD64)
        self.e_attn = (c["e_attn_prefill"] * attn_head_efficiency(spec.head_dim), c["e_attn_decode"])
        self.body_beside, self.body_gemms = False, 4
        self.mla = bool(spec.mla and self.hidden and set(MLA_COEFFICIENTS) <= set(c))
        self.mla_shapes = spec.mla_gemm_shapes(tp) if self.mla else ()
        self.mla_floor_s = self.mla_per_token_s = self.mla_context_flops = 0.0
        if not self.mla:
            return
        m, h = spec.mla, spec.num_attention_heads
        self.attn_width_prefill = h * (m["qk_nope_head_dim"] + spec.qk_rope_head_dim + m["v_head_dim"]) / 2.0
        self.attn_width = h * (2.0 * spec.kv_lora_rank + spec.qk_rope_head_dim) / 2.0
        self.e_attn = (c["mla_e_attn_prefill"], c["mla_e_attn_decode"])
        self.mla_floor_s = c["mla_floor_s"]
        self.mla_per_token_s = c["mla_per_token_s"] + c["mla_per_head_token_s"] * h / tp
        self.mla_context_flops = 2.0 * spec.kv_lora_rank * h / tp * (m["qk_nope_head_dim"] + m["v_head_dim"])
        self.body_params -= spec.mla_projection_params
        self.body_weight_bytes -= spec.mla_projection_params * wbytes
        self.body_beside, self.body_gemms = True, 3  # beside: the shared expert's two GEMMs, the router

    def mamba_term(self, tokens: int, rows: int, prefill: bool) -> float:
        """The Mamba / linear-attention layers' state read, write and update (the module docstring);
        Gated DeltaNet layers with a calibrated kernel: gdn_layer_time."""
        c, m = self.c, self.mamba_layers
        if self.gdn:
            return m * float(gdn_layer_time(self.gdn_c, tokens, rows, self.state_bytes / self.tp, self.gdn_act,
                                            self.gdn_v_heads, prefill, self.attn_peak, self.bandwidth))
        nbytes = 2.0 * self.state_bytes * m * rows / self.tp
        flops = 6.0 * self.state_bytes / 2.0 * m * tokens / self.tp
        floor, e = (c["attn_floor_prefill_s"], c["e_attn_prefill"]) if prefill else \
            (c["attn_floor_decode_s"], c["e_attn_decode"])
        return m * floor + max(flops / (self.attn_peak * e), nbytes / (self.bandwidth * c["e_kv_decode"]))

    def layer_gemms(self, tokens: int) -> float:
        """The layers' GEMMs for `tokens` rows (the fp8 inputs' quantisation apart): with
        gemm_shapes, the sum over the layers of each GEMM's own ``soft_max(2 x rows x n x (k + k0) /
        (peak x e_gemm), (in x T x k + w x k x n + 2 x T x n) / (bw x e_weights)) + floor``; else
        (and beside them for an MLA model, its body but the projections) one GEMM of the body's
        parameters (the module docstring)."""
        peak, bw, tp = self.peak_flops, self.bandwidth, self.tp
        e_gemm, e_weights, floor = self.gemm_c
        e_gemm = float(fp8_gemm_efficiency(tokens, e_gemm, self.gemm_e_large))
        rows = fp8_gemm_rows(tokens, self.c["fp8_partial_rows"]) if self.fp8 else tokens
        act, wbytes, out_bytes = self.gemm_bytes
        layer = 0.0
        for n, k in self.gemm_shapes:
            compute = 2.0 * rows * n * (k + self.gemm_k0) / (peak * e_gemm)
            memory = (act * tokens * k + wbytes * k * n + out_bytes * tokens * n) / (bw * e_weights)
            layer += soft_max(compute, memory, self.gemm_p) + floor
        if self.gemm_shapes and not self.body_beside:
            return self.model.num_layers * layer
        flops = 2.0 * self.body_flop_params * rows / tp
        weights = min(self.body_weight_bytes, self.active_body_weight_bytes * tokens) / tp
        body = soft_max(flops / (peak * e_gemm), weights / (bw * e_weights), self.gemm_p)
        return self.model.num_layers * (layer + self.body_gemms * floor) + body

    def dp_expert_gemm(self, tokens: int) -> float:
        """An MoE whose routed experts are not apart (no MoE kernel calibrated), under data
        parallelism (serving/dataparallel.py): the experts out of the body's GEMM into one GEMM of
        their own over `tokens` gathered tokens, split over the DP x TP GPUs, at the dense GEMMs'
        coefficients: ``soft_max(2 x active params x rows / gpus / (peak x e_gemm), min(all their
        bytes, a token's x tokens) / gpus / (bw x e_weights))``."""
        params, nbytes, active_bytes, gpus = self.dp_experts
        e_gemm, e_weights, _ = self.gemm_c
        rows = fp8_gemm_rows(tokens, self.c["fp8_partial_rows"]) if self.fp8 else tokens
        flops = 2.0 * params * rows / gpus
        weights = min(nbytes, active_bytes * tokens) / gpus
        return soft_max(flops / (self.peak_flops * e_gemm), weights / (self.bandwidth * e_weights), self.gemm_p)

    def terms(self, batch: StepBatch, floor_decodes: int | None = None) -> dict:
        """Each term of the step's time, seconds (their sum is step_time). `floor_decodes`: the terms
        of step_floor instead, a bound for any step holding this one's work with up to that many
        decodes: the only terms that can fall as work joins, the decode KV read's split penalty
        (fewer (request, KV head) pairs split slower) and the all-reduce (its algorithm switches at
        sizes), at their least."""
        c, tp = self.c, self.tp
        layers = self.model.num_layers
        prefill_new = sum(int(n) for n in batch.prefill_new if int(n) > 0)
        prefill_reqs = sum(1 for n in batch.prefill_new if int(n) > 0)
        decodes = len(batch.decode_context)
        tokens = prefill_new + decodes
        rows = prefill_reqs + decodes
        out = dict.fromkeys(("gemm", "lm_head", "attn_prefill", "attn_decode", "allreduce", "overhead"), 0.0)
        if tokens == 0:
            return out
        bw = self.bandwidth
        out["gemm"] = self.layer_gemms(tokens)
        if self.fp8:
            out["gemm"] += tokens * self.quant_bytes_per_token / (bw * c["e_quant_fp8"])
        if self.head_params:
            hf = 2.0 * self.head_flop_params * rows / tp
            out["lm_head"] = (soft_max(hf / (self.attn_peak * c["e_gemm"]), self.head_weight_bytes / tp / (bw * c["e_weights"]),
                                       c["gemm_overlap_p"]) + c["gemm_floor_s"])
        w, width = self.window, self.attn_width / tp
        kv_lt = self.kv_per_layer_token_gpu
        if prefill_reqs:
            keys_f, keys_s, touched_f, touched_s = prefill_keys(batch, w)
            width_p = self.attn_width_prefill / tp
            f = 4.0 * width_p * (self.layers_full * keys_f + self.layers_sw * keys_s)
            b = (kv_lt * (self.layers_full * touched_f + self.layers_sw * touched_s)
                 + 4.0 * width_p * prefill_new * self.attn_layers)
            out["attn_prefill"] = (self.attn_layers * c["attn_floor_prefill_s"]
                                   + max(f / (self.attn_peak * self.e_attn[0]), b / (bw * c["e_kv_prefill"])))
        if decodes:
            ctx = sum(int(x) for x in batch.decode_context)
            ctx_s = sum(min(int(x), w) for x in batch.decode_context) if w else 0
            f = 4.0 * width * (self.layers_full * ctx + self.layers_sw * ctx_s)
            b = kv_lt * (self.layers_full * ctx + self.layers_sw * ctx_s)
            if self.kv_heads_gpu:  # few (request, KV head) pairs: the KV read split over fewer blocks
                b *= 1.0 + c["attn_split_decode"] / (max(decodes, floor_decodes or 0) * self.kv_heads_gpu)
            out["attn_decode"] = (self.attn_layers * (c["attn_floor_decode_s"] + decodes * c["attn_per_request_decode_s"])
                                  + max(f / (self.attn_peak * self.e_attn[1]), b / (bw * c["e_kv_decode"])))
        if self.mla:  # the MLA module's floor, its elementwise kernels per token, the cached context's kv_b
            cached = sum(int(k) for n, k in zip(batch.prefill_new, batch.prefill_cached) if int(n) > 0)
            out["mla"] = self.attn_layers * (self.mla_floor_s + self.mla_per_token_s * tokens
                                             + self.mla_context_flops * cached / (self.peak_flops * self.gemm_c[0]))
        gathered = batch.expert_tokens or tokens  # (data parallelism: every rank's tokens, serving/dataparallel.py)
        if self.dp_experts:
            out["moe"] = self.dp_expert_gemm(gathered)
        if self.moe:
            m = self.moe
            out["moe"] = m["layers"] * float(moe_layer_time(self.moe_c, gathered, self.hidden, self.moe_inter,
                                                            self.moe_experts, m["experts_per_token"],
                                                            self.moe_weight_bytes, self.moe_peak, bw, self.moe_ep))
            if self.moe_route:  # (a floor: the least factor of this step or any with more tokens)
                route = served_routing if floor_decodes is None else served_routing_floor
                out["moe"] *= route(self.moe_kernel, gathered)
        xch = self.dp_exchange
        if xch is not None:  # (the DP ranks' tokens to every rank's experts and back; sequence-parallel: and over TP)
            out["exchange"] = xch.seconds(gathered) + xch.output_gather_seconds(tokens)
        if self.mamba_layers:
            out["mamba"] = self.mamba_term(tokens, rows, prefill_reqs > 0)
        if tp > 1 and self.hidden:
            cost = allreduce_time if floor_decodes is None else allreduce_floor
            reduces = 2 * layers - (xch.replaced_allreduces if xch is not None else 0)  # (sequence-parallel MoE: exchange.py)
            out["allreduce"] = reduces * float(cost(tp, tokens * self.hidden * 2.0, self.allreduce_latency_s, c))
            if self.qk_norm_allreduces:  # q and k normed over every head: their variances, 2 fp32 a token
                out["allreduce"] += self.qk_norm_allreduces * float(cost(tp, tokens * QK_NORM_BYTES_PER_TOKEN,
                                                                         self.allreduce_latency_s, c))
        if self.ew_kernels:
            out["elementwise"] = self.ew_kernels * c["ew_floor_s"] + tokens * self.ew_bytes_per_token / (bw * c["e_ew"])
        out["overhead"] = layers * c["per_layer_s"] + c["per_step_s"]
        return out

    def step_time(self, batch: StepBatch) -> float:
        if batch.is_empty:
            return 0.0
        return self._eager(batch, float(sum(self.terms(batch).values())) * self.scale[phase_of(batch)])

    def _eager(self, batch: StepBatch, gpu_s: float) -> float:
        return eager_step(gpu_s, batch.num_tokens, self.model.num_layers, self.launch_layer_s, self.eager_above)

    def step_floor(self, batch: StepBatch, decodes: int = 1) -> float:
        if batch.is_empty:
            return 0.0
        gpu_s = float(sum(self.terms(batch, floor_decodes=max(int(decodes), 1)).values())) * self.scale[phase_of(batch)]
        return self._eager(batch, gpu_s)

    def at_band(self, end: str) -> "CalibratedRooflineTimeModel":
        """This model with every step's time at the low or high end of its kind's band (prefill,
        decode or mixed): the measured/predicted ratios the calibration saw."""
        import copy

        if end not in ("low", "high"):
            raise ConfigError(f"end must be low or high, got {end!r}")
        other = copy.copy(self)
        other.scale = {p: self.band(p)[0 if end == "low" else 1] for p in PHASES}
        return other

    def band(self, phase: str) -> tuple[float, float]:
        """The measured / predicted step-time band of `phase` steps (5-95%): the calibration's for
        these weights; for an MoE with its experts apart, that of the MoE models' steps composed
        from measured kernels, else (int4: no such steps) the dense band widened to its MoE kernel's;
        with Gated DeltaNet layers on their kernel, widened to those kernels' spread."""
        cal = self.calibration
        steps = (cal.bands_moe_steps or {}).get(self.moe_kernel, {}) if self.moe else {}
        if self.moe and self.model.kv_lora_rank:  # an MLA MoE: DeepSeek-V3's composed steps, where composed
            steps = (cal.bands_mla_steps or {}).get(self.moe_kernel) or steps
        moe = (cal.bands_moe or {}).get(self.moe_kernel) if self.moe else None
        if phase in steps:
            lo, hi = (float(x) for x in steps[phase])
        else:
            lo, hi = cal.band(phase, self.fp8)
            if moe:
                lo, hi = min(lo, moe[0]), max(hi, moe[1])
        if getattr(self, "pcie_allreduce", None) is not None:  # widened to its own composed steps' at this degree
            ar_lo, ar_hi = self.pcie_allreduce[1]["steps"][phase]
            lo, hi = min(lo, ar_lo), max(hi, ar_hi)
        if self.gdn and cal.bands_gdn:  # widened to the Gated DeltaNet layers' spread (a mixed step: both phases')
            for p in (("prefill", "decode") if phase == "mixed" else (phase,)):
                lo, hi = min(lo, cal.bands_gdn[p][0]), max(hi, cal.bands_gdn[p][1])
        return lo, hi

    def breakdown(self, batch: StepBatch) -> dict:
        t = self.terms(batch)
        return {**t, "step_s": self.step_time(batch)}

    def describe(self) -> dict:
        cal = self.calibration
        return {"time_model": self.name, "model": self.model.name, "gpu": self.gpu.name, "tp": self.tp,
                **({"pp": self.pp, "pp_hop_s_per_token": self.pp_hop_s_per_token} if getattr(self, "pp", 1) > 1 else {}),
                "dtype": self.dtype, "kv_dtype": self.kv_dtype, "calibrated_on": cal.measured_on,
                "borrowed_calibration": cal.borrowed, "checked_on_own_kernels": cal.checked,
                "own_fitted": list(cal.own_fitted), "bands": {p: list(self.band(p)) for p in PHASES},
                "coefficients": {k: (None if v == float("inf") else v) for k, v in self.c.items()}, "peak_tflops": self.peak_flops / 1e12,
                "bandwidth_gbps": self.gpu.bandwidth_gbps, "stream_bandwidth_gbps": self.bandwidth / 1e9,
                "stream_bandwidth_source": self.bandwidth_source, "moe_kernel": self.moe_kernel, "mla": self.mla,
                **({"moe_routing": "served" if self.moe_route else "balanced"} if self.moe else {}),
                **({"pcie_allreduce_tp": self.pcie_allreduce[0]} if getattr(self, "pcie_allreduce", None) else {}),
                **({"mamba_layers": self.mamba_layers, "mamba_state_bytes_per_layer": self.state_bytes,
                    "mamba_term": ("Gated DeltaNet kernels, fitted on measured ones" if self.gdn else
                                   "unmeasured: state read and write per request, update per token")}
                   if self.mamba_layers else {})}
