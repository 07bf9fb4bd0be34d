"""Time models: how long one engine step (one forward pass of a continuous batch) takes.

The simulator describes each step as a ``StepBatch`` and asks a ``TimeModel`` for its duration in
seconds. This file holds the batch, the base class, ``InstantTimeModel`` and the roofline;
profiles.py the measured ones; packed.py the form the compiled loop reads (docs/timing.md, "Time
models", has the formulas, defaults and sources).

A StepBatch describes one forward pass:

- ``prefill_new[i]``: prompt tokens computed this step for the i-th prefilling request (a whole
  prompt, or one chunk of it under chunked prefill);
- ``prefill_cached[i]``: tokens of that request already in KV before this step: its prefix-cache
  hit plus the chunks computed in earlier steps;
- ``decode_context[j]``: the j-th decoding request's sequence length at this step (prompt plus
  tokens generated so far, including the token fed this step): the keys its new token attends to;
- ``active_kv_tokens``: only the Dynamo profile reads it (its decode grid's first axis); None means
  the sum of ``decode_context``. See ``profiles.DynamoNpzProfile``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...analysis.models import get_model, kv_bytes_per_token
from ...errors import ConfigError
from ...catalog.gpus import GPUSpec, get_gpu

#: Default model-FLOPs utilization of the roofline (fraction of dense peak a prefill sustains).
DEFAULT_MFU = 0.5
#: Default model-bandwidth utilization (fraction of peak HBM bandwidth a decode step sustains).
DEFAULT_MBU = 0.6
#: Default fixed cost of one step (scheduling, sampling, launch), seconds. 0: see docs/timing.md.
DEFAULT_OVERHEAD_S = 0.0
#: Bytes per weight element for the roofline's weight dtypes (int4: weight-only 4-bit, W4A16; the
#: GEMM dtype of each is gpus.compute_dtype's). Quantization scales are not counted.
WEIGHT_DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp8": 1, "int4": 0.5}

@dataclass(frozen=True)
class StepBatch:
    """One engine step's work (see the module docstring). Sequences of ints; lists or tuples."""

    prefill_new: tuple = ()
    prefill_cached: tuple = ()
    decode_context: tuple = ()
    active_kv_tokens: int | None = None
    expert_tokens: int | None = None  # the tokens an MoE's routed experts run over (None: the step's own)

    def __post_init__(self):
        if len(self.prefill_new) != len(self.prefill_cached):
            raise ConfigError(f"StepBatch: prefill_new has {len(self.prefill_new)} entries but prefill_cached "
                              f"{len(self.prefill_cached)}: one of each per prefilling request")

    @property
    def is_empty(self) -> bool:
        return not self.prefill_new and not self.decode_context

    @property
    def num_tokens(self) -> int:
        """Tokens the forward pass computes: every prefill token plus one per decoding request."""
        return int(sum(self.prefill_new)) + len(self.decode_context)


class TimeModel:
    """A step's duration in seconds. Subclasses set ``name`` and implement ``step_time``."""

    name = "base"

    def step_time(self, batch: StepBatch) -> float:
        raise NotImplementedError

    def step_floor(self, batch: StepBatch, decodes: int = 1) -> float:
        """A lower bound of the time of any step that holds `batch`'s work and more, with up to
        `decodes` decoding requests (serving/floors.py): the step itself, for a model whose step
        time only grows with the work in it."""
        return self.step_time(batch)

    def describe(self) -> dict:
        """What the model is, JSON-ready (for reports)."""
        return {"time_model": self.name}


def eager_step(gpu_s: float, tokens: int, layers: int, launch_layer_s: float, eager_above: float) -> float:
    """A step's time with the host's kernel launches when vLLM runs it without a CUDA graph: a step
    of more than `eager_above` tokens (its largest captured size; 0 under --enforce-eager) has its
    kernels launched one by one from the host (vLLM 0.33.0 v1/cudagraph_dispatcher.py:272-279:
    ``num_tokens > max_size`` gives CUDAGraphMode.NONE), which overlaps the GPU's work, so it takes
    the longer of the GPU's `gpu_s` and `layers` x `launch_layer_s`. Monotone in tokens: a step with
    more work takes at least as long (serving/floors.py's bounds hold). serving/timing/step.c's
    calibrated() is the same formula."""
    if launch_layer_s > 0 and tokens > eager_above:
        return max(gpu_s, layers * launch_layer_s)
    return gpu_s


class InstantTimeModel(TimeModel):
    """No service time at all: every step takes 0 s."""

    name = "instant"

    def step_time(self, batch: StepBatch) -> float:
        return 0.0


# --------------------------------------------------------------------------------------------
# Roofline


