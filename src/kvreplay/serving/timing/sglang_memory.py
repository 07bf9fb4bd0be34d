"""The KV pool SGLang 0.5.23 gives itself on one GPU, term by term (``--engine-style sglang``).

SGLang sizes its pool once, after the weights are loaded, from the memory then free (every file
below is SGLang 0.5.23's, ``sglang/srt/``):

1. **Free memory before the weights** (``pre_model_load_memory``, distributed/bootstrap.py:195-225):
   what the device has free once the CUDA context, NCCL and the custom all-reduce buffers exist:
   the device's total (gpus.json ``total_memory_bytes``) less ``PRE_LOAD_OVERHEAD_BYTES``.
2. **mem_fraction_static**: the share of that memory for the weights and the KV pool. Given, or
   SGLang's default (arg_groups/memory_hook.py:77-200, 281-340): ``round((gpu_mem - reserved) /
   gpu_mem, 3)`` with ``gpu_mem`` the device's memory in MiB and ``reserved = 512 + max(chunked
   prefill size, 2048) x 1.5 + tp / 8 x 1024`` plus the CUDA graphs' reserve (``reserve_for_graph_mb``,
   :355-399: 2 MiB per decode batch size up to ``max_bs``, 8 MiB per prefill graph size, 1.5 GiB
   instead for MLA), at least 10 GiB on a GPU above 60 GiB. The chunked prefill size and the
   decode graphs' ``max_bs`` default by GPU memory (8192 and 256, 512 at tp >= 4, on 60-160 GiB
   GPUs; 16384 and 512 above). A multimodal model's fraction is lowered by its ViT's size
   (``adjust_mem_fraction_for_vlm``, :417-462).
3. **Weights**: what each rank loads (memory.weight_parts: the same checkpoint bytes vLLM loads).
4. **KV left** = free memory after the weights - ``pre_model_load_memory x (1 - mem_fraction_static)``
   - the multimodal cache reserve (``SGLANG_VLM_CACHE_SIZE_MB``, 100 MiB, multimodal models only)
   (mem_cache/kv_cache_configurator.py:2990-3060, 202-219); tokens = KV left // the bytes a token
   takes on the rank (model_executor/pool_configurator.py:637-647), then blocks of the simulator's
   block size.

Nothing is profiled: the activations, CUDA graphs and sampler live in the ``1 - mem_fraction_static``
SGLang leaves aside, not in the pool's budget, so the pool moves with the fraction, not with a
profile run. ``PRE_LOAD_OVERHEAD_BYTES`` is the one constant read off public logs (each
``Load weight begin. avail mem=`` against the device's total; docs/memory.md). Not modelled:
post-capture KV sizing (``SGLANG_ENABLE_POST_CAPTURE_KV_SIZING``, off by default), hybrid
SWA/Mamba pools' split, speculative drafts, DP attention.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ...analysis.models import get_model
from ...errors import ConfigError
from ...catalog.gpus import check_weights_dtype, get_gpu
from .memory import GiB, MiB, check_positive_int, weight_parts
from .models import _check_tp, kv_bytes_per_token_per_gpu

#: What the device no longer has free when SGLang takes its baseline: the CUDA context, cuBLAS
#: and NCCL / custom all-reduce buffers (public logs' "Load weight begin. avail mem" against the
#: total, docs/memory.md)
PRE_LOAD_OVERHEAD_BYTES = int(0.75 * GiB)
#: Multimodal models: the embedding cache reserved out of the KV budget (environ.py:1598)
VLM_CACHE_BYTES = 100 * MiB
#: Prefill CUDA graph capture sizes (arg_groups/cuda_graph_hook.py:480-497)
_PREFILL_GRAPH_SIZES = (list(range(4, 33, 4)) + list(range(48, 257, 16)) + list(range(288, 513, 32))
                        + list(range(576, 1025, 64)) + list(range(1280, 4097, 256)))


def gpu_defaults(gpu_mem_mib: float, tp: int) -> tuple[int, int]:
    """(chunked_prefill_size, decode CUDA graph max_bs) SGLang 0.5.23 picks for a GPU of
    `gpu_mem_mib` MiB at `tp` (arg_groups/memory_hook.py:89-165)."""
    if gpu_mem_mib < 20 * 1024:
        return 2048, 8
    if gpu_mem_mib < 35 * 1024:
        return 4096, 48 if tp < 4 else 160
    if gpu_mem_mib < 60 * 1024:
        return 4096, 32 if tp < 4 else 160
    if gpu_mem_mib < 160 * 1024:
        return 8192, 256 if tp < 4 else 512
    return 16384, 512


def prefill_graph_sizes(max_tokens: int) -> list[int]:
    """The prefill CUDA graph sizes up to `max_tokens` (the chunked prefill size by default)."""
    return [s for s in _PREFILL_GRAPH_SIZES + list(range(4608, max_tokens + 1, 512)) if s <= max_tokens]


def default_mem_fraction_static(spec, gpu_mem_mib: float, tp: int, chunked_prefill_size: int | None = None) -> float:
    """SGLang 0.5.23's --mem-fraction-static default (module docstring, point 2)."""
    default_chunk, max_bs = gpu_defaults(gpu_mem_mib, tp)
    chunk = chunked_prefill_size or default_chunk
    mla = spec.attention == "mla"
    graphs = max_bs * 2 + (1.5 * 1024 if mla else len(prefill_graph_sizes(min(chunk, 8192) if mla else chunk)) * 8)
    reserved = 512 + max(chunk, 2048) * 1.5 + tp / 8 * 1024 + graphs
    if gpu_mem_mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    fraction = round((gpu_mem_mib - reserved) / gpu_mem_mib, 3)
    if spec.vision:
        fraction = vlm_fraction(fraction, spec.vision)
    return fraction


