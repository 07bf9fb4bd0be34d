"""`kvreplay plan` (serving/plan.py, slo.py, prices.py): the fewest instances by doubling and
bisection, hand-worked with 1 s steps; pruning, the cache, monotonicity, prices and SLO windows."""

from __future__ import annotations

import os

import pytest

from kvreplay.errors import ConfigError
from kvreplay.serving.plan import plan
from kvreplay.catalog.prices import Prices, parse_overrides
from kvreplay.serving.simulate import Scheduler, simulate
from kvreplay.serving.slo import SLO, judge

from sim_cases import ONE_SECOND, trace_of

# eight one-block prompts (1 output each) at 0 s; one request per step: an instance serving k of
# them gives TTFTs 1, 2, ..., k s
EIGHT = trace_of(*[([f"r{k}"], 4, 0, 1) for k in range(8)])
ONE_AT_A_TIME = dict(block_size=4, time_model=ONE_SECOND, scheduler=Scheduler(max_num_seqs=1))
#: the plan's TP degree (default: every one of 1, 2, 4, 8 that fits)
TP1 = dict(ONE_AT_A_TIME, tps=(1,))


def test_fewest_instances_by_doubling_then_bisection():
    # TTFT p90 (nearest rank, index round(7 x 0.9) = 6 of the 8 sorted TTFTs):
    #   1 instance 1..8 s -> 7 s; 2 instances 1,1,2,2,3,3,4,4 -> 4 s; 4 instances 1x4, 2x4 -> 2 s (meets);
    #   3 instances (3, 3 and 2 requests) 1,1,1,2,2,2,3,3 -> 3 s. Runs: 1, 2, 4, then 3: the answer is 4
    out = plan(EIGHT, model="Llama-3.1-8B", slo=SLO(ttft_p90_s=2.0), prices=Prices({"H100": 2.0}), **TP1)
    best = out["loads"][0]["best"]
    assert best["instances"] == 4 and best["gpus"] == 4 and best["cost_per_hour"] == 8.0
    assert best["binding"]["objective"] == "TTFT p90" and best["binding"]["value_s"] == 2.0
    assert best["judged_at"] == "centre (no band)" and best["price_sources"] == {"gpu": "--price"}
    assert out["runs"] == 4 and out["monotonicity_violations"] == []
    # USD per million input tokens: 8 USD/h over the run's 2 s, for 32 prompt tokens
    assert best["usd_per_million_input"] == pytest.approx(8.0 * (2 / 3600) / 32 * 1e6)


def test_a_hybrid_models_plan_says_its_semantics():
    # gpt-oss-120b's sliding-window layers: untiered vLLM configurations run vLLM's hybrid manager
    # (each run's report says so too); with a tiered configuration among them every configuration
    # serves every layer as full attention, so that all compare under one semantics, and the plan's
    # result and text say why (with the block-id ratio vLLM's hybrid manager has)
    from kvreplay.output.plan import plan_text

    out = plan(EIGHT, model="gpt-oss-120b", slo=SLO(ttft_p90_s=2.0), prices=Prices({"H100": 2.0}),
               weights_dtype="int4", **TP1)
    assert out["kv_semantics"]["semantics"] == "hybrid"
    assert "semantics  gpt-oss-120b's layer groups: every configuration runs vLLM 0.33.0's hybrid" in plan_text(EIGHT, out)
    tiered = plan(EIGHT, model="gpt-oss-120b", slo=SLO(ttft_p90_s=2.0), prices=Prices({"H100": 2.0}),
                  weights_dtype="int4", tiers=(None, "dram=64GiB@64GB/s"), **TP1)
    assert tiered["kv_semantics"]["semantics"] == "full" and tiered["kv_semantics"]["hybrid_block_ids_ratio"] == 2.0
    assert "so that they compare under one semantics" in tiered["kv_semantics"]["text"]
    assert "warning    KV semantics: gpt-oss-120b has full, sliding_window layer groups" in plan_text(EIGHT, tiered)
    import kvreplay

    page = kvreplay.report_html(EIGHT, policies=["lru"], capacities=[1, 2], block_size=4, plan=tiered)
    assert 'data-note="plan-kv-semantics"><b>KV semantics.</b> gpt-oss-120b has full, sliding_window' in page
    dense = plan(EIGHT, model="Llama-3.1-8B", slo=SLO(ttft_p90_s=2.0), prices=Prices({"H100": 2.0}), **TP1)
    assert dense["kv_semantics"] is None and "KV semantics" not in plan_text(EIGHT, dense)


