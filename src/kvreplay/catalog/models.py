"""Models: their shapes read from Hugging Face ``config.json`` files, and the KV bytes a token takes.

``get_model(model)`` is the one lookup. ``model`` is a catalog name (a short name, a Hugging Face id
or an alias, case-insensitive; unknown names get "did you mean"), a path to a ``config.json``, or a
model directory holding one. Either way the same reader (``hf_config.py``) turns the config.json
into a ``ModelSpec``: the catalog is that reader over the config.json files bundled in
``catalog/configs/`` (each one's source, revision and license in ``configs/sources.json``); only
what a config.json cannot give lives beside them in ``configs/catalog.json`` (display name,
aliases, notes, the published parameter count and its source).

Bytes per token (``kv_bytes_per_token``):

- MHA / GQA: ``2 (K and V) x layers x kv_heads x head_dim x bytes_per_element``.
- MLA (DeepSeek-V3/R1, Kimi K2): ``layers x (kv_lora_rank + qk_rope_head_dim) x bytes``: one
  compressed latent plus the decoupled RoPE key per token and layer, shared by every head; there is
  no separate V. It is listed as 1 KV head of that width, as vLLM's MLA cache spec does.

Sliding-window layers (Gemma 2/3, gpt-oss). A sliding layer only ever attends to its last W
tokens, so an engine with a hybrid allocator (vLLM v1's ``HybridKVCacheCoordinator``) frees its
blocks once they leave the window; for prefixes much longer than W what a prefix cache keeps per
token is then the full-attention layers only. ``layers="all"`` (the default) counts every layer:
the conservative figure, and exactly right for an engine without a hybrid allocator.
``layers="full"`` counts only the full-attention layers: the long-prefix figure of a hybrid
allocator (it ignores the last W tokens a sliding layer still holds).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from fractions import Fraction
from functools import lru_cache
from importlib.resources import files

from ..errors import ConfigError
from .lookup import did_you_mean, index_by_name
from .config_view import ConfigView, ModelConfigError, config_file, read_json
from .hf_config import read_config
from .vision import vision_field

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
    #: "state_bytes"}; catalog/kv_groups.py); None: one full-attention group of every layer
    kv_groups: tuple | None = None
    kv_groups_source: str | None = None
    #: how the released checkpoint stores its weights when not bf16 ("fp8-block": fp8 with a scale
    #: per 128 x 128 block; "fp8": one scale per tensor; "mxfp4"), and what its config.json says; None: bf16
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
    #: a multimodal model's vision tower (catalog/vision.py: shapes, parameters, the encoder tokens
    #: an image costs and the text tokens it yields), from config.json's vision_config, or from
    #: configs/catalog.json where the bundled copy lacks it; None: a text-only model
    vision: dict | None = None
    vision_source: str | None = None
    #: whether total_params counts the vision tower (a published count may; one computed from
    #: text_config does not)
    vision_in_total_params: bool = False
    #: what the published quantized checkpoints of this model leave in bf16 ("attention": the
    #: attention projections and the router), with its source; () for none
    quantized_keeps_bf16: tuple = ()
    quantized_keeps_bf16_source: str | None = None
    #: whether vLLM RMS-norms q and k over every head of the layer, not per head (MiniMax-M2:
    #: ``MiniMaxText01RMSNormTP``), so that under TP each layer all-reduces every token's q and k
    #: variances (two fp32 a token) before its attention
    qk_norm_all_reduce: bool = False
    #: whether active_params leaves out the input embedding (a published count that does: gpt-oss's
    #: model card, configs/catalog.json "active_excludes_embedding"), so that body_params does not
    #: take it out twice
    active_excludes_embedding: bool = False

    @property
    def checkpoint_weights_dtype(self) -> str:
        """The --weights-dtype nearest the checkpoint's weights (mxfp4: int4, half a byte a weight)."""
        return {"fp8-block": "fp8", "fp8": "fp8", "mxfp4": "int4"}.get(self.checkpoint_weights or "bf16", "bf16")

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
        embedding table (a lookup; unless active_params already leaves it out) and the LM head
        (charged apart, on logits rows only)."""
        embedding = self.lm_head_params
        lookup = 0 if self.active_excludes_embedding else embedding
        return self.active_params - lookup - (0 if self.tie_word_embeddings else embedding)

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



#: ModelSpec fields a catalog entry may word itself (configs/catalog.json "prose"): how its numbers
#: were found, never the numbers
PROSE_FIELDS = ("sliding_window_pattern", "kv_groups_source", "moe_source", "mla_source",
                "checkpoint_weights_source", "params_source", "vision_source", "quantized_keeps_bf16_source")


@lru_cache(maxsize=1)
def catalog() -> tuple[ModelSpec, ...]:
    """Every catalog model, in configs/catalog.json's order (read from package data on first call)."""
    configs = files("kvreplay.catalog") / "configs"
    entries = json.loads((configs / "catalog.json").read_text(encoding="utf-8"))["models"]
    sources = json.loads((configs / "sources.json").read_text(encoding="utf-8"))["files"]
    return tuple(_catalog_spec(entry, sources.get(entry["config"]), configs / (entry["config"] or "-"))
                 for entry in entries)


