"""One resolve(): a serving configuration's sizes, worked out once.

Block size, model, KV dtype (and which layers count), weights dtype, the GPU pool, the tiers below
it: every size the simulator, its sweeps and the CLI use comes from :func:`resolve`, so a KV dtype,
say, sizes the GPU pool, every tier and the time model's KV reads alike, and a weights dtype the
pool and the roofline's weight reads and GEMMs (docs/memory.md and docs/timing.md, "KV capacity after the weights").
"""

from __future__ import annotations

from dataclasses import replace

from ..analysis.models import get_model, kv_bytes_per_token, resolve_capacities
from ..catalog.gpus import get_gpu
from ..engine.replay import check_capacity
from ..engine.tiers import Tier, resolve_tiers
from ..errors import ConfigError
from ..trace.model import resolve_block_size
from .dataparallel import resolve as data_parallel
from .deployment import Deployment, DeploymentConfig
from .timing import kv_capacity
from .timing.memory import vllm_utilization
from .timing.pipeline import check_pp
from .timing.sglang_memory import sglang_capacity


#: the resolved deployment's old name (config.resolve returned "Sizes" before it held the specs)
Sizes = Deployment


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


def resolve(trace=None, asked: DeploymentConfig | None = None, **given) -> Deployment:
    """The Deployment of `asked` (or of the DeploymentConfig keywords `given`): every size of it,
    the model and GPU looked up once.

    block_size: tokens per block (default: what the trace declares, else 512). capacity: the GPU
    pool in blocks, or a size ("80GiB", needs `model`); None: what `gpu` x `tp` hold after
    `model`'s weights at `gpu_memory_utilization` (as vLLM sizes its pool; None: vLLM 0.33.0's default,
    0.92, timing/memory.py VLLM_GPU_MEMORY_UTILIZATION), or `--tiers hbm=`.
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
    dp / enable_expert_parallel: vLLM's --data-parallel-size and --enable-expert-parallel
    (dataparallel.py): the pool is one rank's, an MoE's experts split over the DP x TP GPUs.
    """
    a = DeploymentConfig(**given) if asked is None else replace(asked, **given)
    block_size = resolve_block_size(a.block_size, trace)
    kv_dtype = kv_dtype_of(a.kv_dtype, a.model)
    weights_dtype = weights_dtype_of(a.weights_dtype, a.gpu)
    if a.kv_layers is not None and a.model is None:
        raise ConfigError("kv_layers describes a model's KV cache: it needs a model (--model)")
    model = gpu = bytes_per_token = block_bytes = None
    if a.model is not None:
        model = get_model(a.model)
        bytes_per_token = int(kv_bytes_per_token(model, kv_dtype, a.kv_layers or "all"))
        block_bytes = bytes_per_token * block_size
    tier_list, hbm = resolve_tiers(a.tiers, a.global_store, block_size=block_size, block_bytes=block_bytes)
    if any(t.bandwidth for t in tier_list) and block_bytes is None:
        raise ConfigError("a tier's bandwidth needs the model's KV bytes per block: give --model")
    capacity = a.capacity
    if hbm is not None:
        if capacity is not None and _blocks(capacity, block_size, model, kv_dtype, a.kv_layers)[0] != hbm:
            raise ConfigError(f"the pool is given twice: capacity {capacity} and --tiers hbm={hbm}")
        capacity = hbm
    pp = _check(a)
    if a.gpu is not None:
        gpu = get_gpu(a.gpu)
    dp = data_parallel(a.dp, a.enable_expert_parallel, a.tp, model, a.engine_style)
    pool = _pool_options(a, capacity, pp, dp)
    at = dict(block_size=block_size, kv_dtype=kv_dtype, weights_dtype=weights_dtype, model=model, gpu=gpu, pp=pp)
    budget = None
    if a.unbounded_ids is not None:
        blocks, source = max(1, int(a.unbounded_ids)), {"kind": "unbounded"}
    elif capacity is not None:
        blocks, budget, source = _given_pool(a, capacity, pool, at)
    else:
        blocks, source = _gpu_pool(a, pool, at)
    return Deployment(block_size=block_size, capacity=blocks, capacity_source=source, tiers=tuple(tier_list),
                      model=None if a.model is None else str(a.model), kv_dtype=kv_dtype,
                      bytes_per_token=bytes_per_token, block_bytes=block_bytes,
                      gpu=None if a.gpu is None else str(a.gpu), tp=a.tp, budget=budget, weights_dtype=weights_dtype,
                      pp=pp, data_parallel=dp, model_spec=model, gpu_spec=gpu)


