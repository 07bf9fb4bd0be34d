"""The catalog read from its bundled config.json files gives the former hand-written catalog's
values (golden_models.json, the models.json the catalog was before), field by field, for all 24
models: KV bytes per token in every dtype and layer mode, KV groups, MoE / MLA / linear-attention
fields, parameter counts, sizes and max_model_len."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest

from kvreplay.catalog.models import (KV_DTYPES, KV_LAYER_MODES, ModelSpec, catalog, catalog_entry, describe,
                                     kv_bytes_per_token)
from kvreplay.errors import ConfigError

GOLDEN = json.loads((Path(__file__).parent / "golden_models.json").read_text())["models"]
BY_NAME = {m.name: m for m in catalog()}

# What the bundled config.json says where the hand-written catalog did not: Kimi-K2-Instruct's
# config.json has a quantization_config (block fp8, like DeepSeek-V3's), which the old entry missed.
CORRECTIONS = {
    ("Kimi-K2-Instruct", "checkpoint_weights"): "fp8-block",
    ("Kimi-K2-Instruct", "checkpoint_weights_source"):
        "config.json quantization_config: quant_method fp8, fmt e4m3, weight_block_size [128, 128], "
        "activation_scheme dynamic (block-scaled fp8 weights)",
}
# Fields the catalog gained after the golden file (the vision tower, quantized checkpoints' bf16
# parts: checked in tests/serving/test_multimodal_pool.py; MiniMax-M2's q/k norm over every head:
# tests/serving/test_timing.py; gpt-oss's active count without its embedding: the same), not here
LATER_FIELDS = {"vision", "vision_source", "vision_in_total_params", "quantized_keeps_bf16",
                "quantized_keeps_bf16_source", "qk_norm_all_reduce", "active_excludes_embedding"}
# No copy of these two models' config.json could be had: their entries keep the former values.
UNREAD = {"gemma-3-27b-it", "granite-4.0-h-small"}


def golden_spec(entry: dict) -> ModelSpec:
    fields = dict(entry)
    fields["aliases"] = tuple(fields.get("aliases") or ())
    if fields.get("kv_groups"):
        fields["kv_groups"] = tuple(fields["kv_groups"])
    return ModelSpec(**fields)


def test_the_former_catalog_comes_first_in_the_same_order():
    assert [m.name for m in catalog()[:len(GOLDEN)]] == [g["name"] for g in GOLDEN]


@pytest.mark.parametrize("entry", GOLDEN, ids=[g["name"] for g in GOLDEN])
def test_every_field_equal(entry):
    spec = BY_NAME[entry["name"]]
    want = asdict(golden_spec(entry))
    for key, value in asdict(spec).items():
        if key in LATER_FIELDS:
            continue
        expected = CORRECTIONS.get((entry["name"], key), want[key])
        assert value == expected, (entry["name"], key)


@pytest.mark.parametrize("entry", GOLDEN, ids=[g["name"] for g in GOLDEN])
def test_kv_bytes_every_dtype_and_layer_mode(entry):
    spec, golden = BY_NAME[entry["name"]], golden_spec(entry)
    for dtype in KV_DTYPES:
        for layers in KV_LAYER_MODES:
            try:
                want = kv_bytes_per_token(golden, dtype, layers)
            except ConfigError as e:  # no full-attention layer, or half bytes: refused the same way
                with pytest.raises(ConfigError, match=str(e).split(" at ")[0]):
                    kv_bytes_per_token(spec, dtype, layers)
                continue
            assert kv_bytes_per_token(spec, dtype, layers) == want, (dtype, layers)
    skip = {"checkpoint_weights", "checkpoint_weights_source", *LATER_FIELDS}
    assert {k: v for k, v in describe(spec).items() if k not in skip} \
        == {k: v for k, v in describe(golden).items() if k not in skip}


def test_every_model_reads_a_bundled_config_but_two():
    unread = {m.name for m in catalog() if catalog_entry(m.name)["config"] is None}
    assert unread == UNREAD
    for m in catalog():
        entry = catalog_entry(m.name)
        if entry["config"] is not None:
            record = entry["file"]
            assert record["url"].startswith("https://huggingface.co/") and record["copied_from"]["license"]
            assert "commit" in record["copied_from"] or "package" in record["copied_from"], m.name


def test_prose_never_holds_numbers_the_reader_gives():
    # "prose" keeps a former entry's wording of where its numbers came from; the numbers themselves
    # (and every other field) come from config.json, as test_every_field_equal holds
    from kvreplay.catalog.models import PROSE_FIELDS

    for m in catalog():
        assert set(catalog_entry(m.name).get("prose", {})) <= set(PROSE_FIELDS)
