"""How vLLM 0.33.0 lays a hybrid model's KV cache groups out in one block pool, and what one
block id costs (docs/budgets.md, "Hybrid models").

Source: vLLM 0.33.0 ``vllm/v1/core/kv_cache_planning.py`` (``get_kv_cache_groups``,
``unify_kv_cache_spec_page_size``, ``_get_kv_cache_groups_uniform_page_size``) and
``vllm/platforms/interface.py`` (``_align_hybrid_block_size``, lines 940-1137).

1. **Pages.** An attention layer's page is ``block_size x 2 x kv_heads x head_dim x dtype``
   bytes (per TP rank); a Mamba layer's is its whole state (conv + SSM), whatever the block
   size. In a Mamba hybrid vLLM raises the attention block size until an attention page holds a
   Mamba state (``attn_bs = 16 x ceil(state / (16 x attention bytes per token))``) and pads the
   state to that page; a hash-id trace keeps its own block size, so here the page is the larger
   of the two at the trace's block size, and the layout names the block size vLLM would use.
2. **Groups.** Layers of one kind are split into groups of ``group_size`` layers,
   ``group_size`` = the fewest layers of any kind (or the most, when the most is under 1.5x the
   fewest); a kind with n layers becomes ceil(n / group_size) groups, each with its own blocks.
   A block id is one page in each of ``group_size`` layer tensors, so it costs
   ``group_size x page`` bytes, and every group takes its blocks from the same pool.
3. **Order.** Groups are numbered in the order their kind first appears in the layers (the
   catalog lists kv_groups that way); blocks are allocated and freed group by group in that
   order, while lookups go full attention first.

With one kind only (a dense model, or ``--kv-semantics full``), it is one group of every KV layer:
a block costs ``layers x page``, as kvreplay's budgets have always counted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import ConfigError
from .models import get_model, kv_dtype_bytes


@dataclass(frozen=True)
class Group:
    """One spec group: `copies` KV cache groups of one kind (vLLM splits a kind's layers into
    groups of equal size; each group id has its own blocks). `window` (sliding_window) and
    `chunk` (chunked_local) in tokens."""

    kind: str
    copies: int = 1
    window: int | None = None
    chunk: int | None = None


SEMANTICS = ("auto", "hybrid", "full")
ENGINES = {"vllm": "vLLM 0.33.0's hybrid manager", "sglang": "SGLang 0.5.23's UnifiedRadixCache"}
_KERNEL_BLOCK = 16  # vLLM's default cache block size and the smallest attention kernel block


@dataclass(frozen=True)
class Layout:
    """One model's KV cache groups in vLLM's pool at a block size."""

    model: str
    groups: tuple  # of Group, in group order
    group_size: int  # layers per group
    page_bytes: int  # one layer's page at block_size (every group's, after unification)
    bytes_per_block: int  # what one block id costs: group_size x page_bytes
    block_size: int
    vllm_block_size: int  # the block size vLLM 0.33.0 would choose (Mamba hybrids raise it)
    note: str | None = None  # another engine's layout, in words (sglang_layout)
    engine: str = "vllm"  # whose layout: a key of ENGINES

    def text(self) -> str:
        if self.note:
            return self.note
        return f"{self.groups_text()}, {self.bytes_per_block:,} bytes per block id of {self.block_size} tokens"

    def groups_text(self) -> str:
        """Its groups and layers per group, in words."""
        parts = []
        for g in self.groups:
            what = {"full": "full attention", "sliding_window": f"sliding window {g.window}",
                    "chunked_local": f"chunked local {g.chunk}", "mamba": "mamba state"}[g.kind]
            parts.append(what + (f" x{g.copies} groups" if g.copies > 1 else ""))
        return f"{', '.join(parts)}; {self.group_size} layers per group"


def layout(model, block_size: int, kv_dtype: str = "bf16", *, semantics: str = "hybrid", tp: int = 1) -> Layout:
    """vLLM's layout of `model`'s KV cache at `block_size` tokens per block, per TP rank."""
    spec = get_model(model)
    if semantics not in ("hybrid", "full"):
        raise ConfigError(f"kv semantics must be hybrid or full, got {semantics!r}")
    per_token = _layer_bytes_per_token(spec, kv_dtype, tp)
    attn_page = int(per_token * block_size)
    kinds = list(spec.kv_groups or ({"kind": "full", "layers": spec.num_layers},))
    if semantics == "full" or len({k["kind"] for k in kinds}) == 1:
        layers = spec.kv_layers
        return Layout(spec.name, (Group("full"),), layers, attn_page, layers * attn_page, block_size, block_size)
    state = max((k.get("state_bytes", 0) for k in kinds if k["kind"] == "mamba"), default=0) // tp
    vllm_bs = block_size if not state else max(_KERNEL_BLOCK, _KERNEL_BLOCK * math.ceil(state / (_KERNEL_BLOCK * per_token)))
    page = max(attn_page, state)
    counts = [k["layers"] for k in kinds]
    group_size = max(counts) if max(counts) < 1.5 * min(counts) else min(counts)
    groups = tuple(Group(k["kind"], copies=math.ceil(k["layers"] / group_size), window=k.get("window"),
                         chunk=k.get("chunk")) for k in kinds)
    return Layout(spec.name, groups, group_size, page, group_size * page, block_size, vllm_bs)


SWA_FULL_TOKENS_RATIO = 0.8  # SGLang 0.5.23's --swa-full-tokens-ratio default


def sglang_layout(model, block_size: int, kv_dtype: str = "bf16", *, tp: int = 1) -> Layout:
    """SGLang's pools for `model` (policy radix, hybrid semantics): a full-attention pool of pages
    holding every full layer, and a sliding-window pool of 0.8 as many pages holding every
    sliding layer (``--swa-full-tokens-ratio``, mem_cache/pool_configurator.py). A page of the full
    pool therefore costs its full layers plus 0.8 x its sliding layers. SGLang sizes a Mamba
    state pool from memory apart (``--max-mamba-cache-size``): it is not in these bytes."""
    spec = get_model(model)
    page = int(_layer_bytes_per_token(spec, kv_dtype, tp) * block_size)
    local = ("sliding_window", "chunked_local")  # SGLang runs chunked-local attention as a window of the chunk
    full = spec.full_attention_layers
    sliding = sum(k["layers"] for k in spec.kv_groups or () if k["kind"] in local)
    groups = tuple(Group("sliding_window", window=k.get("window") or k.get("chunk")) if k["kind"] in local
                   else Group(k["kind"]) for k in spec.kv_groups or ({"kind": "full"},))
    per_page = int(full * page + SWA_FULL_TOKENS_RATIO * sliding * page)
    note = (f"SGLang pools: {full} full layers per page" + (f", plus 0.8 x {sliding} sliding layers" if sliding else "")
            + (" (its Mamba state pool is sized apart, not in these bytes)" if spec.mamba_layers else "")
            + f", {per_page:,} bytes per full-pool page of {block_size} tokens")
    return Layout(spec.name, groups, full, page, per_page, block_size, block_size, note, engine="sglang")


def _layer_bytes_per_token(spec, kv_dtype: str, tp: int):
    """KV bytes one attention layer keeps per token per TP rank (MLA: one latent, not split)."""
    if spec.attention == "mla":
        return (spec.kv_lora_rank + spec.qk_rope_head_dim) * kv_dtype_bytes(kv_dtype)
    return 2 * spec.num_kv_heads * spec.head_dim * kv_dtype_bytes(kv_dtype) / tp


def resolve_semantics(model, semantics: str | None) -> str:
    """"hybrid" for a hybrid model (vLLM's default manager), else "full"; an explicit choice is
    kept. Llama 4's chunked-local layers run as full attention in vLLM 0.33.0 unless
    VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1, so "auto" is "full" for it."""
    semantics = semantics or "auto"
    if semantics not in SEMANTICS:
        raise ConfigError(f"--kv-semantics must be one of {', '.join(SEMANTICS)}, got {semantics!r}")
    if semantics != "auto":
        return semantics
    if model is None:
        return "full"
    spec = get_model(model)
    if not spec.is_hybrid or any(g["kind"] == "chunked_local" for g in spec.kv_groups):
        return "full"
    return "hybrid"
