"""KV bytes per token of open models, and cache budgets in bytes turned into block counts.

The catalog (``kvreplay/data/models.json``, package data) holds each model's KV-cache shape as
its Hugging Face ``config.json`` states it; ``source`` is that file's address. It is read once,
on first use.

Bytes per token (``kv_bytes_per_token``):

- MHA / GQA: ``2 (K and V) x layers x kv_heads x head_dim x bytes_per_element``.
- MLA (DeepSeek-V3/R1, Kimi K2): ``layers x (kv_lora_rank + qk_rope_head_dim) x bytes``: one
  compressed latent plus the decoupled RoPE key per token and layer, shared by every head; there is
  no separate V. The catalog lists it as 1 KV head of that width, as vLLM's MLA cache spec does.

Sliding-window layers (Gemma 2/3, gpt-oss). A sliding layer only ever attends to its last W
tokens, so an engine with a hybrid allocator (vLLM v1's ``HybridKVCacheCoordinator``) frees its
blocks once they leave the window; for prefixes much longer than W what a prefix cache keeps per
token is then the full-attention layers only. An engine without one allocates every layer for
every token. ``layers="all"`` (the default) counts every layer: the conservative figure, and
exactly right for an engine without a hybrid allocator. ``layers="full"`` counts only the
full-attention layers: the long-prefix figure of a hybrid allocator (it ignores the last W tokens
a sliding layer still holds, at most ``W x sliding bytes`` per request).

Budgets: ``blocks_for_budget(budget_bytes, bytes_per_token, block_size)`` is
``floor(budget / (bytes_per_token x block_size))``: only whole blocks fit.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

from ..errors import ConfigError

ATTENTION_KINDS = ("mha", "gqa", "mla")
KV_LAYER_MODES = ("all", "full")

#: Bytes per stored KV element. fp4 is half a byte; its block scale factors are not counted.
KV_DTYPES: dict[str, Fraction] = {
    "fp32": Fraction(4), "bf16": Fraction(2), "fp16": Fraction(2),
    "fp8": Fraction(1), "fp8_e4m3": Fraction(1), "fp8_e5m2": Fraction(1), "int8": Fraction(1),
    "fp4": Fraction(1, 2),
}


@dataclass(frozen=True)
class ModelSpec:
    """One catalog entry. Counts are ints; ``sliding_window`` is None for models without one.

    ``total_params`` / ``active_params``: parameters stored / used per token (equal for dense
    models; an MoE model activates only its routed experts). ``params_source`` says where they come from.
    """

    name: str
    hf_id: str
    attention: str
    num_layers: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    total_params: int
    active_params: int
    source: str
    params_source: str
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    sliding_window: int | None = None
    sliding_window_layers: int = 0
    sliding_window_pattern: str | None = None
    aliases: tuple[str, ...] = ()
    notes: str | None = None
    #: from the same config.json: the residual width, the dense MLP's width (None for MoE), the
    #: vocabulary, and whether the LM head shares the embedding's weights
    hidden_size: int | None = None
    intermediate_size: int | None = None
    vocab_size: int | None = None
    tie_word_embeddings: bool = False
    #: the context length vLLM derives from config.json (see the catalog's _comment); prompts
    #: plus outputs beyond it are refused
    max_model_len: int | None = None
    #: the KV cache groups, layer 0's kind first ({"kind", "layers", "window" | "chunk" |
    #: "state_bytes"}; analysis/kv_groups.py); None: one full-attention group of every layer
    kv_groups: tuple | None = None
    kv_groups_source: str | None = None
    #: how the released checkpoint stores its weights when not bf16 ("fp8-block": fp8 with a scale
    #: per 128 x 128 block; "mxfp4"), and what its config.json says; None: bf16
    checkpoint_weights: str | None = None
    checkpoint_weights_source: str | None = None
    #: an MoE's routed experts, from config.json: {"experts", "experts_per_token",
    #: "expert_intermediate" (each expert's gated MLP width), "layers" (the MoE layers)}; shared
    #: experts and dense layers are not routed and stay in the body; None: not given (a dense model,
    #: or an MoE the roofline times as one GEMM of its active parameters)
    moe: dict | None = None
    moe_source: str | None = None
    #: Gated DeltaNet layers' shape, from config.json (linear_num_key_heads, linear_num_value_heads,
    #: linear_key_head_dim, linear_value_head_dim, linear_conv_kernel_dim): {"kind": "gated_deltanet",
    #: "k_heads", "v_heads", "head_k_dim", "head_v_dim", "conv_kernel"}; None: none, or not given
    linear_attention: dict | None = None
    #: an MLA model's projections, from config.json: {"q_lora_rank", "qk_nope_head_dim",
    #: "v_head_dim"} (with kv_lora_rank and qk_rope_head_dim above); None: not MLA, or not given
    mla: dict | None = None
    mla_source: str | None = None

    @property
    def checkpoint_weights_dtype(self) -> str:
        """The --weights-dtype nearest the checkpoint's weights (mxfp4: int4, half a byte a weight)."""
        return {"fp8-block": "fp8", "mxfp4": "int4"}.get(self.checkpoint_weights or "bf16", "bf16")

    def checkpoint_note(self) -> str | None:
        """A sentence on the checkpoint's weights, or None for a bf16 checkpoint."""
        if not self.checkpoint_weights:
            return None
        return (f"{self.name}'s checkpoint stores its weights as {self.checkpoint_weights} ({self.hf_id} "
                f"{self.checkpoint_weights_source}); the nearest --weights-dtype is {self.checkpoint_weights_dtype}")

    @property
    def lm_head_params(self) -> int:
        """Parameters of the output projection (vocab x hidden; 0 when the catalog lacks them)."""
        return (self.vocab_size or 0) * (self.hidden_size or 0)

    @property
    def body_params(self) -> int:
        """Active parameters a token multiplies through in the layers: active_params less the
        embedding table (a lookup) and the LM head (charged apart, on logits rows only)."""
        embedding = self.lm_head_params
        return self.active_params - embedding - (0 if self.tie_word_embeddings else embedding)

    @property
    def routed_expert_params(self) -> int:
        """Parameters of one token's routed experts over the MoE layers (gate, up and down of
        experts_per_token experts per layer; 0 without ``moe``)."""
        m = self.moe
        return 3 * m["layers"] * m["experts_per_token"] * (self.hidden_size or 0) * m["expert_intermediate"] if m else 0

    @property
    def stored_expert_params(self) -> int:
        """Parameters of every routed expert over the MoE layers (0 without ``moe``)."""
        m = self.moe
        return 3 * m["layers"] * m["experts"] * (self.hidden_size or 0) * m["expert_intermediate"] if m else 0

    def mla_gemm_shapes(self, tp: int = 1) -> tuple[tuple[int, int], ...]:
        """The (n, k) of an MLA layer's four projection GEMMs on one GPU of a TP group, as vLLM runs
        them: q_a and kv_a fused and replicated on every GPU (q_lora_rank + kv_lora_rank + rope, hidden),
        q_b (heads / tp x (nope + rope), q_lora_rank), kv_b (heads / tp x (nope + v), kv_lora_rank)
        and o (hidden, heads / tp x v). () without ``mla``."""
        m = self.mla
        if not m or not self.hidden_size:
            return ()
        h = self.num_attention_heads // tp
        return ((m["q_lora_rank"] + self.kv_lora_rank + self.qk_rope_head_dim, self.hidden_size),
                (h * (m["qk_nope_head_dim"] + self.qk_rope_head_dim), m["q_lora_rank"]),
                (h * (m["qk_nope_head_dim"] + m["v_head_dim"]), self.kv_lora_rank),
                (self.hidden_size, h * m["v_head_dim"]))

    @property
    def mla_projection_params(self) -> int:
        """Parameters of the MLA projections over the layers (0 without ``mla``)."""
        return self.num_layers * sum(n * k for n, k in self.mla_gemm_shapes(1))

    @property
    def full_attention_layers(self) -> int:
        if self.kv_groups:
            return sum(g["layers"] for g in self.kv_groups if g["kind"] == "full")
        return self.num_layers - self.sliding_window_layers

    @property
    def kv_layers(self) -> int:
        """Layers that keep KV per token: every layer but Mamba / linear-attention ones (whose
        state is fixed per request) and, in Nemotron-H, MLP-only ones."""
        if self.kv_groups:
            return sum(g["layers"] for g in self.kv_groups if g["kind"] != "mamba")
        return self.num_layers

    @property
    def is_hybrid(self) -> bool:
        """More than one kind of KV cache group (sliding window, chunked local, Mamba)."""
        return bool(self.kv_groups) and len({g["kind"] for g in self.kv_groups}) > 1

    @property
    def mamba_layers(self) -> int:
        return sum(g["layers"] for g in self.kv_groups or () if g["kind"] == "mamba")

    def names(self) -> tuple[str, ...]:
        """Every name this model answers to (case-insensitive): short name, HF id, its short part, aliases."""
        return (self.name, self.hf_id, self.hf_id.split("/")[-1], *self.aliases)


