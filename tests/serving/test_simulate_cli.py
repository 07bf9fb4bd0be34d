"""`kvreplay simulate` and `kvreplay gpus` end to end, through a real subprocess."""

from __future__ import annotations

import csv
import io
import json

import pytest

from conftest import MOONCAKE, jsonl, shared_path, write
from test_cli import fails, kv, ok

# block size 4; the 1-second polynomial makes every step last 1 s (tests/serving/test_simulate.py
# works the same two requests by hand: first tokens at 1 s and 2 s, both finish at 3 s, B hits 4)
TWO = jsonl({"timestamp": 0, "input_length": 8, "output_length": 3, "hash_ids": [1, 2], "block_size": 4},
            {"timestamp": 500, "input_length": 8, "output_length": 2, "hash_ids": [1, 3], "block_size": 4})
ONE_SECOND = json.dumps({"format": "kvreplay-step-polynomial", "unit": "s", "terms": [{"coef": 1.0}]})


@pytest.fixture
def files(tmp_path):
    return write(tmp_path, "two.jsonl", TWO), write(tmp_path, "one_second.json", ONE_SECOND), tmp_path


def test_summary_table(files):
    trace, tm, _ = files
    out = ok("simulate", trace, "--capacity", 100, "--time-model", tm, "--cold-start")
    assert "2 requests, 16 prompt tokens, 5 output tokens" in out
    assert "pool       100 blocks of 4 tokens (400 tokens)" in out
    # TTFT 1 s and 1.5 s: mean 1.25, nearest-rank p50 of two values is the second
    rows = {line.split("  ")[0]: line.split() for line in out.splitlines()}
    assert rows["TTFT"][1:] == ["1.25", "s", "1.50", "s", "1.50", "s", "1.50", "s", "1.50", "s", "2"]
    assert rows["queueing"][1:5] == ["250.0", "ms", "500.0", "ms"]  # B waits from 0.5 s to the step at 1 s
    assert "hit rate   25.00% of prompt tokens under concurrency" in out
    assert "sequential replay, same policy and pool: 25.00%" in out
    assert "keeps up   yes" in out and "keeps up   NO" not in out


def test_json_csv_parquet_outputs(files):
    trace, tm, d = files
    doc = json.loads(ok("simulate", trace, "--capacity", 100, "--time-model", tm, "--json", "--warmup", "0"))
    assert doc["per_request"]["first_token_s"] == [1.0, 2.0]
    assert doc["per_request"]["hit_tokens"] == [0, 4]
    assert doc["summary"]["latency_s"]["ttft"]["mean"] == 1.25
    assert doc["config"]["scheduler"]["max_num_batched_tokens"] == 8192
    assert doc["summary"]["window"]["kind"] == "whole_trace" and doc["summary"]["window"]["warmup"]["seconds"] == 0
    ok("simulate", trace, "--capacity", 100, "--time-model", tm, "--output", d / "r.csv")
    rows = list(csv.DictReader(io.StringIO((d / "r.csv").read_text())))
    assert [r["finish_s"] for r in rows] == ["3.0", "3.0"] and rows[1]["hit_tokens"] == "4"
    pq = pytest.importorskip("pyarrow.parquet")
    ok("simulate", trace, "--capacity", 100, "--time-model", tm, "--output", d / "r.parquet")
    assert pq.read_table(d / "r.parquet").column("scheduled_s").to_pylist() == [0.0, 1.0]


def test_the_default_warm_up_is_stated_and_judges_after_it(files):
    # B reuses A's first block 0.5 s after A arrived: the auto warm-up is the 90% reuse lookback,
    # 0.5 s, capped at half the 0.5 s span: 0.25 s. A is served (B still hits its block) but only B
    # is judged: TTFT 1.5 s, hit rate 4 of 8
    trace, tm, d = files
    out = ok("simulate", trace, "--capacity", 100, "--time-model", tm)
    assert ("window     after the warm-up: the 1 requests arriving from 0.25 s (the first 1 of 2 are served but not "
            "judged: warm-up the first 0.25 s of arrivals (auto: 90% of the prefix reuse, by hit tokens, looks back "
            "at most 0.5 s; capped at half the arrival span, 0.25 s))") in out
    rows = {line.split("  ")[0]: line.split() for line in out.splitlines()}
    assert rows["TTFT"][1:3] == ["1.50", "s"] and rows["TTFT"][-1] == "1"
    assert "hit rate   50.00% of prompt tokens under concurrency" in out
    ok("simulate", trace, "--capacity", 100, "--time-model", tm, "--output", d / "r.csv")
    rows = list(csv.DictReader(io.StringIO((d / "r.csv").read_text())))
    assert [r["judged"] for r in rows] == ["false", "true"]
    # --warmup 10m is longer than the span: refused, naming the flag
    assert "--warmup" in fails("simulate", trace, "--capacity", 100, "--time-model", tm, "--warmup", "10m")


