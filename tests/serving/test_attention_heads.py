"""benchmarks/attention_heads.py: the prefill efficiency at 64-wide heads, refitted on a table's 64-wide
rows (bf16 KV, no window, the GPU's prefill kernel) over the 128-wide fit's. Hand-made tables timed
at a known efficiency; the fit recovers it."""

from __future__ import annotations

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
