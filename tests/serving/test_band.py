"""The calibrated roofline's error band through simulate(): the run again at both ends of the
measured/predicted band, the warnings where a run leaves the calibrated range, and the CLI's
columns."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

import kvreplay
from kvreplay.serving.timing.host import prediction_factors
from sim_cases import trace_of


def small_trace():
    return trace_of(*[([3 * i, 3 * i + 1, 3 * i + 2], 40, 100 * i, 5) for i in range(12)], block_size=16)


def trace_file(tmp_path):
    """small_trace() as a Mooncake JSONL file."""
    path = tmp_path / "t.jsonl"
    with open(path, "w") as f:
        for i in range(12):
            f.write(json.dumps({"timestamp": 100 * i, "input_length": 40, "output_length": 5,
                                "hash_ids": [3 * i, 3 * i + 1, 3 * i + 2]}) + "\n")
    return path


def test_band_brackets_every_latency():
    r = kvreplay.simulate(small_trace(), "vllm", 64, 16, model="Llama-3.1-8B", gpu="H100", time_model="roofline")
    band = r.summary()["latency_band_s"]
    lat = r.summary()["latency_s"]
    for key in ("ttft", "tpot", "e2e"):
        for stat in ("mean", "p50", "p90"):
            lo, hi = band[key][stat]
            assert lo <= lat[key][stat] * (1 + 1e-12) and lat[key][stat] <= hi * (1 + 1e-12), (key, stat)
            assert lo < hi
    assert band["calibrated_on"] == "H100" and set(band["ratio_bands"]) == {"prefill", "decode", "mixed"}
    assert band["warnings"] == []  # a checked model on a measured GPU, short contexts, bf16


def test_band_of_an_isolated_request_is_its_steps_times_the_ratios():
    # one request, alone: its first token is what the host CPU adds (its arrival delay, the
    # engine's CPU beside the step, its output delay) plus one prefill step; at each end of the
    # band, the step x the prefill band's end and the host's terms at their own band's end
    from kvreplay.serving.timing import CalibratedRooflineTimeModel, StepBatch
    from kvreplay.serving.timing.host import TERMS, band_end, calibrated

    t = trace_of(([0, 1, 2, 3], 64, 0, 1), block_size=16)
    r = kvreplay.simulate(t, "vllm", 64, 16, model="Llama-3.1-8B", gpu="H100", time_model="roofline")
    lo, hi = r.band["bands"]["prefill"]
    host = calibrated()
    assert r.time_model["host"] == host.describe()
    step = CalibratedRooflineTimeModel("Llama-3.1-8B", "H100").step_time(StepBatch((64,), (0,)))

    def ttft(h, x):
        return float(h.arrival_delay([64])[0]) + h.step_seconds(step * x, 1) + h.output_seconds(1)

    assert float(r.ttft_s[0]) == pytest.approx(ttft(host, 1.0))
    low, high = band_end(host, "low"), band_end(host, "high")
    # (each end one refit of the terms, no term on the other side of the fitted one: this
    # request's TTFT lies between them, 6.9 / 8.8 / 15.9 ms outside the engine)
    assert all(getattr(low, k) <= getattr(host, k) <= getattr(high, k) for k in TERMS) and low != high
    assert ttft(low, lo) < ttft(host, 1.0) < ttft(high, hi)
    band = r.summary()["latency_band_s"]
    assert band["ttft"]["p50"] == pytest.approx([ttft(low, lo), ttft(high, hi)])
    assert band["host_band"]["low"] == low.describe()
    # the prediction band: each end widened to the point estimate x the measured runs' scatter
    q = prediction_factors("vllm")["ttft"]
    centre = ttft(host, 1.0)
    assert band["prediction"]["ttft"]["p50"] == pytest.approx([min(ttft(low, lo), centre * q[0]),
                                                               max(ttft(high, hi), centre * q[1])])
    assert band["prediction"]["factors"]["ttft"] == list(q)


def test_the_prediction_band_by_hand():
    from kvreplay.serving.timing.host import widen_band

    assert widen_band(1.0, 0.9, 1.2, (0.8, 1.5)) == (0.8, 1.5)  # the scatter is wider: its ends
    assert widen_band(1.0, 0.9, 1.2, (0.95, 1.1)) == (0.9, 1.2)  # the parameter band is: its own
    assert widen_band(2.0, 1.9, 2.1, (0.9, 1.1)) == pytest.approx((1.8, 2.2))
    assert widen_band(1.0, 0.9, 1.2, None) == (0.9, 1.2)
    assert prediction_factors("none") == {}
    f = prediction_factors("vllm")
    assert set(f) == {"ttft", "tpot", "itl", "e2e"} and f["itl"] == f["tpot"]
    assert all(lo <= 1.0 <= hi for lo, hi in f.values())


def test_raw_roofline_has_no_band_and_warnings_name_the_range():
    raw = kvreplay.simulate(small_trace(), "vllm", 64, 16, model="Llama-3.1-8B", gpu="H100", time_model="roofline-raw")
    assert raw.summary()["latency_band_s"] is None
    r = kvreplay.simulate(small_trace(), "vllm", 64, 16, model="Qwen3-30B-A3B", gpu="B200", tp=2, time_model="roofline")
    warnings = r.summary()["latency_band_s"]["warnings"]
    # B200: H200's coefficients, checked on B200's own kernels, at B200's measured streaming bandwidth
    assert any(w.startswith("B200 ships H200's coefficients") and "6.33 TB/s: its own measured streaming bandwidth" in w
               and "spread of those coefficients on B200's own measured kernels" in w for w in warnings)
    # an MoE whose steps the calibration checked (bf16 MoE steps composed from B200's kernels): not
    # outside the checked models, but its end-to-end TTFT is said to be a lower bound
    assert not any("Qwen3-30B-A3B is an MoE model" in w for w in warnings)
    assert any("read its TTFT as a lower bound" in w for w in warnings)
    # an MoE outside the checked ones: its experts on the fused MoE kernel, the rest extrapolated
    r = kvreplay.simulate(small_trace(), "vllm", 64, 16, model="gpt-oss-120b", gpu="H100", tp=2, time_model="roofline",
                          weights_dtype="int4")
    warnings = r.summary()["latency_band_s"]["warnings"]
    assert any(w.startswith("gpt-oss-120b is an MoE model with sliding-window layers outside the calibration's "
                            "checked models") and "fused MoE kernel as fitted on measured MoE kernels (mxfp4 weights"
               in w for w in warnings)
    # no MoE kernel measured (A100): the experts with the other GEMMs, and the run says how far off that was
    r = kvreplay.simulate(small_trace(), "vllm", 64, 16, model="Mixtral-8x7B-v0.1", gpu="A100", tp=2, time_model="roofline")
    warnings = r.summary()["latency_band_s"]["warnings"]
    assert any("no bf16 MoE kernel was measured on the A100-80GB" in w for w in warnings)
    # MI300X: nothing measured; its datasheet 5.3 TB/s at the share of peak measured on H200 (84.4%)
    r = kvreplay.simulate(small_trace(), "vllm", 64, 16, model="Llama-3.1-8B", gpu="MI300X", time_model="roofline")
    warnings = r.summary()["latency_band_s"]["warnings"]
    assert any(w.startswith("MI300X has no kernel measurements") and "(H200)" in w and "4.47 TB/s" in w
               and "the cross-GPU check's" in w for w in warnings)


def test_context_warning_takes_the_mla_modules_range_for_an_mla_run():
    # the dense and MoE steps were composed up to 8,192 tokens of context; aiconfigurator's MLA modules
    # (the MLA term's fit) time prompts up to 32,768: a 20,000-token prompt is extrapolated for a GQA
    # model and not for DeepSeek-V3 with its fitted MLA term; a 40,000-token one is for both
    def context_warnings(model, tokens, **kw):
        t = trace_of((list(range(tokens // 16)), tokens, 0, 2), block_size=16)
        r = kvreplay.simulate(t, "vllm", 8192, 16, model=model, time_model="roofline", **kw)
        return [w for w in r.summary()["latency_band_s"]["warnings"] if "beyond the calibrated" in w]

    ds = dict(gpu="H200", tp=8, weights_dtype="fp8")
    assert context_warnings("Llama-3.1-8B", 20000, gpu="H100") == [
        "1 request reaches a context beyond the calibrated 8,192 tokens (up to 20,002): attention there is extrapolated"]
    assert context_warnings("DeepSeek-V3", 20000, **ds) == []
    assert context_warnings("DeepSeek-V3", 40000, **ds) == [
        "1 request reaches a context beyond the calibrated 32,768 tokens (the MLA modules' longest prompt) (up to "
        "40,002): attention there is extrapolated"]


def test_weights_dtype_warnings_name_what_was_not_measured():
    def warnings(dtype):
        r = kvreplay.simulate(small_trace(), "vllm", 64, 16, model="Llama-3.1-8B", gpu="H100", time_model="roofline",
                              weights_dtype=dtype)
        return r.summary()["latency_band_s"]["warnings"]

    assert warnings("fp8") == []  # fp8 GEMMs have their own fitted coefficients (H100's fp8 kernels)
    assert [w for w in warnings("int4") if "int4" in w] == [
        "no int4 GEMMs were measured: int4 weights are read at half a byte each and their GEMMs run at the bf16 "
        "kernels' fitted coefficients (dequantised to bf16)"]


def test_cli_prints_the_band_columns(tmp_path):
    path = trace_file(tmp_path)
    cmd = [sys.executable, "-m", "kvreplay.cli", "simulate", str(path), "--model", "Llama-3.1-8B", "--gpu", "H100",
           "--block-size", "16"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "p50 band" in out.stdout and "p90 band" in out.stdout
    assert "calibrated on H100's measured kernels" in out.stdout
    doc = json.loads(subprocess.run(cmd + ["--json", "--summary-only"], capture_output=True, text=True,
                                    timeout=120).stdout)
    band = doc["summary"]["latency_band_s"] if "summary" in doc else doc["latency_band_s"]
    assert np.all(np.diff(band["ttft"]["p50"]) > 0)
    # the prediction band's p90s, printed under the table: each end the farther of the band's and the
    # point x the measured scatter's factor
    pred, point = band["prediction"], doc["summary"]["latency_s"] if "summary" in doc else doc["latency_s"]
    lo, hi = pred["factors"]["ttft"]
    expect = (min(band["ttft"]["p90"][0], point["ttft"]["p90"] * lo), max(band["ttft"]["p90"][1], point["ttft"]["p90"] * hi))
    assert pred["ttft"]["p90"] == pytest.approx(expect)
    from kvreplay.output.serving import seconds_text
    line = next(x for x in out.stdout.splitlines() if x.startswith("(prediction band"))
    assert f"TTFT p90 {seconds_text(expect[0])} - {seconds_text(expect[1])}" in line
    assert f"TTFT x{lo:.2f}-{hi:.2f}" in line


def test_sweep_csv_has_the_band_columns(tmp_path):
    path = trace_file(tmp_path)
    out = tmp_path / "sweep.csv"
    cmd = [sys.executable, "-m", "kvreplay.cli", "simulate", str(path), "--model", "Llama-3.1-8B", "--gpu", "H100",
           "--block-size", "16", "--speedups", "1,2", "-o", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    import csv

    rows = list(csv.DictReader(open(out)))
    assert len(rows) == 2
    for r in rows:
        assert float(r["ttft_p50_low_s"]) <= float(r["ttft_p50_s"]) <= float(r["ttft_p50_high_s"])
        assert float(r["tpot_p50_low_s"]) < float(r["tpot_p50_high_s"])
