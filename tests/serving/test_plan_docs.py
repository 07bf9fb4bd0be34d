"""The commands and figures docs/plan.md documents, run on the shared traces (skipped without
../shared): the conversation trace at loads 1 and 2, the 70B model, the Claude Code samples and
their agentic double, `--emit`, `report --plan` and the served ranking of `sweep --gpu`."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from conftest import CLAUDE_CODE, MOONCAKE, shared_path
from doc_excerpts import assert_shows, example
from test_cli import fails, kv


def run(*args) -> str:
    r = kv(*args)
    assert r.returncode == 0, r.stderr.decode()
    return r.stdout.decode()


@pytest.fixture(scope="module")
def conversation_plan(tmp_path_factory):
    trace = shared_path(MOONCAKE / "conversation_trace.jsonl")
    d = tmp_path_factory.mktemp("plan")
    out = run("plan", trace, "--model", "Llama-3.1-8B", "--slo-ttft-p90", "2s", "--gpus", "H100,H200", "--loads",
              "1,2", "-o", d / "plan.json", "--cache", d / "runs")
    return trace, d, out


def test_the_conversation_trace_at_loads_1_and_2(conversation_plan):
    _, d, out = conversation_plan
    x1, x2 = out.split("\nload x2: ")
    assert "load x1: 8 configurations tried: 2 meet the SLOs, 6 pruned on cost" in x1
    assert re.search(r"best  chosen   4 x 2 x H100 +3 / 3 / 4 .* 24\.00 .* 8\.18 .*"
                     r"TTFT p90 1\.55 s / 2\.00 s, 2,922-3,222 s, 1,141 req", x1)
    assert re.search(r"2     pruned   3 x 2 x H200 .* at 2: TTFT p90 3\.34 s / 2\.00 s, 822-1,122 s, 880 req", x1)
    assert re.search(r"5     meets    9 x 1 x H100 +7 / 8 / 9 .* 27\.00", x1)
    assert ("judged     10,507 requests arriving from 522 s; warm-up the first 522 s of arrivals (auto: 90% of the "
            "prefix reuse, by hit tokens, looks back at most 522 s)") in x1
    assert "windows    TTFT p90: 10 5-minute windows, each with at least 50 requests" in x1
    assert x2.startswith("8 configurations tried: 3 meet the SLOs, 5 pruned on cost")
    assert re.search(r"best  chosen   2 x 4 x H200 +2 / 2 / 2 .* 32\.00 .* 17\.67 .*"
                     r"TTFT p90 1\.93 s / 2\.00 s, 261-561 s, 1,847 req", x2)
    assert re.search(r"3     meets    6 x 2 x H100 +4 / 4 / 6 .* 36\.00 .* 8\.38 .*"
                     r"TTFT p90 1\.67 s / 2\.00 s, 1,461-1,768 s, 2,295 req", x2)
    assert re.search(r"5     pruned   5 x 2 x H200 .* at 4: TTFT p90 2\.52 s / 2\.00 s, 1,461-1,768 s, 2,295 req", x2)
    assert re.search(r"6     meets    14 x 1 x H100 +11 / 11 / 14 .* 42\.00", x2)
    doc = json.loads((d / "plan.json").read_text())
    assert doc["runs"] == 71 and doc["warmup_spec"] == "auto" and doc["model"] == "Llama-3.1-8B"


def test_the_readme_shows_this_plan(conversation_plan):
    words, excerpt = example("kvreplay plan conversation_trace.jsonl --model Llama-3.1-8B --slo-ttft-p90 2s")
    assert words == ["plan", "conversation_trace.jsonl", "--model", "Llama-3.1-8B", "--slo-ttft-p90", "2s", "--gpus",
                     "H100,H200", "--loads", "1,2"]  # the fixture's command, but for its -o and --cache
    assert_shows(excerpt, conversation_plan[2])


def test_emit_from_the_cached_runs(conversation_plan):
    trace, d, _ = conversation_plan
    out = run("plan", trace, "--model", "Llama-3.1-8B", "--slo-ttft-p90", "2s", "--gpus", "H100,H200", "--emit",
              "vllm", "--cache", d / "runs")
    assert "# llama-3-1-8b-h100-tp2-x1: 4 x 2 x H100 for load 1 (speedup), 24.00 USD/h" in out
    assert out.count("vllm serve --model meta-llama/Llama-3.1-8B --tensor-parallel-size 2 --max-num-batched-tokens "
                     "8192 --max-num-seqs 256 --gpu-memory-utilization 0.92 --enable-prefix-caching "
                     "--enable-chunked-prefill --max-model-len 131072 --dtype bfloat16\n") == 4
    assert "--policy round_robin --backend openai --host 0.0.0.0 --port 8080" in out


def test_report_serves_the_plans_deployment(conversation_plan):
    from html import unescape

    trace, d, _ = conversation_plan
    run("report", trace, "--plan", d / "plan.json", "-o", d / "r.html")
    text = unescape(re.sub(r"<[^>]+>", " ", (d / "r.html").read_text()))
    text = re.sub(r"\s+", " ", text)
    assert ("load x1 4 × 2 × H100, round-robin, vllm, tiers none 1.12 s [1.06 s - 1.34 s] 8.19% 10,507 of 10,507 "
            "(0, 0) yes meets at the pessimistic end of the band: TTFT p90 1.55 s / 2.00 s, 2,922-3,222 s, 1,141 req") in text
    assert re.search(r"load x2 2 × 4 × H200, round-robin, vllm, tiers none [^|]*? 10,507 of 10,507 \(0, 0\) yes meets at "
                     r"the pessimistic end of the band: TTFT p90 1\.93 s / 2\.00 s, 261-561 s, 1,847 req", text)
    assert "differs from the plan's run" not in text and "The ranking differs." in text
    assert "--plan serves the plan's chosen deployment" in fails("report", trace, "--plan", d / "plan.json", "--gpu",
                                                                 "H100", "--model", "Llama-3.1-8B", "-o", d / "x.html")


def test_the_70b_model():
    trace = shared_path(MOONCAKE / "conversation_trace.jsonl")
    out = run("plan", trace, "--model", "Llama-3.1-70B", "--slo-ttft-p90", "2s", "--gpus", "H100,H200")
    assert ("load x1: 8 configurations tried: 1 meets the SLOs, 2 miss at the most instances searched, 1 cannot meet "
            "them on any number of instances, 1 pruned on cost, 3 unfit (vLLM would not start the model)") in out
    assert re.search(r"1     unreachable  - x 2 x H200 .* TTFT p90 3\.06 s / 2\.00 s, 822-1,122 s, 880 req", out)
    assert re.search(r"best  chosen       12 x 8 x H100 +8 / 9 / 12 .* 288\.00 .* TTFT p90 1\.87 s / 2\.00 s, "
                     r"3,222-3,537 s, 1,154 req", out)
    assert re.search(r"misses       64 x 4 x H100 .* TTFT p90 2\.55 s / 2\.00 s, 522-822 s, 967 req", out)
    assert ("the KV cache left on each GPU (6.0 GB after 70.6 GB of weights) holds 36,757 tokens, fewer than one "
            "request at max_model_len 131,072: vLLM refuses to start (lower --max-model-len, or more GPUs)") in out


def test_the_claude_code_samples():
    out = run("plan", shared_path(CLAUDE_CODE), "--model", "Llama-3.1-8B", "--slo-ttft-p90", "2s", "--gpus",
              "H100,H200")
    assert "arrivals   closed loop (the default for claude-code traces)" in out
    assert re.search(r"best  chosen   1 x 1 x H100 +1 / 1 / 1 .* 90\.44 .* TTFT p90 734\.2 ms / 2\.00 s", out)
    assert "judged     31 requests arriving from 136 s" in out
    assert ("windows    TTFT p90: the whole judged span as one window: its 31 requests are fewer than the 50 a window "
            "needs") in out


def test_their_agentic_double():
    import kvreplay
    from kvreplay.trace.synth import synth_like

    big = synth_like(kvreplay.load_trace(str(shared_path(CLAUDE_CODE))), scale_requests=110, seed=0)
    fits = big.take(np.flatnonzero(np.asarray(big.input_length) + np.asarray(big.output_length) <= 131_072))
    p = kvreplay.plan(fits, model="Llama-3.1-8B", slo=kvreplay.SLO(ttft_p90_s=2.0), gpus=["H100", "H200"],
                      max_instances=16)
    block = p["loads"][0]
    assert len(fits) == 2_707
    best = block["best"]
    assert (best["gpu"], best["tp"], best["instances"], best["cost_per_hour"]) == ("H100", 2, 1, 6.0)
    assert round(best["binding"]["value_s"], 2) == 1.89 and best["binding"]["requests"] == 54
    assert best["window_grouping"]["TTFT p90"] == ("1,111 5-minute windows merged with their neighbours into 50, each "
                                                   "with at least 50 requests")
    tp1 = next(r for r in block["tried"] if (r["gpu"], r["tp"]) == ("H100", 1))
    assert tp1["verdict"] == "unreachable" and tp1["why"].startswith(
        "TTFT p90 cannot go below 3.45 s on H100 x1 in the window 244,595-253,895 s (54 requests, 31 windows merged)")


def test_the_served_ranking_of_sweep():
    trace = shared_path(MOONCAKE / "conversation_trace.jsonl")
    out = run("sweep", trace, "--policies", "arc,s3fifo,vllm,lru", "--capacities", "833", "--model", "Llama-3.1-8B",
              "--gpu", "H100", "--instances", "7", "--router", "kv-aware")
    assert ("ranking    DIFFERS: offline arc > s3fifo > vllm > lru; served vllm > lru > arc > s3fifo: choose the "
            "policy at your real concurrency") in out