def test_dominated_configurations_are_pruned_and_runs_cached():
    out = plan(EIGHT, model="Llama-3.1-8B", slo=SLO(ttft_p90_s=2.0), gpus=["H100", "H200"], loads=[1.0, 1.0],
               prices=Prices({"H100": 2.0, "H200": 100.0}), **TP1)
    first, again = out["loads"]
    assert first["best"]["gpu"] == "H100" and first["pruned"] == 1  # one H200 (100 USD/h) > 4 H100s (8 USD/h)
    assert again["best"]["instances"] == 4
    assert out["runs"] == 4 and out["cache_hits"] >= 4  # the second load is answered from the cache


def test_unreachable_slo_says_why():
    out = plan(EIGHT, model="Llama-3.1-8B", slo=SLO(ttft_p90_s=0.5), prices=Prices({"H100": 2.0}), max_instances=8,
               **TP1)
    block = out["loads"][0]
    assert block["best"] is None
    closest = block["closest"]
    assert closest["instances"] == 8 and closest["binding"]["value_s"] == 1.0
    assert "at 8 instances (--max-instances)" in closest["why"] and "TTFT p90 1 s against 0.5 s" in closest["why"]


def test_judge_names_the_binding_window():
    # a burst of 8 at 0 s and a lone request at 100 s: windows of 25 s; the first binds
    t = trace_of(*[([f"r{k}"], 4, 0, 1) for k in range(8)], (["late"], 4, 100_000, 1))
    r = simulate(t, "vllm", 100, compare_sequential=False, **ONE_AT_A_TIME)
    v = judge(r, SLO(ttft_p90_s=2.0), min_requests=1)
    assert v["window_s"] == 25.0 and v["windows"] == 2 and not v["meets"]
    assert v["binding"] == {"ratio": 3.5, "objective": "TTFT p90", "value_s": 7.0, "limit_s": 2.0,
                            "window_start_s": 0.0, "window_end_s": 25.0, "requests": 8, "windows_merged": 1}
    # at the default, 50 requests a window: the nine are one window, the whole span's p90 (index
    # round(8 x 0.9) = 7 of TTFTs 1..8 s and the late one's 1 s: 7 s)
    v = judge(r, SLO(ttft_p90_s=2.0))
    assert v["windows"] == 1 and v["binding"]["requests"] == 9 and v["binding"]["windows_merged"] == 4
    assert v["binding"]["value_s"] == 7.0 and v["binding"]["window_end_s"] == 100.0
    assert v["grouping"]["TTFT p90"].startswith("the whole judged span as one window: its 9 requests are fewer")
    # goodput: requests with TTFT <= 2 s (two of the burst and the late one) over the run's 101 s
    assert v["attainment"] == 3 / 9 and v["goodput_per_s"] == pytest.approx(3 / 101)


def test_prices():
    assert parse_overrides(["H100=2.49/h", "dram=0.5/GiB-month", "H200=3"]) == {"H100": 2.49, "dram": 0.5, "H200": 3.0}
    for bad in ("H100", "H100=-1/h", "dram=1/h", "H100=2/GiB-month"):
        with pytest.raises(ConfigError, match="--price"):
            parse_overrides([bad])
    usd, source = Prices().gpu_hour("H100")
    assert usd == 3.0 and "mercatus-ai.com" in source and "2026-05" in source
    assert Prices(pricing="reserved").gpu_hour("H100")[0] == 1.8
    with pytest.raises(ConfigError, match="no price for B200"):
        Prices().gpu_hour("B200")
    gib_hour, _ = Prices().memory_gib_hour("dram")
    assert gib_hour == pytest.approx(0.52 / 730)
    assert Prices().memory_gib_hour("ssd")[0] == pytest.approx(0.0097 / 730)
    assert Prices({"ssd": 0.02}).memory_gib_hour("ssd") == (pytest.approx(0.02 / 730), "--price")


def test_a_dram_tier_is_priced():
    from kvreplay.serving.plan import Config, Search, instance_cost

    s = Search(trace=EIGHT, model="Llama-3.1-8B", slo=SLO(ttft_p90_s=1.0), prices=Prices({"H100": 2.0, "dram": 7.3}),
               window_s=None, judge="centre", options={}, max_instances=4)
    cost, sources = instance_cost(s, Config("H100", 2, "dram=100GiB@64GB/s", "round-robin", None))
    assert cost == pytest.approx(2 * 2.0 + 100 * 7.3 / 730) and sources["dram"] == "--price"
    with pytest.raises(ConfigError, match="in bytes"):
        instance_cost(s, Config("H100", 1, "dram=100", "round-robin", None))
    # an SSD tier under the DRAM tier: each at its own price (the catalog's for the SSD)
    cost, sources = instance_cost(s, Config("H100", 1, "dram=100GiB@64GB/s,ssd=2TiB@7GB/s", "round-robin", None))
    assert cost == pytest.approx(2.0 + 100 * 7.3 / 730 + 2048 * 0.0097 / 730) and "oscoo.com" in sources["ssd"]
    for bad, match in (("cxl=1TiB@30GB/s", "name the tier dram or ssd"), ("global=1TiB", "not priced")):
        with pytest.raises(ConfigError, match=match):
            instance_cost(s, Config("H100", 1, bad, "round-robin", None))


