"""Capacities as byte budgets on the command line (--capacity 80GiB --model ...), and `kvreplay models`."""

from __future__ import annotations

import csv
import io
import json

import pytest

from kvreplay.cli import main

GiB = 2**30
MiB = 2**20

# Block size 512 (kvreplay's default; Mooncake traces declare none). Every request is two blocks.
#   r1 [1,2] len 1024 | r2 [3,4] len 1024 | r3 [1,2] len 1024          prompt tokens 3 x 1024 = 3072
# LRU, 2 blocks: r2 evicts 1 and 2, so r3 misses -> 0 hit tokens.
# LRU, 4 blocks: nothing is evicted; r3 hits both blocks -> min(2 x 512, 1024) = 1024 hit tokens.
# With --bytes-per-token 1 MiB a block is 1 MiB x 512 = 512 MiB: 1 GiB = 2 blocks, 2 GiB = 4 blocks,
# 2.4 GiB = 2,576,980,377 B -> floor(4.8) = 4 blocks.
LINES = [
    {"timestamp": 0, "input_length": 1024, "output_length": 10, "hash_ids": [1, 2]},
    {"timestamp": 1, "input_length": 1024, "output_length": 10, "hash_ids": [3, 4]},
    {"timestamp": 2, "input_length": 1024, "output_length": 10, "hash_ids": [1, 2]},
]


@pytest.fixture
def trace(tmp_path):
    path = tmp_path / "tiny.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in LINES))
    return str(path)


def run_json(capsys, *argv):
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


RUN = ["run", "--policy", "lru", "--engine", "reference", "--json", "--summary-only"]


@pytest.mark.parametrize("size, blocks, hits", [("1GiB", 2, 0), ("2GiB", 4, 1024), ("2.4GiB", 4, 1024)])
def test_run_size_equals_block_count(capsys, trace, size, blocks, hits):
    by_size = run_json(capsys, *RUN, trace, "--capacity", size, "--bytes-per-token", str(MiB))
    by_blocks = run_json(capsys, *RUN, trace, "--capacity", str(blocks))
    assert by_size["cache_capacity_blocks"] == by_blocks["cache_capacity_blocks"] == blocks
    assert by_size["total_hit_tokens"] == by_blocks["total_hit_tokens"] == hits
    assert "budget" not in by_blocks
    budget = by_size["budget"]
    assert budget["bytes_per_token"] == MiB and budget["block_size"] == 512 and budget["bytes_per_block"] == 512 * MiB
    assert budget["model"] is None
    point = budget["capacities"][0]
    assert point["requested"] == size and point["cache_capacity_blocks"] == blocks
    assert point["cache_bytes"] == blocks * 512 * MiB


def test_run_with_a_model(capsys, trace):
    # Llama-3.1-8B bf16: 2 x 32 x 8 x 128 x 2 = 131,072 B/token; x 512 = 64 MiB per block; 80 GiB -> 1280 blocks
    doc = run_json(capsys, *RUN, trace, "--capacity", "80GiB", "--model", "meta-llama/Llama-3.1-8B-Instruct")
    assert doc["cache_capacity_blocks"] == 1280 and doc["total_hit_tokens"] == 1024
    assert doc["budget"] == {
        "model": "Llama-3.1-8B", "hf_id": "meta-llama/Llama-3.1-8B", "kv_dtype": "bf16", "kv_layers": "all",
        "bytes_per_token": 131_072, "block_size": 512, "bytes_per_block": 64 * MiB,
        "capacities": [{"cache_capacity_blocks": 1280, "cache_bytes": 80 * GiB, "requested": "80GiB",
                        "budget_bytes": 80 * GiB}],
    }
    # fp8 halves the bytes per token: the same 80 GiB holds 2560 blocks
    doc = run_json(capsys, *RUN, trace, "--capacity", "80GiB", "--model", "llama-3.1-8b", "--kv-dtype", "fp8")
    assert doc["cache_capacity_blocks"] == 2560 and doc["budget"]["kv_dtype"] == "fp8"


