"""Time models: how long one engine step (one forward pass of a continuous batch) takes.

The simulator describes each step as a ``StepBatch`` and asks a ``TimeModel`` for its duration in
seconds. Four models (docs/serving.md, "Time models", has the formulas, defaults and sources):

- ``InstantTimeModel`` ("instant"): every step takes 0 s.
- ``RooflineTimeModel`` ("roofline"): from the model catalog (analysis/models.py) and the GPU
  catalog (serving/gpus.py): ``max(FLOPs / (peak x MFU), bytes / (bandwidth x MBU)) + overhead``.
- ``DynamoNpzProfile`` (``FILE.npz``): NVIDIA Dynamo's measured profile, read and interpolated the
  way Dynamo's mocker does.
- ``PolynomialProfile`` (``FILE.json``): a fitted polynomial in the step's aggregates.

``kv_capacity_blocks`` is the KV pool vLLM would allocate on a GPU after the weights.

A StepBatch describes one forward pass:

- ``prefill_new[i]``: prompt tokens computed this step for the i-th prefilling request (a whole
  prompt, or one chunk of it under chunked prefill);
- ``prefill_cached[i]``: tokens of that request already in KV before this step: its prefix-cache
  hit plus the chunks computed in earlier steps;
- ``decode_context[j]``: the j-th decoding request's sequence length at this step (prompt plus
  tokens generated so far, including the token fed this step): the keys its new token attends to;
- ``active_kv_tokens``: only the Dynamo profile reads it (its decode grid's first axis); None means
  the sum of ``decode_context``. See ``DynamoNpzProfile``.
"""

from __future__ import annotations

import bisect
import json
import math
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..analysis.models import get_model, kv_bytes_per_token
from ..errors import ConfigError
from ..jit import HAVE_NUMBA, helper
from .gpus import GPUSpec, get_gpu

#: Default model-FLOPs utilization of the roofline (fraction of dense peak a prefill sustains).
DEFAULT_MFU = 0.5
#: Default model-bandwidth utilization (fraction of peak HBM bandwidth a decode step sustains).
DEFAULT_MBU = 0.6
#: Default fixed cost of one step (scheduling, sampling, launch), seconds. 0: see docs/serving.md.
DEFAULT_OVERHEAD_S = 0.0
#: Bytes per weight element for the roofline's weight dtypes.
WEIGHT_DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp8": 1}


class ProfileError(ConfigError):
    """A measured time profile cannot be used. Names the file and, when there is one, the field:
    ``PATH: FIELD: message`` (like TraceError)."""

    def __init__(self, path, msg: str, field: str | None = None):
        self.path = str(path)
        self.field = field
        self.msg = msg
        super().__init__(f"{self.path}: {field}: {msg}" if field else f"{self.path}: {msg}")


@dataclass(frozen=True)
class StepBatch:
    """One engine step's work (see the module docstring). Sequences of ints; lists or tuples."""

    prefill_new: tuple = ()
    prefill_cached: tuple = ()
    decode_context: tuple = ()
    active_kv_tokens: int | None = None

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

    def describe(self) -> dict:
        """What the model is, JSON-ready (for reports)."""
        return {"time_model": self.name}


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


def _check_fraction(label: str, value, *, allow_zero: bool = False) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{label} must be a number in (0, 1], got {value!r}") from None
    if not (0.0 < v <= 1.0 or (allow_zero and v == 0.0)) or math.isnan(v):
        raise ConfigError(f"{label} must be in (0, 1], got {value!r}")
    return v


def _weight_bytes(dtype: str) -> int:
    key = str(dtype).strip().lower()
    if key not in WEIGHT_DTYPE_BYTES:
        raise ConfigError(f"unknown weight dtype {dtype!r} (known: {', '.join(WEIGHT_DTYPE_BYTES)})")
    return WEIGHT_DTYPE_BYTES[key]


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

    name = "roofline"

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
        self.peak_flops = self.gpu.peak_flops(self.dtype)
        self.bandwidth = self.gpu.bandwidth_bytes_per_s
        self.mfu = _check_fraction("mfu", mfu)
        self.mbu = _check_fraction("mbu", mbu)
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
        keys_full = touched_full = keys_sw = touched_sw = 0
        for n, c in zip(batch.prefill_new, batch.prefill_cached):
            n, c = int(n), int(c)
            if n <= 0:
                continue
            keys_full += n * c + n * (n + 1) // 2
            touched_full += c + n
            if w:
                keys_sw += _sum_min(c + 1, c + n, w)
                touched_sw += min(c + n, w + n - 1)
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