def test_cli_plan_table_and_json(tmp_path):
    import json

    from conftest import jsonl, write
    from test_cli import fails, kv

    lines = jsonl(*[{"timestamp": 0, "input_length": 4, "output_length": 1, "hash_ids": [k]} for k in range(8)])
    trace = write(tmp_path, "eight.jsonl", lines)
    profile = write(tmp_path, "one.json", json.dumps({"format": "kvreplay-step-polynomial", "unit": "s",
                                                       "terms": [{"coef": 1.0}]}))
    out = tmp_path / "plan.json"
    r = kv("plan", trace, "--model", "Llama-3.1-8B", "--slo-ttft-p90", "2s", "--block-size", "4", "--time-model",
           profile, "--price", "H100=2/h", "-o", out)
    assert r.returncode == 0, r.stderr.decode()
    text = r.stdout.decode()
    # vLLM's default batch (256 requests, 8,192 tokens) prefills all eight in one 1 s step: one instance
    assert "best  chosen   1 x 1 x H100" in text and "TTFT p90 1.00 s / 2.00 s, 0-0 s, 8 req" in text
    doc = json.loads(out.read_text())
    assert doc["loads"][0]["best"]["instances"] == 1 and doc["runs"] == 1
    assert "a duration such as 2s" in kv("plan", trace, "--model", "Llama-3.1-8B", "--slo-ttft-p90", "fast").stderr.decode()
    assert "give at least one SLO" in fails("plan", trace, "--model", "Llama-3.1-8B", "--block-size", "4")
    # a plan whose every configuration is skipped has no answer: exit 2 saying why
    assert fails("plan", trace, "--model", "Llama-3.1-8B", "--slo-ttft-p90", "2s", "--gpus", "B200", "--block-size",
                 "4", "--time-model", profile).endswith("every configuration was skipped: no price for B200 in the "
                                                        "catalog (it has A100-80GB, H100, H200, A100-40GB, L4, GB200, B300, "
                                                        "MI325X): give --price B200=USD/h")


def test_rates_and_a_tier_that_cannot_pay_for_itself():
    # Poisson arrivals at 1,000 requests/s (all eight within a few ms: the same queue as at 0 s).
    # A DRAM tier changes nothing here (every step takes 1 s) but costs 1 USD/h per GiB on each
    # instance. HBM only passes at 4 instances, so the tiered twin is searched up to 4 (1, 2, 4, 3:
    # it passes at 4, like its twin) instead of being pruned: it saves no GPU and costs 4 USD/h more
    out = plan(EIGHT, model="Llama-3.1-8B", slo=SLO(ttft_p90_s=2.0), rates=[1000.0], tiers=[None, "dram=1GiB"],
               prices=Prices({"H100": 2.0, "dram": 730.0}), **TP1)
    block = out["loads"][0]
    assert block["load_kind"] == "rate" and block["load"] == 1000.0
    assert block["best"]["tiers"] == "none" and block["best"]["instances"] == 4
    assert block["pruned"] == 0 and [r["cost_per_hour"] for r in block["runners_up"]] == [12.0]
    (t,) = block["tier_economics"]
    assert t["instances"] == 4 and t["meets"] and t["versus_none"]["gpus_saved"] == 0
    assert t["versus_none"]["saves_per_hour"] == -4.0 and t["versus_none"]["same_instances"]
    assert [r["verdict"] for r in block["tried"]] == ["meets", "meets"]
    assert block["tried"][0]["why"] == ("the cheapest that meets every SLO, at 4 instances (centre (no band)): TTFT "
                                        "p90 2 s against 2 s in the window 0-0 s (8 requests)")
    assert block["tried"][1]["why"] == "meets at 4 instances for 12.00 USD/h, 4.00 USD/h more than the chosen"


