"""The config.json reader on small configs worked by hand, one per family, and its refusals."""

from __future__ import annotations

import json

import pytest

from kvreplay.analysis.models import resolve_capacities
from kvreplay.catalog.config_view import MAX_CONFIG_BYTES, ModelConfigError
from kvreplay.catalog.models import get_model, kv_bytes_per_token
from kvreplay.errors import ConfigError

# H 64, 4 heads of 16, 2 KV heads, MLP 128, vocab 100: one layer's attention is q 64x64 + k, v 64x32
# each + o 64x64 = 12,288 weights, its MLP 3 x 64 x 128 = 24,576, its two norms 128
LLAMA = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 2048,
         "tie_word_embeddings": False}


def write(tmp_path, config, name="config.json"):
    path = tmp_path / name
    path.write_text(json.dumps(config) if not isinstance(config, str) else config)
    return path


def read(tmp_path, config):
    return get_model(str(write(tmp_path, config)))


def test_llama_by_hand(tmp_path):
    m = read(tmp_path, LLAMA)
    assert (m.attention, m.num_layers, m.num_kv_heads, m.head_dim) == ("gqa", 2, 2, 16)
    assert kv_bytes_per_token(m) == 2 * 2 * 2 * 16 * 2 == 256  # K and V, layers, kv heads, head dim, bf16
    assert kv_bytes_per_token(m, "fp8") == 128
    assert m.total_params == m.active_params == 2 * (12_288 + 24_576 + 128) + 2 * 6_400 + 64 == 86_848
    assert m.max_model_len == 2048 and m.kv_groups is None and m.moe is None
    assert m.params_source == "computed from config.json shapes (embeddings, attention, MLP, norms)"
    # vLLM multiplies by a linear RoPE factor, not by llama3's (max_position_embeddings already has it)
    assert read(tmp_path, {**LLAMA, "rope_scaling": {"rope_type": "linear", "factor": 4}}).max_model_len == 8192
    assert read(tmp_path, {**LLAMA, "rope_scaling": {"rope_type": "llama3", "factor": 8}}).max_model_len == 2048
    assert read(tmp_path, {**LLAMA, "num_key_value_heads": 4}).attention == "mha"


def test_mixtral_moe_by_hand(tmp_path):
    m = read(tmp_path, {**LLAMA, "model_type": "mixtral", "intermediate_size": 32, "num_local_experts": 4,
                        "num_experts_per_tok": 2})
    assert m.moe == {"experts": 4, "experts_per_token": 2, "expert_intermediate": 32, "layers": 2}
    assert m.intermediate_size is None
    expert = 3 * 64 * 32  # gate, up, down
    layer = 12_288 + 64 * 4 + 4 * expert + 128  # attention, router, 4 experts, norms
    assert m.total_params == 2 * layer + 2 * 6_400 + 64 == 87_360
    assert m.active_params == m.total_params - 2 * (4 - 2) * expert == 62_784


def test_deepseek_mla_by_hand(tmp_path):
    m = read(tmp_path, {"model_type": "deepseek_v3", "hidden_size": 64, "num_hidden_layers": 3, "num_attention_heads": 4,
                        "num_key_value_heads": 4, "q_lora_rank": 32, "kv_lora_rank": 16, "qk_rope_head_dim": 8,
                        "qk_nope_head_dim": 16, "v_head_dim": 16, "intermediate_size": 128, "moe_intermediate_size": 32,
                        "n_routed_experts": 4, "num_experts_per_tok": 2, "n_shared_experts": 1,
                        "first_k_dense_replace": 1, "vocab_size": 100, "max_position_embeddings": 4096,
                        "rope_scaling": {"type": "yarn", "factor": 40, "original_max_position_embeddings": 128}})
    assert (m.attention, m.num_kv_heads, m.head_dim, m.kv_lora_rank, m.qk_rope_head_dim) == ("mla", 1, 24, 16, 8)
    assert kv_bytes_per_token(m) == 3 * (16 + 8) * 2 == 144  # one latent + the RoPE key per layer, no V
    assert m.mla == {"q_lora_rank": 32, "qk_nope_head_dim": 16, "v_head_dim": 16}
    assert m.moe == {"experts": 4, "experts_per_token": 2, "expert_intermediate": 32, "layers": 2}
    attention = (64 * 32 + 32 + 32 * 4 * 24) + (64 * 24 + 16 + 16 * 4 * 32) + 4 * 16 * 64  # q_a/norm/q_b, kv_a/norm/kv_b, o
    assert attention == 12_848
    dense = attention + 3 * 64 * 128 + 128
    moe = attention + 64 * 4 + 4 * 3 * 64 * 32 + 3 * 64 * 32 + 128  # router, routed experts, the shared one
    assert m.total_params == dense + 2 * moe + 2 * 6_400 + 64 == 138_320
    assert m.active_params == 138_320 - 2 * 2 * 3 * 64 * 32
    assert m.max_model_len == 4096  # yarn: max_position_embeddings already scaled


