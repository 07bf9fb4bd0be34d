"""The catalog's hidden/intermediate/vocab sizes (from each config.json): the dense models' parameter
counts recomputed from them match total_params (exactly where the catalog has the exact count)."""

from __future__ import annotations

import pytest

from kvreplay.analysis.models import catalog, get_model


def dense_params(m) -> int:
    H, I, V = m.hidden_size, m.intermediate_size, m.vocab_size
    h, kv, d = m.num_attention_heads, m.num_kv_heads, m.head_dim
    layer = H * h * d + 2 * H * kv * d + h * d * H + 3 * H * I + 2 * H  # q, k, v, o, gate/up/down, 2 norms
    if m.name.startswith("Qwen2.5"):
        layer += (h + 2 * kv) * d  # q/k/v biases
    if m.name.startswith("Qwen3"):
        layer += 2 * d  # q_norm, k_norm
    if m.name.startswith("gemma"):
        layer += 2 * H  # pre/post feed-forward norms
    return m.num_layers * layer + V * H * (1 if m.tie_word_embeddings else 2) + H


@pytest.mark.parametrize("name", ["Llama-3.1-8B", "Llama-3.1-70B", "Llama-3.1-405B"])
def test_llama_counts_are_exact(name):
    m = get_model(name)
    assert dense_params(m) == m.total_params


def test_every_dense_model_within_0_2_percent():
    # the others' total_params are rounded (7.61B) or include a vision tower (gemma-3: 1.4%, skipped); a
    # Mamba hybrid (Nemotron-H) has layers of other shapes and its card's rounded count (skipped)
    for m in catalog():
        assert m.hidden_size and m.vocab_size, m.name
        if m.intermediate_size is None or m.name.startswith("gemma-3") or m.mamba_layers:  # (Mamba layers: other shapes)
            continue
        assert abs(dense_params(m) - m.total_params) / m.total_params < 0.002, m.name


def test_body_params_leave_out_the_embedding_and_lm_head():
    m = get_model("Llama-3.1-8B")  # untied: 2 x 128256 x 4096 out of 8,030,261,248
    assert m.lm_head_params == 525_336_576
    assert m.body_params == 8_030_261_248 - 2 * 525_336_576
    g = get_model("gemma-2-9b")  # tied: one table
    assert g.body_params == g.active_params - 256_000 * 3584


def test_moe_experts_account_for_the_stored_and_active_parameters():
    # routed experts (3 x hidden x width each, over the MoE layers) are most of an MoE's parameters: the
    # rest (attention, shared experts, dense layers, embeddings) is read by every token, so the catalog's
    # active count less one token's routed experts is the stored count less all of them, within the
    # cards' rounding (Kimi-K2's "1T total" is 1.04T by its config.json)
    moe = [m for m in catalog() if m.moe]
    assert {"Qwen3-30B-A3B", "Qwen3-235B-A22B", "DeepSeek-V3", "Kimi-K2-Instruct", "gpt-oss-120b",
            "Mixtral-8x7B-v0.1", "MiniMax-M2.5"} <= {m.name for m in moe}
    for m in moe:
        rest_active = m.active_params - m.routed_expert_params
        rest_stored = m.total_params - m.stored_expert_params
        assert 0 < rest_active and m.routed_expert_params < m.stored_expert_params, m.name
        assert abs(rest_stored - rest_active) < 0.05 * m.total_params, m.name
        assert m.moe_source and str(m.moe["experts"]) in m.moe_source, m.name


def test_moe_by_hand():
    m = get_model("Mixtral-8x7B-v0.1")  # 32 layers of 8 experts 14,336 wide, top 2, hidden 4,096
    assert m.routed_expert_params == 3 * 32 * 2 * 4096 * 14336
    assert m.stored_expert_params == 3 * 32 * 8 * 4096 * 14336
    mm = get_model("MiniMax-M2.5")  # computed from its config.json: every layer's tensors
    per_layer = 4096 * 0 + 3072 * 6144 * 2 + 3072 * 1024 * 2 + 256 * 3 * 3072 * 1536 + 3072 * 256 + 2 * 3072 + 6144 + 1024
    assert mm.total_params == 62 * per_layer + 2 * 200064 * 3072 + 3072
    assert mm.active_params == mm.total_params - (256 - 8) * 3 * 62 * 3072 * 1536
    assert get_model("Llama-3.1-8B").routed_expert_params == 0 and get_model("Llama-3.1-8B").moe is None