def test_a_tier_is_searched_no_further_than_its_twin_and_pruning_is_explained():
    # with an H200 priced at 100 USD/h the H200 is pruned before one instance (4 H100s: 8 USD/h);
    # the DRAM tier on H100 is searched only up to 4 instances
    out = plan(EIGHT, model="Llama-3.1-8B", slo=SLO(ttft_p90_s=2.0), gpus=["H100", "H200"], tiers=[None, "dram=1GiB"],
               prices=Prices({"H100": 2.0, "H200": 100.0, "dram": 730.0}), **TP1)
    tried = {(r["gpu"], r["tiers"]): r for r in out["loads"][0]["tried"]}
    assert tried[("H200", "none")]["verdict"] == "pruned" and tried[("H200", "dram=1GiB")]["verdict"] == "pruned"
    assert tried[("H200", "none")]["why"] == ("1 instance, the fewest it could still need, cost 100.00 USD/h, not "
                                               "below the best (8.00 USD/h)")
    assert tried[("H100", "dram=1GiB")]["instances"] == 4 and out["runs"] == 8


def test_cache_savings_with_the_roofline():
    # four requests sharing a 2-block prefix (block size 16): the last three hit it (32 tokens each)
    t = trace_of(*[(["p", "q", f"r{k}"], 48, 1000 * k, 4) for k in range(4)], block_size=16)
    out = plan(t, model="Llama-3.1-8B", slo=SLO(ttft_p90_s=5.0), prices=Prices({"H100": 2.0}), block_size=16,
               time_model="roofline-raw", tps=(1,))
    best = out["loads"][0]["best"]
    # the warm-up (auto): every reuse looks back 1 s, so the first second's request warms the cache
    # and the other three are judged: 96 hit tokens of their 144
    assert best["warmup"]["seconds"] == 1.0 and best["judged_requests"] == 3
    assert best["instances"] == 1 and best["hit_tokens"] == 96 and best["hit_rate"] == 96 / 144
    per_token = best["prefill_seconds_per_token"]
    assert 0 < per_token < 1e-3  # an 8B prefill on one H100: microseconds per token
    # hit tokens per hour x seconds of prefill per token x USD per instance-second
    per_hour = 96 / (best["duration_s"] / 3600)
    assert best["cache_saved_per_hour"] == pytest.approx(per_hour * per_token * 2.0 / 3600)


def test_pessimistic_and_centre_counts():
    # the calibrated roofline has a band: probes run at its high end; the centre count is searched
    # below the pessimistic one. Four 48-token requests a second apart meet a 5 s TTFT on one H100
    t = trace_of(*[(["p", "q", f"r{k}"], 48, 1000 * k, 4) for k in range(4)], block_size=16)
    out = plan(t, model="Llama-3.1-8B", slo=SLO(ttft_p90_s=5.0), prices=Prices({"H100": 2.0}), block_size=16,
               tps=(1,))
    best = out["loads"][0]["best"]
    assert best["judged_at"] == "pessimistic end of the band" and best["instances"] == 1
    assert best["instances_at_centre"] == 1 and out["runs"] == 1  # (n = 1: no centre probe is needed)
    centre = plan(t, model="Llama-3.1-8B", slo=SLO(ttft_p90_s=5.0), prices=Prices({"H100": 2.0}), block_size=16,
                  judge_at="centre", tps=(1,))["loads"][0]["best"]
    assert centre["judged_at"] == "centre of the band"
    assert centre["instances_band"] == {"low": 1, "centre": 1, "high": 1}


def test_a_refined_plan_reuses_the_cached_runs(tmp_path):
    cache = str(tmp_path / "runs")
    first = plan(EIGHT, model="Llama-3.1-8B", slo=SLO(ttft_p90_s=2.0), prices=Prices({"H100": 2.0}),
                 cache_dir=cache, **TP1)
    assert first["runs"] == 4 and first["disk_hits"] == 0 and len(list((tmp_path / "runs").iterdir())) == 4
    # a looser SLO walks the same points (1, 2, 4, then 3, which now passes: TTFT p90 3 s <= 3 s)
    again = plan(EIGHT, model="Llama-3.1-8B", slo=SLO(ttft_p90_s=3.0), prices=Prices({"H100": 2.0}),
                 cache_dir=cache, **TP1)
    assert again["runs"] == 0 and again["disk_hits"] == 4
    assert again["loads"][0]["best"]["instances"] == 3 and again["trace_digest"] == first["trace_digest"]


