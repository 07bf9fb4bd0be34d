"""`kvreplay calibrate-profile` and serving/timing/fit.py: step measurements -> the JSON polynomial
profile (docs/profiles.md, "Your own measurements: kvreplay calibrate-profile")."""

from __future__ import annotations

import csv
import io
import itertools
import json

import numpy as np
import pytest

from conftest import jsonl, write
from vllm_bench import bench_result
from test_cli import fails, kv, no_temp_files, ok

from kvreplay.serving.timing import PolynomialProfile, StepBatch, load_time_model
from kvreplay.serving.timing.fit import (DEFAULT_TERMS, StepsError, Steps, fit_profile, nnls, parse_terms,
                                         read_steps, term_label)
from kvreplay.errors import ConfigError

# The polynomial the steps are generated from (ms): every default term, each coefficient > 0.
TRUE = {"format": "kvreplay-step-polynomial", "unit": "ms",
        "terms": [{"coef": 4.0}, {"coef": 0.02, "prefill_tokens": 1}, {"coef": 2e-6, "prefill_tokens": 2},
                  {"coef": 1e-6, "prefill_tokens": 1, "prefill_context": 1}, {"coef": 0.05, "decode_batch": 1},
                  {"coef": 0.0008, "decode_context": 1}]}
TRUE_COEFS = [t["coef"] for t in TRUE["terms"]]
COLUMNS = ("prefill_tokens", "prefill_requests", "prefill_context", "decode_batch", "decode_context")