def test_gemma2_sliding_window_by_hand(tmp_path):
    m = read(tmp_path, {**LLAMA, "model_type": "gemma2", "num_hidden_layers": 4, "head_dim": 16, "sliding_window": 32,
                        "tie_word_embeddings": None})
    assert m.kv_groups == ({"kind": "sliding_window", "layers": 2, "window": 32}, {"kind": "full", "layers": 2})
    assert (m.sliding_window, m.sliding_window_layers) == (32, 2)
    assert kv_bytes_per_token(m, layers="all") == 512 and kv_bytes_per_token(m, layers="full") == 256
    assert m.tie_word_embeddings  # Gemma2Config's default
    assert m.total_params == 4 * (12_288 + 24_576 + 4 * 64) + 6_400 + 64 == 154_944  # four norms a layer, tied


def test_gemma3_pattern_and_text_config(tmp_path):
    text = {**LLAMA, "model_type": "gemma3_text", "num_hidden_layers": 12, "head_dim": 16, "sliding_window": 8,
            "sliding_window_pattern": 6, "rope_scaling": {"rope_type": "linear", "factor": 8}}
    m = read(tmp_path, {"model_type": "gemma3", "text_config": text})
    assert m.kv_groups == ({"kind": "sliding_window", "layers": 10, "window": 8}, {"kind": "full", "layers": 2})
    assert m.max_model_len == 2048  # gemma3: vLLM applies no RoPE factor
    assert "text_config" in m.notes


def test_llama4_chunked_local(tmp_path):
    text = {**LLAMA, "model_type": "llama4_text", "num_hidden_layers": 4, "attention_chunk_size": 64,
            "num_local_experts": 2, "num_experts_per_tok": 1, "intermediate_size_mlp": 256}
    m = read(tmp_path, {"model_type": "llama4", "text_config": text})
    assert m.kv_groups == ({"kind": "chunked_local", "layers": 3, "chunk": 64}, {"kind": "full", "layers": 1})
    assert m.moe["layers"] == 4 and m.full_attention_layers == 1


def test_qwen3_next_gated_deltanet_state(tmp_path):
    m = read(tmp_path, {**LLAMA, "model_type": "qwen3_next", "num_hidden_layers": 4, "full_attention_interval": 2,
                        "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 8,
                        "linear_value_head_dim": 8, "linear_conv_kernel_dim": 4, "num_experts": 4,
                        "num_experts_per_tok": 2, "moe_intermediate_size": 16})
    # conv (3, 2*2*8 + 4*8 = 64) x 2 B + recurrent (4, 8, 8) x 2 B
    assert m.kv_groups == ({"kind": "mamba", "layers": 2, "state_bytes": 3 * 64 * 2 + 4 * 8 * 8 * 2},
                           {"kind": "full", "layers": 2})
    assert m.kv_layers == 2 and kv_bytes_per_token(m) == 2 * 2 * 2 * 16 * 2
    assert m.linear_attention == {"kind": "gated_deltanet", "k_heads": 2, "v_heads": 4, "head_k_dim": 8,
                                  "head_v_dim": 8, "conv_kernel": 4}


def test_nemotron_h_mamba2_state(tmp_path):
    m = read(tmp_path, {**LLAMA, "model_type": "nemotron_h", "num_hidden_layers": 4, "hybrid_override_pattern": "M*M-",
                        "mamba_num_heads": 4, "mamba_head_dim": 8, "ssm_state_size": 16, "n_groups": 1,
                        "conv_kernel": 4})
    # conv (3, 32 + 2*1*16 = 64) x 2 B + SSM (4, 8, 16) x 4 B (float32, vLLM's Nemotron-H default)
    assert m.kv_groups == ({"kind": "mamba", "layers": 2, "state_bytes": 384 + 2048}, {"kind": "full", "layers": 1})
    assert m.num_layers == 4 and m.kv_layers == 1 and m.mamba_layers == 2


def test_granite_hybrid_state(tmp_path):
    m = read(tmp_path, {**LLAMA, "model_type": "granitemoehybrid", "num_hidden_layers": 4,
                        "layer_types": ["mamba", "attention", "mamba", "mamba"], "mamba_n_heads": 4,
                        "mamba_d_head": 32, "mamba_d_state": 16, "mamba_n_groups": 1, "mamba_d_conv": 4,
                        "mamba_expand": 2, "shared_intermediate_size": 128})
    # conv (3, 128 + 32 = 160) x 2 B + SSM (4, 32, 16) x 2 B
    assert m.kv_groups == ({"kind": "mamba", "layers": 3, "state_bytes": 960 + 4096}, {"kind": "full", "layers": 1})


def test_a_model_directory(tmp_path):
    write(tmp_path, LLAMA)
    m = get_model(str(tmp_path))
    assert kv_bytes_per_token(m) == 256 and m.name == str(tmp_path)
    assert get_model(tmp_path) == m  # a Path too