def _catalog_spec(entry: dict, source: dict | None, config) -> ModelSpec:
    if entry["config"] is None:
        return _unread_spec(entry)
    reading = read_config(json.loads(config.read_text(encoding="utf-8")), f"kvreplay/catalog/configs/{entry['config']}")
    fields = dict(reading.fields)
    published = entry["published_params"]
    counted = {"total_params": reading.total_params, "active_params": reading.active_params,
               "params_source": reading.params_source}
    if entry.get("params") == "published":
        counted = {"total_params": published["total"], "active_params": published["active"],
                   "params_source": published["source"],
                   "active_excludes_embedding": bool(published.get("active_excludes_embedding", False))}
    fields.update(counted, name=entry["name"], hf_id=entry["hf_id"], aliases=tuple(entry.get("aliases", ())),
                  source=entry.get("source", source["url"]))
    if "notes" in entry:
        fields["notes"] = entry["notes"]
    for key, text in entry.get("prose", {}).items():
        if key not in PROSE_FIELDS:
            raise ValueError(f"configs/catalog.json: {entry['name']}: prose may word {PROSE_FIELDS}, not {key}")
        fields[key] = text
    fields.update(_vision_entry(entry, fields))
    return ModelSpec(**fields)


def _vision_entry(entry: dict, fields: dict) -> dict:
    """The vision tower and quantized-checkpoint layout configs/catalog.json adds to an entry
    ("vision_config": the model's own vision_config, transcribed where the bundled copy dropped it)."""
    out = {}
    if "vision_config" in entry:
        raw = {"vision_config": entry["vision_config"], **entry.get("vision_top", {})}
        top = ConfigView(raw, f"configs/catalog.json {entry['name']}")
        out["vision"] = vision_field(top.section("vision_config"), top, fields["hidden_size"])
        out["vision_in_total_params"] = bool(entry.get("vision_in_published_params", False)
                                             and entry.get("params") == "published")
    if "quantized_keeps_bf16" in entry:
        out["quantized_keeps_bf16"] = tuple(entry["quantized_keeps_bf16"])
    return out


def _unread_spec(entry: dict) -> ModelSpec:
    """A catalog model no config.json copy of which could be had: its former hand-checked fields
    (configs/catalog.json "fields", with their sources in its notes), until a copy is bundled."""
    published = entry["published_params"]
    fields = {k: tuple(v) if k == "kv_groups" and v else v for k, v in entry["fields"].items()}
    prose = {k: v for k, v in entry.get("prose", {}).items() if k in PROSE_FIELDS}
    return ModelSpec(name=entry["name"], hf_id=entry["hf_id"], aliases=tuple(entry.get("aliases", ())),
                     source=entry["source"], notes=entry.get("notes"), total_params=published["total"],
                     active_params=published["active"], params_source=published["source"],
                     **{**fields, **prose, **_vision_entry({**entry, "params": "published"}, fields)})


def catalog_entry(name: str) -> dict:
    """A catalog model's configs/catalog.json entry and its configs/sources.json record (tests, docs)."""
    configs = files("kvreplay.catalog") / "configs"
    sources = json.loads((configs / "sources.json").read_text(encoding="utf-8"))["files"]
    for entry in json.loads((configs / "catalog.json").read_text(encoding="utf-8"))["models"]:
        if entry["name"] == get_model(name).name:
            return {**entry, "file": sources.get(entry["config"])}
    raise ConfigError(f"{name!r} is not a catalog model")


