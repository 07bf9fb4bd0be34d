"""Which KV semantics a simulation of a hybrid model runs, and what its pool holds under them
(docs/engines.md, "Hybrid layer groups").

A hybrid model (sliding-window, chunked-local or Mamba layers beside full attention) is served
with its engine's hybrid cache when ``kv_semantics`` is "hybrid", or "auto" where vLLM uses it by
default (catalog/kv_groups.py resolve_semantics: not Llama 4's chunked-local layers) and the
simulator models it: output KV, no tiers, no prefill/decode disaggregation, and
- the vLLM style with policy vllm: vLLM 0.33.0's hybrid KV cache manager (serving/kernel/hybrid.c;
  Mamba groups in vLLM's align mode). A block id holds one group's layers (catalog/kv_groups.py
  layout), so the same KV bytes hold more block ids than under full semantics, where a block holds
  every layer: a size or the GPU memory left after the weights is divided by the layout's bytes
  per block id; a pool given in blocks is taken as block ids as it is;
- the SGLang style with policy radix: SGLang 0.5.23's UnifiedRadixCache (serving/kernel/
  sglang_hybrid.c): a full-attention pool of pages and a sliding-window pool of 0.8 as many
  (catalog/kv_groups.py sglang_layout: a size or the memory after the weights is divided by a
  full-pool page's bytes, its sliding share included; a pool given in blocks is its full pages),
  and Mamba state slots sized apart.
Otherwise every layer is served as full attention, and the report says why.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigError


@dataclass(frozen=True)
class Semantics:
    """What one simulation serves a model's layers as."""

    hybrid: bool
    groups: tuple = ()  # of policies.hybrid.Group (hybrid)
    capacity: int = 0  # the pool's block ids (hybrid; SGLang's: its full-attention pages)
    note: dict | None = None  # the report's kv_semantics (None: a model with one kind of layer)
    engine: str = "vllm"  # whose hybrid cache: "vllm" or "sglang"


def unmodelled(policy: str, engine_style: str, tiers, disagg: bool, output_kv: bool) -> list[str]:
    """What this simulation has that the simulator's hybrid manager does not model."""
    own = "radix" if engine_style == "sglang" else "vllm"  # each style's engine cache
    checks = ((policy == own, f"a policy other than {own} ({policy}) under the {engine_style} style"),
              (not tiers, "tiers below HBM (--tiers, --global-store)"),
              (not disagg, "prefill/decode disaggregation (--prefill-instances)"),
              (output_kv, "prompt-only KV (output_kv=False, --no-output-kv)"))
    return [why for ok, why in checks if not ok]


def choose(sizes, kv_semantics: str, *, policy: str, engine_style: str, disagg: bool, output_kv: bool, kv_layers,
           capacity) -> Semantics:
    """The semantics of one simulation of the Deployment `sizes` (its model, tiers, TP, and its
    pool as full semantics size it; `capacity`: the pool as asked)."""
    model, tiers, tp = sizes.model_spec, sizes.tiers, sizes.tp
    from ..catalog.kv_groups import SEMANTICS, resolve_semantics
    from ..analysis.models import get_model

    if kv_semantics not in SEMANTICS:
        raise ConfigError(f"kv_semantics (--kv-semantics) must be one of {', '.join(SEMANTICS)}, got {kv_semantics!r}")
    if model is None:
        if kv_semantics == "hybrid":
            raise ConfigError("kv_semantics='hybrid' needs a model (--model): its layer groups")
        return Semantics(False)
    spec = get_model(model)
    if not spec.is_hybrid:
        if kv_semantics == "hybrid":
            raise ConfigError(f"kv_semantics='hybrid': {spec.name} has one kind of layer; its semantics are full")
        return Semantics(False)
    if kv_layers is not None:
        if kv_semantics == "hybrid":
            raise ConfigError("kv_layers (--kv-layers) counts bytes per token for full semantics; with hybrid "
                              "semantics a block id costs what vLLM's layout gives: drop one of them")
        return Semantics(False, note=full_note(spec, "kv_layers (--kv-layers) counts bytes for full semantics"))
    semantics = resolve_semantics(spec, kv_semantics)
    if semantics == "full":
        why = "as asked (kv_semantics='full')" if kv_semantics == "full" else None
        return Semantics(False, note=full_note(spec, why))
    missing = unmodelled(policy, engine_style, tiers, disagg, output_kv)
    if missing:
        if kv_semantics == "hybrid":
            raise ConfigError("kv_semantics='hybrid': the simulator's hybrid manager does not model "
                              + "; ".join(missing) + " (kv_semantics='full' serves every layer as full attention)")
        return Semantics(False, note=full_note(spec, "the simulator's hybrid manager does not model "
                                                     + "; ".join(missing)))
    if engine_style == "sglang":
        return _sglang(spec, capacity, sizes, tp)
    return _hybrid(spec, capacity, sizes, tp)


