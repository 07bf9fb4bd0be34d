"""Pipeline parallelism (--pp): vLLM 0.33.0's layer split, per-stage pools and the stage-to-stage
send, worked by hand (serving/timing/pipeline.py)."""

import json
import math

import pytest

from kvreplay import load_trace
from kvreplay.analysis.models import get_model
from kvreplay.errors import ConfigError
from kvreplay.serving.simulate import simulate
from kvreplay.serving.timing import kv_capacity, load_time_model
from kvreplay.catalog.gpus import get_gpu
from kvreplay.serving.timing.models import StepBatch
from kvreplay.serving.timing.packed import aggregates, packed, step_seconds
from kvreplay.serving.timing.pipeline import hop_seconds_per_token, pipelined, stage_layers


def test_layers_split_as_get_pp_indices():
    # vllm/distributed/utils.py:225-230: the remainder goes to the stages before the last, backwards
    assert stage_layers(80, 2) == [40, 40]
    assert stage_layers(126, 4) == [31, 32, 32, 31]
    assert stage_layers(81, 2) == [41, 40]
    assert stage_layers(10, 4) == [2, 3, 3, 2]
    assert stage_layers(61, 8) == [7, 7, 8, 8, 8, 8, 8, 7]  # 5 left over: stages 6, 5, 4, 3, 2
    with pytest.raises(ConfigError, match="pp=81 stages for a model of 80 layers"):
        stage_layers(80, 81)
    for bad in (0, -1, True, 1.5, "2"):
        with pytest.raises(ConfigError, match="--pipeline-parallel-size"):
            stage_layers(80, bad)


def test_pp1_is_the_pool_without_pp():
    for model, tp, dtype in (("Llama-3.1-70B", 4, "bf16"), ("Llama-3.1-405B", 8, "fp8")):
        assert kv_capacity(model, "H100", tp, 16, dtype=dtype, pp=1) == kv_capacity(model, "H100", tp, 16, dtype=dtype)
        assert "pp" not in kv_capacity(model, "H100", tp, 16, dtype=dtype).to_dict()  # reports read as before