def test_block_size_option_changes_the_conversion(capsys, tmp_path):
    # block size 256: a block is 1 MiB x 256 = 256 MiB, so 1 GiB = 4 blocks; a trace hashed at 256
    # (4 ids per 1024 tokens): the resend hits all 4 blocks, min(1024, 1024) = 1024
    path = tmp_path / "t256.jsonl"
    path.write_text('{"input_length": 1024, "hash_ids": [1, 2, 3, 4]}\n' * 2)
    doc = run_json(capsys, *RUN, str(path), "--block-size", "256", "--capacity", "1GiB", "--bytes-per-token", str(MiB))
    assert doc["cache_capacity_blocks"] == 4 and doc["budget"]["block_size"] == 256
    assert doc["total_hit_tokens"] == 1024


def test_run_summary_shows_the_bytes(capsys, trace):
    assert main(["run", trace, "--policy", "lru", "--engine", "reference", "--capacity", "2GiB",
                 "--bytes-per-token", str(MiB)]) == 0
    out = capsys.readouterr().out
    assert "cache     4 blocks x 512 tokens = 2 GiB (2,147,483,648 B) of KV; budget 2GiB = 2,147,483,648 B" in out
    assert "KV 1,048,576 B/token (as given), 512 MiB per 512-token block" in out
    assert "hits      1,024 of 3,072 prompt tokens" in out


def test_sweep_sizes(capsys, trace):
    doc = run_json(capsys, "sweep", trace, "--policies", "lru,fifo", "--engine", "reference", "--json",
                   "--capacities", "1GiB,2GiB", "--bytes-per-token", str(MiB))
    got = [(r["policy"], r["cache_capacity_blocks"], r["total_hit_tokens"]) for r in doc["results"]]
    # FIFO gives the same numbers: at 2 blocks r2 evicts both of r1's blocks, at 4 nothing is evicted
    assert got == [("lru", 2, 0), ("lru", 4, 1024), ("fifo", 2, 0), ("fifo", 4, 1024)]
    assert [(c["requested"], c["cache_capacity_blocks"], c["budget_bytes"]) for c in doc["budget"]["capacities"]] == [
        ("1GiB", 2, GiB), ("2GiB", 4, 2 * GiB)]


def test_sweep_table_shows_the_bytes(capsys, trace):
    assert main(["sweep", trace, "--policies", "lru", "--engine", "reference", "--capacities", "2,4",
                 "--model", "gpt-oss-120b", "--kv-layers", "full"]) == 0
    out = capsys.readouterr().out
    # gpt-oss-120b, full-attention layers only: 2 x 18 x 8 x 64 x 2 = 36,864 B/token; x 512 = 18 MiB per block
    assert "KV 36,864 B/token (gpt-oss-120b, bf16, full-attention layers only), 18 MiB per 512-token block" in out
    header = next(line for line in out.splitlines() if line.startswith("policy"))
    assert header.split()[:5] == ["policy", "params", "capacity", "KV", "bytes"]
    assert "36 MiB" in out and "72 MiB" in out   # 2 and 4 blocks


def test_mrc_sizes_and_csv(capsys, trace, tmp_path):
    out_csv = tmp_path / "curve.csv"
    doc = run_json(capsys, "mrc", trace, "--json", "--capacities", "1GiB,2GiB", "--bytes-per-token", str(MiB),
                   "--output", str(out_csv))
    assert [(p["cache_capacity_blocks"], p["total_hit_tokens"]) for p in doc["points"]] == [(2, 0), (4, 1024)]
    assert doc["budget"]["capacities"][1]["cache_bytes"] == 2 * GiB
    # the CSV is tidy: kv_bytes an integer (blocks x 512 tokens x 1 MiB per token) and kv_gib its GiB, no "1 GiB" text
    rows = list(csv.DictReader(io.StringIO(out_csv.read_text())))
    assert [(r["policy"], r["cache_capacity_blocks"], r["kv_bytes"], r["kv_gib"], r["total_hit_tokens"]) for r in rows] == [
        ("lru", "2", str(GiB), "1.0", "0"), ("lru", "4", str(2 * GiB), "2.0", "1024")]
    assert [p["kv_bytes"] for p in doc["points"]] == [GiB, 2 * GiB]


def test_auto_capacities_with_a_model(capsys, trace):
    # 4 unique blocks <= 16: auto is the single capacity 16 (analysis/sweep.py auto_capacities)
    doc = run_json(capsys, "mrc", trace, "--json", "--model", "Qwen3-8B")
    assert [p["cache_capacity_blocks"] for p in doc["points"]] == [16]
    # Qwen3-8B: 2 x 36 x 8 x 128 x 2 = 147,456 B/token; 16 blocks x 512 x 147,456 = 1,207,959,552 B
    assert doc["budget"]["capacities"] == [{"cache_capacity_blocks": 16, "cache_bytes": 1_207_959_552}]