def test_catalog_names_still_win_and_did_you_mean(tmp_path):
    assert get_model("llama3.1-8b").name == "Llama-3.1-8B"
    with pytest.raises(ConfigError, match=r"did you mean Llama-3\.1-8B"):
        get_model("lama-3.1-8b")


BAD = [
    ({**LLAMA, "model_type": "bert"}, "model_type: 'bert' is not an architecture kvreplay can read"),
    ({**LLAMA, "layer_types": ["full_attention", "sparse_attention"]},
     "layer_types[1]: 'sparse_attention' is not a layer kind kvreplay knows"),
    ({**LLAMA, "model_type": "nemotron_h", "hybrid_override_pattern": "X*"},
     "hybrid_override_pattern: layer 0: 'X' is not a layer kind kvreplay knows (M: Mamba-2, *: attention"),
    ({k: v for k, v in LLAMA.items() if k != "hidden_size"}, "hidden_size: missing"),
    ({**LLAMA, "hidden_size": "64"}, 'hidden_size: must be a whole number, got "64"'),
    ({**LLAMA, "num_attention_heads": True}, "num_attention_heads: must be a whole number, got true"),
    ({**LLAMA, "num_hidden_layers": -2}, "num_hidden_layers: must be at least 1, got -2"),
    ({**LLAMA, "num_hidden_layers": 2.5}, "num_hidden_layers: must be a whole number, got 2.5"),
    ({**LLAMA, "hidden_size": 10**12}, "hidden_size: 1,000,000,000,000 is beyond any real model"),
    ({**LLAMA, "num_key_value_heads": 3}, "num_key_value_heads: 3 does not divide num_attention_heads 4"),
    ({**LLAMA, "quantization_config": {"quant_method": "awq"}},
     "quantization_config.quant_method: 'awq' weights are not a format kvreplay sizes"),
    ({**LLAMA, "model_type": "mixtral", "num_local_experts": 2, "num_experts_per_tok": 3},
     "num_experts_per_tok: 3 is more than the 2 experts"),
    ({"model_type": "gemma3", "text_config": []}, "text_config: must be a JSON object"),
    ("{\n  \"model_type\": ", "config.json:2: not valid JSON"),
    ("[1, 2]", "a config.json holds a JSON object, not a list"),
]


@pytest.mark.parametrize("config, message", BAD, ids=[m[:40] for _, m in BAD])
def test_refusals_name_the_file_and_key(tmp_path, config, message):
    path = write(tmp_path, config)
    with pytest.raises(ModelConfigError) as err:
        get_model(str(path))
    assert str(err.value).startswith(str(path)) and message in str(err.value), str(err.value)
    assert isinstance(err.value, ConfigError)


def test_files_that_are_not_configs(tmp_path):
    with pytest.raises(ModelConfigError, match=r"missing\.json: no such file or directory$"):
        get_model(str(tmp_path / "missing.json"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelConfigError, match=r"empty: a directory without a config\.json$"):
        get_model(str(tmp_path / "empty"))
    big = write(tmp_path, " " * (MAX_CONFIG_BYTES + 1), "big.json")
    with pytest.raises(ModelConfigError, match="larger than 4 MiB: not a config.json"):
        get_model(str(big))
    deep = write(tmp_path, "[" * 100_000 + "]" * 100_000, "deep.json")
    with pytest.raises(ModelConfigError, match="deep.json"):
        get_model(str(deep))


def test_the_api_names_the_argument(tmp_path):
    path = write(tmp_path, {**LLAMA, "hidden_size": -1})
    with pytest.raises(ConfigError, match=r"config\.json: hidden_size: must be at least 1, got -1"):
        resolve_capacities(["80GiB"], 512, model=str(path))
    with pytest.raises(ConfigError, match="model must be a catalog name or a path to a config.json, got int"):
        get_model(42)
    blocks, budget = resolve_capacities(["80GiB"], 512, model=str(write(tmp_path, LLAMA)))
    assert blocks == [80 * 2**30 // (256 * 512)] and budget["bytes_per_token"] == 256


def test_every_layer_sliding(tmp_path):
    # Mistral-7B-v0.1 style: sliding_window on a mistral config slides every layer; there is no
    # full-attention figure, and describe() says so instead of failing
    from kvreplay.catalog.models import describe

    m = read(tmp_path, {**LLAMA, "model_type": "mistral", "sliding_window": 4096})
    assert m.kv_groups == ({"kind": "sliding_window", "layers": 2, "window": 4096},)
    assert m.sliding_window_pattern == "every layer uses the 4096-token window" and m.full_attention_layers == 0
    assert describe(m)["kv_bytes_per_token"] == {"all": {"bf16": 256, "fp8": 128}, "full": {"bf16": None, "fp8": None}}