def catalog_config(name: str) -> dict:
    """The bundled config.json of catalog model `name`, as a dict."""
    configs = files("kvreplay.catalog") / "configs"
    entry = catalog_entry(name)
    if entry["config"] is None:
        raise ConfigError(f"{entry['name']} has no bundled config.json (configs/catalog.json says why)")
    return json.loads((configs / entry["config"]).read_text(encoding="utf-8"))


@lru_cache(maxsize=1)
def _by_name() -> dict[str, ModelSpec]:
    return index_by_name(catalog())


def _spelled_as_path(text: str) -> bool:
    """Spelled like a file, never like a catalog name: ends in .json, or starts with / . or ~."""
    return text.endswith(".json") or text.startswith(("/", ".", "~"))


def get_model(name) -> ModelSpec:
    """The ModelSpec of `name`: a catalog name (short name, Hugging Face id or alias, case-insensitive),
    a path to a config.json, or a model directory holding one. A ModelSpec is returned as is. A name
    ending in .json or starting with / . ~ is always a path; any other is a catalog name first.

    An unknown name raises ConfigError with the closest catalog names; a config.json that cannot be
    read raises ModelConfigError (a ConfigError) naming the file and the key.
    """
    if isinstance(name, ModelSpec):
        return name
    if not isinstance(name, (str, os.PathLike)):
        raise ConfigError(f"model must be a catalog name or a path to a config.json, got {type(name).__name__}")
    text = os.fspath(name).strip()
    if isinstance(name, os.PathLike) or _spelled_as_path(text):
        return model_from_config(text)
    index = _by_name()
    if text.lower() in index:
        return index[text.lower()]
    if text and os.path.exists(os.path.expanduser(text)):
        return model_from_config(text)  # a model directory (or file) named without a ./
    hint = did_you_mean(text.lower(), index, n=8, cutoff=0.5)
    raise ConfigError(f"unknown model {text!r}{hint} (see `kvreplay models`, or give a path to a config.json)")


def model_from_config(path) -> ModelSpec:
    """The ModelSpec a config.json (or a model directory holding one) gives; read once per file state."""
    text = os.fspath(path)
    where = config_file(text)
    stat = where.stat()
    return _read_model(text, str(where.resolve()), stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=64)
def _read_model(name: str, where: str, mtime_ns: int, size: int) -> ModelSpec:
    shown = name if name.endswith(".json") else os.path.join(name, "config.json")
    raw = read_json(where, shown)
    try:
        reading = read_config(raw, shown)
    except RecursionError:
        raise ModelConfigError(shown, None, "nested too deeply") from None
    given = raw.get("_name_or_path")
    hf_id = given if isinstance(given, str) and 0 < len(given) < 200 and given.count("/") == 1 else name
    return ModelSpec(name=name, hf_id=hf_id, aliases=(), source=where, total_params=reading.total_params,
                     active_params=reading.active_params, params_source=reading.params_source, **reading.fields)


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


def format_params(n: int) -> str:
    """A parameter count for people: 8030261248 -> "8.03B", 10**12 -> "1T"."""
    return f"{n / 1e12:.3g}T" if n >= 10**12 else f"{n / 1e9:.3g}B"


def describe(model) -> dict:
    """A catalog entry as a JSON-ready dict, plus ``kv_bytes_per_token`` at bf16 and fp8, counting
    every layer ("all") and only full-attention layers ("full")."""
    spec = get_model(model)
    out = asdict(spec)
    out["aliases"] = list(spec.aliases)
    out["full_attention_layers"] = spec.full_attention_layers
    out["kv_bytes_per_token"] = {
        layers: {dtype: kv_bytes_per_token(spec, dtype, layers) if layers == "all" or spec.full_attention_layers else None
                 for dtype in ("bf16", "fp8")} for layers in KV_LAYER_MODES
    }  # "full" is None for a model whose every KV layer slides (Mistral-7B-v0.1)
    return out