def _check_tp(tp) -> int:
    if isinstance(tp, bool) or not isinstance(tp, (int, np.integer)) or tp < 1:
        raise ConfigError(f"tp (tensor-parallel degree) must be a whole number >= 1, got {tp!r}")
    return int(tp)


#: the least MFU or MBU a roofline takes: below it a step of one token outlasts a run's clock
MIN_UTILISATION = 1e-4


def _check_fraction(label: str, value, *, allow_zero: bool = False, lo: float = 0.0) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{label} must be a number in (0, 1], got {value!r}") from None
    if not (0.0 < v <= 1.0 or (allow_zero and v == 0.0)) or math.isnan(v):
        raise ConfigError(f"{label} must be in (0, 1], got {value!r}")
    if 0.0 < v < lo:
        raise ConfigError(f"{label} must be from {lo:g} to 1, got {value!r}")
    return v


def _weight_bytes(dtype: str) -> float:
    """Bytes per weight at `dtype` (a float: int4 is half a byte)."""
    key = str(dtype).strip().lower()
    if key not in WEIGHT_DTYPE_BYTES:
        raise ConfigError(f"unknown weights dtype {dtype!r} (--weights-dtype; known: {', '.join(WEIGHT_DTYPE_BYTES)})")
    return float(WEIGHT_DTYPE_BYTES[key])