@pytest.mark.parametrize("executor", ["threads", "local"])
def test_parallel_search_gives_the_same_answer(executor):
    kw = dict(model="Llama-3.1-8B", slo=SLO(ttft_p90_s=2.0), gpus=["H100", "H200"],
              prices=Prices({"H100": 2.0, "H200": 3.0}), **TP1)
    alone = plan(EIGHT, **kw)
    together = plan(EIGHT, jobs=2, executor=executor, **kw)
    a, b = alone["loads"][0], together["loads"][0]
    assert b["best"]["config"] == a["best"]["config"] and b["best"]["instances"] == a["best"]["instances"] == 4
    assert together["parallel"] and b["pruned"] == 0 and [r["gpu"] for r in b["runners_up"]] == ["H200"]
    assert together["runs"] == 8  # each GPU's search: 1, 2, 4 and 3 instances


def test_rows_one_per_configuration_tried_and_the_same_on_every_executor():
    # H100 at 2 USD/h passes at 4 instances (8 USD/h); H200 at 3 USD/h is searched after it and
    # pruned at 3 instances (9 USD/h, not below 8); B200 has no price and is skipped
    kw = dict(model="Llama-3.1-8B", slo=SLO(ttft_p90_s=2.0), gpus=["H100", "H200", "B200"],
              prices=Prices({"H100": 2.0, "H200": 3.0}), **TP1)
    alone = plan(EIGHT, **kw)
    rows = alone.rows()
    assert [(r["gpu"], r["verdict"], r["instances"], r["chosen"]) for r in rows] == [
        ("H100", "meets", 4, True), ("H200", "pruned", 3, False), ("B200", "skipped", None, False)]
    assert rows[1]["cost_per_hour"] == 9.0 and rows[1]["ttft_p90_s"] is None
    assert "no price for B200" in rows[2]["why"]
    assert rows[0]["worst_window_ttft_p90_s"] == 2.0 and rows[0]["binding_objective"] == "TTFT p90"
    # the probes behind the plot: H100 at 1, 2, 4, 3 and H200 at 1, 2 (2 x 3 USD/h < 8; then 3 is pruned)
    probes = [(p["gpu"], p["instances"], p["meets"]) for p in alone["loads"][0]["probes"]]
    assert sorted(probes) == [("H100", 1, False), ("H100", 2, False), ("H100", 3, False), ("H100", 4, True),
                              ("H200", 1, False), ("H200", 2, False)]
    # processes, threads (and Ray, where installed) search every configuration to its end (nothing
    # is pruned), and give the same rows wherever they run
    local = plan(EIGHT, jobs=2, executor="local", **kw)
    assert local.rows() == plan(EIGHT, jobs=2, executor="threads", **kw).rows()
    assert [(r["gpu"], r["verdict"], r["instances"]) for r in local.rows()] == [
        ("H100", "meets", 4), ("H200", "meets", 4), ("B200", "skipped", None)]
    if os.environ.get("KVREPLAY_REQUIRE_OPTIONAL") == "1":
        import ray
    else:
        ray = pytest.importorskip("ray")
    assert plan(EIGHT, jobs=2, executor="ray", **kw).rows() == local.rows()
    assert not ray.is_initialized()


def test_rows_as_tables(tmp_path):
    import csv
    import io

    out = plan(EIGHT, model="Llama-3.1-8B", slo=SLO(ttft_p90_s=2.0), gpus=["H100", "H200"],
               prices=Prices({"H100": 2.0, "H200": 3.0}), **TP1)
    from kvreplay.output.table import to_csv
    from kvreplay.serving.plan_result import ROW_KINDS

    got = list(csv.DictReader(io.StringIO(to_csv(out.rows(), list(ROW_KINDS)))))
    assert [(r["gpu"], r["verdict"], r["chosen"], r["instances"]) for r in got] == [
        ("H100", "meets", "true", "4"), ("H200", "pruned", "false", "3")]
    frame = out.to_pandas()
    assert frame["instances"].tolist() == [4, 3] and str(frame["cost_per_hour"].dtype) == "float64"
    pq = pytest.importorskip("pyarrow.parquet")
    table = pq.read_table(io.BytesIO(out.to_parquet_bytes()))
    assert table.column("verdict").to_pylist() == ["meets", "pruned"]
    assert b"trace_digest" in table.schema.metadata[b"kvreplay"]


def test_pareto_frontier_by_hand():
    from kvreplay.output.plan_plot import frontier

    # (cost, TTFT): (4, 1) beats (5, 2); (1, 9) and (2, 3) are on the frontier; (3, 3) is not
    assert frontier([(5, 2), (1, 9), (4, 1), (2, 3), (3, 3)]) == [(1, 9), (2, 3), (4, 1)]


