"""`plan --cache` cannot lie (serving/plan_cache.py): entries keyed by the content of every input,
storing their key and a checksum; damaged, foreign, renamed, forged or symlinked entries are
ignored with a warning and simulated again, never believed and never a traceback; writes stay in
the cache directory and never go through a link."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from conftest import jsonl, write
from kvreplay.cli import main
from kvreplay.errors import ConfigError
from kvreplay.serving.plan import plan
from kvreplay.catalog.prices import Prices
from kvreplay.serving.simulate import Scheduler
from kvreplay.serving.slo import SLO

from sim_cases import ONE_SECOND, trace_of

# eight one-block prompts at 0 s, one request per step of 1 s: k requests on an instance have TTFTs
# 1..k s; against TTFT p90 <= 2 s the search runs 1, 2, 4 then 3 instances and needs 4
EIGHT = trace_of(*[([f"r{k}"], 4, 0, 1) for k in range(8)])
KW = dict(model="Llama-3.1-8B", slo=SLO(ttft_p90_s=2.0), prices=Prices({"H100": 2.0}), tps=(1,), block_size=4,
          time_model=ONE_SECOND, scheduler=Scheduler(max_num_seqs=1))


def entries(cache) -> list:
    return sorted(p for p in cache.iterdir() if p.name.endswith(".npz"))


def forge_zero_latencies(path, *, keep_key: bool) -> None:
    """Rewrite an entry with every latency 0 (what a forger wants believed), keeping its key and
    old checksum, or dropping both (an entry in the old format)."""
    with np.load(path) as z:
        stored = {k: z[k] for k in z.files}
    for name in ("ttft_s", "tpot_s", "e2e_s"):
        stored[name] = np.zeros_like(stored[name])
    if not keep_key:
        del stored["key"], stored["checksum"]
    buf = io.BytesIO()
    np.savez(buf, **stored)
    os.unlink(path)
    path.write_bytes(buf.getvalue())


DAMAGE = {
    "garbage": lambda p, others, outside: p.write_bytes(b"\x00garbage\xff" * 50),
    "truncated": lambda p, others, outside: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2]),
    "empty": lambda p, others, outside: p.write_bytes(b""),
    "a directory": lambda p, others, outside: (p.unlink(), p.mkdir()),
    "a dangling symlink": lambda p, others, outside: (p.unlink(), p.symlink_to(outside)),
    "a symlink to a file outside": lambda p, others, outside: (p.unlink(), outside.write_text("keep me"),
                                                               p.symlink_to(outside)),
    "renamed from another configuration": lambda p, others, outside: p.write_bytes(others[0]),
    "forged zero latencies (no key)": lambda p, others, outside: forge_zero_latencies(p, keep_key=False),
    "forged zero latencies (its key kept)": lambda p, others, outside: forge_zero_latencies(p, keep_key=True),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_entry_is_ignored_recomputed_and_never_believed(tmp_path, damage):
    cache = tmp_path / "runs"
    fresh = plan(EIGHT, **KW)
    first = plan(EIGHT, cache_dir=str(cache), **KW)
    assert first["runs"] == 4 and len(entries(cache)) == 4
    outside = tmp_path / "outside.txt"
    original = {p: p.read_bytes() for p in entries(cache)}
    for path in original:
        DAMAGE[damage](path, [b for p, b in original.items() if p != path], outside)
    before_outside = outside.read_bytes() if outside.exists() else None
    with pytest.warns(UserWarning, match=r"--cache .*\.npz: .*; ignored and simulated again") as caught:
        again = plan(EIGHT, cache_dir=str(cache), **KW)
    assert len(caught) >= 4
    # every run simulated again, and the answer is a fresh plan's: 4 instances, rows equal
    assert again["runs"] == 4 and again["disk_hits"] == 0
    assert again["loads"][0]["best"]["instances"] == 4 and again.rows() == fresh.rows()
    # nothing written outside the cache directory, and a symlink's target untouched
    assert (outside.read_bytes() if outside.exists() else None) == before_outside
    if damage == "a dangling symlink":
        assert not outside.exists()
    # the damaged entries were replaced by good ones (a directory in the way stays, unused)
    if damage != "a directory":
        assert all(not p.is_symlink() and p.is_file() for p in entries(cache))
        assert plan(EIGHT, cache_dir=str(cache), **KW)["disk_hits"] == 4


def test_a_cache_entry_names_its_key_and_checksum(tmp_path):
    plan(EIGHT, cache_dir=str(tmp_path), **KW)
    path = entries(tmp_path)[0]
    with np.load(path) as z:
        key = json.loads(z["key"].tobytes().decode())
        assert len(z["checksum"].tobytes().decode()) == 64
    assert key["kvreplay"] and key["format"] == 5 and key["trace"] and key["calibration"]
    assert key["config"] == ["H100", 1, None, "round-robin", None] and key["instances"] in (1, 2, 3, 4)


def _plan_cli(tmp_path, trace, profile, cache, *extra) -> dict:
    out = tmp_path / "plan.json"
    code = main(["plan", str(trace), "--model", "Llama-3.1-8B", "--slo-ttft-p90", "2s", "--block-size", "4",
                 "--time-model", str(profile), "--price", "H100=2/h", "--tp", "1", "--cache", str(cache), "-o",
                 str(out), *extra])
    assert code == 0
    return json.loads(out.read_text())


def test_an_edited_time_model_file_is_not_answered_from_the_cache(tmp_path, capsys):
    # 1 s steps: one instance serves the eight prompts in one step, TTFT 1 s, and meets 2 s; with
    # 3 s steps no instance count can (every TTFT is 3 s). Keyed by the file's path, the cache
    # answered the second plan with the first's runs and chose 1 x H100.
    lines = jsonl(*[{"timestamp": 0, "input_length": 4, "output_length": 1, "hash_ids": [k]} for k in range(8)])
    trace = write(tmp_path, "eight.jsonl", lines)
    profile = tmp_path / "steps.json"
    profile.write_text(json.dumps({"format": "kvreplay-step-polynomial", "unit": "s", "terms": [{"coef": 1.0}]}))
    cache = tmp_path / "runs"
    first = _plan_cli(tmp_path, trace, profile, cache, "--max-instances", "2")
    assert first["loads"][0]["best"]["instances"] == 1 and first["runs"] >= 1
    profile.write_text(json.dumps({"format": "kvreplay-step-polynomial", "unit": "s", "terms": [{"coef": 3.0}]}))
    edited = _plan_cli(tmp_path, trace, profile, cache, "--max-instances", "2")
    assert edited["disk_hits"] == 0 and edited["runs"] >= 1
    assert edited["loads"][0]["best"] is None  # a fresh plan's answer: no deployment meets 2 s
    assert _plan_cli(tmp_path, trace, profile, cache, "--max-instances", "2")["disk_hits"] >= 1


def test_an_edited_rate_profile_is_not_answered_from_the_cache(tmp_path):
    lines = jsonl(*[{"timestamp": 1000 * k, "input_length": 4, "output_length": 1, "hash_ids": [k]}
                    for k in range(8)])
    trace = write(tmp_path, "spread.jsonl", lines)
    profile = write(tmp_path, "one.json", json.dumps({"format": "kvreplay-step-polynomial", "unit": "s",
                                                       "terms": [{"coef": 1.0}]}))
    shape = tmp_path / "shape.csv"
    shape.write_text("t,rate\n0,1\n1,1\n")
    cache = tmp_path / "runs"
    first = _plan_cli(tmp_path, trace, profile, cache, "--rate-profile", str(shape))
    assert first["disk_hits"] == 0
    assert _plan_cli(tmp_path, trace, profile, cache, "--rate-profile", str(shape))["disk_hits"] == first["runs"]
    shape.write_text("t,rate\n0,1\n1,8\n")
    assert _plan_cli(tmp_path, trace, profile, cache, "--rate-profile", str(shape))["disk_hits"] == 0


def test_two_plans_sharing_a_cache_give_the_rows_of_plans_without_one(tmp_path):
    cache = str(tmp_path / "shared")
    tight, loose = dict(KW), dict(KW, slo=SLO(ttft_p90_s=3.0))
    alone = [plan(EIGHT, **tight).rows(), plan(EIGHT, **loose).rows()]
    together = [plan(EIGHT, cache_dir=cache, **tight), plan(EIGHT, cache_dir=cache, **loose),
                plan(EIGHT, cache_dir=cache, jobs=2, executor="threads", **tight)]
    assert together[1]["disk_hits"] >= 3 and together[2]["disk_hits"] >= 4
    assert [t.rows() for t in together] == [alone[0], alone[1], alone[0]]
    assert alone[0][0]["instances"] == 4 and alone[1][0]["instances"] == 3


@pytest.mark.parametrize("make", ["file", "devnull"])
def test_a_cache_that_is_not_a_directory_names_the_flag(tmp_path, capsys, make):
    lines = jsonl({"timestamp": 0, "input_length": 4, "output_length": 1, "hash_ids": [1]})
    trace = write(tmp_path, "one.jsonl", lines)
    profile = write(tmp_path, "p.json", json.dumps({"format": "kvreplay-step-polynomial", "unit": "s",
                                                    "terms": [{"coef": 1.0}]}))
    cache = write(tmp_path, "cache.txt", "not a directory") if make == "file" else "/dev/null"
    before = open(cache, "rb").read()
    code = main(["plan", str(trace), "--model", "Llama-3.1-8B", "--slo-ttft-p90", "2s", "--block-size", "4",
                 "--time-model", str(profile), "--price", "H100=2/h", "--tp", "1", "--cache", str(cache)])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert err.strip() == f"kvreplay: --cache {cache}: not a directory (the cache keeps one file per run in a directory)"
    assert open(cache, "rb").read() == before


@pytest.mark.parametrize("value, message", [
    (12, "cache_dir (--cache) must be a directory's path, got 12"),
    ("", "cache_dir (--cache) must be a directory's path, got an empty name"),
])
def test_the_api_refuses_a_cache_dir_that_is_not_a_path(value, message):
    with pytest.raises(ConfigError) as e:
        plan(EIGHT, cache_dir=value, **KW)
    assert str(e.value) == message


def test_an_option_that_cannot_be_keyed_is_not_cached(tmp_path):
    # a time model holding a function cannot be keyed by its content: the plan says so once, keeps
    # no run, and answers as without a cache
    from sim_cases import PolynomialProfile

    model = PolynomialProfile(document={"format": "kvreplay-step-polynomial", "unit": "s", "terms": [{"coef": 1.0}]})
    model.hook = lambda: None
    kw = dict(KW, time_model=model)
    with pytest.warns(UserWarning, match="--cache: options holds a Python object that cannot be keyed") as caught:
        out = plan(EIGHT, cache_dir=str(tmp_path), **kw)
    assert len([w for w in caught if "cannot be keyed" in str(w.message)]) == 1
    assert out["runs"] == 4 and list(tmp_path.iterdir()) == [] and out.rows() == plan(EIGHT, **kw).rows()


def test_the_same_arrays_at_another_block_size_are_not_reused(tmp_path):
    # a trace's arrays say nothing of its block size (its format's own, without --block-size): the
    # key holds the block size the runs used
    kw = {k: v for k, v in KW.items() if k != "block_size"}
    coarse = trace_of(*[([f"r{k}"], 4, 0, 1) for k in range(8)], block_size=8)
    assert plan(EIGHT, cache_dir=str(tmp_path), **kw)["runs"] == 4
    assert plan(EIGHT, cache_dir=str(tmp_path), **kw)["disk_hits"] == 4
    assert plan(coarse, cache_dir=str(tmp_path), **kw)["disk_hits"] == 0


def test_a_writer_killed_mid_write_leaves_a_temporary_file_the_next_sweep_removes(tmp_path):
    # a plan's worker process dies of SIGTERM at once: killed between its entry's temporary file and the
    # rename, it leaves the file (named with its process id) and no entry; plan_cache.sweep, which a
    # plan runs when it stops and when it starts, removes a dead writer's file and leaves a live one's
    from kvreplay.serving import plan_cache

    code = textwrap.dedent(f"""
        import os, signal
        import numpy as np
        from kvreplay.serving import plan_cache
        os.replace = lambda a, b: os.kill(os.getpid(), signal.SIGKILL)
        arrays = {{k: np.arange(3.0) for k in ("arrival_s", "ttft_s", "tpot_s", "e2e_s")}}
        plan_cache.write({str(tmp_path / "entry.npz")!r}, "k", {{**arrays, "finished": np.ones(3, bool)}}, {{}})
    """)
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2] / "src"))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == -9, r.stderr
    (left,) = os.listdir(tmp_path)
    assert left.startswith(".kvreplay-") and left.endswith(".tmp") and left != "entry.npz"
    live = tmp_path / f".kvreplay-{os.getpid()}-abc.tmp"  # (this process: a writer still running)
    live.write_bytes(b"")
    plan_cache.sweep(str(tmp_path))
    assert os.listdir(tmp_path) == [live.name]
    assert plan_cache.prepare(str(tmp_path)) == str(tmp_path) and os.listdir(tmp_path) == [live.name]
