"""benchmarks/calibrate_host.py's fit: the least-absolute-relative-error linear program recovers
terms and GPU factors that generated the measurements (synthetic runs, worked from the linear
model the fit assumes)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest


def load():
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "calibrate_host.py"
    spec = importlib.util.spec_from_file_location("calibrate_host", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_fit_recovers_the_terms_that_made_the_measurements():
    pytest.importorskip("scipy")
    H = load()
    truth = {"request_s": 0.008, "prompt_token_s": 1.5e-6, "step_s": 0.0005, "step_request_s": 4e-5,
             "output_request_s": 6e-5}
    factor = (1.2, 0.9)  # the group's GPU steps: prefill x 1.2, decode x 0.9
    runs, base, slopes = [], [], []
    cases = [(1024, 4, 1), (8192, 4, 2), (1024, 64, 4), (8192, 64, 1), (2048, 16, 2), (4096, 32, 4), (1024, 8, 2)]
    for k, (isl, b, tp) in enumerate(cases):
        run = {"gpu": "H100", "model": "m", "weights": "bf16", "source": "2026-04-06", "isl": isl}
        # a run's simulated TTFT and TPOT with no host terms and factors 1, and their slopes: the
        # GPU's prefill and decode shares (split over tp GPUs: the host's terms are not), the
        # steps' CPU, the outputs' delay growing with b
        gpu_prefill, gpu_decode = 0.01 * isl / 1024 / tp, (0.01 + 0.0002 * b) / tp
        sl = {"request_s": (1.0, 0.0), "prompt_token_s": (float(isl), 0.0),
              "step_s": (3.0, 1.0), "step_request_s": (3.0 * b, float(b)), "output_request_s": (float(b), 0.0),
              "gpu_prefill": (gpu_prefill, 0.0), "gpu_decode": (2 * gpu_decode, gpu_decode)}
        b0 = (gpu_prefill + 2 * gpu_decode, gpu_decode)
        measured = [b0[m] + sum(sl[t][m] * v for t, v in truth.items())
                    + sl["gpu_prefill"][m] * (factor[0] - 1) + sl["gpu_decode"][m] * (factor[1] - 1) for m in (0, 1)]
        run.update(ttft_s=measured[0], tpot_s=measured[1], id=k)
        runs.append(run)
        base.append(b0)
        slopes.append(sl)
    terms0 = dict.fromkeys(truth, 0.0)
    fitted, scales = H.lad_fit(runs, terms0, {("H100", "m", "bf16"): (1.0, 1.0)}, base, slopes)
    for t, v in truth.items():
        assert fitted[t] == pytest.approx(v, rel=1e-6, abs=1e-9)
    assert scales[("H100", "m", "bf16")] == pytest.approx(factor, rel=1e-6)


def test_host_cpu_none_checks_only(capsys):
    # the steps alone (no host terms, synchronous: kvreplay before them) is a check, not a fit,
    # and refused before any table is read
    H = load()
    for argv in (["--host-cpu", "none"], ["--check", "--bands", "--host-cpu", "none"]):
        with pytest.raises(SystemExit) as e:
            H.main(argv)
        assert e.value.code == 2
        assert "--host-cpu none needs --check and no --bands" in capsys.readouterr().err