def test_unreachable_ttft_names_the_prefill_floor():
    # 20,000-token prompts on one H100 (roofline-raw): each prefill alone is three steps of 8,192,
    # 8,192 and 3,616 new tokens; a 10 ms TTFT p90 is below that in every window
    from kvreplay.serving.timing import load_time_model
    from kvreplay.serving.timing.models import StepBatch

    t = trace_of(*[([f"r{k}"], 20_000, 1000 * k, 1) for k in range(4)], block_size=16)
    out = plan(t, model="Llama-3.1-8B", slo=SLO(ttft_p90_s=0.01), prices=Prices({"H100": 2.0}), block_size=16,
               time_model="roofline-raw", max_instances=2, tps=(1,))
    tm = load_time_model("roofline-raw", model="Llama-3.1-8B", gpu="H100", tp=1)
    alone = sum(tm.step_time(StepBatch(prefill_new=(n,), prefill_cached=(done,)))
                for n, done in ((8192, 0), (8192, 8192), (3616, 16384)))
    block = out["loads"][0]
    why = block["closest"]["why"]
    # four requests (fewer than a window needs): one window, from 0 to 3 s, its p90 that floor;
    # nothing was simulated
    assert why.startswith(f"TTFT p90 cannot go below {alone:.3g} s on H100 x1 in the window 0-3 s (4 requests, "
                          "3 windows merged): each request's prefill alone")
    assert block["tried"][0]["verdict"] == "unreachable" and out["runs"] == 0


def test_report_plan_section_is_checked_against_its_trace(tmp_path):
    import json

    from conftest import jsonl, write
    from test_cli import fails, kv

    lines = jsonl(*[{"timestamp": 0, "input_length": 4, "output_length": 1, "hash_ids": [k]} for k in range(8)])
    trace = write(tmp_path, "eight.jsonl", lines)
    other = write(tmp_path, "other.jsonl", jsonl({"timestamp": 0, "input_length": 4, "output_length": 1,
                                                  "hash_ids": [1]}))
    profile = write(tmp_path, "one.json", json.dumps({"format": "kvreplay-step-polynomial", "unit": "s",
                                                       "terms": [{"coef": 1.0}]}))
    made = tmp_path / "plan.json"
    assert kv("plan", trace, "--model", "Llama-3.1-8B", "--slo-ttft-p90", "2s", "--block-size", "4", "--time-model",
              profile, "--price", "H100=2/h", "-o", made, "--plot", tmp_path / "plan.svg").returncode == 0
    assert "chosen (cheapest meeting every SLO)" in (tmp_path / "plan.svg").read_text()
    page = tmp_path / "r.html"
    r = kv("report", trace, "--block-size", "4", "--plan", made, "-o", page, "--capacities", "10,20")
    assert r.returncode == 0, r.stderr.decode()
    text = page.read_text()
    assert "Plan: the cheapest deployment meeting TTFT p90 &lt;= 2 s" in text and "1 &times; 1 &times; H100" in text
    assert "made from another trace" in fails("report", other, "--block-size", "4", "--plan", made, "-o",
                                              tmp_path / "x.html", "--capacities", "10,20")
    assert "not a plan" in fails("report", trace, "--block-size", "4", "--plan", profile, "-o", tmp_path / "x.html",
                                 "--capacities", "10,20")
    assert not (tmp_path / "x.html").exists()


def test_a_plan_says_where_its_calibrated_roofline_leaves_what_was_measured():
    # The plan's runs skip the band's warnings (band_runs=False), so the plan says them itself,
    # once each over its configurations: Qwen3-Next is an MoE with Gated DeltaNet layers, which run
    # the GDN kernels fitted on measured ones; Llama-3.1-8B at bf16 on H100 at tp 1 with 5-token
    # contexts is inside what was measured, and gets none
    import kvreplay
    from kvreplay.output.plan import plan_text

    slo = SLO(ttft_p90_s=60.0)
    out = plan(EIGHT, model="Qwen3-Next-80B-A3B", slo=slo, prices=Prices({"H100": 2.0}), gpus=("H100",),
               tps=(2, 4), weights_dtype="fp8", block_size=4, max_instances=2)
    warnings = out["calibration_warnings"]
    # (and, an MoE with its experts on the fused MoE kernel, that its TTFT is a lower bound)
    assert len(warnings) == 3 and "36 Gated DeltaNet layers run vLLM's GDN kernels" in warnings[2]
    assert "read its TTFT as a lower bound" in warnings[1]
    assert "an MoE model with Mamba / linear-attention layers outside the calibration's checked models" in warnings[0]
    text = plan_text(EIGHT, out)
    assert text.count("warning    calibration: ") == 3
    page = kvreplay.report_html(EIGHT, policies=["lru"], capacities=[1, 2], block_size=4, plan=out)
    assert 'data-note="plan-calibration"><b>Time model.</b>' in page
    dense = plan(EIGHT, model="Llama-3.1-8B", slo=slo, prices=Prices({"H100": 2.0}), block_size=4, max_instances=2)
    assert dense["calibration_warnings"] == [] and "warning    calibration" not in plan_text(EIGHT, dense)


