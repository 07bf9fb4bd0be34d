"""One resolve(): a serving configuration's sizes, worked out once.

Block size, model, KV dtype (and which layers count), weights dtype, the GPU pool, the tiers below
it: every size the simulator, its sweeps and the CLI use comes from :func:`resolve`, so a KV dtype,
say, sizes the GPU pool, every tier and the time model's KV reads alike, and a weights dtype the
pool and the roofline's weight reads and GEMMs (docs/memory.md and docs/timing.md, "KV capacity after the weights").
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..analysis.models import kv_bytes_per_token, resolve_capacities
from ..engine.replay import check_capacity
from ..engine.tiers import Tier, resolve_tiers
from ..errors import ConfigError
from ..trace.model import resolve_block_size


@dataclass(frozen=True)
class Sizes:
    """A configuration's sizes. capacity: the GPU pool of one instance, in blocks; block_bytes:
    one block's KV bytes over the whole model (None without a model); capacity_source: how the
    pool was sized (given, in bytes, or what the GPUs hold after the weights)."""

    block_size: int
    capacity: int | None
    capacity_source: dict
    tiers: tuple = ()
    model: str | None = None
    kv_dtype: str = "bf16"
    bytes_per_token: int | None = None
    block_bytes: int | None = None
    gpu: str | None = None
    tp: int = 1
    budget: dict | None = field(default=None, compare=False)
    weights_dtype: str = "bf16"
    pp: int = 1  # pipeline stages, each on `tp` GPUs (timing/pipeline.py)

    def describe(self) -> dict:
        out = {"block_size": self.block_size, "capacity_blocks": self.capacity, "kv_dtype": self.kv_dtype,
               "weights_dtype": self.weights_dtype, "capacity_source": self.capacity_source}
        if self.model is not None:
            out.update(model=self.model, kv_bytes_per_token=self.bytes_per_token, kv_block_bytes=self.block_bytes)
        if self.tiers:
            out["tiers"] = [t.to_dict(self.block_bytes) for t in self.tiers]
        return out


def kv_dtype_of(kv_dtype, model) -> str:
    if kv_dtype is not None and model is None:
        raise ConfigError("kv_dtype describes a model's KV cache: it needs a model (--model)")
    if kv_dtype is not None and not isinstance(kv_dtype, str):
        raise ConfigError(f"kv_dtype (--kv-dtype) must be a dtype's name such as bf16 or fp8, got {kv_dtype!r}")
    return (kv_dtype or "bf16").strip().lower()


def weights_dtype_of(weights_dtype, gpu) -> str:
    """The weights dtype (default bf16), checked against `gpu` when there is one (gpus.py)."""
    from ..catalog.gpus import check_weights_dtype, compute_dtype

    key = str(weights_dtype or "bf16").strip().lower()
    if gpu is None:
        compute_dtype(key)  # an unknown name: a ConfigError naming --weights-dtype
        return key
    return check_weights_dtype(key, gpu)


def resolve(trace=None, *, block_size: int | None = None, capacity=None, model=None, kv_dtype: str | None = None,
            kv_layers: str | None = None, gpu=None, tp: int = 1, gpu_memory_utilization: float = 0.9, tiers=None,
            global_store=None, unbounded_ids: int | None = None, weights_dtype: str | None = None,
            max_num_batched_tokens: int = 8192, max_num_seqs: int = 256, kv_cache_memory=None,
            num_gpu_blocks_override: int | None = None, enforce_eager: bool = False,
            language_model_only: bool = False, engine_style: str = "vllm",
            mem_fraction_static: float | None = None, pp: int = 1) -> Sizes:
    """The sizes of a configuration.

    block_size: tokens per block (default: what the trace declares, else 512). capacity: the GPU
    pool in blocks, or a size ("80GiB", needs `model`); None: what `gpu` x `tp` hold after
    `model`'s weights at `gpu_memory_utilization` (as vLLM sizes its pool), or `--tiers hbm=`.
    kv_dtype / kv_layers: how the model's KV is stored (bf16, all layers by default). weights_dtype:
    the model's weights (bf16 default, fp16, fp8, int4), which the pool `gpu` holds is sized after;
    refused on a `gpu` that cannot run it (fp8 without FP8 tensor cores). tiers /
    global_store: the tiers below the pool (engine/tiers.py syntax; sizes in bytes need `model`).
    unbounded_ids: a policy without a capacity (infinite) gets a pool of that many blocks.
    max_num_batched_tokens / max_num_seqs: the scheduler's limits, which set the profile run's
    activation and sampler peaks vLLM takes from the pool (timing/memory.py). kv_cache_memory
    (bytes or a size) / num_gpu_blocks_override: vLLM's ``kv_cache_memory_bytes`` and
    ``num_gpu_blocks_override``: the KV memory instead of the profiled figure, the block count
    instead of what the memory holds (applied last when both are given, as vLLM does); each needs
    `gpu` and `model` and excludes `capacity`. enforce_eager: vLLM without CUDA graphs, whose
    memory the budget then does not take. language_model_only: a multimodal model served as text
    only (vLLM's --language-model-only: no vision tower, no encoder profiling). engine_style
    "sglang" sizes the pool on a GPU as SGLang 0.5.23 does (timing/sglang_memory.py), with
    `mem_fraction_static` (None: SGLang's default for the GPU and TP), which only that style takes.
    pp: pipeline stages (vLLM's --pipeline-parallel-size), each on `tp` GPUs holding its layers'
    weights and KV; the pool is the smallest stage's (timing/pipeline.py). vLLM style, on a GPU.
    """
    block_size = resolve_block_size(block_size, trace)
    kv_dtype = kv_dtype_of(kv_dtype, model)
    weights_dtype = weights_dtype_of(weights_dtype, gpu)
    if kv_layers is not None and model is None:
        raise ConfigError("kv_layers describes a model's KV cache: it needs a model (--model)")
    bytes_per_token = block_bytes = None
    if model is not None:
        bytes_per_token = int(kv_bytes_per_token(model, kv_dtype, kv_layers or "all"))
        block_bytes = bytes_per_token * block_size
    tier_list, hbm = resolve_tiers(tiers, global_store, block_size=block_size, block_bytes=block_bytes)
    if any(t.bandwidth for t in tier_list) and block_bytes is None:
        raise ConfigError("a tier's bandwidth needs the model's KV bytes per block: give --model")
    if hbm is not None:
        if capacity is not None and _blocks(capacity, block_size, model, kv_dtype, kv_layers)[0] != hbm:
            raise ConfigError(f"the pool is given twice: capacity {capacity} and --tiers hbm={hbm}")
        capacity = hbm
    if not isinstance(enforce_eager, bool):
        raise ConfigError(f"enforce_eager must be True or False, got {enforce_eager!r}")
    if enforce_eager and (gpu is None or model is None):
        raise ConfigError("enforce_eager (--enforce-eager) leaves CUDA graphs out of the pool vLLM sizes on a GPU: "
                          "it needs --gpu and --model")
    if language_model_only and (gpu is None or model is None):
        raise ConfigError("language_model_only (--language-model-only) drops a multimodal model's vision tower from the "
                          "pool vLLM sizes on a GPU: it needs --gpu and --model")
    if mem_fraction_static is not None and engine_style != "sglang":
        raise ConfigError("mem_fraction_static (--mem-fraction-static) is SGLang's: add --engine-style sglang "
                          "(vLLM's is --gpu-memory-utilization)")
    from .timing.pipeline import check_pp

    pp = check_pp(pp)
    if pp > 1 and (gpu is None or model is None):
        raise ConfigError("pp (--pp) splits a model's layers over GPUs: it needs --gpu and --model")
    if pp > 1 and engine_style != "vllm":
        raise ConfigError(f"pp (--pp) is modelled as vLLM 0.33.0 runs it: drop --engine-style {engine_style}")
    pool = dict(max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs, enforce_eager=enforce_eager,
                language_model_only=language_model_only, **({"pp": pp} if pp > 1 else {}))
    for name, flag, value in (("kv_cache_memory", "--kv-cache-memory", kv_cache_memory),
                              ("num_gpu_blocks_override", "--num-gpu-blocks-override", num_gpu_blocks_override)):
        if value is None:
            continue
        if capacity is not None:
            raise ConfigError(f"{name} ({flag}) sizes the GPU pool, and the pool is given already ({capacity}): "
                              "give one of them")
        if gpu is None or model is None:
            raise ConfigError(f"{name} ({flag}) sizes the pool vLLM allocates on a GPU: it needs --gpu and --model")
        pool[name] = value
    budget = None
    if unbounded_ids is not None:
        blocks, source = max(1, int(unbounded_ids)), {"kind": "unbounded"}
    elif capacity is not None:
        blocks, budget = _blocks(capacity, block_size, model, kv_dtype, kv_layers)
        source = {"kind": "given"} if budget is None else {"kind": "bytes", "size": str(capacity).strip()}
        if gpu is not None and model is not None and engine_style != "trtllm":
            # how the given pool compares with what the GPUs hold (a pool no GPU has is a what-if;
            # vLLM's budget, which TensorRT-LLM's pool is not)
            from .timing import kv_capacity

            try:
                fits = kv_capacity(model, gpu, tp, block_size, gpu_memory_utilization, dtype=weights_dtype,
                                   kv_dtype=kv_dtype, **pool).blocks
            except ConfigError:  # the weights leave no room: the given pool is a what-if
                fits = 0
            source.update(gpu_memory_blocks=int(fits), gpu=str(gpu), model=str(model), tp=tp, **({"pp": pp} if pp > 1 else {}),
                          weights_dtype=weights_dtype)
    else:
        if gpu is None or model is None:
            raise ConfigError("give the KV pool: --capacity BLOCKS, or --gpu NAME --model NAME (the memory left after "
                              "the weights, as vLLM sizes it)")
        from .timing import kv_capacity

        if engine_style == "sglang":
            from .timing.sglang_memory import sglang_capacity

            if gpu_memory_utilization != 0.9:
                raise ConfigError("gpu_memory_utilization (--gpu-memory-utilization) is vLLM's; the SGLang-style pool "
                                  "is sized by mem_fraction_static (--mem-fraction-static)")

            kv = sglang_capacity(model, gpu, tp, block_size, mem_fraction_static, dtype=weights_dtype,
                                 kv_dtype=kv_dtype, **pool)
            blocks, source = int(kv.blocks), {"kind": "sglang_memory", **kv.to_dict(), "kv_dtype": kv_dtype}
        else:
            kv = kv_capacity(model, gpu, tp, block_size, gpu_memory_utilization, dtype=weights_dtype,
                             kv_dtype=kv_dtype, **pool)
            blocks, source = int(kv.blocks), {"kind": "gpu_memory", **kv.to_dict(), "kv_dtype": kv_dtype}
    return Sizes(block_size=block_size, capacity=blocks, capacity_source=source, tiers=tuple(tier_list),
                 model=None if model is None else str(model), kv_dtype=kv_dtype, bytes_per_token=bytes_per_token,
                 block_bytes=block_bytes, gpu=None if gpu is None else str(gpu), tp=tp, budget=budget,
                 weights_dtype=weights_dtype, pp=pp)


def _blocks(capacity, block_size, model, kv_dtype, kv_layers) -> tuple[int, dict | None]:
    """A capacity in blocks (a count, or a size with a model) and its budget document (sizes only)."""
    if isinstance(capacity, str) and not capacity.strip().isdigit():
        blocks, budget = resolve_capacities([capacity], block_size, model=model,
                                            kv_dtype=kv_dtype if model is not None else None,
                                            layers=kv_layers if model is not None else None)
        return check_capacity(blocks[0]), budget
    if isinstance(capacity, str):
        raise ConfigError(f"capacity (--capacity) {capacity!r} is text: give a block count as a number "
                          f"({capacity.strip()}), or a size with its unit ('80GiB')")
    return check_capacity(capacity), None


__all__ = ["Sizes", "Tier", "resolve"]
