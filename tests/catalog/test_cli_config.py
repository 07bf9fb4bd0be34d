"""--model PATH on the command line: a config.json (or a model directory) sizes run's budgets and
simulate's pool the same way the catalog name does; a bad one exits 2 naming the file and the key."""

from __future__ import annotations

import json
import re

import pytest

from conftest import MOONCAKE, shared_path
from kvreplay.catalog.models import catalog_config
from kvreplay.cli import main

# 64 wide, 2 layers of 2 KV heads of 16: 2 x 2 x 2 x 16 x 2 B = 256 KV bytes per token at bf16
TOY = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
       "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 4096}
LINES = [{"timestamp": 0, "input_length": 1024, "output_length": 10, "hash_ids": [1, 2]},
         {"timestamp": 1, "input_length": 1024, "output_length": 10, "hash_ids": [1, 3]}]


@pytest.fixture
def trace(tmp_path):
    path = tmp_path / "two.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in LINES))
    return str(path)


def test_run_80gib_with_a_config_path(tmp_path, trace, capsys):
    config = tmp_path / "toy" / "config.json"
    config.parent.mkdir()
    config.write_text(json.dumps(TOY))
    for model in (str(config), str(config.parent)):  # the file, or the directory holding it
        assert main(["run", trace, "--capacity", "80GiB", "--model", model, "--json"]) == 0
        budget = json.loads(capsys.readouterr().out)["budget"]
        assert budget["model"] == model and budget["bytes_per_token"] == 256
        assert budget["capacities"][0]["cache_capacity_blocks"] == 80 * 2**30 // (256 * 512) == 655_360


def test_simulate_with_a_config_path_sizes_the_pool_as_the_catalog_name(tmp_path, capsys):
    # the catalog's Llama-3.1-8B is its bundled config.json: a copy of that file, given by path, gives
    # the same pool on an H100 (weights, KV bytes per token, block count)
    rows = [json.loads(line) for line in shared_path(MOONCAKE / "conversation_trace.jsonl").open()][:30]
    trace = tmp_path / "head.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = tmp_path / "config.json"
    config.write_text(json.dumps(catalog_config("Llama-3.1-8B")))
    pools = []
    for model in ("Llama-3.1-8B", str(config)):
        assert main(["simulate", str(trace), "--model", model, "--gpu", "H100"]) == 0
        out = capsys.readouterr().out
        pool = next(line for line in out.splitlines() if line.startswith("pool"))
        pools.append(pool.replace(model, "MODEL"))
        assert re.search(r"TTFT +\d", out)
    assert pools[0] == pools[1] and "131,072 KV bytes per token per GPU" in pools[0]


@pytest.mark.parametrize("config, message", [
    ({**TOY, "model_type": "bert"}, "config.json: model_type: 'bert' is not an architecture kvreplay can read"),
    ({**TOY, "num_hidden_layers": "two"}, 'config.json: num_hidden_layers: must be a whole number, got "two"'),
    ({**TOY, "hidden_size": -64}, "config.json: hidden_size: must be at least 1, got -64"),
])
def test_a_bad_config_exits_2_naming_file_and_key(tmp_path, trace, capsys, config, message):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    assert main(["run", trace, "--capacity", "80GiB", "--model", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{tmp_path}/{message}") and err.count("\n") == 1 and "Traceback" not in err
    assert main(["run", trace, "--capacity", "80GiB", "--model", str(tmp_path / "nope.json")]) == 2
    assert capsys.readouterr().err == f"{tmp_path}/nope.json: no such file or directory\n"


def test_models_shows_a_config_path_as_the_catalog_reads_it(tmp_path, capsys):
    (tmp_path / "config.json").write_text(json.dumps(TOY))
    assert main(["models", "--model", str(tmp_path), "--model", "Qwen3-8B", "--json"]) == 0
    toy, qwen = json.loads(capsys.readouterr().out)["models"]
    assert toy["name"] == str(tmp_path) and toy["kv_bytes_per_token"]["all"] == {"bf16": 256, "fp8": 128}
    assert toy["total_params"] == 86_848 and toy["source"] == str(tmp_path / "config.json")
    assert qwen["name"] == "Qwen3-8B" and qwen["kv_bytes_per_token"]["all"]["bf16"] == 147_456
    assert main(["models", "--model", str(tmp_path)]) == 0
    assert str(tmp_path) in capsys.readouterr().out


def test_the_api_simulates_a_config_path_as_the_catalog_name(tmp_path):
    # kvreplay.simulate(model=PATH): the same pool and the same simulated run as the catalog's name
    import kvreplay

    trace_file = tmp_path / "t.jsonl"
    trace_file.write_text("".join(json.dumps({"timestamp": 100 * i, "input_length": 1024, "output_length": 8,
                                              "hash_ids": [1, 2 + i]}) + "\n" for i in range(6)))
    trace = kvreplay.load_trace(str(trace_file))
    config = tmp_path / "config.json"
    config.write_text(json.dumps(catalog_config("Llama-3.1-8B")))
    by_name = kvreplay.simulate(trace, model="Llama-3.1-8B", gpu="H100", time_model="roofline-raw", band_runs=False)
    by_path = kvreplay.simulate(trace, model=str(config), gpu="H100", time_model="roofline-raw", band_runs=False)
    assert by_path.capacity_blocks == by_name.capacity_blocks > 0
    assert by_path.first_token_s.tolist() == by_name.first_token_s.tolist() and len(by_path.first_token_s) == 6