def test_models_table(capsys):
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    llama = next(line for line in out.splitlines() if line.startswith("Llama-3.1-8B "))
    assert llama.split()[:8] == ["Llama-3.1-8B", "gqa", "32", "8", "128", "-", "131,072", "65,536"]
    assert "https://huggingface.co/meta-llama/Llama-3.1-8B/blob/main/config.json" in llama
    gemma = next(line for line in out.splitlines() if line.startswith("gemma-3-27b-it "))
    assert "52 sw1024 + 10 full" in gemma and "507,904" in gemma and "81,920" in gemma
    deepseek = next(line for line in out.splitlines() if line.startswith("DeepSeek-V3 "))
    assert deepseek.split()[:7] == ["DeepSeek-V3", "mla", "61", "1", "576", "-", "70,272"]
    assert "37B / 671B" in deepseek
    assert "--kv-layers full counts only full-attention layers" in out
    # the checkpoint's weights: bf16 unless the catalog says otherwise
    assert llama.split()[-2] == "bf16" and deepseek.split()[-2] == "fp8-block"
    gpt_oss = next(line for line in out.splitlines() if line.startswith("gpt-oss-120b "))
    assert gpt_oss.split()[-2] == "mxfp4"


def test_models_json(capsys):
    doc = run_json(capsys, "models", "--json")
    assert len(doc["models"]) >= 15
    by_name = {m["name"]: m for m in doc["models"]}
    assert by_name["Llama-3.1-8B"]["kv_bytes_per_token"]["all"] == {"bf16": 131_072, "fp8": 65_536}
    assert by_name["Qwen3-235B-A22B"]["active_params"] == 22_000_000_000
    assert by_name["gpt-oss-120b"]["checkpoint_weights"] == "mxfp4"
    assert "quant_method mxfp4" in by_name["gpt-oss-120b"]["checkpoint_weights_source"]
    assert by_name["Llama-3.1-8B"]["checkpoint_weights"] is None


@pytest.mark.parametrize("argv, message", [
    (["--capacity", "1GiB"], "kvreplay: capacity 1GiB is a size: give --model NAME (and --kv-dtype) or --bytes-per-token N"),
    (["--capacity", "1GiB", "--model", "lama-3.1-8b"], "unknown model 'lama-3.1-8b'; did you mean Llama-3.1-8B"),
    (["--capacity", "1GiB", "--model", "Llama-3.1-8B", "--bytes-per-token", "9"], "give --model or --bytes-per-token, not both"),
    (["--capacity", "4", "--kv-dtype", "fp8"], "--kv-dtype and --kv-layers need --model"),
    (["--capacity", "1GiB", "--model", "Llama-3.1-8B", "--kv-dtype", "fp7"], "unknown KV dtype 'fp7'"),
    # 1 KiB < 64 MiB, one block of Llama-3.1-8B at bf16
    (["--capacity", "1KiB", "--model", "Llama-3.1-8B"], "a budget of 1 KiB holds no block of 512 tokens (64 MiB each"),
])
def test_run_errors_exit_2(capsys, trace, argv, message):
    assert main(["run", trace, "--policy", "lru", "--engine", "reference", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


@pytest.mark.parametrize("argv, message", [
    (["run", "--capacity", "80XB"], "kvreplay run: --capacity: not a size: '80XB'"),
    (["run", "--capacity", "80Gb"], "kvreplay run: --capacity: 80Gb is in bits; write 80GB or 80GiB"),
    (["run", "--capacity", "1.5"], "kvreplay run: --capacity: expected a whole number"),
    (["sweep", "--capacities", "1GiB,oops"], "kvreplay sweep: --capacities: capacities: not a size: 'oops'"),
    (["mrc", "--capacities", "0"], "kvreplay mrc: --capacities: capacities: must be >= 1"),
])
def test_bad_sizes_are_usage_errors(capsys, trace, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        main([argv[0], trace, *argv[1:]])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.startswith(message)  # the message first, then one usage line


def test_sweep_size_without_a_model_exits_2(capsys, trace):
    assert main(["sweep", trace, "--policies", "lru", "--engine", "reference", "--capacities", "4,16GiB"]) == 2
    assert "capacity 16GiB is a size" in capsys.readouterr().err
