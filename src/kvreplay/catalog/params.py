"""Parameter counts from a config.json's shapes (hf_config.Arch): every weight tensor's size,
layer by layer, as the transformers / vLLM modules of each family lay them out.

Counted: the token embedding, each layer's mixer (attention, MLA, Gated DeltaNet or Mamba-2 with
their biases and norms), its feed-forward (dense MLP, or the router, routed experts and shared
experts of an MoE layer), the layer norms, the final norm and the LM head (not when tied). Not
counted: vision towers and projectors (a multimodal config's text model only), multi-token
prediction modules (num_nextn_predict_layers, num_mtp_modules: vLLM runs them only for speculative
decoding), the routers' score-correction biases (DeepSeek-V3's and MiniMax's e_score_correction_bias,
one value per expert and layer) and buffers that are not weights (RoPE tables). Active parameters: the total less the
routed experts a token does not use (experts - experts_per_token per MoE layer).
"""

from __future__ import annotations

#: families whose layers have four norms (pre/post attention and feed-forward) instead of two
_FOUR_NORMS = ("gemma2", "gemma3_text")
#: families with a weight per head dimension on q and k (RMSNorm of each head)
_QK_NORM = ("qwen3", "qwen3_moe", "qwen3_next", "gemma3_text")


def count(arch) -> tuple[int, int]:
    """(total, active) parameters of `arch`."""
    h = arch.hidden
    total = active = arch.vocab * h * (1 if arch.tie else 2) + h  # embedding, LM head, final norm
    for i, kind in enumerate(arch.kinds):
        layer = _mixer(arch, kind) + _norms(arch, kind)
        routed_idle = 0
        if i in arch.moe_layers:
            ffn, routed_idle = _moe(arch)
        elif arch.model_type == "nemotron_h":
            # a Nemotron-H layer is one block: Mamba-2 or attention without an MLP, or "-", an MLP of
            # up and down (relu2, no gate)
            ffn = 2 * h * arch.intermediate if kind == "mlp" else 0
        else:
            ffn = 3 * h * arch.intermediate + (_mlp_bias(arch) if arch.text.bool("mlp_bias", False) else 0)
        total += layer + ffn
        active += layer + ffn - routed_idle
    return total, active


def source_text(arch) -> str:
    """params_source for a count computed here."""
    if not arch.moe:
        return "computed from config.json shapes (embeddings, attention, MLP, norms)"
    t = arch.text
    skipped = [f"{t.raw[k]} {what}" for k, what in (("num_nextn_predict_layers", "MTP layer(s)"),
                                                    ("num_mtp_modules", "MTP module(s)")) if t.has(k) and t.raw[k]]
    return ("computed from config.json shapes (embeddings, attention, routed and shared experts, routers, norms)"
            + (f"; the {' and '.join(skipped)}, which vLLM runs only for speculative decoding, are not counted"
               if skipped else ""))


def _norms(arch, kind: str) -> int:
    if arch.model_type == "nemotron_h":
        return arch.hidden
    return (4 if arch.model_type in _FOUR_NORMS else 2) * arch.hidden


def _mlp_bias(arch) -> int:
    return 2 * arch.intermediate + arch.hidden


def _mixer(arch, kind: str) -> int:
    if kind in ("full", "sliding", "chunked"):
        return _mla(arch) if arch.mla else _attention(arch)
    if kind == "linear":
        return _gated_deltanet(arch)
    if kind == "mamba":
        return _mamba2(arch)
    return 0  # "mlp", "moe": Nemotron-H blocks without a mixer


def _attention(arch) -> int:
    t, h, d = arch.text, arch.hidden, arch.head_dim
    q, kv = arch.heads * d, arch.kv_heads * d
    gated = arch.model_type == "qwen3_next"  # q_proj also gives the output gate
    n = h * q * (2 if gated else 1) + 2 * h * kv + q * h
    bias = t.bool("attention_bias", arch.model_type in ("qwen2", "qwen2_moe"))
    if bias:
        n += q + 2 * kv
        if arch.model_type not in ("qwen2", "qwen2_moe", "glm4_moe"):
            n += h  # o_proj's bias (Llama, gpt-oss); Qwen2 and GLM bias q, k and v only
    if arch.model_type in _QK_NORM or arch.model_type == "glm4_moe" and t.bool("use_qk_norm", False):
        n += 2 * d
    if arch.model_type == "minimax_m2" and t.bool("use_qk_norm", False):
        n += q + kv  # qk_norm_type per_layer: one weight per q and k channel
    if arch.model_type == "gpt_oss":
        n += arch.heads  # attention sinks
    return n


def _mla(arch) -> int:
    m, h, heads = arch.mla, arch.hidden, arch.heads
    qk = m["qk_nope_head_dim"] + m["qk_rope_head_dim"]
    if m["q_lora_rank"]:
        q = h * m["q_lora_rank"] + m["q_lora_rank"] + m["q_lora_rank"] * heads * qk  # q_a, its norm, q_b
    else:
        q = h * heads * qk
    kv = h * (m["kv_lora_rank"] + m["qk_rope_head_dim"]) + m["kv_lora_rank"]  # kv_a_proj_with_mqa, its norm
    kv += m["kv_lora_rank"] * heads * (m["qk_nope_head_dim"] + m["v_head_dim"])  # kv_b_proj
    return q + kv + heads * m["v_head_dim"] * h


def _gated_deltanet(arch) -> int:
    g, h = arch.linear, arch.hidden
    keys, values = g["k_heads"] * g["head_k_dim"], g["v_heads"] * g["head_v_dim"]
    conv_dim = 2 * keys + values
    return (h * (2 * keys + 2 * values)  # in_proj_qkvz
            + h * 2 * g["v_heads"]  # in_proj_ba
            + conv_dim * g["conv_kernel"]  # conv1d (no bias)
            + 2 * g["v_heads"]  # dt_bias, A_log
            + g["head_v_dim"]  # the gated RMSNorm
            + values * h)  # out_proj


def _mamba2(arch) -> int:
    m, h = arch.mamba, arch.hidden
    inner, heads = m["intermediate"], m["heads"]
    conv_dim = inner + 2 * m["groups"] * m["state"]
    in_proj = inner + conv_dim + heads  # z, xBC, dt
    n = h * in_proj + conv_dim * m["conv"] + 3 * heads + inner + inner * h  # conv1d, dt_bias/A_log/D, norm, out_proj
    if m["conv_bias"]:
        n += conv_dim
    if m["proj_bias"]:
        n += in_proj + h
    return n


def _moe(arch) -> tuple[int, int]:
    """(an MoE layer's feed-forward parameters, those of its routed experts a token does not use)."""
    m, h, mt = arch.moe, arch.hidden, arch.model_type
    experts, width = m["experts"], m["expert_intermediate"]
    per_expert = 3 * h * width
    if mt == "gpt_oss":
        per_expert += 2 * width + h  # gate_up and down biases
    router = h * experts
    if mt == "gpt_oss":
        router += experts  # the router's bias
    shared = 3 * h * arch.shared_intermediate
    if not arch.gated_experts:
        per_expert = 2 * h * width  # relu2 experts: up and down
        shared = 2 * h * arch.shared_intermediate
    if mt in ("qwen2_moe", "qwen3_next") and arch.shared_intermediate:
        shared += h  # shared_expert_gate
    return router + experts * per_expert + shared, (experts - m["experts_per_token"]) * per_expert