def kv_bytes_per_token_per_gpu(model, tp: int, kv_dtype: str = "bf16") -> float:
    """KV bytes one token takes on each of `tp` GPUs (every layer counted).

    MHA/GQA: each rank holds ``max(1, kv_heads // tp)`` of the ``kv_heads`` heads (vLLM replicates
    KV heads when tp > kv_heads), so the per-GPU share is that many heads' worth. MLA (1 latent
    "head" in the catalog) is replicated on every rank: the full per-token size.
    """
    spec = get_model(model)
    tp = _check_tp(tp)
    heads = spec.num_kv_heads
    return kv_bytes_per_token(spec, kv_dtype, "all") * max(1, heads // tp) / heads


def _sum_min(a: int, b: int, w: int) -> int:
    """sum(min(k, w) for k in a..b), a <= b."""
    if b <= w:
        return (a + b) * (b - a + 1) // 2
    if a > w:
        return w * (b - a + 1)
    return (a + w) * (w - a + 1) // 2 + w * (b - w)


def prefill_keys(batch: StepBatch, window) -> tuple[int, int, int, int]:
    """The prefills' attention work: (query-key pairs over full layers, over sliding layers, KV
    entries touched in full layers, in sliding layers). A chunk of n new tokens after c cached has
    ``n x c + n (n + 1) / 2`` causal pairs and touches ``c + n`` entries; a sliding layer of window
    W counts ``min(keys, W)`` per query and touches at most ``W + n - 1``."""
    keys_full = keys_sw = touched_full = touched_sw = 0
    for n, c in zip(batch.prefill_new, batch.prefill_cached):
        n, c = int(n), int(c)
        if n <= 0:
            continue
        keys_full += n * c + n * (n + 1) // 2
        touched_full += c + n
        if window:
            keys_sw += _sum_min(c + 1, c + n, window)
            touched_sw += min(c + n, window + n - 1)
    return keys_full, keys_sw, touched_full, touched_sw


class RooflineTimeModel(TimeModel):
    """Step time from peak compute and memory bandwidth (per GPU, TP-way sharded).

    ``t = max(F / (tp x peak x mfu), B / (bandwidth x mbu)) + overhead_s`` for a non-empty step
    (0 for an empty one), where, with T the step's tokens (prefill tokens + one per decode):

    - ``F = 2 x active_params x T + 4 x A x (L_full x K_full + L_sw x K_sw)``: the matmuls (2 FLOPs
      per active parameter per token) plus attention (QK^T and AV, 2 FLOPs each per query-key
      pair per attention-width element). ``A = num_attention_heads x head_dim`` (the attention
      width; the catalog has no hidden size, and for GQA/MHA models this is the query width the
      kernels multiply over). ``K`` = query-key pairs: a prefill chunk of n new tokens over c
      cached ones has ``n x c + n (n + 1) / 2`` (causal), a decode of context x has ``x``.
      Sliding-window layers (L_sw of them, window W) count ``min(keys, W)`` per query.
    - ``B = min(weights, active_weights x T) / tp + kv_per_gpu x touched``: weights read once per
      step (an MoE reads at most the experts its T tokens route to, bounded by all of them), plus
      every KV entry the step's attention touches once: ``c + n`` per prefill chunk, ``x`` per
      decode (sliding layers: at most ``W + n - 1``).

    Ignored: tensor-parallel communication, the LM head's restriction to the last prompt token,
    elementwise ops. For MLA models the catalog's head_dim is the latent width (576), which is what
    the absorbed decode kernel multiplies over; prefill attention is overestimated by that.
    """

    name = "roofline-raw"

    def __init__(self, model, gpu, tp: int = 1, *, dtype: str = "bf16", kv_dtype: str = "bf16",
                 mfu: float = DEFAULT_MFU, mbu: float = DEFAULT_MBU, overhead_s: float = DEFAULT_OVERHEAD_S):
        self.model = get_model(model)
        self.gpu: GPUSpec = get_gpu(gpu)
        self.tp = _check_tp(tp)
        spec = self.model
        if spec.num_attention_heads % self.tp:
            raise ConfigError(f"{spec.name} has {spec.num_attention_heads} attention heads, not divisible by "
                              f"tp={self.tp} (vLLM requires it)")
        self.dtype = str(dtype).strip().lower()
        self.kv_dtype = str(kv_dtype).strip().lower()
        wbytes = _weight_bytes(self.dtype)
        self.peak_flops = self.gpu.weights_peak_flops(self.dtype)  # GEMMs at gpus.compute_dtype(dtype)
        self.bandwidth = self.gpu.bandwidth_bytes_per_s
        self.mfu = _check_fraction("mfu (--mfu)", mfu, lo=MIN_UTILISATION)
        self.mbu = _check_fraction("mbu (--mbu)", mbu, lo=MIN_UTILISATION)
        try:
            self.overhead_s = float(overhead_s)
        except (TypeError, ValueError):
            raise ConfigError(f"overhead_s must be a number of seconds >= 0, got {overhead_s!r}") from None
        if not self.overhead_s >= 0:
            raise ConfigError(f"overhead_s must be a number of seconds >= 0, got {overhead_s!r}")
        self.weight_bytes = spec.total_params * wbytes
        self.active_weight_bytes = spec.active_params * wbytes
        self.attn_width = spec.num_attention_heads * spec.head_dim
        self.window = spec.sliding_window if spec.sliding_window_layers else None
        self.layers_sw = spec.sliding_window_layers if self.window else 0
        self.layers_full = spec.num_layers - self.layers_sw
        self.kv_per_token_gpu = kv_bytes_per_token_per_gpu(spec, self.tp, self.kv_dtype)
        self.kv_per_layer_token_gpu = self.kv_per_token_gpu / spec.num_layers

    def work(self, batch: StepBatch) -> tuple[float, float]:
        """(FLOPs per GPU, bytes per GPU) of the step."""
        tokens = batch.num_tokens
        if tokens == 0:
            return 0.0, 0.0
        w = self.window
        keys_full, keys_sw, touched_full, touched_sw = prefill_keys(batch, w)
        ctx = batch.decode_context
        if len(ctx):
            total_ctx = int(sum(ctx))
            keys_full += total_ctx
            touched_full += total_ctx
            if w:
                clipped = int(sum(min(int(x), w) for x in ctx))
                keys_sw += clipped
                touched_sw += clipped
        flops = (2.0 * self.model.active_params * tokens
                 + 4.0 * self.attn_width * (self.layers_full * keys_full + self.layers_sw * keys_sw))
        weights = min(self.weight_bytes, self.active_weight_bytes * tokens) / self.tp
        kv = self.kv_per_layer_token_gpu * (self.layers_full * touched_full + self.layers_sw * touched_sw)
        return flops / self.tp, weights + kv

    def breakdown(self, batch: StepBatch) -> dict:
        """The step's FLOPs, bytes, compute and memory times and which one bounds it."""
        flops, nbytes = self.work(batch)
        compute_s = flops / (self.peak_flops * self.mfu)
        memory_s = nbytes / (self.bandwidth * self.mbu)
        total = 0.0 if batch.is_empty else max(compute_s, memory_s) + self.overhead_s
        return {"flops_per_gpu": flops, "bytes_per_gpu": nbytes, "compute_s": compute_s, "memory_s": memory_s,
                "overhead_s": self.overhead_s if total else 0.0,
                "bound": "compute" if compute_s >= memory_s else "memory", "step_s": total}

    def step_time(self, batch: StepBatch) -> float:
        if batch.is_empty:
            return 0.0
        flops, nbytes = self.work(batch)
        return max(flops / (self.peak_flops * self.mfu), nbytes / (self.bandwidth * self.mbu)) + self.overhead_s

    def describe(self) -> dict:
        return {"time_model": self.name, "model": self.model.name, "gpu": self.gpu.name, "tp": self.tp,
                "dtype": self.dtype, "kv_dtype": self.kv_dtype, "mfu": self.mfu, "mbu": self.mbu,
                "overhead_s": self.overhead_s, "peak_tflops": self.peak_flops / 1e12,
                "bandwidth_gbps": self.gpu.bandwidth_gbps}
