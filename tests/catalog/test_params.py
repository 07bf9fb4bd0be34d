"""Parameter counts computed from each bundled config.json against the published figure (model card
or release post, cited in configs/catalog.json).

Tolerance: half a unit of the published figure's last digit ("7B" is 6.5B-7.5B, "7.61B" is
7.605B-7.615B) plus 3% of it, for what a card may count that the config does not give or the reader
does not read: a vision encoder (Llama-4-Scout's 109B includes one: 107.8B here, -1.1%),
multi-token-prediction modules (DeepSeek-V3's 14B MTP module, MiniMax-M2.5's three), norms and
biases a card rounds away. For active parameters a card may leave out the input embedding (a row
lookup, no multiply): gpt-oss-20b's 3.6B is 4.19B less its 0.58B embedding, Qwen3-Next's 3B is 3.88B
less 0.31B, DeepSeek-V2-Lite's 2.4B is 2.66B less 0.21B; either count is accepted.
"""

from __future__ import annotations

import pytest

from kvreplay.catalog.hf_config import read_config
from kvreplay.catalog.models import catalog, catalog_config, catalog_entry

READ = [m for m in catalog() if catalog_entry(m.name)["config"] is not None]


def tolerance(published: int) -> float:
    digits = str(published)
    half_unit = 10 ** (len(digits) - len(digits.rstrip("0"))) / 2
    return half_unit + 0.03 * published


@pytest.mark.parametrize("model", READ, ids=[m.name for m in READ])
def test_counts_match_the_published_figure(model):
    reading = read_config(catalog_config(model.name), model.name)
    published = catalog_entry(model.name)["published_params"]
    assert published["source"]
    assert abs(reading.total_params - published["total"]) <= tolerance(published["total"]), reading.total_params
    embedding = model.vocab_size * model.hidden_size
    assert min(abs(active - published["active"]) for active in (reading.active_params, reading.active_params - embedding)) \
        <= tolerance(published["active"]), reading.active_params


def test_exact_where_the_card_gives_every_digit():
    # Hugging Face pages list these to the parameter (safetensors metadata)
    exact = {"Llama-2-7B": 6_738_415_616, "Llama-3.2-1B-Instruct": 1_235_814_400, "gemma-3-1b-it": 999_885_952,
             "gemma-2-2b-it": 2_614_341_888, "Qwen2.5-1.5B": 1_543_714_304, "Llama-3.1-8B": 8_030_261_248}
    by_name = {m.name: m for m in catalog()}
    assert {name: by_name[name].total_params for name in exact} == exact


def test_the_catalog_states_published_counts_only_where_it_always_did():
    # the former entries that gave a model card's count keep it (the roofline's weights were fitted
    # with them); every other model, and any config.json given by path, uses the computed count
    for m in READ:
        entry = catalog_entry(m.name)
        reading = read_config(catalog_config(m.name), m.name)
        if entry.get("params") == "published":
            assert (m.total_params, m.active_params) == (entry["published_params"]["total"],
                                                         entry["published_params"]["active"])
        else:
            assert (m.total_params, m.active_params) == (reading.total_params, reading.active_params)
