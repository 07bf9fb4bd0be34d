"""Hostile input, round three (issue 21 item 7): simulate, run --tiers, sweep --hbm, time-model
profiles and the Python API. Each case exits 2 with one line naming the flag or FILE: field and
what is wrong (no traceback, no partial file), or the API raises a kvreplay error naming the
argument; none hangs or exhausts memory."""

from __future__ import annotations

import json
import zipfile
import io

import numpy as np
import pytest

import kvreplay
from conftest import jsonl, write
from kvreplay.cli import main
from kvreplay.engine.tiers.parse import Tier
from kvreplay.errors import KvreplayError

TWO = jsonl({"timestamp": 0, "input_length": 8, "output_length": 3, "hash_ids": [1, 2]},
            {"timestamp": 500, "input_length": 8, "output_length": 2, "hash_ids": [1, 3]})
SIM = ("--block-size", "4", "--time-model", "instant", "--capacity", "10")


def refused(capsys, *argv) -> str:
    usage = False
    try:
        code = main([str(a) for a in argv])
    except SystemExit as e:  # argparse's own refusals (a flag's type): the error line, then one usage line
        code, usage = e.code, True
    captured = capsys.readouterr()
    assert code == 2, (code, captured.err)
    assert "Traceback" not in captured.err and captured.err.count("\n") == 1 + usage, captured.err
    return captured.err.strip().splitlines()[0]


@pytest.fixture
def two(tmp_path):
    return write(tmp_path, "two.jsonl", TWO)


@pytest.mark.parametrize("args, message", [
    (("--tiers", "dram=64@"), "--tiers: 'dram=64@': nothing after '@'"),
    (("--tiers", "dram=64@0"), "--tiers dram: not a bandwidth: '0'"),
    (("--tiers", "dram=64@-5GB/s"), "--tiers dram: not a bandwidth"),
    (("--tiers", "dram=64@5"), "--tiers dram: not a bandwidth: '5'"),
    (("--global-store", "64@"), "--global-store: '64@': nothing after '@'"),
    (("--global-store", "64@fast"), "--global-store: not a bandwidth: 'fast'"),
    (("--tiers", "dram=99999999999999999999999"), "at most 2^40"),
    (("--tier-list", "none;dram=99999999999999999999999"), "at most 2^40"),
    (("--instances", "1000000000"), "instances (--instances) must be a whole number from 1 to 4,096"),
    (("--instances", "1000000"), "from 1 to 4,096"),
    (("--instances", "4", "--router", "least-loaded", "--router-lag-ms", "1e-300"),
     "--router-lag-ms) must be 0 or from 0.1 to 1e+09 ms"),
    (("--speedup", "1e-308"), "speedup 1e-308 puts the last arrival at 5e+307 s"),
    (("--rate", "1e-300"), "beyond the 1e+10 s a run may span"),
    (("--max-model-len", "0"), "--max-model-len"),
    (("--policy", "vllm", "--small-ratio", "0.2"), "--small-ratio applies to s3fifo, not vllm"),
    (("--policy", "vllm", "--ttl", "5s"), "--ttl applies to ttl, deepseek, not vllm"),
    (("--policy", "ttl", "--ttl", "5"), "--ttl: 5 what? write 5s or 5ms"),
    (("--policy", ""), "policy (--policy) must be a policy's name"),
    (("--model", "Llama-3.1-8B", "--kv-dtype", "fp3"), "unknown KV dtype 'fp3'"),
])
def test_simulate_refuses(two, capsys, args, message):
    assert message in refused(capsys, "simulate", two, *SIM, *args)


def test_step_overhead_past_the_clock(two, capsys):
    err = refused(capsys, "simulate", two, "--block-size", "4", "--model", "Llama-3.1-8B", "--gpu", "H100",
                  "--step-overhead-ms", "1e308")
    assert "a step would take more than 1e+07 s" in err and "--step-overhead-ms" in err


@pytest.mark.parametrize("line, message", [
    ({"timestamp": 0, "input_length": 10 ** 12, "output_length": 2, "hash_ids": [1, 3]},
     "request 1: input_length 1,000,000,000,000 is more than a simulated run can take"),
    ({"timestamp": 0, "input_length": 8, "output_length": 10 ** 12, "hash_ids": [1, 3]},
     "request 1: output_length 1,000,000,000,000 is more than a simulated run can take"),
])
def test_lengths_beyond_a_run(tmp_path, capsys, line, message):
    trace = write(tmp_path, "t.jsonl", jsonl({"timestamp": 0, "input_length": 8, "output_length": 1,
                                              "hash_ids": [1, 2]}, line))
    assert message in refused(capsys, "simulate", trace, *SIM, "--no-output-kv")


def test_sweep_grid_limit(two, capsys):
    loads = ",".join(str(k + 1) for k in range(10_001))
    assert "the sweep has 10,001 runs" in refused(capsys, "simulate", two, *SIM, "--speedups", loads)