@lru_cache(maxsize=1)
def catalog() -> tuple[ModelSpec, ...]:
    """Every model of the catalog, in file order (read from package data on first call)."""
    from importlib.resources import files

    raw = json.loads(files("kvreplay.data").joinpath("models.json").read_text(encoding="utf-8"))
    models = []
    for entry in raw["models"]:
        entry = dict(entry)
        entry["aliases"] = tuple(entry.get("aliases") or ())
        if entry.get("kv_groups"):
            entry["kv_groups"] = tuple(entry["kv_groups"])
        models.append(ModelSpec(**entry))
    return tuple(models)


@lru_cache(maxsize=1)
def _by_name() -> dict[str, ModelSpec]:
    index: dict[str, ModelSpec] = {}
    for model in catalog():
        for name in model.names():
            index.setdefault(name.lower(), model)
    return index


def get_model(name) -> ModelSpec:
    """The catalog entry for `name`: its short name, Hugging Face id or an alias, case-insensitive.

    A ModelSpec is returned as is. Unknown names raise ConfigError with the closest known names.
    """
    if isinstance(name, ModelSpec):
        return name
    key = str(name).strip().lower()
    index = _by_name()
    if key in index:
        return index[key]
    close = difflib.get_close_matches(key, list(index), n=8, cutoff=0.5)
    suggestions = list(dict.fromkeys(index[c].name for c in close))[:3]
    hint = f"; did you mean {', '.join(suggestions)}?" if suggestions else ""
    raise ConfigError(f"unknown model {name!r}{hint} (see `kvreplay models`)")


