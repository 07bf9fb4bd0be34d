"""A model's shape from its Hugging Face ``config.json``: the one reader behind ``--model PATH`` and
behind every catalog entry (the catalog is this reader over bundled config.json files).

``read_config(raw, path)`` returns a ``Reading``: the ModelSpec fields a config.json gives (layers,
heads, KV width, KV cache groups, MoE, MLA, linear attention, checkpoint weights, max_model_len,
hidden / intermediate / vocab sizes) and the parameter counts computed from the shapes
(``params.py``). Families read (``model_type``, of ``text_config`` when the file has one):

- GQA / MHA: llama, mistral, qwen2, qwen3, phi3, gemma2, gemma3 (sliding windows);
- MoE: mixtral, qwen2_moe, qwen3_moe, gpt_oss, llama4 (chunked local attention), minimax_m2, glm4_moe;
- MLA: deepseek_v2, deepseek_v3, kimi_k2;
- linear attention: qwen3_next (Gated DeltaNet);
- Mamba-2 hybrids: nemotron_h, granitemoehybrid.

Anything else is refused naming the key that could not be interpreted (``model_type``, a
``layer_types`` entry, a ``hybrid_override_pattern`` character, a ``quant_method``).

What vLLM 0.33.0 would do is followed where a choice exists: max_model_len as
``vllm/config/model.py`` ``_get_and_verify_max_len`` derives it (the smallest of
max_position_embeddings and its aliases, times the RoPE factor except for su / longrope / llama3 /
yarn scaling and gemma3, longrope falling back to original_max_position_embeddings; no
tokenizer_config.json is read), and Mamba / Gated DeltaNet state bytes as
``vllm/model_executor/layers/mamba/mamba_utils.py`` shapes them (bf16; Nemotron-H's SSM state in
float32 unless its config.json names ``mamba_ssm_cache_dtype``, ``models/config.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from . import params as param_counts
from .config_view import ConfigView
from .vision import vision_field

DENSE = ("llama", "mistral", "qwen2", "qwen3", "phi3", "gemma2", "gemma3_text")
MOE = ("mixtral", "qwen2_moe", "qwen3_moe", "gpt_oss", "llama4_text", "minimax_m2", "glm4_moe")
MLA = ("deepseek_v2", "deepseek_v3", "kimi_k2")
LINEAR = ("qwen3_next",)
MAMBA = ("nemotron_h", "granitemoehybrid")
MODEL_TYPES = DENSE + MOE + MLA + LINEAR + MAMBA
#: model types whose text model sits in ``text_config`` (a ``vision_config`` beside it: catalog/vision.py)
WRAPPERS = {"gemma3": "gemma3_text", "llama4": "llama4_text"}
#: tie_word_embeddings when config.json leaves it out (the transformers config classes' defaults)
TIED_BY_DEFAULT = ("gemma2", "gemma3_text")

_LAYER_TYPES = {"full_attention": "full", "attention": "full", "sliding_attention": "sliding",
                "chunked_attention": "chunked", "linear_attention": "linear", "mamba": "mamba"}
_PATTERN = {"M": "mamba", "*": "full", "-": "mlp", "E": "moe"}
_MAX_LEN_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
                 "max_target_positions", "max_sequence_length", "max_seq_length", "seq_len")
_UNSCALED_ROPE = ("su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling")
_SSM_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
_HUGE = 2**24  # widths: hidden, intermediate, heads x head_dim
_MAX_LAYERS = 4096


@dataclass
class Arch:
    """The shapes of one config.json the reader and the parameter count share."""

    model_type: str
    text: ConfigView
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tie: bool
    kinds: list  # per layer: full, sliding, chunked, linear, mamba, mlp, moe (the last two hold no KV)
    intermediate: int | None = None  # a dense MLP's width
    moe: dict | None = None
    moe_layers: frozenset = frozenset()
    shared_intermediate: int = 0  # the MoE layers' shared (always active) expert width
    gated_experts: bool = True  # gate, up and down (SwiGLU); False: up and down only (Nemotron's relu2)
    mla: dict | None = None
    linear: dict | None = None
    mamba: dict | None = None
    text_fields: dict = field(default_factory=dict)  # the prose: where each value came from


@dataclass(frozen=True)
class Reading:
    """What one config.json gives: ModelSpec fields, and the parameter counts of its shapes."""

    fields: dict
    total_params: int
    active_params: int
    params_source: str


def text_view(raw: dict, path: str) -> tuple[ConfigView, ConfigView, str]:
    """(the whole file, the text model's section, its model_type)."""
    top = ConfigView(raw, path)
    model_type = top.string("model_type")
    text = top
    if model_type in WRAPPERS or top.has("text_config"):
        text = top.section("text_config")
        if text is None:
            raise top.error("text_config", f"missing: a {model_type} config.json keeps its text model there")
        model_type = text.string("model_type", WRAPPERS.get(model_type, model_type))
    if model_type not in MODEL_TYPES:
        raise text.error("model_type", f"{model_type!r} is not an architecture kvreplay can read "
                         f"(it reads {', '.join(MODEL_TYPES)}); give a catalog model's name instead")
    return top, text, model_type


def read_config(raw: dict, path: str) -> Reading:
    """Every ModelSpec field `raw` (a config.json's object, from `path`) gives, checked."""
    top, text, model_type = text_view(raw, path)
    arch = _shape(top, text, model_type)
    _read_ffn(arch)
    groups = _kv_groups(arch)
    windows = _windows(arch)
    spec = {
        "attention": "mla" if arch.mla else ("mha" if arch.kv_heads == arch.heads else "gqa"),
        "num_layers": arch.layers,
        "num_attention_heads": arch.heads,
        "num_kv_heads": 1 if arch.mla else arch.kv_heads,
        "head_dim": arch.mla["kv_lora_rank"] + arch.mla["qk_rope_head_dim"] if arch.mla else arch.head_dim,
        "kv_lora_rank": arch.mla["kv_lora_rank"] if arch.mla else None,
        "qk_rope_head_dim": arch.mla["qk_rope_head_dim"] if arch.mla else None,
        **windows,
        "hidden_size": arch.hidden,
        "intermediate_size": None if arch.moe else arch.intermediate,
        "vocab_size": arch.vocab,
        "tie_word_embeddings": arch.tie,
        "max_model_len": max_model_len(top, text),
        "kv_groups": groups,
        "kv_groups_source": arch.text_fields.get("kv_groups") if groups else None,
        **_checkpoint_weights(top, text),
        # the roofline's fused-MoE term times gated experts: relu2 ones (up and down only) stay in the
        # body, timed as active parameters (ModelSpec.moe None), their source saying why
        "moe": arch.moe if arch.gated_experts else None,
        "moe_source": arch.text_fields.get("moe"),
        "linear_attention": arch.linear,
        "mla": _mla_field(arch),
        "mla_source": arch.text_fields.get("mla") if _mla_field(arch) else None,
        "notes": _notes(arch),
        # vLLM 0.19-0.33's MiniMaxM2Attention norms q and k over all heads, an all-reduce a layer under TP
        # (models/minimax_m2.py: MiniMaxText01RMSNormTP forward_qk / forward_qkv), whatever the config says
        "qk_norm_all_reduce": model_type == "minimax_m2",
        **_vision(top, arch),
    }
    total, active = param_counts.count(arch)
    return Reading(spec, total, active, param_counts.source_text(arch))


def _where(view: ConfigView) -> str:
    return "config.json text_config" if view.prefix else "config.json"


def _shape(top: ConfigView, text: ConfigView, model_type: str) -> Arch:
    hidden = text.int("hidden_size", hi=_HUGE)
    layers = text.int("num_hidden_layers", hi=_MAX_LAYERS)
    heads = text.int("num_attention_heads", hi=65536)
    kv_heads = text.int("num_key_value_heads", heads, hi=65536)
    if heads % kv_heads:
        raise text.error("num_key_value_heads", f"{kv_heads} does not divide num_attention_heads {heads}")
    dim_key = "attention_head_dim" if model_type == "nemotron_h" and text.has("attention_head_dim") else "head_dim"
    if text.has(dim_key):
        head_dim = text.int(dim_key, hi=65536)
    elif hidden % heads:
        raise text.error("head_dim", f"missing, and hidden_size {hidden} is no multiple of num_attention_heads {heads}")
    else:
        head_dim = hidden // heads
    if heads * head_dim > _HUGE:
        raise text.error("num_attention_heads", f"{heads} heads of {head_dim} is beyond any real model")
    vocab = text.int("vocab_size", hi=2**24)
    tied_default = top.bool("tie_word_embeddings", model_type in TIED_BY_DEFAULT) if text is not top else \
        model_type in TIED_BY_DEFAULT
    tie = text.bool("tie_word_embeddings", tied_default)
    arch = Arch(model_type, text, hidden, layers, heads, kv_heads, head_dim, vocab, tie, [])
    arch.kinds = _layer_kinds(arch)
    if model_type in MLA:
        arch.mla = m = _read_mla(text)
        arch.text_fields["mla"] = (f"{_where(text)}: q_lora_rank {m['q_lora_rank']}, qk_nope_head_dim "
                                   f"{m['qk_nope_head_dim']}, v_head_dim {m['v_head_dim']}")
    if "linear" in arch.kinds:
        arch.linear = _read_linear(text)
    if "mamba" in arch.kinds:
        arch.mamba = _read_mamba(arch)
    return arch


def _layer_kinds(arch: Arch) -> list:
    """Each layer's kind, layer 0 first."""
    t, n, mt = arch.text, arch.layers, arch.model_type
    if mt == "nemotron_h":
        pattern = t.string("hybrid_override_pattern")
        if len(pattern) != n:
            raise t.error("hybrid_override_pattern", f"has {len(pattern)} layers, num_hidden_layers {n}")
        for i, c in enumerate(pattern):
            if c not in _PATTERN:
                raise t.error("hybrid_override_pattern", f"layer {i}: {c!r} is not a layer kind kvreplay knows "
                              "(M: Mamba-2, *: attention, -: MLP, E: MoE)")
        return [_PATTERN[c] for c in pattern]
    types = t.string_list("layer_types", n)
    if types is not None:
        for i, kind in enumerate(types):
            if kind not in _LAYER_TYPES:
                raise t.error(f"layer_types[{i}]", f"{kind!r} is not a layer kind kvreplay knows "
                              f"({', '.join(_LAYER_TYPES)})")
        return [_LAYER_TYPES[k] for k in types]
    if mt in MAMBA:
        raise t.error("layer_types", "missing: a hybrid model names each layer's kind there")
    if mt == "qwen3_next":
        every = t.int("full_attention_interval", hi=n)
        return ["full" if (i + 1) % every == 0 else "linear" for i in range(n)]
    if mt == "gemma2":
        return ["sliding" if i % 2 == 0 else "full" for i in range(n)]
    if mt == "gemma3_text":
        every = t.int("sliding_window_pattern", 6, hi=n)
        return ["sliding" if (i + 1) % every else "full" for i in range(n)]
    if mt == "llama4_text" and t.has("attention_chunk_size"):
        rope = t.int_list("no_rope_layers", lo=0, hi=1, length=n)
        if rope is None:
            every = t.int("no_rope_layer_interval", 4, hi=n)
            rope = [int((i + 1) % every != 0) for i in range(n)]
        return ["chunked" if r else "full" for r in rope]
    if mt in ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe"):
        if t.bool("use_sliding_window", False) and t.has("sliding_window"):
            start = t.int("max_window_layers", n, lo=0, hi=n)
            return ["sliding" if i >= start else "full" for i in range(n)]
        return ["full"] * n
    if mt in ("mistral", "mixtral", "phi3") and t.has("sliding_window"):
        return ["sliding"] * n
    return ["full"] * n


def _read_mla(t: ConfigView) -> dict:
    return {"q_lora_rank": t.int("q_lora_rank", None, hi=_HUGE), "kv_lora_rank": t.int("kv_lora_rank", hi=_HUGE),
            "qk_rope_head_dim": t.int("qk_rope_head_dim", hi=65536),
            "qk_nope_head_dim": t.int("qk_nope_head_dim", hi=65536), "v_head_dim": t.int("v_head_dim", hi=65536)}


def _mla_field(arch: Arch) -> dict | None:
    """ModelSpec.mla: the projections vLLM's MLA runs (None without a q_lora_rank: DeepSeek-V2-Lite's
    plain q projection, which ModelSpec.mla_gemm_shapes does not describe)."""
    m = arch.mla
    if not m or m["q_lora_rank"] is None:
        return None
    return {"q_lora_rank": m["q_lora_rank"], "qk_nope_head_dim": m["qk_nope_head_dim"], "v_head_dim": m["v_head_dim"]}


def _read_linear(t: ConfigView) -> dict:
    return {"kind": "gated_deltanet", "k_heads": t.int("linear_num_key_heads", hi=65536),
            "v_heads": t.int("linear_num_value_heads", hi=65536), "head_k_dim": t.int("linear_key_head_dim", hi=65536),
            "head_v_dim": t.int("linear_value_head_dim", hi=65536),
            "conv_kernel": t.int("linear_conv_kernel_dim", hi=64)}


def _read_mamba(arch: Arch) -> dict:
    t = arch.text
    if arch.model_type == "nemotron_h":
        m = {"heads": t.int("mamba_num_heads", hi=65536), "head_dim": t.int("mamba_head_dim", hi=65536),
             "state": t.int("ssm_state_size", hi=65536), "groups": t.int("n_groups", hi=65536),
             "conv": t.int("conv_kernel", hi=64), "conv_bias": t.bool("use_conv_bias", True),
             "proj_bias": t.bool("mamba_proj_bias", False)}
        m["intermediate"] = m["heads"] * m["head_dim"]
        ssm_dtype = t.string("mamba_ssm_cache_dtype", "float32")
        if ssm_dtype not in _SSM_DTYPE_BYTES:
            raise t.error("mamba_ssm_cache_dtype", f"{ssm_dtype!r} is not one of {', '.join(_SSM_DTYPE_BYTES)}")
        m["ssm_bytes"] = _SSM_DTYPE_BYTES[ssm_dtype]
    else:
        m = {"heads": t.int("mamba_n_heads", hi=65536), "head_dim": t.int("mamba_d_head", hi=65536),
             "state": t.int("mamba_d_state", hi=65536), "groups": t.int("mamba_n_groups", hi=65536),
             "conv": t.int("mamba_d_conv", hi=64), "conv_bias": t.bool("mamba_conv_bias", True),
             "proj_bias": t.bool("mamba_proj_bias", False), "ssm_bytes": 2}
        m["intermediate"] = t.int("mamba_expand", hi=64) * arch.hidden
        if m["intermediate"] != m["heads"] * m["head_dim"]:
            raise t.error("mamba_n_heads", f"{m['heads']} heads of {m['head_dim']} do not fill mamba_expand x "
                          f"hidden_size = {m['intermediate']}")
    return m


def _mamba_state(arch: Arch) -> tuple[int, str]:
    """Bytes of one Mamba-2 layer's state per request at TP 1, and the sum written out."""
    m, t = arch.mamba, arch.text
    conv_dim = m["intermediate"] + 2 * m["groups"] * m["state"]
    conv = (m["conv"] - 1) * conv_dim * 2
    ssm = m["heads"] * m["head_dim"] * m["state"] * m["ssm_bytes"]
    if arch.model_type == "nemotron_h":
        names = (f"mamba_num_heads {m['heads']}, mamba_head_dim {m['head_dim']}, ssm_state_size {m['state']}, "
                 f"n_groups {m['groups']}, conv_kernel {m['conv']}")
        dtype = (f"; SSM state {t.string('mamba_ssm_cache_dtype')} (mamba_ssm_cache_dtype)" if t.has("mamba_ssm_cache_dtype")
                 else "; SSM state float32 for Nemotron-H, models/config.py:812-839")
        conv_text = f"{m['intermediate']} + 2*{m['groups']}*{m['state']}"
    else:
        expand = m["intermediate"] // arch.hidden
        names = (f"mamba_n_heads {m['heads']}, mamba_d_head {m['head_dim']}, mamba_d_state {m['state']}, "
                 f"mamba_n_groups {m['groups']}, mamba_d_conv {m['conv']}, mamba_expand {expand}")
        dtype = ", bf16"
        conv_text = f"{expand}*{arch.hidden} + 2*{m['groups']}*{m['state']} = {conv_dim}"
    text = (f"{names}. State per layer (vLLM mamba_utils.py mamba2_state_shape{dtype}): conv ({m['conv'] - 1}, "
            f"{conv_text}) x 2 B = {conv:,} + ssm ({m['heads']}, {m['head_dim']}, {m['state']}) x "
            f"{m['ssm_bytes']} B = {ssm:,}")
    return conv + ssm, text


def _linear_state(arch: Arch) -> tuple[int, str]:
    """Bytes of one Gated DeltaNet layer's state per request at TP 1 (bf16), and the sum written out."""
    g = arch.linear
    conv_dim = 2 * g["k_heads"] * g["head_k_dim"] + g["v_heads"] * g["head_v_dim"]
    conv = (g["conv_kernel"] - 1) * conv_dim * 2
    recurrent = g["v_heads"] * g["head_k_dim"] * g["head_v_dim"] * 2
    dims = (f"key/value head dim {g['head_k_dim']}" if g["head_k_dim"] == g["head_v_dim"]
            else f"key head dim {g['head_k_dim']}, value head dim {g['head_v_dim']}")
    text = (f"linear_num_key_heads {g['k_heads']}, linear_num_value_heads {g['v_heads']}, {dims}, conv kernel "
            f"{g['conv_kernel']}. State per layer (vLLM mamba_utils.py gated_delta_net_state_shape, bf16): conv "
            f"({g['conv_kernel'] - 1}, 2*{g['k_heads']}*{g['head_k_dim']} + {g['v_heads']}*{g['head_v_dim']} = "
            f"{conv_dim}) x 2 B = {conv:,} + recurrent ({g['v_heads']}, {g['head_k_dim']}, {g['head_v_dim']}) x 2 B "
            f"= {recurrent:,}")
    return conv + recurrent, text


def _listed(layers: list) -> str:
    """7, 18, 29, 40; an arithmetic run of more than four as 3, 7, ..., 47."""
    if len(layers) > 4 and len({b - a for a, b in zip(layers, layers[1:])}) == 1:
        return f"{layers[0]}, {layers[1]}, ..., {layers[-1]}"
    return ", ".join(map(str, layers))


def _kv_groups(arch: Arch):
    """ModelSpec.kv_groups (None: every layer full attention), its source text in arch.text_fields."""
    kinds = arch.kinds
    if all(k == "full" for k in kinds):
        return None
    t = arch.text
    sizes = {}
    if "sliding" in kinds:
        sizes["sliding"] = ("sliding_window", "window", t.int("sliding_window", hi=2**31))
    if "chunked" in kinds:
        sizes["chunked"] = ("chunked_local", "chunk", t.int("attention_chunk_size", hi=2**31))
    state_text = None
    if "mamba" in kinds:
        state, state_text = _mamba_state(arch)
        sizes["mamba"] = ("mamba", "state_bytes", state)
    if "linear" in kinds:
        state, state_text = _linear_state(arch)
        sizes["linear"] = ("mamba", "state_bytes", state)
    sizes["full"] = ("full", None, None)
    groups, seen = [], []
    for k in kinds:
        if k in sizes and k not in seen:
            seen.append(k)
    for k in seen:
        kind, key, value = sizes[k]
        group = {"kind": kind, "layers": kinds.count(k)}
        if key:
            group[key] = value
        groups.append(group)
    arch.text_fields["kv_groups"] = _groups_text(arch, sizes, state_text)
    return tuple(groups)


def _groups_text(arch: Arch, sizes: dict, state_text: str | None) -> str:
    kinds, t, mt = arch.kinds, arch.text, arch.model_type
    full = [i for i, k in enumerate(kinds) if k == "full"]
    where = _where(t)
    if mt == "nemotron_h":
        legend = "M: Mamba-2, *: attention, -: MLP" + (", E: MoE" if "moe" in kinds else "")
        return f"hybrid_override_pattern ({legend}): attention at layers {_listed(full)}; {state_text}"
    if "mamba" in kinds:
        return f"layer_types: attention at {_listed(full)}, mamba elsewhere; {state_text}"
    if "linear" in kinds:
        how = (f"full_attention_interval {t.int('full_attention_interval')}" if not t.has("layer_types")
               else "layer_types")
        return (f"{how}: layers {_listed(full)} full attention ({len(full)}); the other {len(kinds) - len(full)} "
                f"Gated DeltaNet: {state_text}")
    if "chunked" in kinds:
        how = "no_rope_layers" + ("" if t.has("no_rope_layers") else " (transformers Llama4 default)")
        prefix = "text_config" if t.prefix else "config.json"
        return (f"{prefix} attention_chunk_size {sizes['chunked'][2]}; {how}: layers {_listed(full)} global "
                f"({len(full)}), the other {len(kinds) - len(full)} chunked-local")
    window = sizes["sliding"][2]
    if mt == "gemma2" and not t.has("layer_types"):
        return f"{where} sliding_window {window}; transformers Gemma2: layer i slides iff i is even (layer 0 first)"
    if mt == "gemma3_text" and not t.has("layer_types"):
        every = t.int("sliding_window_pattern", 6)
        prefix = "text_config" if t.prefix else "config.json"
        return (f"{prefix} sliding_window {window}, sliding_window_pattern {every}: layers {_listed(full)} full "
                f"({len(full)}), the other {len(kinds) - len(full)} local")
    if t.has("layer_types"):
        if _alternates(kinds):
            return (f"{where} layer_types: sliding_attention at even layers (0, 2, ...), full_attention at odd; "
                    f"sliding_window {window}")
        return (f"{where} layer_types: {kinds.count('sliding')} sliding_attention, {len(full)} full_attention; "
                f"sliding_window {window}")
    return f"{where} sliding_window {window}: " + _window_rule(arch, window)


def _alternates(kinds: list) -> bool:
    return all(k == ("sliding" if i % 2 == 0 else "full") for i, k in enumerate(kinds))


def _window_rule(arch: Arch, window: int) -> str:
    kinds, t = arch.kinds, arch.text
    if all(k == "sliding" for k in kinds):
        return f"every layer uses the {window}-token window"
    start = kinds.index("sliding")
    return (f"layers {start} and above use the {window}-token window (use_sliding_window, "
            f"max_window_layers {t.int('max_window_layers', start, lo=0)})")


def _windows(arch: Arch) -> dict:
    """ModelSpec's sliding_window, sliding_window_layers and sliding_window_pattern."""
    kinds, t = arch.kinds, arch.text
    n = kinds.count("sliding")
    if not n:
        return {"sliding_window": None, "sliding_window_layers": 0, "sliding_window_pattern": None}
    window = t.int("sliding_window", hi=2**31)
    full = kinds.count("full")
    if arch.model_type == "gemma2" and not t.has("layer_types"):
        pattern = (f"alternating: even-indexed layers (0, 2, ...) use the {window}-token window, "
                   "odd-indexed layers are full")
    elif arch.model_type == "gemma3_text" and not t.has("layer_types"):
        every = t.int("sliding_window_pattern", 6)
        pattern = (f"{every - 1} local : 1 global (sliding_window_pattern {every}): layer i is full iff "
                   f"(i + 1) % {every} == 0, so {full} full and {n} sliding")
    elif t.has("layer_types") and _alternates(kinds):
        pattern = (f"alternating (layer_types): even-indexed layers sliding_attention ({window} tokens), "
                   "odd-indexed full_attention")
    elif t.has("layer_types"):
        pattern = f"layer_types: {n} sliding_attention ({window} tokens), {full} full_attention"
    else:
        pattern = _window_rule(arch, window)
    return {"sliding_window": window, "sliding_window_layers": n, "sliding_window_pattern": pattern}


def _read_ffn(arch: Arch) -> None:
    """The dense MLP width (arch.intermediate), and an MoE's routed experts (arch.moe, arch.moe_layers,
    arch.shared_intermediate, its source text)."""
    mt = arch.model_type
    reader = (_local_experts if mt in ("mixtral", "gpt_oss", "minimax_m2") else
              _qwen_experts if mt in ("qwen2_moe", "qwen3_moe", "qwen3_next") else
              _llama4_experts if mt == "llama4_text" else
              _deepseek_experts if mt in MLA + ("glm4_moe",) else
              _nemotron_experts if mt == "nemotron_h" and "moe" in arch.kinds else
              _granite_experts if mt == "granitemoehybrid" else None)
    found = reader(arch) if reader else None
    if found is None:
        if arch.intermediate is None:
            arch.intermediate = arch.text.int("intermediate_size", hi=_HUGE)
        return
    experts, per_token, width, layers, text = found
    if per_token > experts:
        raise arch.text.error("num_experts_per_tok", f"{per_token} is more than the {experts} experts")
    if len(layers) < arch.layers and arch.intermediate is None:
        arch.intermediate = arch.text.int("intermediate_size", hi=_HUGE)
    arch.moe = {"experts": experts, "experts_per_token": per_token, "expert_intermediate": width,
                "layers": len(layers)}
    arch.moe_layers = frozenset(layers)
    arch.text_fields["moe"] = text


def _local_experts(arch: Arch):
    """Mixtral, gpt-oss, MiniMax-M2: num_local_experts of intermediate_size each, every layer."""
    t, n = arch.text, arch.layers
    experts, per_token, width = t.int("num_local_experts", hi=65536), _per_token(t), t.int("intermediate_size", hi=_HUGE)
    text = (f"{_where(t)}: num_local_experts {experts}, num_experts_per_tok {per_token}, intermediate_size {width} "
            f"(each expert's); every one of the {n} layers is MoE")
    if arch.model_type == "minimax_m2":
        arch.shared_intermediate = t.int("shared_intermediate_size", 0, lo=0, hi=_HUGE)
        text += f"; shared_intermediate_size {arch.shared_intermediate}"
    return experts, per_token, width, range(n), text


def _qwen_experts(arch: Arch):
    """Qwen2-MoE, Qwen3-MoE, Qwen3-Next: decoder_sparse_step and mlp_only_layers pick the MoE layers."""
    t, n = arch.text, arch.layers
    experts, per_token, width = t.int("num_experts", hi=65536), _per_token(t), t.int("moe_intermediate_size", hi=_HUGE)
    step = t.int("decoder_sparse_step", 1, hi=n)
    dense = set(t.int_list("mlp_only_layers", hi=n - 1) or [])
    layers = [i for i in range(n) if i not in dense and (i + 1) % step == 0]
    every = f"every one of the {n} layers is MoE" if len(layers) == n else f"{len(layers)} of the {n} layers are MoE"
    text = (f"{_where(t)}: num_experts {experts}, num_experts_per_tok {per_token}, moe_intermediate_size {width}; "
            f"decoder_sparse_step {step} and mlp_only_layers {sorted(dense)} ({every})")
    arch.shared_intermediate = t.int("shared_expert_intermediate_size", 0, lo=0, hi=_HUGE)
    if arch.shared_intermediate:
        text += f"; its shared expert (shared_expert_intermediate_size {arch.shared_intermediate}) is not routed (body)"
    return experts, per_token, width, layers, text


def _llama4_experts(arch: Arch):
    """Llama 4: interleave_moe_layer_step (or moe_layers) picks the MoE layers; one shared expert each."""
    t, n = arch.text, arch.layers
    experts, per_token, width = t.int("num_local_experts", hi=65536), _per_token(t), t.int("intermediate_size", hi=_HUGE)
    step = t.int("interleave_moe_layer_step", 1, hi=n)
    layers = t.int_list("moe_layers", hi=n - 1) or list(range(step - 1, n, step))
    share = f"all {n} layers MoE" if len(layers) == n else f"{len(layers)} of the {n} layers MoE"
    text = (f"{_where(t)}: num_local_experts {experts}, num_experts_per_tok {per_token}, intermediate_size {width} "
            f"(each expert's); interleave_moe_layer_step {step} ({share}); its shared expert is not routed (body)")
    arch.shared_intermediate = width
    if len(layers) < n:
        arch.intermediate = t.int("intermediate_size_mlp", hi=_HUGE)
    return experts, per_token, width, layers, text


def _deepseek_experts(arch: Arch):
    """DeepSeek-V2/V3, Kimi-K2, GLM-4.5: the first first_k_dense_replace layers are dense; None without experts."""
    t, n = arch.text, arch.layers
    experts = t.int("n_routed_experts", 0, lo=0, hi=65536)
    if not experts:
        return None
    per_token, width = _per_token(t), t.int("moe_intermediate_size", hi=_HUGE)
    first, freq = t.int("first_k_dense_replace", 0, lo=0, hi=n), t.int("moe_layer_freq", 1, hi=n)
    layers = [i for i in range(first, n) if i % freq == 0]
    dense = (f"every one of the {n} layers is MoE" if not first else
             f"layer 0 dense, {len(layers)} MoE layers" if first == 1 else
             f"layers 0-{first - 1} dense, {len(layers)} MoE layers")
    text = (f"{_where(t)}: n_routed_experts {experts}, num_experts_per_tok {per_token}, moe_intermediate_size "
            f"{width}; first_k_dense_replace {first} ({dense})")
    shared = t.int("n_shared_experts", 0, lo=0, hi=65536)
    arch.shared_intermediate = shared * width
    if shared:
        text += f"; its n_shared_experts {shared} is not routed (body)"
    return experts, per_token, width, layers, text


def _nemotron_experts(arch: Arch):
    """Nemotron-H with E layers in its hybrid_override_pattern (Nemotron 3)."""
    t = arch.text
    experts, per_token, width = t.int("n_routed_experts", hi=65536), _per_token(t), t.int("moe_intermediate_size", hi=_HUGE)
    layers = [i for i, k in enumerate(arch.kinds) if k == "moe"]
    arch.shared_intermediate = t.int("moe_shared_expert_intermediate_size", 0, lo=0, hi=_HUGE)
    arch.gated_experts = False
    text = (f"{_where(t)}: n_routed_experts {experts}, num_experts_per_tok {per_token}, moe_intermediate_size "
            f"{width}; hybrid_override_pattern: {len(layers)} MoE layers (E); relu2 experts (up and down, no gate), "
            "which the roofline times with the body as active parameters, not as vLLM's gated fused-MoE kernel")
    if arch.shared_intermediate:
        text += (f"; its shared expert (moe_shared_expert_intermediate_size {arch.shared_intermediate}) is not "
                 "routed (body)")
    return experts, per_token, width, layers, text


def _granite_experts(arch: Arch):
    """Granite 4.0-H: experts on every layer beside a shared MLP; None (a dense shared MLP) without experts."""
    t, n = arch.text, arch.layers
    experts = t.int("num_local_experts", 0, lo=0, hi=65536)
    arch.shared_intermediate = t.int("shared_intermediate_size", 0, lo=0, hi=_HUGE)
    if not experts:
        arch.intermediate = arch.shared_intermediate
        return None
    per_token, width = _per_token(t), t.int("intermediate_size", hi=_HUGE)
    text = (f"{_where(t)}: num_local_experts {experts}, num_experts_per_tok {per_token}, intermediate_size {width} "
            f"(each expert's); every one of the {n} layers is MoE; its shared MLP (shared_intermediate_size "
            f"{arch.shared_intermediate}) is not routed (body)")
    return experts, per_token, width, range(n), text


def _per_token(t: ConfigView) -> int:
    return t.int("num_experts_per_tok", hi=65536)


def max_model_len(top: ConfigView, text: ConfigView) -> int:
    """The context vLLM 0.33.0 derives from config.json (module docstring)."""
    found = [text.int(k, hi=2**40) for k in _MAX_LEN_KEYS if text.has(k)]
    derived = min(found) if found else 2048
    if text.has("model_max_length"):
        derived = text.int("model_max_length", hi=2**40)
    rope_key = "rope_parameters" if text.has("rope_parameters") else "rope_scaling"
    rope = text.section(rope_key)
    if rope is None:
        return derived
    nested = rope.raw and all(isinstance(v, dict) for v in rope.raw.values())
    parts = [rope.section(k) for k in rope.raw] if nested else [rope]
    kinds = [p.string("rope_type", p.raw.get("type") if isinstance(p.raw.get("type"), str) else "default")
             for p in parts]
    if "longrope" in kinds:
        return text.int("original_max_position_embeddings", derived, hi=2**40)
    if "gemma3" in top.string("model_type"):
        return derived
    factor = 1.0
    for part, kind in zip(parts, kinds):
        if kind not in _UNSCALED_ROPE and part.has("factor"):
            factor = part.number("factor", 1.0, lo=1e-6, hi=1e6)
    return int(derived * factor)


def _checkpoint_weights(top: ConfigView, text: ConfigView) -> dict:
    q = top.section("quantization_config") or text.section("quantization_config")
    if q is None:
        return {"checkpoint_weights": None, "checkpoint_weights_source": None}
    method = q.string("quant_method")
    keep = q.raw.get("modules_to_not_convert")
    kept = ""
    if isinstance(keep, list) and keep and all(isinstance(m, str) for m in keep):
        names = [m.replace("model.layers.*.", "").replace("model.", "") for m in keep]
        kept = f"; modules_to_not_convert {', '.join(names[:-1])} and {names[-1]} stay bf16" if len(names) > 1 else \
            f"; modules_to_not_convert {names[0]} stays bf16"
    if method == "fp8":
        block = q.int_list("weight_block_size", hi=65536)
        parts = ["quant_method fp8"]
        if isinstance(q.raw.get("fmt"), str):
            parts.append(f"fmt {q.string('fmt')}")
        if block:
            parts.append(f"weight_block_size {block}")
        if isinstance(q.raw.get("activation_scheme"), str):
            parts.append(f"activation_scheme {q.string('activation_scheme')}")
        what = "fp8-block" if block else "fp8"
        text = ", ".join(parts) + (kept or (" (block-scaled fp8 weights)" if block else " (per-tensor fp8 weights)"))
    elif method == "mxfp4":
        what = "mxfp4"
        text = ("quant_method mxfp4 (the MoE experts: 4-bit values with a shared 8-bit scale per 32, 4.25 bits a "
                "weight)" + kept)
    else:
        raise q.error("quant_method", f"{method!r} weights are not a format kvreplay sizes (it reads fp8 and mxfp4 "
                      "checkpoints); give the unquantized model's config.json")
    where = "config.json" if top.has("quantization_config") else "config.json text_config"
    return {"checkpoint_weights": what, "checkpoint_weights_source": f"{where} quantization_config: {text}"}


def _vision(top: ConfigView, arch: Arch) -> dict:
    """The vision tower a multimodal config.json declares (catalog/vision.py), or nothing."""
    section = top.section("vision_config") if arch.text.prefix and top.has("vision_config") else None
    if section is None:
        return {}
    return {"vision": vision_field(section, top, arch.hidden),
            "vision_source": f"config.json vision_config ({section.string('model_type')})"}


def _notes(arch: Arch) -> str | None:
    notes = []
    if arch.text.prefix:
        notes.append("the numbers are in config.json's text_config")
    if arch.mla:
        notes.append("MLA caches one latent per token and layer (kv_lora_rank + qk_rope_head_dim values, shared by "
                     "all heads): listed as 1 KV head of that width, as vLLM's MLA cache does; config.json's "
                     "num_key_value_heads does not apply")
    t = arch.text
    if arch.model_type.startswith("qwen") and t.has("sliding_window") and "sliding" not in arch.kinds and \
            not t.bool("use_sliding_window", False):
        notes.append(f"config.json has sliding_window {t.raw['sliding_window']} but use_sliding_window false: every "
                     "layer is full attention")
    return "; ".join(notes) or None