def _pool(spec, capacity, sizes, tp: int, lay, unit: str, given: str) -> tuple[int, int, str]:
    """A hybrid pool's (count, bytes each, how it was sized) under layout function `lay`: the GPU
    memory left after the weights divided by a per-rank `unit`'s bytes, a size divided by the whole
    layout's, or the count as `given`."""
    from ..analysis.models import blocks_for_block_bytes, is_size, parse_size

    bs, dtype = sizes.block_size, sizes.kv_dtype
    if capacity is None:
        per_rank = lay(spec, bs, dtype, tp=tp)
        count = int(sizes.capacity_source["kv_bytes_available"] // per_rank.bytes_per_block)
        if count < 1:
            raise ConfigError(f"{spec.name} on {sizes.gpu} x tp={tp}: the memory left after the weights holds no "
                              f"{unit} ({per_rank.bytes_per_block:,} bytes)")
        return count, per_rank.bytes_per_block, "the GPU memory left after the weights, per GPU"
    whole = lay(spec, bs, dtype)
    if is_size(capacity):
        return (blocks_for_block_bytes(parse_size(capacity), whole.bytes_per_block, bs), whole.bytes_per_block,
                f"{str(capacity).strip()} of KV")
    return int(sizes.capacity), whole.bytes_per_block, given


def _sglang(spec, capacity, sizes, tp: int) -> Semantics:
    """SGLang's UnifiedRadixCache: its full-attention pool in pages (capacity), its SWA pool 0.8 of it."""
    from ..catalog.kv_groups import SWA_FULL_TOKENS_RATIO, sglang_layout

    bs = sizes.block_size
    whole = sglang_layout(spec, bs, sizes.kv_dtype)
    pages, cost, how = _pool(spec, capacity, sizes, tp, sglang_layout, "page of SGLang's pools",
                             "full-attention pages as given")
    kinds = {g.kind for g in whole.groups}
    swa = int(pages * bs * SWA_FULL_TOKENS_RATIO) // bs if "sliding_window" in kinds else 0
    text = (f"{spec.name}'s layer groups under SGLang 0.5.23's UnifiedRadixCache: a hit must be served by every "
            f"component (full KV; " + ("a sliding window's last W tokens live; " if swa else "")
            + ("a Mamba state at the hit's end; " if "mamba" in kinds else "")
            + f"each evicts on its own LRU); a full-attention pool of {pages:,} pages ({how}, {cost:,} bytes a page"
            + (f", its 0.8 x sliding-window pool of {swa:,} pages included" if swa else "") + ")"
            + ("; Mamba state slots are sized apart by SGLang (--max-mamba-cache-size): here they never run short"
               if "mamba" in kinds else ""))
    note = {"semantics": "hybrid", "engine": "sglang", "groups": [vars(g) for g in whole.groups],
            "full_pages": pages, "swa_pages": swa, "bytes_per_page": int(cost),
            "full_semantics_blocks": None if how.endswith("as given") else int(sizes.capacity),
            "source": "SGLang 0.5.23 UnifiedRadixCache (serving/kernel/sglang_hybrid.c, policies/radix_hybrid.c)",
            "text": text}
    return Semantics(True, tuple(whole.groups), pages, note, engine="sglang")


def _hybrid(spec, capacity, sizes, tp: int) -> Semantics:
    from ..catalog.kv_groups import layout

    bs = sizes.block_size
    whole = layout(spec, bs, sizes.kv_dtype)
    ids, cost, how = _pool(spec, capacity, sizes, tp, layout, "block id of its hybrid layout", "block ids as given")
    text = (f"{spec.name}'s layer groups under vLLM 0.33.0's hybrid KV cache manager ({whole.groups_text()}): a hit "
            f"must be served by every group, {_freed(g.kind for g in whole.groups)}; the pool is {ids:,} block ids ({how}, "
            f"{cost:,} bytes per block id)")
    given = how == "block ids as given"
    if not given:
        text += f", where full-attention semantics hold {sizes.capacity:,} blocks in the same bytes"
    if whole.vllm_block_size != bs:  # (a Mamba hybrid: vLLM raises the block until a page holds a state)
        text += (f"; vLLM 0.33.0 would use {whole.vllm_block_size}-token blocks for {spec.name} (an attention page "
                 f"must hold a Mamba state): this trace's ids are {bs}-token blocks, so hits, states and the pool are "
                 f"counted at {bs} (kvreplay hash --block-size {whole.vllm_block_size} re-hashes a token log)")
    note = {"semantics": "hybrid", "engine": "vllm", "groups": [vars(g) for g in whole.groups],
            "block_ids": ids, "bytes_per_block_id": int(cost), "vllm_block_size": int(whole.vllm_block_size),
            "full_semantics_blocks": None if given else int(sizes.capacity),
            "retention": 0, "source": "vLLM 0.33.0 HybridKVCacheCoordinator (serving/kernel/hybrid.c)", "text": text}
    return Semantics(True, tuple(whole.groups), ids, note)


def _freed(kinds) -> str:
    """What the hybrid manager frees and keeps, for a layout's kinds of group."""
    kinds = set(kinds)
    parts = []
    if kinds & {"sliding_window", "chunked_local"}:
        parts.append("the blocks that leave a window or a local-attention chunk are freed")
    if "mamba" in kinds:
        parts.append("a Mamba group hits only where its state was saved (MambaManager's align mode: at the "
                     "prompt's last block boundary and a shared-prefix junction; prefill chunks end at block "
                     "boundaries) and holds one state block per step")
    return " and ".join(parts) or "each group evicts on its own"


def full_note(spec, why: str | None) -> dict:
    """The report's kv_semantics for a hybrid model served with every layer as full attention."""
    kinds = sorted({g["kind"] for g in spec.kv_groups})
    out = {"semantics": "full", "model_groups": kinds}
    ratio = None if "mamba" in kinds else _ratio(spec)  # (a Mamba layout depends on the block size)
    if ratio is not None:
        out["hybrid_block_ids_ratio"] = ratio
    if why is None and "chunked_local" in kinds:  # Llama 4: vLLM's own default
        out["text"] = (f"{spec.name} has {', '.join(kinds)} layer groups; vLLM 0.33.0 serves its chunked-local "
                       "layers as full attention, as this run does, unless "
                       "VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1 (then the same KV bytes hold "
                       f"{ratio:.1f}x the block ids: kv_semantics='hybrid')")
        return out
    out["text"] = (f"{spec.name} has {', '.join(kinds)} layer groups, but every layer is served as full attention "
                   f"here{': ' + why if why else ''}"
                   + (f"; in the same KV bytes vLLM's hybrid manager holds {ratio:.1f}x the block ids and frees the "
                      "blocks that leave a window" if ratio else ""))
    return out


def one_semantics(model, options: dict, tiers, policies) -> tuple[dict, dict | None]:
    """A grid's runs (plan's configurations, a simulate sweep): `options` with one KV semantics for
    all of them, so that a hybrid model's configurations compare under the same semantics (auto:
    hybrid when every one can run it, else full for all), and the grid's kv_semantics note."""
    asked = options.get("kv_semantics", "auto")
    engine = options.get("engine_style", "vllm")
    policies = [p.split(":")[0].strip().lower() if isinstance(p, str) else p for p in policies]
    own = "radix" if engine == "sglang" else "vllm"  # each style's hybrid cache (None: the style's default)
    hybrid_ok = not any(tiers) and all(p in (None, own) for p in policies)
    if asked == "auto" and not hybrid_ok:
        options = {**options, "kv_semantics": "full"}
        return options, plan_note(model, "full", f"the configurations include tiers or another policy than {own} "
                                                 f"under the {engine} style, which the simulator's hybrid caches do "
                                                 "not model, and all of them are served the same way so that they "
                                                 "compare under one semantics", engine)
    return options, plan_note(model, asked, None, engine)


def plan_note(model, asked: str, why: str | None, engine: str = "vllm") -> dict | None:
    """A plan's kv_semantics: what its runs of a hybrid `model` serve under `asked` ("full" when
    `why` says why all of them do); each run's report has its own."""
    from ..catalog.kv_groups import resolve_semantics
    from ..analysis.models import get_model

    if model is None or not get_model(model).is_hybrid:
        return None
    spec = get_model(model)
    kinds = sorted({g["kind"] for g in spec.kv_groups})
    semantics = resolve_semantics(spec, asked)
    if semantics == "full":
        return full_note(spec, why or ("as asked (kv_semantics='full')" if asked == "full" else None))
    freed = _freed(kinds)
    return {"semantics": "hybrid", "model_groups": kinds,
            "text": (f"{spec.name}'s layer groups: every configuration runs SGLang 0.5.23's UnifiedRadixCache (a full-"
                     "attention pool, a sliding-window pool of 0.8 as many pages, Mamba states; each evicts on its "
                     "own LRU)") if engine == "sglang" else
                    (f"{spec.name}'s layer groups: every configuration runs vLLM 0.33.0's hybrid KV cache manager (a "
                     f"block id holds one group's layers; {freed})")}


def _ratio(spec) -> float:
    from ..catalog.kv_groups import layout
    from ..analysis.models import kv_bytes_per_token

    return round(kv_bytes_per_token(spec) * 16 / layout(spec, 16).bytes_per_block, 3)