def test_load_sweep_table_and_plot(files):
    trace, tm, d = files
    out = ok("simulate", trace, "--time-model", tm, "--speedups", "1,4", "--policies", "vllm,lru",
             "--capacities", "100", "--plot", d / "load.png", "--output", d / "load.csv")
    assert "TTFT and hit rate against load" in out
    lines = [line for line in out.splitlines() if line.startswith("x")]
    assert len(lines) == 4 and lines[0].split()[:2] == ["x1", "vllm"]
    assert (d / "load.png").read_bytes()[:4] == b"\x89PNG"
    rows = list(csv.DictReader(io.StringIO((d / "load.csv").read_text())))
    assert [(r["policy"], r["load"]) for r in rows] == [("vllm", "1.0"), ("vllm", "4.0"), ("lru", "1.0"), ("lru", "4.0")]


def test_cluster_sweep_table(files):
    trace, tm, d = files
    out = ok("simulate", trace, "--time-model", tm, "--capacity", "100", "--instances-list", "1,2", "--routers",
             "round-robin,least-loaded", "--tier-list", "none;dram=4", "--output", d / "grid.csv")
    assert "instances" in out and "HBM hit %" in out
    rows = list(csv.DictReader(io.StringIO((d / "grid.csv").read_text())))
    # all 8 rows of the grid (one instance has no routing: run once, written under each router)
    assert [(r["instances"], r["router"], r["tiers"]) for r in rows] == [
        ("1", "round-robin", "none"), ("1", "round-robin", "dram=4"), ("1", "least-loaded", "none"),
        ("1", "least-loaded", "dram=4"), ("2", "round-robin", "none"), ("2", "round-robin", "dram=4"),
        ("2", "least-loaded", "none"), ("2", "least-loaded", "dram=4")]
    assert [dict(r, router="") for r in rows[:2]] == [dict(r, router="") for r in rows[2:4]]
    out = ok("simulate", trace, "--time-model", tm, "--capacity", "100", "--prefill-instances", "1",
             "--decode-instances", "1")
    assert "1 prefill, 1 decode" in out and "decode" in out


def test_plot_of_one_run(files):
    trace, tm, d = files
    ok("simulate", trace, "--capacity", 100, "--time-model", tm, "--plot", d / "sim.svg")
    assert b"<svg" in (d / "sim.svg").read_bytes()[:400]


@pytest.mark.parametrize("args, message", [
    ((), "simulate needs a time model: --gpu NAME --model NAME"),
    (("--time-model", "instant"), "give the KV pool: --capacity BLOCKS, or --gpu NAME --model NAME"),
    (("--time-model", "instant", "--capacity", "10", "--schedule", "lpm"), "--schedule lpm is SGLang's"),
    (("--time-model", "instant", "--capacity", "10", "--policies", "lru"), "--policies and --capacities compare runs"),
    (("--time-model", "instant", "--capacity", "10", "--jobs", "2"), "--jobs, --executor and --ray-address run a sweep"),
    (("--time-model", "instant", "--capacity", "10", "--routers", "nearest", "--speedups", "1"), "unknown router"),
    (("--time-model", "instant", "--capacity", "10", "--kv-link", "25GB/s"), "disaggregation"),
    (("--time-model", "instant", "--capacity", "10", "--tiers", "dram=1GiB"), "give --model"),
    (("--time-model", "instant", "--capacity", "10", "--warmup-fraction", "0.5"),
     "--warmup-fraction is replay's (a share of the requests); serving judges a warm server with --warmup"),
    # (--warmup 600 is refused as it is parsed: tests/test_argument_errors.py)
    (("--time-model", "instant", "--capacity", "10", "--warmup", "1h"), "not shorter than the arrival span"),
    (("--time-model", "instant", "--capacity", "10", "--warmup", "0.2", "--cold-start"), "not both"),
    (("--time-model", "instant", "--capacity", "10", "--output", "x.txt"), "must end in .csv, .json or .parquet"),
    (("--time-model", "roofline", "--capacity", "10"), "the roofline time model needs model and gpu"),
    (("--time-model", "instant", "--capacity", "10", "--mfu", "0.4"), "set the uncalibrated roofline (--time-model roofline-raw)"),
    (("--time-model", "nope.npz", "--capacity", "10"), "nope.npz: no such file"),
    (("--model", "Llama-3.1-405B", "--gpu", "H100"), "needs 756.0 GiB of weights per GPU"),
    (("--model", "Llama-3.1-8B", "--gpu", "H999"), "H999"),
])
def test_bad_options_exit_2_with_one_line(files, args, message):
    trace, _, _ = files
    assert message in fails("simulate", trace, *args)


