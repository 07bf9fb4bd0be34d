"""benchmarks/attention_heads.py: the prefill efficiency at 64-wide heads, refitted on a table's 64-wide
rows (bf16 KV, no window, the GPU's prefill kernel) over the 128-wide fit's. Hand-made tables timed
at a known efficiency; the fit recovers it."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from conftest import benchmark_module


@pytest.fixture(scope="module")
def heads():
    return benchmark_module("attention_heads")


C = {"e_attn_prefill": 0.5, "e_kv_prefill": 0.4, "attn_floor_prefill_s": 0.0}  # (no floor: pure ratios)


def rows(heads, gpu, e64):
    """Compute-bound rows (long prompts) at 64 and 128-wide heads, the 64-wide timed at `e64`; a
    windowed, an fp8 and another kernel's row that the fit must leave out (timed 10x slower)."""
    from calibrate import ctx_model

    out = []
    for b, s, h, kv in ((1, 8192, 16, 2), (2, 4096, 32, 4), (1, 16384, 8, 1)):
        for d, e in ((64, e64), (128, 0.5)):
            t = float(ctx_model({**C, "e_attn_prefill": e}, gpu, b, s, h, kv, d)) * 1e3
            out.append({"kernel_source": "vllm_flash_attn_fa3", "batch_size": b, "isl": s, "num_heads": h,
                        "num_key_value_heads": kv, "head_dim": d, "kv_cache_dtype": "bfloat16", "window_size": 0,
                        "latency": t})
    bad = dict(out[0], latency=out[0]["latency"] * 10)
    out += [dict(bad, window_size=128), dict(bad, kv_cache_dtype="fp8"), dict(bad, kernel_source="vllm_flash_attn_fa2")]
    return pd.DataFrame(out)


def test_the_ratio_is_the_64_wide_efficiency_over_the_fitted_one(heads):
    from kvreplay.catalog.gpus import get_gpu

    gpu = get_gpu("H100")
    table = rows(heads, gpu, 0.35)
    r = heads.head_rows(table, 64)
    assert len(r) == 3 and set(r.head_dim) == {64} and set(r.window_size) == {0}
    assert heads.head_ratio(r, C, gpu) == pytest.approx(0.35 / 0.5, rel=1e-3)
    # the rows' error: 0 at the true ratio; at 1 each 64-wide row is compute-bound, 0.5 / 0.35 x as long
    e0, m0, e1, m1 = heads.errors(r, C, gpu, 0.7)
    assert e1 == pytest.approx(0.0, abs=1e-9) and m1 == pytest.approx(1.0)
    assert m0 == pytest.approx(0.5 / 0.35) and e0 == pytest.approx(1 - 0.35 / 0.5)


ROOT = Path(__file__).resolve().parents[2]
WHEELS = sorted((ROOT / "benchmarks" / ".cache" / "aiconfigurator").glob("aiconfigurator_core-*.whl"))


@pytest.mark.skipif(not WHEELS, reason="aiconfigurator's wheel is not in benchmarks/.cache/aiconfigurator "
                                       "(python benchmarks/calibrate.py downloads it)")
def test_the_script_ships_h100s_ratio_and_prints_the_figures_the_docs_quote():
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "benchmarks/attention_heads.py"], capture_output=True, text=True,
                       cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr  # the shipped constant is H100's fit
    doc = (ROOT / "docs" / "timing.md").read_text()
    rows = {line.split(" | ")[0].strip("| ").split(" (")[0]: line.split(" | ") for line in r.stdout.splitlines()
            if line.startswith(("| H100 ", "| H200 ", "| B200 "))}
    assert set(rows) == {"H100", "H200", "B200"}
    for gpu, cells in rows.items():
        errors, medians = cells[4], cells[5].rstrip(" |")
        assert errors in doc, (gpu, errors)  # e.g. "23.3% -> 18.6%"
        if gpu != "H200":
            assert medians in doc, (gpu, medians)
        if gpu != "H100":
            assert f"{gpu}'s" in doc and cells[3] in doc, (gpu, cells[3])  # its own ratio, held back