def batches(seed: int, n: int) -> list[StepBatch]:
    """Random steps: 0-2 prefilling requests (chunk 1-3999 after 0-7999 cached), 0-127 decodes."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        k = int(rng.integers(0, 3))
        new = tuple(int(x) for x in rng.integers(1, 4000, k))
        cached = tuple(int(x) for x in rng.integers(0, 8000, k))
        decode = tuple(int(x) for x in rng.integers(1, 6000, int(rng.integers(0 if k else 1, 128))))
        out.append(StepBatch(new, cached, decode))
    return out


def measured_ms(steps: list[StepBatch], noise: float = 0.0, seed: int = 0) -> np.ndarray:
    truth = PolynomialProfile(document=TRUE)
    ms = np.array([truth.step_time(b) * 1000 for b in steps])
    return ms * (1 + noise * np.random.default_rng(seed).standard_normal(ms.size))


def steps_csv(steps: list[StepBatch], ms) -> str:
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow([*COLUMNS, "step_ms"])
    for b, t in zip(steps, ms):
        v = PolynomialProfile.variables(b)
        w.writerow([v[c] for c in COLUMNS] + [repr(float(t))])
    return out.getvalue()


def as_steps(steps: list[StepBatch], ms) -> Steps:
    vs = [PolynomialProfile.variables(b) for b in steps]
    variables = {k: np.array([v[k] for v in vs], dtype=np.float64) for k in vs[0]}
    return Steps("mem", "csv", variables, np.asarray(ms) / 1000, np.arange(2, len(steps) + 2), "step_ms")


# ------------------------------------------------------------------ the fit


def test_exact_steps_give_back_the_coefficients():
    steps = batches(0, 60)
    cal = fit_profile(as_steps(steps, measured_ms(steps)))
    assert [term_label(t) for t in cal.terms] == list(DEFAULT_TERMS)
    np.testing.assert_allclose(cal.coefs, TRUE_COEFS, rtol=1e-9)
    assert cal.in_sample.mape < 1e-9 and cal.held_out.mape < 1e-9
    assert cal.in_sample.ratio_min == pytest.approx(1) and cal.held_out.ratio_max == pytest.approx(1)
    assert cal.rank == 6 and cal.dropped == ()


def test_relative_weighting_recovers_them_too():
    steps = batches(1, 40)
    cal = fit_profile(as_steps(steps, measured_ms(steps)), relative=True, unit="us")
    np.testing.assert_allclose(cal.coefs, np.array(TRUE_COEFS) * 1000, rtol=1e-9)  # us: 1000 x the ms coefficients
    assert cal.weighting == "relative"


def test_noisy_steps_fit_within_the_noise():
    # 3 % multiplicative noise: the error in and out of sample is about the noise (0.8 x 3 % for a
    # normal's mean absolute deviation); the dominant coefficients come back within 10 %; on fresh
    # steps the fitted profile is within 1.5 % of the true one on average.
    steps = batches(2, 400)
    cal = fit_profile(as_steps(steps, measured_ms(steps, noise=0.03, seed=2)))
    assert 1.5 < cal.in_sample.mape < 3.5 and 1.5 < cal.held_out.mape < 3.5
    assert 0.97 < cal.held_out.ratio_median < 1.03
    coef = dict(zip(map(term_label, cal.terms), cal.coefs))
    for term, true in (("prefill_tokens", 0.02), ("prefill_tokens*prefill_context", 1e-6), ("decode_context", 0.0008)):
        assert coef[term] == pytest.approx(true, rel=0.10), term
    fresh = batches(3, 300)
    fitted, truth = cal.profile(), PolynomialProfile(document=TRUE)
    err = [abs(fitted.step_time(b) / truth.step_time(b) - 1) for b in fresh]
    assert np.mean(err) < 0.015


def test_terms_the_input_cannot_measure_are_left_out():
    # decodes only: no prefill column is ever non-zero, and the input has no decode_mean_context
    # column (it is derived from decode_context / decode_batch)
    steps = [StepBatch((), (), tuple(range(1, b + 1))) for b in (1, 2, 5, 9, 17)]
    cal = fit_profile(as_steps(steps, measured_ms(steps)), "1,prefill_tokens,decode_batch,decode_context")
    assert [term_label(t) for t in cal.terms] == ["1", "decode_batch", "decode_context"]
    assert [(term_label(t), why) for t, why in cal.dropped] == [("prefill_tokens", "0 on every row")]
    np.testing.assert_allclose(cal.coefs, [4.0, 0.05, 0.0008], rtol=1e-9)


def test_nnls_matches_brute_force_over_the_active_sets():
    rng = np.random.default_rng(5)
    for _ in range(30):
        a = rng.standard_normal((12, 4))
        b = rng.standard_normal(12)
        x = nnls(a, b)
        assert (x >= 0).all()
        best = min((np.linalg.norm(a @ s - b), tuple(s)) for s in _feasible_subset_solutions(a, b))
        assert np.linalg.norm(a @ x - b) == pytest.approx(best[0], rel=1e-9, abs=1e-12)


def _feasible_subset_solutions(a, b):
    n = a.shape[1]
    yield np.zeros(n)
    for r in range(1, n + 1):
        for subset in itertools.combinations(range(n), r):
            s = np.zeros(n)
            s[list(subset)] = np.linalg.lstsq(a[:, subset], b, rcond=None)[0]
            if (s >= 0).all():
                yield s


def test_parse_terms():
    assert parse_terms("1, prefill_tokens^2 ,decode_context*decode_batch,num_ctx_tokens**1") == (
        (), (("prefill_tokens", 2),), (("decode_batch", 1), ("decode_context", 1)), (("prefill_tokens", 1),))
    with pytest.raises(ConfigError, match=r"terms: 'batch': unknown variable 'batch'"):
        parse_terms("1,batch")
    with pytest.raises(ConfigError, match="given twice"):
        parse_terms("prefill_tokens,prefill_tokens^1")
    with pytest.raises(ConfigError, match="exponent of decode_batch must be a whole number from 1 to 8"):
        parse_terms("decode_batch^0.5")


# ------------------------------------------------------------------ the command


def test_cli_writes_a_profile_that_reproduces_the_steps(tmp_path):
    steps = batches(4, 80)
    ms = measured_ms(steps)
    src = write(tmp_path, "steps.csv", steps_csv(steps, ms))
    out = ok("calibrate-profile", src, "-o", tmp_path / "profile.json", "--source", "H100, Llama-3.1-8B, vLLM 0.11")
    assert "input      " in out and "80 steps, time from step_ms" in out
    assert "in-sample" in out and "5-fold held-out" in out and "0.00%" in out
    doc = json.loads((tmp_path / "profile.json").read_text())
    assert doc["format"] == "kvreplay-step-polynomial" and doc["unit"] == "ms"
    assert doc["source"].startswith("H100, Llama-3.1-8B, vLLM 0.11. kvreplay calibrate-profile steps.csv: 80 steps (csv)")
    np.testing.assert_allclose([t["coef"] for t in doc["terms"]], TRUE_COEFS, rtol=1e-9)
    profile = load_time_model(str(tmp_path / "profile.json"))
    assert isinstance(profile, PolynomialProfile)
    np.testing.assert_allclose([profile.step_time(b) * 1000 for b in steps], ms, rtol=1e-9)
    # and the compiled loop's copy of the profile charges the same
    from kvreplay.serving.timing import aggregates, packed, step_seconds

    tm = packed(profile)
    np.testing.assert_allclose([step_seconds(tm, aggregates(b)) * 1000 for b in steps], ms, rtol=1e-9)
    assert no_temp_files(tmp_path)


def test_cli_json_report(tmp_path):
    steps = batches(6, 30)
    src = write(tmp_path, "steps.csv", steps_csv(steps, measured_ms(steps)))
    report = json.loads(ok("calibrate-profile", src, "-o", tmp_path / "p.json", "--json", "--folds", "3",
                           "--terms", "1,prefill_tokens,decode_context"))
    assert report["steps"] == 30 and report["held_out"]["folds"] == 3 and report["approximate"] is None
    assert [t["term"] for t in report["terms"]] == ["1", "prefill_tokens", "decode_context"]
    assert report["in_sample"]["mape_percent"] > 0  # three terms cannot follow the six-term truth exactly


def test_vllm_iteration_fields_in_jsonl(tmp_path):
    # vLLM's IterationDetails names (vllm/v1/utils.py) and elapsed_ms (SchedulerIterationDetails)
    rows = [{"num_ctx_requests": 1, "num_ctx_tokens": 512, "num_generation_requests": 0, "num_generation_tokens": 0},
            {"num_ctx_requests": 0, "num_ctx_tokens": 0, "num_generation_requests": 8, "num_generation_tokens": 8},
            {"num_ctx_requests": 1, "num_ctx_tokens": 2048, "num_generation_requests": 8, "num_generation_tokens": 8},
            {"num_ctx_requests": 0, "num_ctx_tokens": 0, "num_generation_requests": 32, "num_generation_tokens": 32}]
    for r in rows:  # 3 ms + 0.01 ms per prefill token + 0.1 ms per decoding request
        r["elapsed_ms"] = 3 + 0.01 * r["num_ctx_tokens"] + 0.1 * r["num_generation_requests"]
    src = write(tmp_path, "iters.jsonl", jsonl(*rows))
    out = ok("calibrate-profile", src, "-o", tmp_path / "p.json", "--terms", "1,prefill_tokens,decode_batch,decode_context")
    assert "decode_context  not fitted: the input has no decode_context" in out
    assert "note: ignored: num_generation_tokens" in out
    doc = json.loads((tmp_path / "p.json").read_text())
    assert [list(t) for t in doc["terms"]] == [["coef"], ["coef", "prefill_tokens"], ["coef", "decode_batch"]]
    np.testing.assert_allclose([t["coef"] for t in doc["terms"]], [3, 0.01, 0.1], rtol=1e-9)


def test_vllm_log_is_sniffed(tmp_path):
    log = "".join(
        f"INFO 05-01 10:00:00 [core.py:391] Iteration({i}): {cr} context requests, {ct} context tokens, {gr} generation "
        f"requests, {gr} generation tokens, iteration elapsed time: {2 + 0.02 * ct + 0.5 * gr:.2f} ms\n"
        for i, (cr, ct, gr) in enumerate([(1, 100, 0), (0, 0, 4), (1, 300, 4), (0, 0, 10), (2, 400, 2)]))
    log += "INFO 05-01 10:00:01 [core.py:391] Iteration(5): 0 context requests, 0 context tokens, 0 generation " \
           "requests, 0 generation tokens, iteration elapsed time: 0.10 ms (dummy)\nINFO unrelated line\n"
    src = write(tmp_path, "server.log", log)
    out = ok("calibrate-profile", src, "-o", tmp_path / "p.json", "--terms", "1,prefill_tokens,decode_batch")
    assert "(vllm-log): 5 steps" in out and "1 dummy iterations" in out
    np.testing.assert_allclose([t["coef"] for t in json.loads((tmp_path / "p.json").read_text())["terms"]],
                               [2, 0.02, 0.5], rtol=1e-6)


# benchmark_serving / vllm bench serve results (field names of vllm/benchmarks/serve.py), isl 1000
# and osl 200 on average. Hand-worked with the terms 1, prefill_tokens, decode_batch: the decode
# steps (B = 1, 8, 32; TPOT 10, 17, 41 ms) give 9 + 1 x B; the prefill step of the concurrency-1
# result (1000 tokens, TTFT 50 ms) gives 9 + 1000 x 0.041.
def test_benchmark_serving_results_are_accepted_as_approximate_steps(tmp_path):
    results = [bench_result(1, 50.0, 10.0), bench_result(8, 120.0, 17.0), bench_result(32, 400.0, 41.0)]
    for name, text in (("bench.json", json.dumps(results)),                       # a list
                       ("bench.jsonl", "\n".join(json.dumps(r) for r in results))):  # --append-result
        src = write(tmp_path, name, text)
        out = ok("calibrate-profile", src, "-o", tmp_path / "p.json", "--terms", "1,prefill_tokens,decode_batch")
        assert out.startswith("APPROXIMATE: steps derived from benchmark_serving results")
        assert "(vllm-bench): 4 steps" in out
        doc = json.loads((tmp_path / "p.json").read_text())
        assert "APPROXIMATE: steps derived from benchmark_serving results" in doc["source"]
        np.testing.assert_allclose([t["coef"] for t in doc["terms"]], [9, 0.041, 1], rtol=1e-9)
        profile = PolynomialProfile(tmp_path / "p.json")
        assert profile.step_time(StepBatch((1000,), (0,), ())) == pytest.approx(0.050)
        assert profile.step_time(StepBatch((), (), (1100,) * 8)) == pytest.approx(0.017)


def test_one_benchmark_result_and_littles_law(tmp_path):
    # max_concurrency null: B = request_throughput x mean_e2el_ms / 1000 = 1.6 x 3500 / 1000 = 5.6
    r = bench_result(None, 100.0, 17.09, mean_e2el_ms=3500.0)
    steps = read_steps(write(tmp_path, "r.json", json.dumps(r)))
    assert steps.format == "vllm-bench" and len(steps) == 1
    assert steps.variables["decode_batch"][0] == pytest.approx(5.6)
    assert steps.variables["decode_context"][0] == pytest.approx(5.6 * 1100)
    assert any("Little's law" in n for n in steps.notes)
    msg = fails("calibrate-profile", tmp_path / "r.json", "-o", tmp_path / "p.json")
    assert msg.startswith(f"{tmp_path / 'r.json'}: 1 step: a fit needs at least 2 (each benchmark result")


def test_benchmark_result_without_tpot(tmp_path):
    r = bench_result(4, 80.0, 12.0)
    for k in ("mean_tpot_ms", "mean_itl_ms"):
        del r[k]
    src = write(tmp_path, "r.jsonl", json.dumps(bench_result(1, 50.0, 10.0)) + "\n" + json.dumps(r) + "\n")
    assert fails("calibrate-profile", src, "-o", tmp_path / "p.json") == (
        f"{src}:2: mean_tpot_ms: missing, and so is mean_itl_ms (run with --percentile-metrics ttft,tpot,itl)")


# ------------------------------------------------------------------ bad input


@pytest.mark.parametrize("rows, line, message", [
    ("100,1,0,2,50,5\n10,1,0,2,x,3\n", 3, "decode_context: must be a number, got 'x'"),
    ("100,1,0,2,50,5\n0,0,0,0,0,3\n", 3, "prefill_tokens: no work in this step"),
    ("100,1,0,2,50,5\n100,1,0,2,1,3\n", 3, "decode_context: 1 is less than decode_batch 2"),
    ("100,1,0,2,50,5\n100,1,0,2.5,50,3\n", 3, "decode_batch: must be a whole number >= 0, got 2.5"),
    ("100,1,0,2,50,5\n100,1,0,2,50,0\n", 3, "step_ms: must be > 0, got 0"),
    ("100,1,0,2,50,5\n100,1,0,2,50\n", 3, "5 fields, the header has 6"),
    ("\n\n100,1,0,2,50,5\n100,1,0,2,50,inf\n", 5, "step_ms: must be finite, got inf"),
])
def test_a_bad_row_names_file_line_and_field(tmp_path, rows, line, message):
    src = write(tmp_path, "steps.csv", ",".join(COLUMNS) + ",step_ms\n" + rows)
    msg = fails("calibrate-profile", src, "-o", tmp_path / "p.json")
    assert msg.startswith(f"{src}:{line}: {message}"), msg
    assert not (tmp_path / "p.json").exists() and no_temp_files(tmp_path)


def test_bad_headers_and_records(tmp_path):
    src = write(tmp_path, "a.csv", "prefill_tokens,decode_batch\n1,1\n")
    assert fails("calibrate-profile", src, "-o", tmp_path / "p.json").startswith(
        f"{src}:1: no step time: name it step_ms or step_s or step_us or elapsed_ms")
    src = write(tmp_path, "b.csv", "prefill_tokens,num_ctx_tokens,step_ms\n1,1,1\n")
    assert fails("calibrate-profile", src, "-o", tmp_path / "p.json") == (
        f"{src}:1: num_ctx_tokens: given twice (prefill_tokens is another name of it)")
    src = write(tmp_path, "c.jsonl", jsonl({"decode_batch": 1, "decode_context": 5, "step_s": 0.01},
                                           {"decode_context": 5, "step_s": 0.01}))
    assert fails("calibrate-profile", src, "-o", tmp_path / "p.json") == (
        f"{src}:2: decode_batch: missing (the first row has it)")
    src = write(tmp_path, "d.jsonl", '{"decode_batch": 1, "decode_context": 5, "step_s": 0.01}\n{"decode_batch": \n')
    assert fails("calibrate-profile", src, "-o", tmp_path / "p.json").startswith(f"{src}:2: not JSON: ")
    assert fails("calibrate-profile", tmp_path / "none.csv", "-o", tmp_path / "p.json") == (
        f"{tmp_path / 'none.csv'}: no such file")
    with pytest.raises(StepsError):
        read_steps(write(tmp_path, "e.json", json.dumps({"decode_batch": 1})))


def test_bad_options(tmp_path):
    steps = batches(7, 10)
    src = write(tmp_path, "steps.csv", steps_csv(steps, measured_ms(steps)))
    assert fails("calibrate-profile", src, "-o", tmp_path / "p.json", "--terms", "1,foo").startswith(
        "kvreplay: --terms: 'foo': unknown variable 'foo' (known: prefill_tokens, ")
    assert fails("calibrate-profile", src, "-o", tmp_path / "p.json", "--folds", "1") == (
        "kvreplay: --folds 1: the held-out error needs at least 2 folds")


def test_output_equal_to_the_input_is_refused(tmp_path):
    steps = batches(8, 10)
    text = steps_csv(steps, measured_ms(steps))
    src = write(tmp_path, "steps.csv", text)
    for same in (src, tmp_path / "sub" / ".." / "steps.csv"):
        (tmp_path / "sub").mkdir(exist_ok=True)
        assert fails("calibrate-profile", src, "-o", same) == (
            f"kvreplay: -o {same}: that is the input file; write to another name")
    assert src.read_text() == text and no_temp_files(tmp_path)
    r = kv("calibrate-profile", src, "-o", tmp_path / "p.json")
    assert r.returncode == 0 and (tmp_path / "p.json").exists()