def kv_dtype_bytes(kv_dtype: str) -> Fraction:
    """Bytes per KV element of `kv_dtype` (case-insensitive; see KV_DTYPES)."""
    key = str(kv_dtype).strip().lower()
    if key not in KV_DTYPES:
        raise ConfigError(f"unknown KV dtype {kv_dtype!r} (known: {', '.join(KV_DTYPES)})")
    return KV_DTYPES[key]


def kv_elements_per_token(model, layers: str = "all") -> int:
    """KV values stored per token (before the dtype): see the module docstring for the formulas."""
    model = get_model(model)
    if layers not in KV_LAYER_MODES:
        raise ConfigError(f"layers must be one of {', '.join(KV_LAYER_MODES)}, got {layers!r}")
    counted = model.kv_layers if layers == "all" else model.full_attention_layers
    if counted < 1:
        raise ConfigError(f"{model.name} has no full-attention layers; use layers='all'")
    if model.attention == "mla":
        return counted * (model.kv_lora_rank + model.qk_rope_head_dim)
    return 2 * counted * model.num_kv_heads * model.head_dim


def kv_bytes_per_token(model, kv_dtype: str = "bf16", layers: str = "all") -> int:
    """KV-cache bytes one token takes in `model` stored as `kv_dtype`.

    layers: "all" counts every layer (default); "full" only full-attention layers (what a hybrid
    allocator keeps for long prefixes of sliding-window models). Equal for models without sliding layers.
    """
    total = kv_elements_per_token(model, layers) * kv_dtype_bytes(kv_dtype)
    if total.denominator != 1:
        raise ConfigError(f"{get_model(model).name} at {kv_dtype}: {total} bytes per token is not a whole number")
    return int(total)