def test_sweep_hbm(two, capsys, tmp_path):
    assert "drop --capacities" in refused(capsys, "sweep", two, "--block-size", "4", "--hbm", "10",
                                          "--dram-sizes", "10,20", "--capacities", "5")
    assert "from 0 to 2^40" in refused(capsys, "sweep", two, "--block-size", "4", "--hbm", "10",
                                       "--dram-sizes", "99999999999999999999999")
    out = tmp_path / "d.csv"
    assert main(["sweep", str(two), "--block-size", "4", "--hbm", "1", "--dram-sizes", "0,20", "--policies", "lru",
                 "-o", str(out)]) == 0
    capsys.readouterr()
    import csv

    rows = list(csv.DictReader(out.open()))
    # HBM of 1 block: the second request's [1] was demoted to DRAM by [2], and is found there
    assert [(r["dram_blocks"], r["hbm_hit_tokens"], r["dram_hit_tokens"]) for r in rows] == [("0", "0", "0"),
                                                                                         ("20", "0", "4")]
    assert rows[1]["dram_hit_rate"] == "0.25" and rows[1]["hit_rate"] == "0.25"


def test_run_tiers_hbm_replaces_the_default_capacity(two, capsys):
    assert main(["run", str(two), "--block-size", "4", "--policy", "lru", "--tiers", "hbm=20,dram=30"]) == 0
    assert "cache     20 blocks x 4 tokens" in capsys.readouterr().out


# ------------------------------------------------------------------------------------------
# Time-model profiles


def poly(**term):
    return json.dumps({"format": "kvreplay-step-polynomial", "unit": "s", "terms": [{"coef": 1.0, **term}]})


@pytest.mark.parametrize("text, message", [
    (poly(prefill_tokens=10 ** 400), "terms[0].prefill_tokens: exponent must be a whole number from 0 to 8, got a huge"),
    (poly(prefill_tokens=9), "from 0 to 8, got 9"),
    (json.dumps({"format": "kvreplay-step-polynomial", "terms": [{"coef": 10 ** 400}]}),
     "terms[0].coef: must be a finite number, got an integer of 401 digits"),
    ('{"format": "kvreplay-step-polynomial", "terms": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deep"),
])
def test_polynomial_profiles(two, capsys, tmp_path, text, message):
    profile = write(tmp_path, "p.json", text)
    err = refused(capsys, "simulate", two, "--block-size", "4", "--capacity", "10", "--time-model", profile)
    assert err.startswith(f"{profile}: ") and message in err


def npz_with(member: bytes) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("prefill_isl.npy", member)
    return buf.getvalue()


def absurd_header() -> bytes:
    head = io.BytesIO()
    np.lib.format.write_array_header_1_0(head, {"descr": "<f8", "fortran_order": False, "shape": (10 ** 12,)})
    return head.getvalue() + b"\0" * 16


@pytest.mark.parametrize("member, message", [
    (b"hello", "prefill_isl: is not a NumPy array (.npy member)"),
    (absurd_header(), "prefill_isl: declares shape (1000000000000,): 1,000,000,000,000 values"),
])
def test_npz_profiles(two, capsys, tmp_path, member, message):
    profile = tmp_path / "p.npz"
    profile.write_bytes(npz_with(member))
    err = refused(capsys, "simulate", two, "--block-size", "4", "--capacity", "10", "--time-model", profile)
    assert message in err


# ------------------------------------------------------------------------------------------
# The API


@pytest.mark.parametrize("kw, message", [
    (dict(blocks=-5), "blocks must be a whole number from 1 to 2^40, got -5"),
    (dict(blocks=0), "got 0"),
    (dict(blocks=1.5), "got 1.5"),
    (dict(blocks=2 ** 70), "from 1 to 2^40"),
    (dict(blocks=5, bandwidth=-1e9), "bandwidth must be from 1000 to 1e+15 bytes per second"),
    (dict(blocks=5, policy="mru"), "policy must be one of lru, fifo"),
])
def test_tier_refuses(kw, message):
    with pytest.raises(KvreplayError, match="Tier") as e:
        Tier(name="dram", **kw)
    assert message in str(e.value)


TRACE = kvreplay.Trace.from_requests([([1], 4, 0.0, 1), ([2], 4, 1000.0, 1)], block_size=4)


@pytest.mark.parametrize("kw, message", [
    (dict(tier_overlap="yes", tiers="dram=5"), "tier_overlap must be True or False"),
    (dict(output_kv="no"), "output_kv must be True or False"),
    (dict(instances=10 ** 9), "instances (--instances)"),
    (dict(router_lag_ms=1e-300, instances=2, router="least-loaded"), "router lag"),
    (dict(max_model_len=-3), "max_model_len must be a whole number"),
    (dict(speedup=1e-308), "speedup 1e-308"),
    (dict(policy=""), "policy (--policy)"),
    (dict(seed="a"), "seed (--seed)"),
])
def test_simulate_api_raises_kvreplay_errors(kw, message):
    with pytest.raises(KvreplayError) as e:
        kvreplay.simulate(TRACE, **{"policy": "lru", "capacity": 10, **kw})
    assert message in str(e.value)


@pytest.mark.parametrize("call", [
    lambda: kvreplay.simulate(TRACE, "lru", 10, model="Llama-3.1-8B", kv_dtype=1.5),
    lambda: kvreplay.sweep(TRACE, [2, 4], ["lru"], block_size="x"),
    lambda: kvreplay.sweep(TRACE, [2, 4], ["lru"], block_size=float("inf")),
    lambda: kvreplay.sweep(TRACE, [2, 4], ["lru"], block_size=[]),
])
def test_api_arguments_of_the_wrong_type(call):
    # (found by trying every bad value on every argument of replay, simulate, sweep and mrc)
    with pytest.raises(KvreplayError, match="kv_dtype|block_size"):
        call()
