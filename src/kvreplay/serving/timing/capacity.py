"""The KV pool an engine allocates on its GPUs after the weights (vLLM's sizing)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...analysis.models import get_model
from ...errors import ConfigError
from .gpus import check_weights_dtype, get_gpu
from .models import _check_fraction, _check_tp, _weight_bytes, kv_bytes_per_token_per_gpu


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
    weights_dtype: str = "bf16"

    @property
    def tokens(self) -> int:
        return self.blocks * self.block_size

    def to_dict(self) -> dict:
        from dataclasses import asdict

        return {**asdict(self), "tokens": self.tokens}


def kv_capacity(model, gpu, tp: int = 1, block_size: int = 16, gpu_memory_utilization: float = 0.9, *,
                dtype: str = "bf16", kv_dtype: str = "bf16", total_memory_bytes: int | None = None) -> KVCapacity:
    """The KV pool vLLM allocates per GPU, as ``KVCapacity`` (see ``kv_capacity_blocks``). `dtype`
    is the weights dtype (bf16, fp16, fp8, int4: ``--weights-dtype``), refused where the GPU cannot
    run it (gpus.check_weights_dtype)."""
    spec = get_model(model)
    g = get_gpu(gpu)
    dtype = check_weights_dtype(dtype, g)
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
        smaller = [d for d in ("fp8", "int4") if _weight_bytes(d) < _weight_bytes(dtype)]
        hint = f", or use smaller weights (--weights-dtype {' or '.join(smaller)})" if smaller else ""
        note = spec.checkpoint_note() if spec.checkpoint_weights_dtype != dtype else None
        raise ConfigError(f"{spec.name} at {dtype} over tp={tp} needs {weights / 1e9:.1f} GB of weights per GPU, "
                          f"more than the {usable / 1e9:.1f} GB a {g.name} gives at "
                          f"gpu_memory_utilization={util}: raise tp or the utilization{hint}"
                          + (f". {note}" if note else ""))
    blocks = int(available // (per_token * block_size))
    if blocks < 1:
        raise ConfigError(f"{spec.name} on {g.name} x tp={tp}: {available / 1e9:.3f} GB left after weights "
                          f"holds no {block_size}-token block")
    return KVCapacity(spec.name, g.name, tp, int(block_size), util, total, usable, weights, available,
                      per_token, blocks, dtype)


def kv_capacity_blocks(model, gpu, tp: int = 1, block_size: int = 16, gpu_memory_utilization: float = 0.9, *,
                       dtype: str = "bf16", kv_dtype: str = "bf16", total_memory_bytes: int | None = None) -> int:
    """KV blocks left on each GPU after the weights, as vLLM sizes its pool.

    ``floor((total_memory x gpu_memory_utilization - weights / tp) / (kv_bytes_per_token_per_gpu x
    block_size))``, the weights at `dtype` (bf16 2 bytes each, fp8 1, int4 0.5): vLLM's worker
    requests ``total x utilization``, subtracts the memory the model holds, and divides what is
    left by the page size of every layer (vllm/v1/worker/gpu_worker.py
    ``determine_available_memory``; vllm/v1/core/kv_cache_utils.py ``get_num_blocks``). Ignored, so
    this is an upper bound: the activation peak of the profiling run, CUDA graphs, NCCL and other
    non-torch memory (typically a few GB). ``total_memory_bytes`` defaults to the datasheet's
    decimal GB (serving/gpus.py says why the driver reports a little more); the block count is the
    same on every TP rank. Sliding-window layers are counted in full (an engine without a hybrid
    allocator).
    """
    return kv_capacity(model, gpu, tp, block_size, gpu_memory_utilization, dtype=dtype, kv_dtype=kv_dtype,
                       total_memory_bytes=total_memory_bytes).blocks