def test_a_cached_run_is_not_reused_under_another_roofline_calibration(tmp_path, monkeypatch):
    import kvreplay.serving.plan as plan_module

    kw = dict(model="Llama-3.1-8B", slo=SLO(ttft_p90_s=2.0), prices=Prices({"H100": 2.0}), cache_dir=str(tmp_path),
              **TP1)
    first = plan(EIGHT, **kw)
    assert first["runs"] >= 1 and first["disk_hits"] == 0
    assert plan(EIGHT, **kw)["disk_hits"] >= 1  # the same calibration: runs read back from the directory
    monkeypatch.setattr(plan_module, "_calibration_digest", lambda: "a-refit")
    assert plan(EIGHT, **kw)["disk_hits"] == 0  # a refit: no run of before reused


def test_the_run_cache_is_keyed_by_the_warm_up(tmp_path):
    cache = str(tmp_path / "runs")
    kw = dict(model="Llama-3.1-8B", slo=SLO(ttft_p90_s=2.0), prices=Prices({"H100": 2.0}), cache_dir=cache, **TP1)
    cold = plan(EIGHT, warmup=0, **kw)
    assert cold["runs"] == 4 and cold["warmup_spec"] == "0"
    assert plan(EIGHT, warmup="auto", **kw)["disk_hits"] == 0  # another warm-up: nothing reused
    assert plan(EIGHT, warmup=0, **kw)["disk_hits"] == 4
    with pytest.raises(ConfigError, match="warmup_fraction"):
        plan(EIGHT, warmup_fraction=0.5, **kw)
    with pytest.raises(ConfigError, match=r"600 what\? a bare number is a fraction .* 600s or 600ms"):
        plan(EIGHT, warmup=600, **kw)


def test_unfit_tp_degrees_are_rows_not_errors():
    # Llama-3.1-70B at bf16: TP 1 needs 131.4 GiB (141.1 GB) per GPU; TP 2 on H100 leaves too little KV for one
    # 131,072-token request; TP 4 and 8 fit. Without --tp, every degree is a row
    out = plan(EIGHT, model="Llama-3.1-70B", slo=SLO(ttft_p90_s=10.0), prices=Prices({"H100": 2.0}), max_instances=1,
               **ONE_AT_A_TIME)
    rows = {r["tp"]: r for r in out["loads"][0]["tried"]}
    assert rows[1]["verdict"] == rows[2]["verdict"] == "unfit"
    assert ("needs 131.4 GiB of weights per GPU, more than the 72.9 GiB a H100 gives at gpu_memory_utilization=0.92"
            in rows[1]["why"])
    assert "fewer than one request at max_model_len 131,072: vLLM refuses to start" in rows[2]["why"]
    # one instance of TP 4 meets a 10 s TTFT p90 (8 USD/h); TP 8 (16 USD/h) is pruned on cost
    assert rows[4]["verdict"] == "meets" and rows[8]["verdict"] == "pruned"
    assert out["loads"][0]["best"]["tp"] == 4 and out["loads"][0]["best"]["cost_per_hour"] == 8.0


def test_a_closed_loop_is_judged_at_the_worst_of_its_band():
    """A closed loop's band ends are runs of their own (with faster steps the agents send sooner),
    so the optimistic end's TTFT can be the highest: a pessimistic plan judges it at the worst of
    the three runs and passes only when all three do. The three runs are given (the search's cache)."""
    from kvreplay.serving.plan import Config, Search, evaluate

    s = Search(trace=EIGHT, model="Llama-3.1-8B", slo=SLO(ttft_p90_s=1.0), prices=Prices({"H100": 2.0}),
               window_s=None, judge="pessimistic", options={}, max_instances=4)
    c, load = Config("H100", 1, None, "round-robin", "vllm"), ("sessions", 2.0)

    def given(**ratios):
        s.cache.clear()
        for end, ratio in ratios.items():
            s.cache[(c, 1, load, end)] = {"meets": ratio <= 1.0, "verdict": {"binding": {"ratio": ratio}},
                                          "judged_at": end, "report": None}
        return evaluate(s, c, 1, load)

    e = given(high=0.9, centre=0.95, low=1.2)  # the pessimistic end passes, the optimistic one does not
    assert not e["meets"] and e["worst_end"] == "low" and e["verdict"]["binding"]["ratio"] == 1.2
    assert e["judged_at"] == "worst of the band's ends and its centre (a closed loop: here the optimistic end of the band)"
    e = given(high=0.9, centre=0.97, low=0.8)  # all pass: the verdict shown is the closest to the SLO
    assert e["meets"] and e["worst_end"] == "centre" and e["verdict"]["binding"]["ratio"] == 0.97
    s.cache.clear()
    for end, ratio in (("high", 0.9), ("centre", 0.95), ("low", 1.2)):  # an open loop: the pessimistic end alone
        s.cache[(c, 1, ("speedup", 1.0), end)] = {"meets": ratio <= 1.0, "verdict": {"binding": {"ratio": ratio}},
                                                  "judged_at": end, "report": None}
    assert evaluate(s, c, 1, ("speedup", 1.0))["meets"]