from ..units import parse_size  # noqa: E402,F401 - sizes are parsed below the analysis layer (tiers)


def blocks_for_budget(budget_bytes: int, bytes_per_token: int, block_size: int) -> int:
    """Whole blocks of `block_size` tokens that fit in `budget_bytes`: floor(budget / (bytes_per_token * block_size))."""
    for label, value in (("budget", budget_bytes), ("bytes per token", bytes_per_token), ("block size", block_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{label} must be a positive whole number, got {value!r}")
    block_bytes = bytes_per_token * block_size
    blocks = budget_bytes // block_bytes
    if blocks == 0:
        raise ConfigError(f"a budget of {format_bytes(budget_bytes)} holds no block of {block_size} tokens "
                          f"({format_bytes(block_bytes)} each at {bytes_per_token:,} bytes per token)")
    return blocks


def format_bytes(n: int) -> str:
    """A byte count in binary units for people: 85899345920 -> "80 GiB", 1536 -> "1.5 KiB"."""
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            text = f"{n / scale:.2f}".rstrip("0").rstrip(".")
            return f"{text} {unit}"
    return f"{n} B"


def budget_document(bytes_per_token: int, block_size: int, capacities, *, requested=None, model=None,
                    kv_dtype: str | None = None, layers: str = "all", layout=None) -> dict:
    """The JSON ``"budget"`` object: how byte sizes map to the block counts that were replayed.

    capacities: the block counts replayed. requested: for each, the size asked for (text) or None
    when it was given in blocks. Each capacity lists its ``cache_bytes`` (blocks x block_size x
    bytes_per_token, at most the budget) and, when a size was asked for, ``budget_bytes``.
    """
    spec = get_model(model) if model is not None else None
    requested = list(requested) if requested is not None else [None] * len(capacities)
    rows = []
    per_block = int(bytes_per_token) * int(block_size) if layout is None else layout.bytes_per_block
    for blocks, asked in zip(capacities, requested):
        row = {"cache_capacity_blocks": int(blocks), "cache_bytes": int(blocks) * per_block}
        if asked is not None:
            row.update(requested=str(asked), budget_bytes=parse_size(asked))
        rows.append(row)
    return {
        "model": spec.name if spec else None,
        "hf_id": spec.hf_id if spec else None,
        "kv_dtype": kv_dtype if spec else None,
        "kv_layers": layers if spec else None,
        "bytes_per_token": int(bytes_per_token),
        "block_size": int(block_size),
        "bytes_per_block": per_block,
        "capacities": rows,
        # hybrid semantics only (a full-semantics budget keeps its fields)
        **({} if layout is None else {"kv_semantics": "hybrid", "kv_engine": layout.engine,
                                      "kv_layout": layout.text(), "vllm_block_size": layout.vllm_block_size}),
    }


def is_size(capacity) -> bool:
    """True for a capacity given as a size with a unit ("80GiB"), False for a block count."""
    return isinstance(capacity, str) and not capacity.strip().isdigit()


def resolve_capacities(capacities, block_size: int, *, model=None, kv_dtype: str | None = None,
                       layers: str | None = None, bytes_per_token: int | None = None, layout=None):
    """Block counts for `capacities` (ints, digit strings, or sizes like "80GiB"), and the budget.

    Sizes are converted with ``blocks_for_budget`` at `block_size` and the bytes per token of
    `model` (at `kv_dtype`, default bf16, and `layers`, default "all") or the given
    `bytes_per_token`. `layout` (analysis.kv_groups.Layout, hybrid semantics): a block id costs
    its ``bytes_per_block`` instead (vLLM's groups in one pool). Returns ``(blocks, budget)``:
    budget is the ``budget_document`` when a model or bytes_per_token was given, else None. A size
    with neither raises ConfigError.
    """
    if model is not None and bytes_per_token is not None:
        raise ConfigError("give a model or bytes_per_token, not both")
    if model is None and (kv_dtype is not None or layers is not None):
        raise ConfigError("kv_dtype and layers describe a model's KV cache: they need a model")
    capacities = list(capacities)
    if model is not None:
        if kv_dtype is not None and not isinstance(kv_dtype, str):
            raise ConfigError(f"kv_dtype (--kv-dtype) must be a dtype's name such as bf16 or fp8, got {kv_dtype!r}")
        kv_dtype = (kv_dtype or "bf16").strip().lower()
        layers = layers or "all"
        bytes_per_token = kv_bytes_per_token(model, kv_dtype, layers)
    elif bytes_per_token is None:
        sizes = [c for c in capacities if is_size(c)]
        if sizes:
            raise ConfigError(f"capacity {sizes[0]!r} is a size in bytes: turning it into blocks needs a model "
                              "or a number of KV bytes per token")
        return [int(c) for c in capacities], None
    blocks, requested = [], []
    for c in capacities:
        if is_size(c):
            blocks.append(blocks_for_budget(parse_size(c), int(bytes_per_token), int(block_size)) if layout is None
                          else blocks_for_block_bytes(parse_size(c), layout.bytes_per_block, block_size))
            requested.append(c.strip())
        else:
            blocks.append(int(c))
            requested.append(None)
    budget = budget_document(int(bytes_per_token), int(block_size), blocks, requested=requested, model=model,
                             kv_dtype=kv_dtype, layers=layers or "all", layout=layout)
    return blocks, budget


def blocks_for_block_bytes(budget_bytes: int, block_bytes: int, block_size: int) -> int:
    """Whole block ids of `block_bytes` each in `budget_bytes` (a hybrid layout's blocks)."""
    blocks = budget_bytes // block_bytes
    if blocks == 0:
        raise ConfigError(f"a budget of {format_bytes(budget_bytes)} holds no block id of {block_size} tokens "
                          f"({format_bytes(block_bytes)} each in the model's hybrid layout)")
    return blocks


def budget_text(budget: dict) -> str:
    """One line saying what a budget's bytes per token stand for."""
    if budget.get("kv_semantics") == "hybrid":
        return (f"KV {budget['model']}, {budget['kv_dtype']}, hybrid layout: {budget['kv_layout']} "
                f"({format_bytes(budget['bytes_per_block'])} per block)")
    what = (f"{budget['model']}, {budget['kv_dtype']}, "
            + ("every layer" if budget["kv_layers"] == "all" else "full-attention layers only")
            if budget["model"] else "as given")
    return (f"KV {budget['bytes_per_token']:,} B/token ({what}), "
            f"{format_bytes(budget['bytes_per_block'])} per {budget['block_size']}-token block")


def format_params(n: int) -> str:
    """A parameter count for people: 8030261248 -> "8.03B", 10**12 -> "1T"."""
    return f"{n / 1e12:.3g}T" if n >= 10**12 else f"{n / 1e9:.3g}B"


def describe(model) -> dict:
    """A catalog entry as a JSON-ready dict, plus ``kv_bytes_per_token`` at bf16 and fp8, counting
    every layer ("all") and only full-attention layers ("full")."""
    from dataclasses import asdict

    spec = get_model(model)
    out = asdict(spec)
    out["aliases"] = list(spec.aliases)
    out["full_attention_layers"] = spec.full_attention_layers
    out["kv_bytes_per_token"] = {
        layers: {dtype: kv_bytes_per_token(spec, dtype, layers) for dtype in ("bf16", "fp8")} for layers in KV_LAYER_MODES
    }
    return out