# --------------------------------------------------------------------------------------------
# KV capacity after weights


@dataclass(frozen=True)
class KVCapacity:
    """How ``kv_capacity_blocks`` got its number (every figure per GPU, bytes)."""

    model: str
    gpu: str
    tp: int
    block_size: int
    gpu_memory_utilization: float
    total_memory_bytes: int
    usable_bytes: float
    weight_bytes_per_gpu: float
    kv_bytes_available: float
    kv_bytes_per_token_per_gpu: float
    blocks: int

    @property
    def tokens(self) -> int:
        return self.blocks * self.block_size

    def to_dict(self) -> dict:
        from dataclasses import asdict

        return {**asdict(self), "tokens": self.tokens}


def kv_capacity(model, gpu, tp: int = 1, block_size: int = 16, gpu_memory_utilization: float = 0.9, *,
                dtype: str = "bf16", kv_dtype: str = "bf16", total_memory_bytes: int | None = None) -> KVCapacity:
    """The KV pool vLLM allocates per GPU, as ``KVCapacity`` (see ``kv_capacity_blocks``)."""
    spec = get_model(model)
    g = get_gpu(gpu)
    tp = _check_tp(tp)
    if isinstance(block_size, bool) or not isinstance(block_size, (int, np.integer)) or block_size < 1:
        raise ConfigError(f"block_size must be a whole number >= 1, got {block_size!r}")
    util = _check_fraction("gpu_memory_utilization", gpu_memory_utilization)
    total = g.memory_bytes if total_memory_bytes is None else int(total_memory_bytes)
    if total < 1:
        raise ConfigError(f"total_memory_bytes must be positive, got {total_memory_bytes!r}")
    usable = total * util
    weights = spec.total_params * _weight_bytes(dtype) / tp
    available = usable - weights
    per_token = kv_bytes_per_token_per_gpu(spec, tp, kv_dtype)
    if available <= 0:
        raise ConfigError(f"{spec.name} at {dtype} over tp={tp} needs {weights / 1e9:.1f} GB of weights per GPU, "
                          f"more than the {usable / 1e9:.1f} GB a {g.name} gives at "
                          f"gpu_memory_utilization={util}: raise tp or the utilization")
    blocks = int(available // (per_token * block_size))
    if blocks < 1:
        raise ConfigError(f"{spec.name} on {g.name} x tp={tp}: {available / 1e9:.3f} GB left after weights "
                          f"holds no {block_size}-token block")
    return KVCapacity(spec.name, g.name, tp, int(block_size), util, total, usable, weights, available,
                      per_token, blocks)


def kv_capacity_blocks(model, gpu, tp: int = 1, block_size: int = 16, gpu_memory_utilization: float = 0.9, *,
                       dtype: str = "bf16", kv_dtype: str = "bf16", total_memory_bytes: int | None = None) -> int:
    """KV blocks left on each GPU after the weights, as vLLM sizes its pool.

    ``floor((total_memory x gpu_memory_utilization - weights / tp) / (kv_bytes_per_token_per_gpu x
    block_size))``: vLLM's worker requests ``total x utilization``, subtracts the memory the model
    holds, and divides what is left by the page size of every layer (vllm/v1/worker/gpu_worker.py
    ``determine_available_memory``; vllm/v1/core/kv_cache_utils.py ``get_num_blocks``). Ignored, so
    this is an upper bound: the activation peak of the profiling run, CUDA graphs, NCCL and other
    non-torch memory (typically a few GB). ``total_memory_bytes`` defaults to the datasheet's
    decimal GB (serving/gpus.py says why the driver reports a little more); the block count is the
    same on every TP rank. Sliding-window layers are counted in full (an engine without a hybrid
    allocator).
    """
    return kv_capacity(model, gpu, tp, block_size, gpu_memory_utilization, dtype=dtype, kv_dtype=kv_dtype,
                       total_memory_bytes=total_memory_bytes).blocks


# --------------------------------------------------------------------------------------------
# Dynamo's NPZ profile

#: Where the NPZ rules below were read (docs/serving.md cites them too).
DYNAMO_SOURCES = {
    "perf_model": "ai-dynamo/dynamo lib/mocker/src/common/perf_model.rs @ f80944a4c0c32d6e8ba9ab7a58a399eae18a053a",
    "scheduler": "ai-dynamo/dynamo lib/mocker/src/scheduler/vllm/core.rs @ 04cc7029664ffeaa071d15a2b0f1d6566f045f4d "
                 "(execute_pass_internal, emit_ready_tokens, predict_prefill_duration; same rules @ ac0be1b9)",
    "interp1d": "jonasBoss/ndarray-interp src/interp1d/strategies/linear.rs @ 0718b0c7e9ced4e929fe52559bbade89ce6cb76b",
    "interp2d": "jonasBoss/ndarray-interp src/interp2d/strategies/bilinear.rs @ 8a898d6421e1c50d86addcf59241d9306edd3188",
}

NPZ_KEYS = ("prefill_isl", "prefill_ttft_ms", "decode_active_kv_tokens", "decode_context_length", "decode_itl")


def _segment(xs: list, x: float) -> int:
    """Index i of the segment [xs[i], xs[i+1]] used at x: the one holding x (left end at or below
    it), the first below the range, the last above it (never the last index)."""
    i = bisect.bisect_right(xs, x) - 1
    return min(max(i, 0), len(xs) - 2)


def _lerp(x1: float, y1: float, x2: float, y2: float, x: float) -> float:
    """The line through (x1, y1), (x2, y2) at x, as ndarray-interp's Linear::calc_frac writes it."""
    return (y2 - y1) / (x2 - x1) * (x - x1) + y1


class DynamoNpzProfile(TimeModel):
    """NVIDIA Dynamo's measured profile (``.npz``), read and applied as Dynamo's mocker does.

    Arrays (float64, as Dynamo's reader ``ndarray_npy`` loads them into ``Array<f64>``):
    ``prefill_isl`` (n) -> ``prefill_ttft_ms`` (n); ``decode_active_kv_tokens`` (r) x
    ``decode_context_length`` (c) -> ``decode_itl`` (r, c), milliseconds. Each axis needs at least
    2 points and must rise strictly (ndarray-interp's builders refuse anything else).

    Interpolation (``PerfModel::from_npz``: ``Linear::new().extrapolate(true)`` and
    ``Bilinear::new().extrapolate(true)`` of ndarray-interp):

    - prefill: ``y = (y2 - y1) / (x2 - x1) * (x - x1) + y1`` on the segment holding x; below the
      first point the first segment's line, above the last the last segment's line.
    - decode: the same segment choice on each axis (x = active KV tokens, rows; y = context length,
      columns), then ``z1 = lerp_x(z11, z21)``, ``z2 = lerp_x(z12, z22)``, ``z = lerp_y(z1, z2)``:
      bilinear inside the grid, the edge cell's bilinear surface continued outside it.

    Charging a step (``predict_prefill_time`` / ``predict_decode_time`` of perf_model.rs, called
    from the vLLM scheduler's ``execute_pass_internal``; see DYNAMO_SOURCES):

    - prefill, once per step for the whole batch: ``k`` = prefilling requests, ``isl = floor(sum(
      cached + new) / k)``, ``prefix = floor(sum(cached) / k)`` (integer means), ``tokens = k x
      max(isl - prefix, 0)``; ``prefill_ms = max(interp(tokens), 0)``, 0 when k or tokens is 0.
    - decode, once per step: ``b`` = decoding requests, ``context = floor(sum(decode_context) /
      b)``, ``decode_ms = max(interp(active_kv_tokens, context), min_decode_ms)`` (Dynamo's floor
      is 1 ms: "token-emitting decode steps should not collapse onto the same timestamp"), 0 when
      b is 0.
    - the step: ``(prefill_ms + decode_ms) / 1000`` seconds: Dynamo runs the decode part after the
      prefill part (``decode_start_ms = now_ms + prefill``; tokens are stamped at
      ``decode_start_ms + decode``), so the two are summed, not overlapped.

    What the simulator feeds, as Dynamo 1.6.1 (its ``aisimulate-core`` 0.13.0 scheduler) does: the
    decode group is the requests decoding in the step (a request whose prompt completes in the step
    adds nothing to it), and ``active_kv_tokens`` is the sum of their sequence lengths (None here).
    Checked per request against Dynamo by tests/real_engines/test_dynamo_replay.py. An interpolation error in Dynamo
    yields 0 ms (``unwrap_or(0.0)``); with extrapolation on there is none for finite inputs.
    """

    name = "dynamo-npz"

    def __init__(self, path, *, min_decode_ms: float = 1.0):
        self.path = str(path)
        self.min_decode_ms = float(min_decode_ms)
        arrays = _read_npz(self.path)
        self.prefill_isl = arrays["prefill_isl"].tolist()
        self.prefill_ttft_ms = arrays["prefill_ttft_ms"].tolist()
        self.decode_active_kv_tokens = arrays["decode_active_kv_tokens"].tolist()
        self.decode_context_length = arrays["decode_context_length"].tolist()
        self.decode_itl = arrays["decode_itl"].tolist()

    def interp_prefill(self, x: float) -> float:
        """prefill_ttft_ms at x prefill tokens (linear, extrapolated)."""
        xs, ys = self.prefill_isl, self.prefill_ttft_ms
        i = _segment(xs, x)
        return _lerp(xs[i], ys[i], xs[i + 1], ys[i + 1], x)

    def interp_decode(self, x: float, y: float) -> float:
        """decode_itl at (x active KV tokens, y context length) (bilinear, extrapolated)."""
        xs, ys, z = self.decode_active_kv_tokens, self.decode_context_length, self.decode_itl
        i, j = _segment(xs, x), _segment(ys, y)
        x1, x2, y1, y2 = xs[i], xs[i + 1], ys[j], ys[j + 1]
        z1 = _lerp(x1, z[i][j], x2, z[i + 1][j], x)
        z2 = _lerp(x1, z[i][j + 1], x2, z[i + 1][j + 1], x)
        return _lerp(y1, z1, y2, z2, y)

    def prefill_ms(self, batch_size: int, isl: int, prefix: int) -> float:
        """Dynamo's ``predict_prefill_time(batch_size, isl, prefix)`` in ms."""
        new = max(int(isl) - int(prefix), 0)
        if batch_size <= 0 or new == 0:
            return 0.0
        return max(self.interp_prefill(float(batch_size * new)), 0.0)

    def decode_ms(self, batch_size: int, active_kv_tokens: int, context_length: int) -> float:
        """Dynamo's ``predict_decode_time(batch_size, active_kv_tokens, context_length, _)`` in ms."""
        if batch_size <= 0:
            return 0.0
        return max(self.interp_decode(float(active_kv_tokens), float(context_length)), self.min_decode_ms)

    def step_parts_ms(self, batch: StepBatch) -> tuple[float, float]:
        """(prefill_ms, decode_ms) of the step, as Dynamo's vLLM scheduler charges them."""
        k = len(batch.prefill_new)
        prefill = 0.0
        if k:
            total_prefix = int(sum(batch.prefill_cached))
            total_isl = total_prefix + int(sum(batch.prefill_new))
            prefill = self.prefill_ms(k, total_isl // k, total_prefix // k)
        b = len(batch.decode_context)
        decode = 0.0
        if b:
            total_ctx = int(sum(batch.decode_context))
            active = total_ctx if batch.active_kv_tokens is None else int(batch.active_kv_tokens)
            decode = self.decode_ms(b, active, total_ctx // b)
        return prefill, decode

    def step_time(self, batch: StepBatch) -> float:
        prefill, decode = self.step_parts_ms(batch)
        return (prefill + decode) / 1000.0

    def describe(self) -> dict:
        return {"time_model": self.name, "path": self.path, "prefill_points": len(self.prefill_isl),
                "decode_grid": [len(self.decode_active_kv_tokens), len(self.decode_context_length)],
                "min_decode_ms": self.min_decode_ms, "follows": DYNAMO_SOURCES}


def _read_npz(path: str) -> dict:
    if not os.path.exists(path):
        raise ProfileError(path, "no such file")
    try:
        npz = np.load(path, allow_pickle=False)
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
        raise ProfileError(path, f"not a NumPy .npz archive ({e})") from None
    if not isinstance(npz, np.lib.npyio.NpzFile):
        raise ProfileError(path, "holds a single array (.npy), not an .npz archive of named arrays "
                                 f"({', '.join(NPZ_KEYS)})")
    out = {}
    with npz:
        for key in NPZ_KEYS:
            if key not in npz.files:
                raise ProfileError(path, f"missing (Dynamo's profile has {', '.join(NPZ_KEYS)}; "
                                         f"this file has {', '.join(npz.files) or 'no arrays'})", key)
            try:
                arr = npz[key]
            except (ValueError, OSError, zipfile.BadZipFile) as e:
                raise ProfileError(path, f"unreadable ({e})", key) from None
            if arr.dtype != np.float64:
                raise ProfileError(path, f"dtype {arr.dtype}: Dynamo reads every array as float64 "
                                         "(ndarray_npy Array<f64>) and refuses other dtypes; save with "
                                         ".astype(numpy.float64)", key)
            want = 2 if key == "decode_itl" else 1
            if arr.ndim != want:
                raise ProfileError(path, f"must be {want}-D, got shape {arr.shape}", key)
            if not np.all(np.isfinite(arr)):
                raise ProfileError(path, "holds NaN or infinite values", key)
            out[key] = arr
    for key in ("prefill_isl", "decode_active_kv_tokens", "decode_context_length"):
        axis = out[key]
        if axis.size < 2:
            raise ProfileError(path, f"needs at least 2 points to interpolate, has {axis.size}", key)
        if np.any(np.diff(axis) <= 0):
            bad = int(np.flatnonzero(np.diff(axis) <= 0)[0])
            raise ProfileError(path, f"must rise strictly (ndarray-interp's requirement), but entry {bad + 1} "
                                     f"({axis[bad + 1]:g}) follows {axis[bad]:g}", key)
    if out["prefill_ttft_ms"].shape != out["prefill_isl"].shape:
        raise ProfileError(path, f"has {out['prefill_ttft_ms'].size} values but prefill_isl has "
                                 f"{out['prefill_isl'].size}", "prefill_ttft_ms")
    want = (out["decode_active_kv_tokens"].size, out["decode_context_length"].size)
    if out["decode_itl"].shape != want:
        raise ProfileError(path, f"shape {out['decode_itl'].shape}, expected {want} (rows: "
                                 "decode_active_kv_tokens, columns: decode_context_length)", "decode_itl")
    return out


# --------------------------------------------------------------------------------------------
# Polynomial coefficients file

#: Variables a polynomial term may use: the step's aggregates.
POLY_VARIABLES = {
    "prefill_tokens": "prompt tokens computed this step (sum of prefill_new)",
    "prefill_requests": "prefilling requests this step",
    "prefill_context": "tokens already in KV for the prefilling requests (sum of prefill_cached)",
    "decode_batch": "decoding requests this step",
    "decode_context": "sum of the decoding requests' context lengths",
    "decode_mean_context": "decode_context / decode_batch (0 without decodes)",
}
POLY_FORMAT = "kvreplay-step-polynomial"
POLY_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6}


class PolynomialProfile(TimeModel):
    """A step time fitted as a polynomial in the step's aggregates (a ``.json`` file).

    Schema (docs/serving.md has an example)::

        {"format": "kvreplay-step-polynomial", "version": 1, "unit": "ms",
         "terms": [{"coef": 4.2},
                   {"coef": 0.021, "prefill_tokens": 1},
                   {"coef": 3.1e-7, "prefill_tokens": 2},
                   {"coef": 0.0009, "decode_context": 1}],
         "min": 0}

    ``step = max(sum(coef x prod(var ** exponent)), min)`` in ``unit`` (s, ms or us); the variables
    are POLY_VARIABLES, exponents whole numbers >= 0 (a term without variables is a constant). An
    empty step takes 0 (a constant term is not charged when nothing runs). Optional: ``"source"``
    (free text: where the fit came from), ``"min"`` (default 0).
    """

    name = "polynomial"

    def __init__(self, path=None, *, document: dict | None = None):
        self.path = str(path) if path is not None else "<polynomial>"
        if document is None:
            document = _read_json(self.path)
        self.terms, self.scale, self.min_value, self.source = _parse_poly(self.path, document)
        self.unit = document.get("unit", "s")

    @staticmethod
    def variables(batch: StepBatch) -> dict:
        b = len(batch.decode_context)
        dctx = int(sum(batch.decode_context))
        return {"prefill_tokens": int(sum(batch.prefill_new)), "prefill_requests": len(batch.prefill_new),
                "prefill_context": int(sum(batch.prefill_cached)), "decode_batch": b, "decode_context": dctx,
                "decode_mean_context": dctx / b if b else 0.0}

    def step_time(self, batch: StepBatch) -> float:
        if batch.is_empty:
            return 0.0
        v = self.variables(batch)
        total = 0.0
        for coef, powers in self.terms:
            term = coef
            for var, exp in powers:
                term *= float(v[var]) ** exp
            total += term
        return max(total, self.min_value) * self.scale

    def describe(self) -> dict:
        return {"time_model": self.name, "path": self.path, "unit": self.unit, "terms": len(self.terms),
                "source": self.source}


def _read_json(path: str) -> dict:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ProfileError(path, "no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ProfileError(path, f"unreadable ({e})") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ProfileError(path, f"not JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    if not isinstance(doc, dict):
        raise ProfileError(path, f"must be a JSON object with \"format\": \"{POLY_FORMAT}\", got {type(doc).__name__}")
    return doc


def _number(path, field, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ProfileError(path, f"must be a finite number, got {value!r}", field)
    return float(value)


def _parse_poly(path: str, doc: dict):
    fmt = doc.get("format")
    if fmt != POLY_FORMAT:
        raise ProfileError(path, f"must be {POLY_FORMAT!r}, got {fmt!r}", "format")
    version = doc.get("version", 1)
    if version != 1:
        raise ProfileError(path, f"unsupported version {version!r} (this kvreplay reads version 1)", "version")
    unit = doc.get("unit", "s")
    if unit not in POLY_UNITS:
        raise ProfileError(path, f"must be one of {', '.join(POLY_UNITS)}, got {unit!r}", "unit")
    known = {"format", "version", "unit", "terms", "min", "source"}
    extra = sorted(set(doc) - known)
    if extra:
        raise ProfileError(path, f"unknown key (known: {', '.join(sorted(known))})", extra[0])
    raw_terms = doc.get("terms")
    if not isinstance(raw_terms, list) or not raw_terms:
        raise ProfileError(path, "must be a non-empty list of {\"coef\": number, VARIABLE: exponent, ...}", "terms")
    terms = []
    for i, t in enumerate(raw_terms):
        where = f"terms[{i}]"
        if not isinstance(t, dict):
            raise ProfileError(path, f"must be an object, got {t!r}", where)
        if "coef" not in t:
            raise ProfileError(path, "missing", f"{where}.coef")
        coef = _number(path, f"{where}.coef", t["coef"])
        powers = []
        for var, exp in t.items():
            if var == "coef":
                continue
            if var not in POLY_VARIABLES:
                raise ProfileError(path, f"unknown variable (known: {', '.join(POLY_VARIABLES)})", f"{where}.{var}")
            if isinstance(exp, bool) or not isinstance(exp, int) or exp < 0:
                raise ProfileError(path, f"exponent must be a whole number >= 0, got {exp!r}", f"{where}.{var}")
            if exp:
                powers.append((var, exp))
        terms.append((coef, tuple(powers)))
    min_value = _number(path, "min", doc.get("min", 0))
    source = doc.get("source")
    if source is not None and not isinstance(source, str):
        raise ProfileError(path, f"must be text, got {source!r}", "source")
    return tuple(terms), POLY_UNITS[unit], min_value, source


# --------------------------------------------------------------------------------------------
# Choosing a model by name

TIME_MODEL_NAMES = ("instant", "roofline")


def load_time_model(spec, *, model=None, gpu=None, tp: int = 1, **roofline_options) -> TimeModel:
    """The TimeModel `spec` names: ``"instant"``, ``"roofline"`` (needs `model` and `gpu`; `tp`
    and the RooflineTimeModel keywords apply), a ``.npz`` path (DynamoNpzProfile) or a ``.json``
    path (PolynomialProfile). A TimeModel is returned as is."""
    if isinstance(spec, TimeModel):
        return spec
    text = str(spec).strip()
    key = text.lower()
    if key == "instant":
        return InstantTimeModel()
    if key == "roofline":
        missing = [n for n, v in (("model", model), ("gpu", gpu)) if v is None]
        if missing:
            raise ConfigError(f"the roofline time model needs {' and '.join(missing)} (e.g. --model Llama-3.1-8B "
                              "--gpu H100)")
        return RooflineTimeModel(model, gpu, tp, **roofline_options)
    if key.endswith(".npz"):
        return DynamoNpzProfile(text)
    if key.endswith(".json"):
        return PolynomialProfile(text)
    raise ConfigError(f"unknown time model {spec!r}: use instant, roofline, a Dynamo profile FILE.npz "
                      "or a polynomial FILE.json")


# --------------------------------------------------------------------------------------------
# The compiled form: the simulator's kernel times its steps without calling Python.
#
# ``packed(model)`` flattens a time model into one float64 array (its first entry says which
# model); ``step_seconds(packed, agg)`` computes a step's duration from the step's aggregates
# (AGG_* below), with the same formulas as each model's ``step_time``. tests/serving/test_timing.py
# checks the two agree on random batches.

(AGG_PREFILL_REQS, AGG_PREFILL_NEW, AGG_PREFILL_CACHED, AGG_DECODE_REQS, AGG_DECODE_CTX, AGG_ACTIVE_KV,
 AGG_KEYS_FULL, AGG_TOUCHED_FULL, AGG_KEYS_SW, AGG_TOUCHED_SW) = range(10)
NUM_AGG = 10
KIND_INSTANT, KIND_ROOFLINE, KIND_NPZ, KIND_POLY = 0, 1, 2, 3
# Roofline layout after the kind.
(R_ACTIVE_PARAMS, R_ATTN_WIDTH, R_LAYERS_FULL, R_LAYERS_SW, R_WINDOW, R_WEIGHT_BYTES, R_ACTIVE_WEIGHT_BYTES, R_TP,
 R_KV_LAYER_TOKEN, R_FLOPS, R_BYTES_PER_S, R_OVERHEAD) = range(1, 13)


def packed(model: TimeModel) -> np.ndarray:
    """`model` as the float64 array ``step_seconds`` reads (see above)."""
    if isinstance(model, InstantTimeModel):
        return np.array([KIND_INSTANT], dtype=np.float64)
    if isinstance(model, RooflineTimeModel):
        return np.array([KIND_ROOFLINE, model.model.active_params, model.attn_width, model.layers_full,
                         model.layers_sw, model.window or 0, model.weight_bytes, model.active_weight_bytes,
                         model.tp, model.kv_per_layer_token_gpu, model.peak_flops * model.mfu,
                         model.bandwidth * model.mbu, model.overhead_s], dtype=np.float64)
    if isinstance(model, DynamoNpzProfile):
        z = np.asarray(model.decode_itl, dtype=np.float64)
        return np.concatenate([[KIND_NPZ, model.min_decode_ms, len(model.prefill_isl)], model.prefill_isl,
                               model.prefill_ttft_ms, [z.shape[0], z.shape[1]], model.decode_active_kv_tokens,
                               model.decode_context_length, z.ravel()]).astype(np.float64)
    if isinstance(model, PolynomialProfile):
        names = list(POLY_VARIABLES)
        out = [KIND_POLY, model.scale, model.min_value, len(model.terms)]
        for coef, powers in model.terms:
            exps = [0.0] * len(names)
            for var, exp in powers:
                exps[names.index(var)] = exp
            out += [coef, *exps]
        return np.array(out, dtype=np.float64)
    raise ConfigError(f"the simulator cannot run the time model {type(model).__name__}: it needs one of "
                      "instant, roofline, a Dynamo .npz or a polynomial .json (or packed() for it)")


def roofline_window(tm: np.ndarray) -> int:
    """The sliding window a packed model needs the simulator's aggregates for (0: none)."""
    return int(tm[R_WINDOW]) if tm[0] == KIND_ROOFLINE else 0


def _segment_sorted(xs_start, n, tm, x):
    """tm[xs_start:xs_start+n] rises: the segment i (0..n-2) holding x, ends extended (as _segment)."""
    lo, hi = 0, n - 2
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if tm[xs_start + mid] <= x:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _lerp_compiled(x1, y1, x2, y2, x):
    return (y2 - y1) / (x2 - x1) * (x - x1) + y1


def step_seconds(tm, agg):
    """The duration of a step with aggregates `agg` under the packed model `tm` (seconds)."""
    kind = tm[0]
    empty = agg[AGG_PREFILL_REQS] == 0 and agg[AGG_DECODE_REQS] == 0
    if kind == KIND_INSTANT or empty:
        return 0.0
    if kind == KIND_ROOFLINE:
        tokens = agg[AGG_PREFILL_NEW] + agg[AGG_DECODE_REQS]
        flops = (2.0 * tm[R_ACTIVE_PARAMS] * tokens + 4.0 * tm[R_ATTN_WIDTH]
                 * (tm[R_LAYERS_FULL] * agg[AGG_KEYS_FULL] + tm[R_LAYERS_SW] * agg[AGG_KEYS_SW]))
        weights = min(tm[R_WEIGHT_BYTES], tm[R_ACTIVE_WEIGHT_BYTES] * tokens) / tm[R_TP]
        kv = tm[R_KV_LAYER_TOKEN] * (tm[R_LAYERS_FULL] * agg[AGG_TOUCHED_FULL] + tm[R_LAYERS_SW] * agg[AGG_TOUCHED_SW])
        return max(flops / tm[R_TP] / tm[R_FLOPS], (weights + kv) / tm[R_BYTES_PER_S]) + tm[R_OVERHEAD]
    if kind == KIND_NPZ:
        n = int(tm[2])
        px, py = 3, 3 + n
        r, c = int(tm[3 + 2 * n]), int(tm[4 + 2 * n])
        dx, dy = 5 + 2 * n, 5 + 2 * n + r
        dz = dy + c
        prefill = 0.0
        k = agg[AGG_PREFILL_REQS]
        if k > 0:
            prefix = agg[AGG_PREFILL_CACHED]
            isl = prefix + agg[AGG_PREFILL_NEW]
            new = (isl // k) - (prefix // k)
            if new > 0:
                x = k * new
                i = _segment_sorted(px, n, tm, x)
                prefill = max(_lerp_compiled(tm[px + i], tm[py + i], tm[px + i + 1], tm[py + i + 1], x), 0.0)
        decode = 0.0
        b = agg[AGG_DECODE_REQS]
        if b > 0:
            ctx = agg[AGG_DECODE_CTX]
            x = agg[AGG_ACTIVE_KV]
            y = ctx // b
            i = _segment_sorted(dx, r, tm, x)
            j = _segment_sorted(dy, c, tm, y)
            x1, x2, y1, y2 = tm[dx + i], tm[dx + i + 1], tm[dy + j], tm[dy + j + 1]
            z1 = _lerp_compiled(x1, tm[dz + i * c + j], x2, tm[dz + (i + 1) * c + j], x)
            z2 = _lerp_compiled(x1, tm[dz + i * c + j + 1], x2, tm[dz + (i + 1) * c + j + 1], x)
            decode = max(_lerp_compiled(y1, z1, y2, z2, y), tm[1])
        return (prefill + decode) / 1000.0
    # KIND_POLY: variables in POLY_VARIABLES order
    b = agg[AGG_DECODE_REQS]
    v0, v1, v2 = agg[AGG_PREFILL_NEW], agg[AGG_PREFILL_REQS], agg[AGG_PREFILL_CACHED]
    v3, v4 = b, agg[AGG_DECODE_CTX]
    v5 = v4 / b if b > 0 else 0.0
    total = 0.0
    for t in range(int(tm[3])):
        at = 4 + t * 7
        term = tm[at]
        term *= v0 ** tm[at + 1] * v1 ** tm[at + 2] * v2 ** tm[at + 3]
        term *= v3 ** tm[at + 4] * v4 ** tm[at + 5] * v5 ** tm[at + 6]
        total += term
    return max(total, tm[2]) * tm[1]


if HAVE_NUMBA:
    _segment_sorted = helper(_segment_sorted)
    _lerp_compiled = helper(_lerp_compiled)
    step_seconds = helper(inline=False)(step_seconds)


def aggregates(batch: StepBatch, window: int = 0) -> np.ndarray:
    """The AGG_* array of a StepBatch, as the simulator's kernel accumulates it (instance.py)."""
    agg = np.zeros(NUM_AGG, dtype=np.float64)
    for n, c in zip(batch.prefill_new, batch.prefill_cached):
        n, c = int(n), int(c)
        if n <= 0:
            continue
        agg[AGG_PREFILL_REQS] += 1
        agg[AGG_PREFILL_NEW] += n
        agg[AGG_PREFILL_CACHED] += c
        agg[AGG_KEYS_FULL] += n * c + n * (n + 1) // 2
        agg[AGG_TOUCHED_FULL] += c + n
        if window:
            agg[AGG_KEYS_SW] += _sum_min(c + 1, c + n, window)
            agg[AGG_TOUCHED_SW] += min(c + n, window + n - 1)
    for x in batch.decode_context:
        x = int(x)
        agg[AGG_DECODE_REQS] += 1
        agg[AGG_DECODE_CTX] += x
        agg[AGG_KEYS_FULL] += x
        agg[AGG_TOUCHED_FULL] += x
        if window:
            agg[AGG_KEYS_SW] += min(x, window)
            agg[AGG_TOUCHED_SW] += min(x, window)
    agg[AGG_ACTIVE_KV] = agg[AGG_DECODE_CTX] if batch.active_kv_tokens is None else batch.active_kv_tokens
    return agg