def vlm_fraction(fraction: float, vision: dict) -> float:
    """``adjust_mem_fraction_for_vlm`` (memory_hook.py:417-462): x 0.95, and x 0.1 less per 100 %
    of ViT-L/14's layers x width^2 the tower has beyond it (bounded to 0.8 .. 1.05)."""
    ratio = vision["layers"] * vision["hidden"] ** 2 / (24 * 1024 ** 2)
    return fraction * 0.95 * max(0.8, min(1.05, 1.0 - 0.1 * (ratio - 1.0)))


@dataclass(frozen=True)
class SGLangCapacity:
    """How the SGLang-style pool got its number (bytes, per GPU)."""

    model: str
    gpu: str
    tp: int
    block_size: int
    mem_fraction_static: float
    mem_fraction_static_default: bool
    total_memory_bytes: int
    pre_load_free_bytes: float
    weight_bytes_per_gpu: float
    reserved_bytes: float  # pre_load_free x (1 - mem_fraction_static): activations, graphs, sampler
    vlm_cache_bytes: float
    kv_bytes_available: float
    kv_bytes_per_token_per_gpu: float
    max_total_num_tokens: int
    blocks: int
    weights_dtype: str = "bf16"
    chunked_prefill_size: int = 8192

    @property
    def tokens(self) -> int:
        return self.blocks * self.block_size

    def to_dict(self) -> dict:
        return {**asdict(self), "tokens": self.tokens, "engine": "sglang 0.5.23"}


def _refuse_vllm_options(options: dict) -> None:
    for name, flag, off in (("kv_cache_memory", "--kv-cache-memory", None),
                            ("num_gpu_blocks_override", "--num-gpu-blocks-override", None),
                            ("enforce_eager", "--enforce-eager", False)):
        if options.pop(name, off) != off:
            raise ConfigError(f"{name} ({flag}) is vLLM's; the SGLang-style pool (--engine-style sglang) is sized by "
                              "--mem-fraction-static")