def test_405b_tp8_pp2_bf16_by_hand():
    """Llama-3.1-405B bf16 on 2 x 8 H100: does not fit one node (tp=8 alone), fits two stages."""
    with pytest.raises(ConfigError, match="over tp=8 needs"):
        kv_capacity("Llama-3.1-405B", "H100", 8, 16)
    spec = get_model("Llama-3.1-405B")
    one = kv_capacity("Llama-3.1-405B", "H100", 8, 16, dtype="fp8")  # the terms that do not depend on pp
    cap = kv_capacity("Llama-3.1-405B", "H100", 8, 16, pp=2)
    hidden, vocab = 16384, 128256
    assert (spec.hidden_size, spec.vocab_size, spec.num_layers, spec.num_kv_heads) == (hidden, vocab, 126, 8)
    # weights of one GPU of the last stage: the LM head's 1/8 (bf16), half the body (63 of 126 layers), the rotary cache
    lm_head = 2 * math.ceil(vocab * hidden / 8)  # 128256 is a multiple of 64 already
    body = (spec.total_params - 2 * vocab * hidden) / 8 * 2 * 63 / 126
    rotary = 2 * spec.max_model_len * spec.head_dim
    last = cap.stages[1]
    assert last["weight_bytes"] == pytest.approx(lm_head + body + rotary, rel=1e-12)
    assert cap.stages[0]["weight_bytes"] == pytest.approx(lm_head + body + rotary, rel=1e-12)  # the embedding, same size
    # KV: 63 layers x K and V x 1 of 8 heads x 128 x 2 bytes on each GPU
    assert last["kv_bytes_per_token_per_gpu"] == 63 * 2 * 1 * 128 * 2 == 32256
    # the last stage's peak: the sampler beside the received hidden states and residual (2 x 8192 x hidden bf16)
    received = 2 * 8192 * hidden * 2
    peak = max(one.activation_peak_bytes, one.sampler_peak_bytes) + received
    assert last["peak_bytes"] == pytest.approx(peak)
    available = one.usable_bytes - last["weight_bytes"] - peak - one.cudagraph_bytes - one.non_torch_bytes
    assert last["kv_bytes_available"] == pytest.approx(available)
    assert last["blocks"] == int(available // (32256 * 16)) == 49247
    # the first stage has no sampler: a smaller peak, more blocks; the pool is the smaller (kv_cache_planning.py:1583)
    assert cap.stages[0]["blocks"] == 50287 > last["blocks"]
    assert cap.blocks == 49247 and cap.pp == 2 and cap.weight_bytes_per_gpu == last["weight_bytes"]


def test_70b_tp4_pp2_holds_more_than_tp4_alone():
    alone = kv_capacity("Llama-3.1-70B", "H100", 4, 16)
    two = kv_capacity("Llama-3.1-70B", "H100", 4, 16, pp=2)
    assert (alone.blocks, two.blocks) == (31777, 90059)
    # each stage holds half the layers' weights and KV: its token takes half the bytes
    assert two.kv_bytes_per_token_per_gpu == alone.kv_bytes_per_token_per_gpu / 2
    assert two.weight_bytes_per_gpu < alone.weight_bytes_per_gpu / 2 + 2 * 128256 * 8192 / 4 + 1


def test_hop_by_hand():
    """405B, tp=8 x pp=2 spans two servers: each GPU sends its 1/8 of hidden states + residual
    (2 x 16384 x 2 bytes / 8 = 8192 bytes a token) at 400 Gb/s, then the receivers all-gather 7/8
    over NVLink (H100: 450 GB/s)."""
    spec, h100 = get_model("Llama-3.1-405B"), get_gpu("H100")
    assert h100.link_bytes_per_s == 450e9
    assert hop_seconds_per_token(spec, h100, 8, 2) == pytest.approx(8192 / 50e9 + 8192 * 7 / 450e9)
    # tp=4 x pp=2 is one server: NVLink both ways
    assert hop_seconds_per_token(spec, h100, 4, 2) == pytest.approx(16384 / 450e9 + 16384 * 3 / 450e9)


def test_pp_step_is_the_stages_plus_the_hops_in_python_and_c():
    tm = load_time_model("roofline", model="Llama-3.1-405B", gpu="H100", tp=8, dtype="fp8")
    assert pipelined(tm, 1) is tm
    hop = hop_seconds_per_token(tm.model, tm.gpu, 8, 4)
    for pp in (2, 4):
        p = pipelined(tm, pp)
        for batch, tokens in ((StepBatch(decode_context=(1000,)), 1),
                              (StepBatch(prefill_new=(8192,), prefill_cached=(0,)), 8192),
                              (StepBatch(prefill_new=(300,), prefill_cached=(64,), decode_context=(50, 900)), 302)):
            want = tm.step_time(batch) + (pp - 1) * tokens * hop
            assert p.step_time(batch) == pytest.approx(want, rel=1e-12)
            assert step_seconds(packed(p), aggregates(batch)) == pytest.approx(want, rel=1e-12)
    assert pipelined(tm, 2).describe()["pp"] == 2


def _one_request(tmp_path):
    path = tmp_path / "one.jsonl"
    path.write_text(json.dumps({"chat_id": 1, "parent_chat_id": -1, "timestamp": 0.0, "input_length": 2000,
                                "output_length": 20, "type": "text", "turn": 1, "hash_ids": list(range(1, 126))}) + "\n")
    return load_trace(path)


def test_one_request_latency_is_two_stages_and_one_send(tmp_path):
    trace = _one_request(tmp_path)
    runs = {pp: simulate(trace, model="Llama-3.1-405B", gpu="H100", tp=8, pp=pp, weights_dtype="fp8",
                         time_model="roofline", compare_sequential=False, band_runs=False).to_dict(per_request=True)
            for pp in (1, 2)}
    one, two = (runs[p]["per_request"] for p in (1, 2))
    hop = 8192 / 50e9 + 8192 * 7 / 450e9
    # the prefill's 2000 tokens cross one hop; each of the 19 decode steps sends one token
    assert two["first_token_s"][0] - one["first_token_s"][0] == pytest.approx(2000 * hop, rel=1e-6)
    decode = lambda r: r["finish_s"][0] - r["first_token_s"][0]  # noqa: E731
    assert decode(two) - decode(one) == pytest.approx(19 * hop, rel=1e-4)
    assert runs[2]["config"]["capacity_source"]["pp"] == 2
    assert [s["layers"] for s in runs[2]["config"]["capacity_source"]["stages"]] == [63, 63]


def test_pp_needs_a_gpu_model_and_the_calibrated_roofline(tmp_path):
    trace = _one_request(tmp_path)
    with pytest.raises(ConfigError, match="pp \\(--pp\\) splits a model's layers over GPUs: it needs --gpu and --model"):
        simulate(trace, capacity=1000, pp=2)
    with pytest.raises(ConfigError, match="calibrated roofline"):
        simulate(trace, model="Llama-3.1-70B", gpu="H100", tp=4, pp=2)
    with pytest.raises(ConfigError, match="drop --engine-style sglang"):
        simulate(trace, model="Llama-3.1-70B", gpu="H100", tp=4, pp=2, engine_style="sglang", time_model="roofline")


def test_cli_pipeline_parallel_size(tmp_path):
    from test_cli import fails, ok

    _one_request(tmp_path)
    trace = tmp_path / "one.jsonl"
    out = tmp_path / "r.json"
    ok("simulate", trace, "--gpu", "H100", "--model", "Llama-3.1-405B", "--tp", 8, "--pipeline-parallel-size", 2,
       "--weights-dtype", "fp8", "--time-model", "roofline", "-o", out)
    src = json.loads(out.read_text())["config"]["capacity_source"]
    assert (src["pp"], src["tp"], src["blocks"]) == (2, 8, 97888)
    ok("simulate", trace, "--gpu", "H100", "--model", "Llama-3.1-405B", "--tp", 8, "--pp", 2,
       "--time-model", "roofline", "-o", out)
    assert json.loads(out.read_text())["config"]["capacity_source"]["blocks"] == 49247
    assert fails("simulate", trace, "--gpu", "H100", "--model", "Llama-3.1-405B", "--tp", 8, "--time-model",
                 "roofline").startswith("kvreplay: Llama-3.1-405B at bf16 over tp=8 needs")
    assert "--pp" in fails("simulate", trace, "--capacity", 100, "--pp", 2, "--time-model", "instant")


def test_cli_text_names_the_stages(tmp_path):
    from test_cli import ok

    _one_request(tmp_path)
    text = ok("simulate", tmp_path / "one.jsonl", "--gpu", "H100", "--model", "Llama-3.1-405B", "--tp", 8, "--pp", 2,
              "--time-model", "roofline")
    assert "leaves for KV on each of 2 stages x 8 x H100" in text
    assert "over tp=8 x pp=2: stage 1's 63 of 126 layers (blocks by stage: 50,287, 49,247)" in text
    assert "2 pipeline stages, one batch at a time through them, each step's tokens crossing 1 stage-to-stage " \
           "send(s) of 291 ns a token" in text


def test_plan_searches_tp_x_pp_for_a_model_one_node_cannot_hold(tmp_path):
    """Llama-3.1-405B bf16 fits no TP of 1..8 on H100: the plan adds TP 8 x PP 2 and 4, rows say PP,
    the cost counts every stage's GPUs, and --emit vllm writes --pipeline-parallel-size."""
    from test_cli import ok

    from kvreplay.serving.plan import plan
    from kvreplay.serving.slo import SLO

    trace = load_trace("tests/data/bailian_chat.jsonl")
    result = plan(trace, model="Llama-3.1-405B", slo=SLO(2.0, None, None), max_instances=4)
    block = result["loads"][0]
    shapes = sorted((r["tp"], r["pp"], r["verdict"]) for r in block["tried"])
    assert shapes == [(1, 1, "unfit"), (2, 1, "unfit"), (4, 1, "unfit"), (8, 1, "unfit"), (8, 2, "meets"),
                      (8, 4, "pruned")]
    best = block["best"]
    assert (best["tp"], best["pp"], best["instances"], best["gpus"]) == (8, 2, 1, 16)
    from kvreplay.catalog.prices import Prices

    assert best["cost_per_hour"] == pytest.approx(16 * Prices().gpu_hour("H100")[0])  # both stages' GPUs
    assert best["config"] == "H100 x8 x pp2, tiers none, router round-robin, policy vllm"
    # a model one node holds: no PP searched
    small = plan(trace, model="Llama-3.1-70B", slo=SLO(2.0, None, None), max_instances=4, tps=[4])
    assert [r["pp"] for r in small["loads"][0]["tried"]] == [1]
    text = ok("plan", "tests/data/bailian_chat.jsonl", "--model", "Llama-3.1-405B", "--slo-ttft-p90", "2s",
              "--max-instances", 4, "--emit", "vllm")
    assert "# llama-3-1-405b-h100-tp8-pp2-x1: 1 x 2 stages x 8 x H100 for load 1 (speedup)" in text
    assert "vllm serve --model meta-llama/Llama-3.1-405B --tensor-parallel-size 8 --pipeline-parallel-size 2 " in text
    table = ok("plan", "tests/data/bailian_chat.jsonl", "--model", "Llama-3.1-405B", "--slo-ttft-p90", "2s",
               "--max-instances", 4, "--tp", 8, "--pp", "1,2")
    assert "chosen     1 x 2 stages x 8 x H100 (16 GPUs)" in table


def test_plan_json_round_trips_into_a_report(tmp_path):
    from test_cli import kv, ok

    out, page = tmp_path / "plan.json", tmp_path / "r.html"
    ok("plan", "tests/data/bailian_chat.jsonl", "--model", "Llama-3.1-405B", "--slo-ttft-p90", "2s", "--max-instances",
       4, "-o", out)
    assert json.loads(out.read_text())["loads"][0]["best"]["pp"] == 2
    assert kv("report", "tests/data/bailian_chat.jsonl", "--plan", out, "-o", page).returncode == 0
    html = page.read_text()
    assert "the KV pool of the serving section&#x27;s deployment: 2 stages x 8 x H100" in html


def test_the_commands_docs_memory_md_runs():
    """docs/memory.md, "Pipeline stages": its simulate and plan commands and their figures."""
    from conftest import MOONCAKE
    from test_cli import ok

    trace = MOONCAKE / "conversation_trace.jsonl"
    if not trace.exists():
        pytest.skip("the shared traces are absent")
    doc = open("docs/memory.md").read()
    pools = {}
    for args in (["--weights-dtype", "fp8"], ["--pp", 2, "--weights-dtype", "fp8"], ["--pp", 2]):
        text = ok("simulate", trace, "--gpu", "H100", "--model", "Llama-3.1-405B", "--tp", 8, *args, "--block-size",
                  512, "--speedup", 0.05)
        pools[tuple(map(str, args))] = next(line for line in text.splitlines() if line.startswith("pool")).split()[1]
        ttft = next(line for line in text.splitlines() if line.startswith("TTFT")).split()
        tpot = next(line for line in text.splitlines() if line.startswith("TPOT")).split()
        row = f"| {ttft[3]} s ({ttft[5]}-{ttft[8]}) | {tpot[3]} ms ({tpot[5]}-{tpot[8]}) |"
        assert row in doc, row
    assert pools == {("--weights-dtype", "fp8"): "769", ("--pp", "2", "--weights-dtype", "fp8"): "3,059",
                     ("--pp", "2"): "1,538"}
    assert "kvreplay simulate conversation_trace.jsonl --gpu H100 --model Llama-3.1-405B --tp 8 --pp 2 " in doc
    text = ok("plan", trace, "--model", "Llama-3.1-405B", "--slo-tpot-p90", "500ms", "--loads", 0.05,
              "--max-instances", 4, "--block-size", 512)
    assert "chosen     4 x 2 stages x 8 x H100 (64 GPUs), 192.00 USD/h" in text
    assert "chooses 4 x 2 stages x 8 x H100 (64 GPUs, 192.00 USD/h)" in doc
