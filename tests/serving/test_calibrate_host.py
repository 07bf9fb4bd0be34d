"""benchmarks/calibrate_host.py's fit: the least-absolute-relative-error linear program recovers
terms and GPU factors that generated the measurements (synthetic runs, worked from the linear
model the fit assumes)."""

from __future__ import annotations


import numpy as np
import pytest

from conftest import benchmark_module


def load():
    return benchmark_module("calibrate_host")


TRUTH = {"request_s": 0.004, "prompt_token_s": 1.5e-6, "latency_s": 0.004, "step_s": 0.0005,
         "step_request_s": 4e-5, "output_request_s": 6e-5}
FACTOR = (1.2, 0.9)  # the group's GPU steps: prefill x 1.2, decode x 0.9


def synthetic(truth=TRUTH, factor=FACTOR):
    """Runs measured as the fit's linear model makes them from `truth` and `factor`, with their
    simulated base (no host terms, factors 1) and slopes."""
    runs, base, slopes = [], [], []
    cases = [(isl, b, tp) for isl in (1024, 2048, 8192) for b in (4, 16, 64) for tp in (1, 2, 4)]
    for k, (isl, b, tp) in enumerate(cases):
        run = {"gpu": "H100", "model": "m", "weights": "bf16", "source": "2026-04-06", "isl": isl}
        # a run's simulated TTFT and TPOT with no host terms and factors 1, and their slopes: the
        # GPU's prefill and decode shares (split over tp GPUs: the host's terms are not), the
        # steps' CPU, the outputs' delay growing with b, the API server's service more than once
        # in TTFT as requests sent together queue for it (by b^2: the burst's mean wait), the fixed
        # latency once
        gpu_prefill, gpu_decode = 0.01 * isl / 1024 / tp, (0.01 + 0.0002 * b) / tp
        sl = {"request_s": (1.0 + 2e-4 * b * b, 0.0), "prompt_token_s": (isl * (1.0 + 2e-4 * b * b), 0.0),
              "latency_s": (1.0, 0.0),
              "step_s": (3.0, 1.0), "step_request_s": (3.0 * b, float(b)), "output_request_s": (float(b), 0.0),
              "gpu_prefill": (gpu_prefill, 0.0), "gpu_decode": (2 * gpu_decode, gpu_decode)}
        b0 = (gpu_prefill + 2 * gpu_decode, gpu_decode)
        measured = [b0[m] + sum(sl[t][m] * v for t, v in truth.items())
                    + sl["gpu_prefill"][m] * (factor[0] - 1) + sl["gpu_decode"][m] * (factor[1] - 1) for m in (0, 1)]
        run.update(ttft_s=measured[0], tpot_s=measured[1], id=k)
        runs.append(run)
        base.append(b0)
        slopes.append(sl)
    return runs, base, slopes


def test_the_fit_recovers_the_terms_that_made_the_measurements():
    pytest.importorskip("scipy")
    H = load()
    runs, base, slopes = synthetic()
    fitted, scales = H.lad_fit(runs, dict.fromkeys(TRUTH, 0.0), {("H100", "m", "bf16"): (1.0, 1.0)}, base, slopes)
    for t, v in TRUTH.items():
        assert fitted[t] == pytest.approx(v, rel=1e-6, abs=1e-9)
    assert scales[("H100", "m", "bf16")] == pytest.approx(FACTOR, rel=1e-6)


def test_the_fits_mean_error_is_what_its_optimum_leaves():
    """lad_fit.mean_error (what --fit-launch compares across the grid): 0 on exact data; on data
    with one TTFT 10% above the model, that run's share of the mean over every fitted figure."""
    pytest.importorskip("scipy")
    H = load()
    runs, base, slopes = synthetic()
    H.lad_fit(runs, dict.fromkeys(TRUTH, 0.0), {("H100", "m", "bf16"): (1.0, 1.0)}, base, slopes)
    assert H.lad_fit.mean_error == pytest.approx(0.0, abs=1e-9)
    runs[5] = {**runs[5], "ttft_s": runs[5]["ttft_s"] * 1.1}
    H.lad_fit(runs, dict.fromkeys(TRUTH, 0.0), {("H100", "m", "bf16"): (1.0, 1.0)}, base, slopes)
    # the least absolute fit leaves the outlier alone: |1.1 x - x| / (1.1 x) over 2 x 27 figures
    assert H.lad_fit.mean_error == pytest.approx((0.1 / 1.1) / (2 * len(runs)), rel=1e-6)


