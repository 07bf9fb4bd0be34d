"""`kvreplay plan --emit vllm|sglang|k8s` (serving/emit.py): the chosen deployment as the engines'
launch commands. Every emitted flag is one the engine's parser accepts, with a value it accepts:
checked against tests/data/engine_flags.json, the parsers' own tables (refreshed by the opt-in
tests/real_engines/test_emit_flags.py, which parses every command with the real parsers)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvreplay.errors import ConfigError
from kvreplay.serving.emit import emit

from emit_cases import CASES, commands, plan_of

TABLE = json.loads((Path(__file__).resolve().parents[1] / "data" / "engine_flags.json").read_text())
VERSIONS = {"vllm": "vllm 0.33.0", "sglang": "sglang 0.5.23", "sglang-router": "sglang-router 0.3.2"}


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_emitted_flag_is_the_engines(case):
    kind, plan = CASES[case]
    seen = set()
    for engine, argv in commands(emit(plan, kind), kind):
        flags = TABLE[VERSIONS[engine]]
        seen.add(engine)
        k = 0
        while k < len(argv):
            flag = argv[k]
            assert flag in flags, f"{engine} has no {flag}"
            spec = flags[flag]
            k += 1
            if not spec["value"]:
                continue
            values = []
            while k < len(argv) and not argv[k].startswith("--"):
                values.append(argv[k])
                k += 1
            assert values, f"{engine} {flag} takes a value"
            if spec["choices"] is not None:
                assert all(v in spec["choices"] for v in values), (flag, values, spec["choices"])
    assert "sglang-router" in seen and seen & {"vllm", "sglang"}


def test_the_vllm_command_by_hand():
    kind, plan = CASES["vllm dram fp8 tp2 kv-aware"]
    text = emit(plan, kind)
    engine, argv = commands(text, kind)[0]
    assert engine == "vllm"
    assert argv == ["--model", "meta-llama/Llama-3.1-8B", "--tensor-parallel-size", "2", "--max-num-batched-tokens",
                    "8192", "--max-num-seqs", "256", "--gpu-memory-utilization", "0.92", "--enable-prefix-caching",
                    "--enable-chunked-prefill", "--max-model-len", "32768", "--dtype", "bfloat16", "--quantization",
                    "fp8", "--kv-cache-dtype", "fp8", "--kv-offloading-size", "256", "--kv-offloading-backend", "native"]
    # two instances (one line each) and the router over both, with what its policy approximates
    assert text.count("vllm serve --model") == 2
    assert ("--worker-urls http://llama-3-1-8b-h100-tp2-x1-0:8000 http://llama-3-1-8b-h100-tp2-x1-1:8000 --policy "
            "cache_aware --backend openai") in text
    assert "# router: kvreplay's kv-aware is NVIDIA Dynamo's KV router" in text


def test_the_memory_flags_state_the_values_the_plan_sized_its_pool_with():
    # vLLM: the plan's utilization when it was given, else vLLM 0.33.0's default (0.92)
    for case, value in (("vllm 70B tp4 least-loaded", "0.85"), ("vllm plain", "0.92")):
        kind, plan = CASES[case]
        engine, argv = commands(emit(plan, kind), kind)[0]
        assert argv[argv.index("--gpu-memory-utilization") + 1] == value
    # SGLang: its own default for an H100 at TP 2 (timing/sglang_memory.py): reserved 512 + 8,192 x 1.5
    # + 2 / 8 x 1,024 + 256 decode graphs x 2 + 58 prefill graphs x 8 = 14,032 MiB of the
    # 81,121.28 MiB the device reports: round(67,089.28 / 81,121.28, 3) = 0.827, not vLLM's figure
    kind, plan = CASES["sglang dram fp8 tp2 sglang-router"]
    engine, argv = commands(emit(plan, kind), kind)[0]
    assert engine == "sglang" and argv[argv.index("--mem-fraction-static") + 1] == "0.827"


def test_what_no_flag_says_is_a_comment():
    kind, plan = CASES["vllm ssd lru int4 session"]
    text = emit(plan, kind)
    assert "# note: an SSD tier (2048 GiB) has no vLLM flag" in text
    assert "# note: the plan's policy lru is not vLLM's" in text
    assert "# note: int4 weights: serve an int4 checkpoint" in text
    assert "--policy manual" in text and "routing key" in text


def test_sglang_hicache_per_rank():
    # 256 GiB per instance over 2 TP ranks: each rank's host pool is floor(256 x 2^30 / 1e9 / 2) = 137 GB
    kind, plan = CASES["sglang dram fp8 tp2 sglang-router"]
    text = emit(plan, kind)
    engine, argv = commands(text, kind)[0]
    assert engine == "sglang" and argv[argv.index("--hicache-size") + 1] == "137"
    assert "--enable-hierarchical-cache" in argv and argv[argv.index("--kv-cache-dtype") + 1] == "fp8_e4m3"
    assert "--policy cache_aware --backend sglang" in text and "# router:" not in text  # (SGLang's own policy)


def test_k8s_manifest():
    kind, plan = CASES["k8s vllm dram"]
    text = emit(plan, kind)
    docs = text.split("\n---\n")
    assert len(docs) == 4  # the engine's Deployment and Service, the router's Deployment and Service
    assert "kind: Deployment" in docs[0] and "  replicas: 3" in docs[0] and "nvidia.com/gpu: 2" in docs[0]
    assert "image: vllm/vllm-openai:v0.33.0" in docs[0] and "clusterIP: None" in docs[1]
    assert "- --service-discovery" in docs[2] and '- "app=llama-3-1-8b-h100-tp2-x1"' in docs[2]
    assert "kind: Service" in docs[3] and "port: 8080" in docs[3]


def test_refusals():
    empty = plan_of({})
    empty["loads"][0]["best"] = None
    with pytest.raises(ConfigError, match="no load has a deployment that meets the SLOs"):
        emit(empty, "vllm")
    with pytest.raises(ConfigError, match="plan with --engine-style sglang"):
        emit(plan_of({}), "sglang")
    with pytest.raises(ConfigError, match="--emit must be one of vllm, sglang, k8s"):
        emit(plan_of({}), "docker")


def test_cli_emit(tmp_path):
    from conftest import jsonl, write
    from test_cli import fails, kv

    lines = jsonl(*[{"timestamp": 0, "input_length": 4, "output_length": 1, "hash_ids": [k]} for k in range(8)])
    trace = write(tmp_path, "eight.jsonl", lines)
    profile = write(tmp_path, "one.json", json.dumps({"format": "kvreplay-step-polynomial", "unit": "s",
                                                       "terms": [{"coef": 1.0}]}))
    base = ("plan", trace, "--model", "Llama-3.1-8B", "--slo-ttft-p90", "2s", "--block-size", "4", "--time-model",
            profile, "--price", "H100=2/h", "--tp", "1")
    r = kv(*base, "--emit", "vllm")
    assert r.returncode == 0, r.stderr.decode()
    out = r.stdout.decode()
    assert out.startswith("#!/bin/sh") and "vllm serve --model meta-llama/Llama-3.1-8B --tensor-parallel-size 1" in out
    assert "best  chosen" not in out  # (the commands replace the table)
    assert "--emit sglang deploys the sglang engine: plan it with --engine-style sglang" in fails(*base, "--emit",
                                                                                                  "sglang")
    r = kv(*base, "--emit", "sglang", "--engine-style", "sglang")
    assert r.returncode == 0 and "python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B" in \
        r.stdout.decode()


def test_a_plan_without_its_utilization_is_deployed_with_a_comment_saying_so():
    # "vllm plain" records no utilization (a plan of an older kvreplay): the flag is today's default
    # and a comment says the plan's pools may have been sized at another
    kind, plan = CASES["vllm plain"]
    text = emit(plan, kind)
    assert "# note: the plan does not record the GPU memory utilization its pools were sized at" in text
    kind, plan = CASES["vllm 70B tp4 least-loaded"]
    assert "does not record the GPU memory utilization" not in emit(plan, kind)