def test_a_plan_records_the_utilization_its_pools_were_sized_at(tmp_path, monkeypatch):
    # A vLLM-style plan sizes each instance's pool at vLLM 0.33.0's default utilization (0.92) when
    # none is given, and records it: its JSON, its text and its runs' cache keys say that budget, so
    # a kvreplay with another default reuses no run and serves or deploys the plan at the same pool
    import kvreplay.serving.plan as plan_module
    import kvreplay.serving.timing.memory as memory
    from kvreplay.output.plan import plan_text

    kw = dict(model="Llama-3.1-8B", slo=SLO(ttft_p90_s=2.0), prices=Prices({"H100": 2.0}), cache_dir=str(tmp_path),
              **TP1)
    first = plan(EIGHT, **kw)
    assert first["run_options"]["gpu_memory_utilization"] == 0.92 and first["disk_hits"] == 0
    assert ("pools      each instance's KV pool as vLLM 0.33.0 sizes it at --gpu-memory-utilization 0.92 (its default)"
            in plan_text(EIGHT, first))
    # the same budget given: the very same runs, read back
    assert plan(EIGHT, gpu_memory_utilization=0.92, **kw)["disk_hits"] == first["runs"]
    given = plan(EIGHT, gpu_memory_utilization=0.8, **kw)
    assert given["disk_hits"] == 0 and given["run_options"]["gpu_memory_utilization"] == 0.8
    assert "--gpu-memory-utilization 0.8\n" in plan_text(EIGHT, given) + "\n"
    # another default (as 0.9 was before): the default-sized runs are not reused
    monkeypatch.setattr(memory, "VLLM_GPU_MEMORY_UTILIZATION", 0.9)
    again = plan(EIGHT, **kw)
    assert again["run_options"]["gpu_memory_utilization"] == 0.9 and again["disk_hits"] == 0
    # SGLang sizes its pool by mem_fraction_static: no utilization recorded (it would refuse one)
    monkeypatch.undo()
    sglang = plan(EIGHT, engine_style="sglang", **{**kw, "cache_dir": None,
                                                   "scheduler": Scheduler(style="sglang", max_num_seqs=1)})
    assert "gpu_memory_utilization" not in sglang["run_options"]
    assert "pools      " not in plan_text(EIGHT, sglang)
    assert plan_module.sized_options({"engine_style": "sglang"}) == {"engine_style": "sglang"}


def test_a_plan_that_does_not_record_its_utilization_says_so_where_it_is_served_again():
    # a plan of a kvreplay before plans recorded it: its report and its engine flags say the pool
    # is served at today's default, not silently
    import kvreplay
    from kvreplay.serving.plan_check import unrecorded_utilization

    out = plan(EIGHT, model="Llama-3.1-8B", slo=SLO(ttft_p90_s=60.0), prices=Prices({"H100": 2.0}), block_size=4,
               max_instances=1, tps=(1,))
    assert unrecorded_utilization(out) is None
    old = {**out, "run_options": {k: v for k, v in out["run_options"].items() if k != "gpu_memory_utilization"}}
    why = unrecorded_utilization(old)
    assert why.startswith("the plan does not record the GPU memory utilization") and "at 0.92" in why
    page = kvreplay.report_html(EIGHT, policies=["lru"], capacities=[1, 2], block_size=4, plan=old)
    assert 'data-note="plan-utilization"><b>Pools.</b> The plan does not record' in page
    assert 'data-note="plan-utilization"' not in kvreplay.report_html(EIGHT, policies=["lru"], capacities=[1, 2],
                                                                       block_size=4, plan=out)