def _check(a: DeploymentConfig) -> int:
    """The checks of the pool's engine settings (each naming its flag); the pipeline stages."""
    if not isinstance(a.enforce_eager, bool):
        raise ConfigError(f"enforce_eager must be True or False, got {a.enforce_eager!r}")
    if a.enforce_eager and (a.gpu is None or a.model is None):
        raise ConfigError("enforce_eager (--enforce-eager) leaves CUDA graphs out of the pool vLLM sizes on a GPU: "
                          "it needs --gpu and --model")
    if a.language_model_only and (a.gpu is None or a.model is None):
        raise ConfigError("language_model_only (--language-model-only) drops a multimodal model's vision tower from the "
                          "pool vLLM sizes on a GPU: it needs --gpu and --model")
    if a.mem_fraction_static is not None and a.engine_style != "sglang":
        raise ConfigError("mem_fraction_static (--mem-fraction-static) is SGLang's: add --engine-style sglang "
                          "(vLLM's is --gpu-memory-utilization)")
    pp = check_pp(a.pp)
    if pp > 1 and (a.gpu is None or a.model is None):
        raise ConfigError("pp (--pp) splits a model's layers over GPUs: it needs --gpu and --model")
    if pp > 1 and a.engine_style != "vllm":
        raise ConfigError(f"pp (--pp) is modelled as vLLM 0.33.0 runs it: drop --engine-style {a.engine_style}")
    return pp


def _pool_options(a: DeploymentConfig, capacity, pp: int, dp=None) -> dict:
    """The engine settings the pool on a GPU is sized with (timing/memory.py)."""
    pool = dict(max_num_batched_tokens=a.max_num_batched_tokens, max_num_seqs=a.max_num_seqs,
                enforce_eager=a.enforce_eager, language_model_only=a.language_model_only,
                **({"pp": pp} if pp > 1 else {}),
                **({"dp": dp.size, "expert_parallel": dp.expert_parallel} if dp is not None else {}))
    for name, flag, value in (("kv_cache_memory", "--kv-cache-memory", a.kv_cache_memory),
                              ("num_gpu_blocks_override", "--num-gpu-blocks-override", a.num_gpu_blocks_override)):
        if value is None:
            continue
        if capacity is not None:
            raise ConfigError(f"{name} ({flag}) sizes the GPU pool, and the pool is given already ({capacity}): "
                              "give one of them")
        if a.gpu is None or a.model is None:
            raise ConfigError(f"{name} ({flag}) sizes the pool vLLM allocates on a GPU: it needs --gpu and --model")
        pool[name] = value
    return pool


def _given_pool(a: DeploymentConfig, capacity, pool: dict, at: dict) -> tuple[int, dict | None, dict]:
    """A given pool (blocks or a size): its blocks, its budget document, and its source (with
    how it compares with what the GPUs hold, when there are a GPU and a model)."""
    blocks, budget = _blocks(capacity, at["block_size"], at["model"], at["kv_dtype"], a.kv_layers)
    source = {"kind": "given"} if budget is None else {"kind": "bytes", "size": str(capacity).strip()}
    if a.gpu is not None and a.model is not None and a.engine_style != "trtllm":
        # how the given pool compares with what the GPUs hold (a pool no GPU has is a what-if;
        # vLLM's budget, which TensorRT-LLM's pool is not)
        try:
            util = vllm_utilization(a.gpu_memory_utilization)
            fits = kv_capacity(at["model"], at["gpu"], a.tp, at["block_size"], util, dtype=at["weights_dtype"],
                               kv_dtype=at["kv_dtype"], **pool).blocks
        except ConfigError:  # the weights leave no room: the given pool is a what-if
            fits = 0
        source.update(gpu_memory_blocks=int(fits), gpu=str(a.gpu), model=str(a.model), tp=a.tp,
                      **({"pp": at["pp"]} if at["pp"] > 1 else {}), weights_dtype=at["weights_dtype"])
    return blocks, budget, source


def _gpu_pool(a: DeploymentConfig, pool: dict, at: dict) -> tuple[int, dict]:
    """The pool the GPUs hold after the weights, as vLLM (or SGLang) sizes it, and its source."""
    if a.gpu is None or a.model is None:
        raise ConfigError("give the KV pool: --capacity BLOCKS, or --gpu NAME --model NAME (the memory left after "
                          "the weights, as vLLM sizes it)")
    if a.engine_style == "sglang":
        if a.gpu_memory_utilization is not None:
            raise ConfigError("gpu_memory_utilization (--gpu-memory-utilization) is vLLM's; the SGLang-style pool "
                              "is sized by mem_fraction_static (--mem-fraction-static)")
        kv = sglang_capacity(at["model"], at["gpu"], a.tp, at["block_size"], a.mem_fraction_static,
                             dtype=at["weights_dtype"], kv_dtype=at["kv_dtype"], **pool)
        return int(kv.blocks), {"kind": "sglang_memory", **kv.to_dict(), "kv_dtype": at["kv_dtype"]}
    util = vllm_utilization(a.gpu_memory_utilization)  # (None: vLLM 0.33.0's default)
    kv = kv_capacity(at["model"], at["gpu"], a.tp, at["block_size"], util, dtype=at["weights_dtype"],
                     kv_dtype=at["kv_dtype"], **pool)
    return int(kv.blocks), {"kind": "gpu_memory", **kv.to_dict(), "kv_dtype": at["kv_dtype"]}


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


__all__ = ["Deployment", "DeploymentConfig", "Sizes", "Tier", "resolve"]