@pytest.mark.parametrize("scores, verdict", [
    ((0.2175, 0.2175, 0.2144, 0.2126), (0.0008, False)),  # the least at the grid's end: not a fit
    ((0.10412, 0.10412, 0.10406, 0.10636), (0.0004, False)),  # 0.006 points better than none: not evidence
    ((0.1041, 0.1020, 0.0990, 0.1010), (0.0004, True)),  # 0.51 points better, inside the grid: the fit
])
def test_a_launch_term_ships_only_when_the_runs_pin_it_down(scores, verdict):
    H = load()
    best, pinned = H.launch_verdict((0.0, 200e-6, 400e-6, 800e-6), scores)
    assert (best, pinned) == (pytest.approx(verdict[0]), verdict[1])


def test_the_band_is_as_wide_as_the_evidence_leaves_the_terms():
    # the band: refits on the runs resampled within each source, its ends the refits whose mean
    # effect on the fitted latencies is at the 5th and 95th percentile. Measurements the model
    # makes exactly pin every term down in every resample: both ends are the terms themselves.
    # Every run measured up to 10% off (a fixed draw): the resamples disagree, the ends are two
    # different refits (never below 0), the low one shortening the runs' latencies, the high one
    # lengthening them, and no term of either on the other side of the fitted one
    pytest.importorskip("scipy")
    H = load()
    runs, base, slopes = synthetic()
    scales = {("H100", "m", "bf16"): (1.0, 1.0)}
    zero = dict.fromkeys(TRUTH, 0.0)
    exact = H.band(runs, zero, scales, base, slopes)
    for t, v in TRUTH.items():
        assert exact["low"][t] == pytest.approx(v, rel=1e-4, abs=1e-9)
        assert exact["high"][t] == pytest.approx(v, rel=1e-4, abs=1e-9)
    off = np.random.default_rng(1).uniform(0.9, 1.1, size=(len(runs), 2))
    runs = [{**r, "ttft_s": r["ttft_s"] * a, "tpot_s": r["tpot_s"] * b} for r, (a, b) in zip(runs, off)]
    noisy = H.band(runs, zero, scales, base, slopes)
    centre, _ = H.lad_fit(runs, zero, scales, base, slopes)
    assert any(abs(noisy["high"][t] - noisy["low"][t]) > 0.05 * TRUTH[t] for t in TRUTH)
    assert all(noisy[end][t] >= 0 for end in ("low", "high") for t in TRUTH)

    def effect(terms):  # the runs' latencies at `terms` less at the centre, relative, summed
        return sum(sum(sl[t][m] * (terms[t] - centre[t]) for t in TRUTH) / r[key]
                   for r, sl in zip(runs, slopes) for m, key in ((0, "ttft_s"), (1, "tpot_s")))

    assert effect(noisy["low"]) < 0 < effect(noisy["high"])
    assert all(noisy["low"][t] <= centre[t] <= noisy["high"][t] for t in TRUTH)


def test_host_cpu_none_checks_only(capsys):
    # the steps alone (no host terms, synchronous: kvreplay before them) is a check, not a fit,
    # and refused before any table is read
    H = load()
    for argv in (["--host-cpu", "none"], ["--check", "--bands", "--host-cpu", "none"]):
        with pytest.raises(SystemExit) as e:
            H.main(argv)
        assert e.value.code == 2
        assert "--host-cpu none needs --check and no --bands" in capsys.readouterr().err