def test_gpus_lists_the_catalog():
    out = ok("gpus")
    for name in ("A100-80GB", "H100", "H200", "B200", "L40S", "MI300X"):
        assert name in out
    doc = json.loads(ok("gpus", "--json"))
    h100 = next(g for g in doc["gpus"] if g["name"] == "H100")
    assert h100["bf16_tflops"] == 989.5 and h100["bandwidth_gbps"] == 3350
    # how the calibrated roofline times each GPU: whose coefficients, and the bandwidth its memory terms run at
    cal = {g["name"]: g["roofline_calibration"] for g in doc["gpus"]}
    assert cal["H200"]["own_kernels_fitted"] and cal["H200"]["stream_bandwidth_source"] == "measured on this GPU"
    assert 4000 < cal["H200"]["stream_bandwidth_gbps"] < 4800
    assert cal["B200"]["coefficients_from"] == "H200" and cal["B200"]["checked_on_own_kernels"]
    assert cal["MI300X"]["coefficients_from"] == "H200" and not cal["MI300X"]["checked_on_own_kernels"]
    assert cal["MI300X"]["stream_bandwidth_gbps"] == pytest.approx(
        5300 * cal["H200"]["stream_bandwidth_gbps"] / 4800)
    assert cal["A100-80GB"]["stream_bandwidth_gbps"] == 2039  # no quantisation table: the datasheet figure
    # B200 ships H200's coefficients but for its GEMMs, MoE kernels, GDN, MLA and elementwise terms, fitted on its own tables
    assert cal["B200"]["own_fitted"] == ["gemm", "moe", "gdn", "mla", "elementwise"] and cal["MI300X"]["own_fitted"] == []
    assert (f"{cal['H200']['stream_bandwidth_gbps']:,.0f}*" in out
            and "H200's (GEMM/MoE/GDN/MLA/elementwise: its own), checked on its own" in out)
    assert "H200's (nothing measured)" in out
    # the fused MoE kernels each GPU's calibration holds: none measured on A100 (its experts stay GEMMs)
    assert cal["H100"]["moe_kernels"] == ["bf16", "fp8", "int4", "mxfp4"] and cal["A100-80GB"]["moe_kernels"] == []
    assert cal["L40S"]["moe_kernels"] == [] and cal["B200"]["moe_kernels"] == cal["H200"]["moe_kernels"]
    assert "bf16, fp8, int4, mxfp4" in out


def test_conversation_trace_as_the_issue_asks():
    path = shared_path(MOONCAKE / "conversation_trace.jsonl")
    out = ok("simulate", path, "--model", "Llama-3.1-8B", "--gpu", "H100", "--policy", "vllm")
    # vLLM 0.33.0's budget on one H100 (tests/serving/test_config.py works it): 56.48 GiB left over
    # 512 x 131,072 B = 64 MiB blocks -> 903 blocks
    assert "pool       903 blocks of 512 tokens (462,336 tokens): what vLLM 0.33.0 leaves for KV on each of 1 x H100" in out
    # the first 522 s (1,524 requests) warm the cache: the other 10,507 are judged, and finish
    assert "after the warm-up: the 10,507 requests arriving from 522 s (the first 1,524 of 12,031" in out
    assert "10,507 finished" in out
    # one H100 cannot keep up with this trace's arrivals for an 8B model: the output says so, and
    # runs the estimates it prints: 4 instances do keep up
    assert "keeps up   NO (300.00 s windows); in the worst window (arrivals from 3,222.00 s)" in out
    assert "--instances 4 (now 1): checked, it keeps up" in out
    # a cold start judges all 12,031
    cold = json.loads(ok("simulate", path, "--model", "Llama-3.1-8B", "--gpu", "H100", "--cold-start", "--json",
                         "--summary-only"))
    assert cold["summary"]["finished"] == 12_031 and cold["summary"]["window"]["kind"] == "whole_trace"


