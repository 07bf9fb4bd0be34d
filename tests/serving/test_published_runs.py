"""benchmarks/published_runs.py: vLLM bench serve results quoted from GPUStack's performance lab (the
committed csv) and their simulation. Hand values from the page gpustack/gpustack
docs/performance-lab/qwen3-32b/a100.md at 1f37f1b: vLLM v0.11.0, one A100 SXM 80GB, ``vllm serve
Qwen/Qwen3-32B``, its "random 2K input" block: 500 successful requests, 998175 input and 50000
generated tokens, mean TTFT 208397.03 ms, mean TPOT 143.23 ms, mean ITL 142.07 ms, 415.71 s."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from conftest import BENCHMARKS, benchmark_module

BENCH = BENCHMARKS
RUN = "qwen3-32b-a100-2k"
GiB = 1 << 30

pytestmark = pytest.mark.skipif(not (BENCH / "data" / "published_runs.csv").exists(),
                                reason="benchmarks/data/published_runs.csv absent")


@pytest.fixture(scope="module")
def bench():
    return benchmark_module("published_runs")


@pytest.fixture(scope="module")
def runs(bench):
    return {r["run"]: r for r in bench.load_runs()}


def test_the_csv_holds_each_configurations_four_cases(bench, runs):
    assert len(runs) == 64 and len({r["source_url"] for r in runs.values()}) == 10
    assert sum(r["config"] == "optimized" for r in runs.values()) == 24  # 6 pages optimized on vLLM
    r = runs[RUN]
    assert (r["gpu"], r["tp"], r["model"], r["weights"], r["vllm_version"]) == ("A100-80GB", 1, "Qwen3-32B", "bf16", "0.11.0")
    assert r["serve_command"] == "vllm serve Qwen/Qwen3-32B" and r["max_model_len"] == 40960
    assert (r["async_scheduling"], r["max_num_batched_tokens"], r["max_num_seqs"]) == ("default", None, None)
    assert (r["input_len"], r["output_len"], r["num_prompts"], r["request_rate"], r["burstiness"],
            r["max_concurrency"]) == (2000, 100, 500, "inf", 1.0, None)
    assert (r["successful_requests"], r["total_input_tokens"], r["total_generated_tokens"]) == (500, 998175, 50000)
    assert (r["mean_ttft_ms"], r["mean_tpot_ms"], r["mean_itl_ms"], r["duration_s"]) == (208397.03, 143.23, 142.07, 415.71)
    # the serving commands' flags: -tp 8, --max-model-len, and the optimized configurations' own
    assert runs["qwen3-235b-a22b-h100-4k"]["tp"] == 8 and runs["gpt-oss-120b-h100-4k"]["max_model_len"] == 32768
    assert runs["gpt-oss-120b-h100-4k"]["vllm_version"] == "0.10.2" and runs["gpt-oss-120b-h100-4k"]["tp"] == 1
    opt = runs["qwen3-235b-a22b-h100-opt-4k"]
    assert (opt["checkpoint"], opt["weights"], opt["tp"], opt["max_num_batched_tokens"], opt["max_model_len"]) == (
        "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8", "fp8", 4, 16384, 262144)
    assert runs["gpt-oss-120b-h100-opt-4k"]["tp"] == 2 and runs["gpt-oss-120b-h100-opt-4k"]["async_scheduling"] == "on"
    # 16 of the 1,000 requests failed in one case: its means are the 984 successful ones'
    assert runs["qwen3-235b-a22b-h100-128"]["num_prompts"] == 1000
    assert runs["qwen3-235b-a22b-h100-128"]["successful_requests"] == 984


def test_a_model_the_catalog_lacks_is_read_from_its_committed_config(bench, runs):
    r = runs["qwen3-14b-h100-4k"]
    assert (r["model"], r["checkpoint"], r["max_model_len"]) == ("Qwen3-14B", "Qwen/Qwen3-14B", 40960)
    from kvreplay.serving.timing.models import get_model, kv_bytes_per_token_per_gpu

    spec = get_model(bench.model_of(r))
    # config.json: 40 layers x 8 KV heads x 128 x 2 (K, V) x 2 B = 163,840 B a token; 14.8B parameters
    assert kv_bytes_per_token_per_gpu(spec, 1, "bf16") == 40 * 8 * 128 * 2 * 2
    assert round(spec.total_params / 1e9, 1) == 14.8
    assert bench.model_of(runs[RUN]) == "Qwen3-32B"  # a catalog model is named


def test_the_page_parser_reads_each_configurations_results_and_flags(bench):
    def block(label, ttft):
        return ["    # random " + label + " input", "    " + "=" * 12 + " Serving Benchmark Result " + "=" * 12,
                "    Successful requests:                     7", f"    Mean TTFT (ms):                          {ttft}",
                "    " + "=" * 50]
    page = "\n".join(
        ["- vLLM: v0.9.9", "### Other Benchmark Cases", '??? info "Baseline serving script"', "    ```bash",
         "    vllm serve org/model -tp 4 --max-model-len 8192", "    ```", '??? info "Baseline benchmark results"',
         "    ```bash"] + block("2K", "12.50") + ["    ```", '??? info "Optimized serving script"', "    ```bash",
         "    vllm serve org/model-FP8 --async-scheduling --max-num-batched-tokens=4096", "    ```",
         '??? info "Optimized benchmark results"', "    ```bash"] + block("2K", "3.25") + ["    ```", "", "## Next"])
    parsed = bench.parse_page(page)
    assert parsed["version"] == "0.9.9" and set(parsed["configs"]) == {"baseline", "optimized"}
    base, opt = parsed["configs"]["baseline"], parsed["configs"]["optimized"]
    assert base["cases"] == {"2K": {"successful_requests": "7", "mean_ttft_ms": "12.50"}}
    assert opt["cases"] == {"2K": {"successful_requests": "7", "mean_ttft_ms": "3.25"}}
    assert bench.serve_flags(base["serve"]) == {"checkpoint": "org/model", "tp": 4, "max_model_len": 8192,
                                                "max_num_batched_tokens": None, "max_num_seqs": None,
                                                "async_scheduling": None}
    flags = bench.serve_flags(opt["serve"])
    assert (flags["checkpoint"], flags["tp"], flags["async_scheduling"], flags["max_num_batched_tokens"]) == (
        "org/model-FP8", 1, True, 4096)
    with pytest.raises(ValueError, match="--enforce-eager is not read"):
        bench.serve_flags("vllm serve org/model --enforce-eager")  # no flag dropped unread
    # an optimized configuration on another engine is not vLLM's: not taken
    other = page.replace("vllm serve org/model-FP8", "trtllm-serve org/model")
    assert set(bench.parse_page(other)["configs"]) == {"baseline"}


def test_a_runs_requests_all_arrive_at_once_with_the_quoted_totals(bench, runs):
    r = runs["qwen3-32b-h100-4k"]
    inputs, outputs = bench.lengths(r)
    # 1,997,942 input tokens over 500 prompts: 442 of 3,996 and 58 of 3,995; 99,790 generated: 290 of 200, 210 of 199
    assert (inputs == 3996).sum() == 442 and (inputs == 3995).sum() == 58 and inputs.sum() == 1_997_942
    assert (outputs == 200).sum() == 290 and (outputs == 199).sum() == 210 and outputs.sum() == 99_790
    assert not bench.schedule_s(r).any() and len(bench.schedule_s(r)) == 500
    trace = bench.trace_of(r, bench.schedule_s(r))
    assert trace.num_requests == 500 and len(np.unique(trace.blocks)) == len(trace.blocks)  # random prompts share nothing
    assert bench.limits(r) == (1024, 8192) and bench.limits(runs[RUN]) == (256, 2048)  # vLLM's API-server defaults
    assert bench.limits(runs["gpt-oss-120b-a100-opt-4k"]) == (256, 4096)  # the command's --max-num-batched-tokens
    assert not bench.scheduled_async_run(r) and bench.scheduled_async_run(runs["gpt-oss-20b-h100-opt-4k"])
    assert bench.not_simulated(runs["qwen3-235b-a22b-a100-opt-4k"]) and not bench.not_simulated(runs["qwen3-235b-a22b-h100-opt-4k"])


def test_a_finite_rate_follows_vllms_gamma_schedule(bench, runs):
    r = {**runs[RUN], "request_rate": "4", "burstiness": 1.0, "successful_requests": 8}
    draws = np.cumsum(np.random.RandomState(42).gamma(1.0, 0.25, 8))  # serve.py: np.random.seed(args.seed)
    t = bench.schedule_s(r)
    assert t == pytest.approx(draws * 2.0 / draws[-1])  # rescaled: the last at 8 / 4 = 2 s
    r["burstiness"] = float("inf")  # constant intervals of 1 / rate
    assert bench.schedule_s(r) == pytest.approx([0.25 * (i + 1) for i in range(8)])


def test_max_concurrency_sends_each_request_when_a_client_frees(bench, runs):
    schedule, finish = np.zeros(5), np.array([3.0, 1.0, 4.0, 6.0, 9.0])
    # two clients: the third request takes the first slot freed (request 1's, at 1.0), the fourth the
    # next (3.0), the fifth the next (4.0)
    assert list(bench.semaphore_sends(schedule, finish, 2)) == [0.0, 0.0, 1.0, 3.0, 4.0]
    assert list(bench.semaphore_sends(np.array([0.0, 0.5, 2.0, 2.5, 7.0]), finish, 2)) == [0.0, 0.5, 2.0, 3.0, 7.0]
    # one client, 12 requests of the 2K case: each sent when the one before ends, to the loop's fixed point
    r = {**runs[RUN], "successful_requests": 12, "total_input_tokens": 12 * 2000, "total_generated_tokens": 12 * 100,
         "max_concurrency": 1}
    rep = bench.simulate_run(r)
    assert rep.arrival_s[0] == 0.0 and rep.arrival_s[1:] == pytest.approx(rep.finish_s[:-1], abs=1e-9)
    sim = bench.simulated(rep)
    assert sim["duration_s"] == pytest.approx(12 * sim["e2e_ms"] / 1e3, rel=1e-6)  # back to back: no overlap


def test_the_pool_is_the_start_up_minimum_where_the_commands_budget_cannot_start(bench, runs):
    # vLLM 0.11 on one A100-80GB (79.15 GiB) at 0.9: 71.235 GiB less the weights (61.105 GiB) and the
    # dummy sampler's sort (256 rows x 151,936 logits x 38 B = 1.376 GiB) and 0.04 GiB: 8.71 GiB, less
    # than one 40,960-token request's KV (x 262,144 B = 10 GiB): vLLM would not have started
    kv, floor = bench.pool_bytes(runs[RUN])
    assert floor and kv == 40960 * 262_144
    kv, floor = bench.pool_bytes(runs["qwen3-235b-a22b-a100-4k"])
    assert not floor and kv > 262_144 * 192_512 / 8


def test_one_run_simulated_as_it_ran(bench, runs):
    r = runs[RUN]
    rep = bench.simulate_run(r)
    assert int(rep.finished.sum()) == 500 and rep.capacity_blocks == 40960 // 16
    assert int(rep.prompt_tokens.sum()) == 998_175 and int(rep.output_tokens.sum()) == 50_000
    assert not rep.arrival_s.any()
    sim, meas = bench.simulated(rep), bench.measured(r)
    assert meas["e2e_ms"] == pytest.approx(208397.03 + 143.23 * 99)  # TTFT + TPOT x (100 - 1)
    # the shipped model on this run (docs/fidelity.md quotes them): within 15% of the measured means
    for key in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
        assert 0.85 < sim[key] / meas[key] < 1.15, key
    check = bench.check_run(r)
    assert sim["requests"] == 500 and check["error"]["ttft_ms"] == pytest.approx(sim["ttft_ms"] / 208397.03 - 1)
    # the measured means (208.4 s, 143.2 ms) inside both of the simulated means' bands (docs/fidelity.md)
    assert check["covers"] == {"ttft": (True, True), "tpot": (True, True)}


def test_the_benchmark_prints_the_figures_the_docs_quote():
    root = BENCH.parent
    command = "python benchmarks/published_runs.py"  # docs/fidelity.md
    r = subprocess.run([sys.executable, *command.split()[1:]], capture_output=True, text=True, cwd=root, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "| qwen3-32b-a100-2k | A100-80GB x 1 | 1996 / 100.0 | 500 of 500 | 2,560 (min) |" in r.stdout
    doc = (root / "docs" / "fidelity.md").read_text()
    host = (root / "docs" / "host.md").read_text()
    quoted = 0
    for line in r.stdout.splitlines():
        if line.startswith(("| all |", "| all but ", "| A100-80GB |", "| H100 |", "| H200 |", "| Qwen3-14B ",
                            "| Qwen3-32B ", "| Qwen3-235B-A22B ", "| 128 / 4 ")):
            assert line in doc, line
            quoted += 1
        if line.startswith("| GPUStack performance lab (published"):
            assert line in host, line
            quoted += 1
    assert quoted == 15  # 12 rows of docs/fidelity.md, 3 of docs/host.md
    assert "not simulated (4): qwen3-235b-a22b-a100-opt-32k: fp8 weights on A100" in r.stdout
    band = next(line for line in r.stdout.splitlines() if line.startswith("the measured mean in the simulated band"))
    assert band.split(": ", 1)[1] in doc.replace("\n  ", " ")