@dataclass(frozen=True)
class SGLangPoolOptions:
    """sglang_capacity's options beyond the model, GPU, TP, block size and --mem-fraction-static."""

    dtype: str = "bf16"
    kv_dtype: str = "bf16"
    max_num_batched_tokens: int | None = None
    total_memory_bytes: int | None = None
    language_model_only: bool = False

    @classmethod
    def of(cls, options: dict) -> "SGLangPoolOptions":
        """The options, vLLM's pool options refused and max_num_seqs (not in SGLang's budget) dropped."""
        rest = dict(options)
        rest.pop("max_num_seqs", None)
        _refuse_vllm_options(rest)
        unknown = sorted(set(rest) - set(cls.__dataclass_fields__))
        if unknown:
            raise ConfigError(f"sglang_capacity: unknown option {unknown[0]!r}")
        return cls(**rest)


def sglang_capacity(model, gpu, tp: int = 1, block_size: int = 16, mem_fraction_static: float | None = None,
                    **options) -> SGLangCapacity:
    """The KV pool SGLang 0.5.23 allocates on each GPU (module docstring). `mem_fraction_static`:
    SGLang's --mem-fraction-static (None: its default for the GPU and TP); keyword options:
    SGLangPoolOptions' fields; `max_num_batched_tokens`: the chunked prefill size its default
    fraction is computed with (None: SGLang's for the GPU). vLLM's pool options (kv_cache_memory,
    num_gpu_blocks_override, enforce_eager) are refused; max_num_seqs is accepted and does not
    enter the budget."""
    o = SGLangPoolOptions.of(options)
    language_model_only, max_num_batched_tokens = o.language_model_only, o.max_num_batched_tokens
    spec, g = get_model(model), get_gpu(gpu)
    dtype = check_weights_dtype(o.dtype, g)
    tp = _check_tp(tp)
    block_size = check_positive_int("block_size", block_size)
    if language_model_only and not spec.vision:
        raise ConfigError(f"language_model_only (--language-model-only) turns a multimodal model's vision tower off; "
                          f"{spec.name} has none")
    total = int(g.memory_bytes if o.total_memory_bytes is None else o.total_memory_bytes)
    gpu_mem_mib = total / MiB
    chunk = None if max_num_batched_tokens is None else check_positive_int(
        "chunked_prefill_size (--chunked-prefill-size)", max_num_batched_tokens)
    given = mem_fraction_static is not None
    if given:
        if isinstance(mem_fraction_static, bool) or not isinstance(mem_fraction_static, (int, float)) or \
                not 0 < mem_fraction_static < 1:
            raise ConfigError(f"mem_fraction_static (--mem-fraction-static) must be a fraction in (0, 1), "
                              f"got {mem_fraction_static!r}")
        fraction = float(mem_fraction_static)
    else:
        fraction = default_mem_fraction_static(spec if not language_model_only else _text_only(spec),
                                               gpu_mem_mib, tp, chunk)
    pre = total - PRE_LOAD_OVERHEAD_BYTES
    weights = sum(weight_parts(spec, dtype, tp, g.name, language_model_only).values())
    reserved = pre * (1 - fraction)
    vlm = VLM_CACHE_BYTES if spec.vision and not language_model_only else 0
    available = pre - weights - reserved - vlm
    per_token = kv_bytes_per_token_per_gpu(spec, tp, o.kv_dtype)
    if available <= 0:
        raise ConfigError(f"{spec.name} at {dtype} over tp={tp}: the weights ({weights / GiB:.2f} GiB) leave no KV room "
                          f"in SGLang's {pre * fraction / GiB:.2f} GiB (mem_fraction_static={fraction:g} of "
                          f"{pre / GiB:.2f} GiB free): raise --mem-fraction-static or tp")
    max_tokens = int(available // per_token)
    blocks = max_tokens // block_size
    if blocks < 1:
        raise ConfigError(f"{spec.name} on {g.name} x tp={tp}: {available / GiB:.3f} GiB left for KV holds no "
                          f"{block_size}-token block")
    return SGLangCapacity(spec.name, g.name, tp, int(block_size), fraction, not given, total, float(pre), weights,
                          reserved, float(vlm), float(available), per_token, max_tokens, int(blocks), dtype,
                          chunk or gpu_defaults(gpu_mem_mib, tp)[0])


def _text_only(spec):
    from dataclasses import replace

    return replace(spec, vision=None)