def test_host_cpu_terms_on_the_time_line_and_in_the_latencies(files):
    # the calibrated roofline adds what the host CPU does (serving/timing/host.py) unless told not to;
    # --host-cpu none leaves the engine's steps alone; a measured profile adds nothing by default
    trace, tm, _ = files
    run = lambda *a: json.loads(ok("simulate", trace, "--model", "Llama-3.1-8B", "--gpu", "H100", "--json", *a))  # noqa: E731
    default, none, sync = run(), run("--host-cpu", "none"), run("--host-cpu", "vllm-sync")
    assert default["config"]["time_model"]["host"]["host"] == "vllm"
    assert default["config"]["time_model"]["host"]["async_scheduling"] is True
    assert none["config"]["time_model"]["host"]["host"] == "none"
    assert sync["config"]["time_model"]["host"]["async_scheduling"] is False
    first = lambda doc: doc["per_request"]["first_token_s"][0]  # noqa: E731 - the first request, alone
    assert first(default) > first(none)
    line = next(x for x in ok("simulate", trace, "--model", "Llama-3.1-8B", "--gpu", "H100").splitlines()
                if x.startswith("time"))
    assert "host CPU (vllm: vLLM's API server and engine core, async scheduling" in line
    assert "host CPU" not in ok("simulate", trace, "--capacity", 100, "--time-model", tm)
    assert "instant time model takes no time" in fails("simulate", trace, "--time-model", "instant", "--capacity", 10,
                                                       "--host-cpu", "vllm")


def test_report_has_a_serving_section_with_gpu(files):
    trace, _, d = files
    r = kv("report", trace, "--model", "Llama-3.1-8B", "--gpu", "H100", "--speedups", "1,2", "--capacities", "10,100",
           "-o", d / "r.html")
    assert r.returncode == 0 and "wrote" in r.stderr.decode()
    page = (d / "r.html").read_text()
    assert "<h2>Serving on 1 &times; H100 (Llama-3.1-8B)</h2>" in page
    # vLLM 0.33.0's budget on one H100 leaves 60,649,750,962 B (tests/serving/test_weights_dtype.py);
    # 131,072 B per token x 4 tokens = 524,288 B per block: 115,680.2, so 115,680 blocks
    assert "a pool of 115,680 blocks of 4 tokens" in page
    assert page.count("<td>&times;1</td>") == 1 and page.count("<td>&times;2</td>") == 1
    assert "needs --model" in fails("report", trace, "--gpu", "H100", "-o", d / "x.html")
    # the operating point is that pool, and the curves carry vllm, the serving section's policy
    assert "Why this capacity: the KV pool of the serving section&#x27;s deployment: 1 x H100" in page
    assert 'data-kpi="at 115,680 blocks' in page and "<code>vllm</code>" in page


def test_report_serving_section_as_a_cluster(files):
    trace, _, d = files
    r = kv("report", trace, "--model", "Llama-3.1-8B", "--gpu", "H100", "--speedups", "1", "--capacities", "10,100",
           "--instances", "3", "--router", "kv-aware", "-o", d / "c.html")
    assert r.returncode == 0, r.stderr.decode()
    page = (d / "c.html").read_text()
    assert "<h2>Serving on 3 &times; 1 &times; H100 (Llama-3.1-8B)</h2>" in page
    assert "3 identical engine instances behind the <code>kv-aware</code> router serve" in page
    assert "add --gpu and --model" in fails("report", trace, "--instances", "3", "-o", d / "x.html")


def test_several_instances(files):
    trace, tm, d = files
    out = ok("simulate", trace, "--capacity", 100, "--time-model", tm, "--instances", 2, "--output", d / "c.csv",
             "--cold-start")
    assert "cluster    2 identical instances (each with the pool above), router round-robin" in out
    assert "busy time 1.20x" in out and "requests 1.00x" in out  # busy 3 s and 2 s; one request each
    rows = list(csv.DictReader(io.StringIO((d / "c.csv").read_text())))
    assert [r["instance"] for r in rows] == ["0", "1"]


def test_session_router_warns_when_instances_get_nothing(files):
    trace, tm, _ = files
    # both requests start with block 1: the session router (no session ids) sends both to one instance
    out = ok("simulate", trace, "--capacity", 100, "--time-model", tm, "--instances", 2, "--router", "session")
    assert "warning    1 of 2 instances received no request (the session router keys" in out


@pytest.mark.parametrize("extra", [(), ("--speedups", "1,2")])
def test_output_never_replaces_the_time_model(files, extra):
    trace, tm, _ = files
    before = open(tm, "rb").read()
    assert "that is the input file" in fails("simulate", trace, "--capacity", 100, "--time-model", tm, *extra,
                                             "--output", tm)
    assert open(tm, "rb").read() == before


def test_report_never_replaces_the_time_model(files):
    trace, tm, _ = files
    before = open(tm, "rb").read()
    assert "that is the input file" in fails("report", trace, "--capacity", 100, "--time-model", tm, "-o", tm)
    assert open(tm, "rb").read() == before