def test_the_prediction_bands_quantiles_leave_out_what_does_not_follow_its_protocol():
    # measured / simulated TTFT of 1, 2, ..., 21 (x 0.1) in one group, and a group whose TTFT does
    # not follow its protocol (gap-analysis): the quantiles are the first group's, 5th and 95th
    # percentile by linear interpolation (0.1 + 0.05 x 2.0 = 0.2; 2.1 - 0.1 = 2.0); leaving that
    # group out leaves only what is left: nothing but the excluded group has TTFT, so TPOT is used
    H = load()
    rows = [{"source": "2026-04-06", "gpu": "H200", "ttft": 0.1 * k, "tpot": 1.0, "e2e": 1.0} for k in range(1, 22)]
    rows += [{"source": "gap-analysis (vLLM 0.12)", "gpu": "H100", "ttft": 50.0, "tpot": 1.1, "e2e": 9.0}]
    assert H.prediction_quantiles(rows, "ttft") == pytest.approx((0.2, 2.0))
    # TPOT: the gap-analysis runs count (their TPOT follows the protocol); clamped to <= 1 <= high
    lo, hi = H.prediction_quantiles(rows, "tpot")
    assert lo == 1.0 and hi == pytest.approx(1.0)
    assert H.prediction_quantiles(rows, "tpot", leave_out=("2026-04-06", "H200")) == pytest.approx((1.0, 1.1))
    table = H.interval_table(rows)
    assert table["2026-04-06 / H200"]["tpot"][0] == 1.0  # judged by the other group's [1.0, 1.1]: all
    # TTFT judged by no other group (the other's is left out): the point estimate alone, 1.0 of 21
    assert table["2026-04-06 / H200"]["ttft"] == [pytest.approx(1 / 21), 0.0]


def test_runs_and_tpot_terms_need_check(capsys, tmp_path):
    # --runs writes the checked runs and --tpot-terms splits their TPOT: both refused without
    # --check before any table is read, as is a --runs file in a directory that does not exist
    H = load()
    for argv, message in ((["--runs", str(tmp_path / "r.csv")], "--runs needs --check"),
                          (["--tpot-terms"], "--tpot-terms needs --check"),
                          (["--check", "--runs", str(tmp_path / "no" / "r.csv")], "is not a directory"),
                          # (refused before the 14 minutes of runs it would otherwise throw away)
                          (["--check", "--only", "H200", "--write-prediction"], "--write-prediction takes every run"),
                          (["--write-prediction"], "--write-prediction takes every run"),
                          # (each was accepted and ignored: the band or the launch fit ran alone)
                          (["--band-only", "--check"], "--band-only recomputes the band alone"),
                          (["--fit-launch", "--only", "H200"], "--fit-launch fits the launch term over every run")):
        with pytest.raises(SystemExit) as e:
            H.main(argv)
        assert e.value.code == 2
        assert message in capsys.readouterr().err


def test_write_runs_writes_each_run_whole(tmp_path):
    # one row a run, floats to 6 significant digits, the role as the tables say it; no temporary
    # file left beside it
    H = load()
    row = {"id": "r1", "source": "2026-04-06", "gpu": "H200", "model": "Llama-3.1-70B", "weights": "fp8", "tp": 4,
           "concurrency": 32, "isl": 8192, "osl": 1024, "measured_ttft": 1.11709, "sim_ttft": 1.27503,
           "ttft": 1.11709 / 1.27503, "measured_tpot": 0.0286204, "sim_tpot": 0.0247298, "tpot": 0.0286204 / 0.0247298,
           "measured_e2e": 30.3957, "sim_e2e": 26.5734, "e2e": 30.3957 / 26.5734}
    out = tmp_path / "runs.csv"
    H.write_runs([row], out)
    lines = out.read_text().splitlines()
    assert lines[0].split(",") == list(H.RUN_COLUMNS)
    assert lines[1] == ("r1,2026-04-06,H200,Llama-3.1-70B,fp8,4,32,8192,1024,held back,1.11709,1.27503,0.876128,"
                        "0.0286204,0.0247298,1.15732,30.3957,26.5734,1.14384")
    assert [p.name for p in tmp_path.iterdir()] == ["runs.csv"]


def test_tpot_terms_split_the_decode_step_and_count_the_other_clients_prefills():
    # a run's TPOT parts: the decode step of its B requests at the mean context ISL + OSL / 2
    # (attention and the rest adding up to the step's time), and the other B - 1 clients' prompts,
    # one each a cycle, over its OSL - 1 tokens; a lone client (B = 1) is stalled by no prefill
    from kvreplay.serving.timing.models import StepBatch
    from kvreplay.serving.timing.roofline import CalibratedRooflineTimeModel

    H = load()
    run = {"model": "Llama-3.1-70B", "gpu": "H100", "tp": 4, "weights": "fp8", "kv": "fp8",
           "concurrency": 32, "isl": 8192, "osl": 1025}
    parts = H.tpot_terms(run)
    tm = CalibratedRooflineTimeModel("Llama-3.1-70B", "H100", 4, dtype="fp8", kv_dtype="fp8")
    decode = StepBatch(decode_context=(8192 + 512,) * 32)
    assert parts["decode_rest"] + parts["decode_attention"] == pytest.approx(tm.step_time(decode), rel=1e-12)
    terms = tm.terms(decode)
    assert parts["decode_attention"] == pytest.approx(terms["attn_decode"], rel=1e-12)  # (the factors are 1)
    lone = tm.step_time(StepBatch(prefill_new=(8192,), prefill_cached=(0,)))
    assert parts["prefill_share"] == pytest.approx(31 * lone / 1024, rel=1e-12)
    assert H.tpot_terms({**run, "concurrency": 1})["prefill_share"] == 0.0


def test_the_tpot_terms_fit_recovers_the_factors_that_made_the_measurements():
    # measured TPOT made as 0.9 x the decode step's rest + 2.2 x its attention + 0.8 x the
    # prefills' share + 0.2 ms, over parts that vary independently: the least absolute relative
    # error fit gets them back, with no error left; one run 10% off is left alone (its share of
    # the mean error: (0.1 / 1.1) / runs)
    pytest.importorskip("scipy")
    H = load()
    rng = np.random.default_rng(7)
    rows = []
    for _ in range(24):
        parts = {"decode_rest": rng.uniform(0.006, 0.02), "decode_attention": rng.uniform(0.0005, 0.01),
                 "prefill_share": rng.uniform(0.0, 0.03)}
        tpot = 0.9 * parts["decode_rest"] + 2.2 * parts["decode_attention"] + 0.8 * parts["prefill_share"] + 2e-4
        rows.append({"parts": parts, "tpot_s": tpot})
    fit = H.fit_tpot_terms(rows)
    assert (fit["decode_rest"], fit["decode_attention"], fit["prefill_share"]) == pytest.approx((0.9, 2.2, 0.8), rel=1e-6)
    assert fit["constant_s"] == pytest.approx(2e-4, rel=1e-5)
    assert fit["mean_error"] == pytest.approx(0.0, abs=1e-9)
    rows[3] = {**rows[3], "tpot_s": rows[3]["tpot_s"] * 1.1}
    fit = H.fit_tpot_terms(rows)
    assert fit["decode_attention"] == pytest.approx(2.2, rel=1e-6)
    assert fit["mean_error"] == pytest.approx((0.1 / 1.1) / 24, rel=1e-6)


def test_tpot_terms_fit_each_source_on_its_own_fit_gpu_runs(capsys):
    # each source and model is fitted on its own H100 runs and judged on its other GPUs with those
    # factors; one with fewer than TPOT_TERMS_MIN_RUNS runs on H100 is left out (four unknowns)
    pytest.importorskip("scipy")
    H = load()
    base = {"model": "Llama-3.1-70B", "weights": "fp8", "kv": "fp8", "osl": 1024}
    rows = []
    for gpu in ("H100", "H200"):
        for tp in (2, 4, 8):
            for b in (4, 16, 64):
                for isl in (1024, 8192):
                    rows.append({**base, "source": "a", "gpu": gpu, "tp": tp, "concurrency": b, "isl": isl})
    rows += [{**base, "source": "b", "gpu": "H100", "tp": 4, "concurrency": 8, "isl": 1024}] * (H.TPOT_TERMS_MIN_RUNS - 1)
    for r in rows:  # measured: attention x2, the rest x0.9, prefills x1; the simulation took them at 1
        p = H.tpot_terms(r)
        r["tpot_s"] = 0.9 * p["decode_rest"] + 2.0 * p["decode_attention"] + p["prefill_share"]
        r["sim_tpot"] = sum(p.values())
    out = H.tpot_terms_table(rows)
    assert list(out) == ["a (Llama-3.1-70B)"]
    fit = out["a (Llama-3.1-70B)"]["fit"]
    assert (fit["decode_rest"], fit["decode_attention"], fit["prefill_share"]) == pytest.approx((0.9, 2.0, 1.0), rel=1e-5)
    assert out["a (Llama-3.1-70B)"]["H200"]["fit"] == pytest.approx(0.0, abs=1e-6)  # the H100 factors hold on H200 here
    assert out["a (Llama-3.1-70B)"]["H200"]["simulated"] > 0.0
    assert "| a (Llama-3.1-70B) | H200 | 18 | 0.90 2.00 1.00 +0.00 ms | 0.0% |" in capsys.readouterr().out
