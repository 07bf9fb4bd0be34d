"""The command line end to end, through a real subprocess (`python -m kvreplay.cli`)."""

from __future__ import annotations

import csv
import gzip
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import kvreplay
from kvreplay.policies.registry import POLICIES

KNOWN = ", ".join(POLICIES)  # the list every "unknown policy" message ends with


def owners(param: str) -> str:
    """The policies taking `param`, as the CLI names them when a flag does not apply."""
    return ", ".join(s.name for s in POLICIES.values() if any(p.name == param for p in s.params))

DATA = Path(__file__).resolve().parent / "data"
REPO = Path(__file__).resolve().parents[1]
SHARED_TRACES = REPO.parent / "shared" / "traces" / "mooncake"

# prefix_lru_vs_fifo.jsonl, block size 4 (every request is one block):
#   r1 [1] len 3 | r2 [2] len 4 | r3 [1] len 5 | r4 [3] len 6 | r5 [1] len 2      prompt tokens = 20
# LRU, capacity 2:
#   r1 miss -> {1}; r2 miss -> LRU order 1,2; r3 hit k=1 -> min(4,5)=4, order 2,1;
#   r4 miss, evicts 2 -> 1,3; r5 hit k=1 -> min(4,2)=2.                  hits 0,0,4,0,2 = 6
# FIFO, capacity 2:
#   r3 hit 4 (hits do not refresh: queue stays 1,2); r4 evicts 1 -> 2,3; r5 miss.  hits 0,0,4,0,0 = 4
# capacity 6 (nothing is ever evicted): LRU and FIFO both hit r3 and r5 -> 6.
# S3FIFO, capacity 6: small_cap round(0.6)=1, main_cap 5, ghost 5.
#   r1: 1 -> S=[1]; r2: S full, pop 1 (freq 0) -> G=[1], S=[2];
#   r3: 1 is only a ghost -> not resident, k=0; access: G -> M=[1] (ghost_hits 1);
#   r4: pop 2 (freq 0) -> G=[2], S=[3]; r5: 1 in M -> hit min(4,2)=2.     hits 0,0,0,0,2 = 2
#   final |S|+|M| = 2; admissions 3 (1, 2, 3), evictions 2 (1, 2 to ghost), ghost_hits 1.
LVF = DATA / "prefix_lru_vs_fifo.jsonl"

# prefix_multiblock.jsonl, block size 4, LRU capacity 3 (order written LRU -> MRU):
#   r1 [1,2,3] len 12: k=0; cache 1,2,3
#   r2 [4] len 4:      k=0; 4 evicts 1 -> 2,3,4
#   r3 [1,2] len 8:    1 missing -> k=0; 1 evicts 2 -> 3,4,1; 2 evicts 3 -> 4,1,2
#   r4 [1,2,3] len 6:  1,2 resident, 3 not -> k=2, hit min(8,6)=6; 3 evicts 4 -> 1,2,3
#   r5 [9,1,2] len 12: 9 missing -> k=0 (1,2 resident but the prefix stops at the first miss);
#                      9 evicts 1 -> 2,3,9; 1 evicts 2 -> 3,9,1; 2 evicts 3 -> 9,1,2
#   r6 [1,2,9] len 10: all three resident -> k=3, hit min(12,10)=10
#   hits 0,0,0,6,0,10 = 16 of 12+4+8+6+12+10 = 52; admissions 3+1+2+1+3 = 10, evictions 10-3 = 7
# FIFO happens to give the same numbers here (no hit ever saves a block from eviction).
MULTI = DATA / "prefix_multiblock.jsonl"
BAD3 = DATA / "bad_line3.jsonl"  # line 3: input_length -4

REPORT_FIELDS = {
    "policy", "params", "block_size", "cache_capacity_blocks", "num_requests", "total_prompt_tokens",
    "total_hit_tokens", "hit_rate", "final_cache_blocks", "window", "counters", "stranded_blocks", "sizes",
    "engine", "trace", "metrics", "oversize_requests", "misses", "headroom", "advice",
}


def kv(*args, input: bytes | None = None, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kvreplay.cli", *map(str, args)],
        input=input, capture_output=True, cwd=cwd, timeout=300,
    )


def ok(*args, **kw) -> str:
    r = kv(*args, **kw)
    assert r.returncode == 0, r.stderr.decode()
    assert r.stderr.decode() == ""  # nothing compiles, nothing to say
    return r.stdout.decode()


def run_json(*args, **kw) -> dict:
    return json.loads(ok("run", *args, "--json", **kw))


def fails(*args, **kw) -> str:
    """Run, expect exit 2 and exactly one line on stderr without a traceback; return that line."""
    r = kv(*args, **kw)
    err = r.stderr.decode()
    assert r.returncode == 2, (r.returncode, err)
    assert "Traceback" not in err
    assert err.endswith("\n") and err.count("\n") == 1, err
    return err[:-1]


def no_temp_files(directory: Path) -> bool:
    return not [p for p in directory.iterdir() if p.name.startswith(".kvreplay-")]


# ---------------------------------------------------------------- run: numbers


@pytest.mark.parametrize("engine", ["compiled", "reference"])
@pytest.mark.parametrize("policy,capacity,hits,final", [
    ("lru", 2, [0, 0, 4, 0, 2], 2),
    ("fifo", 2, [0, 0, 4, 0, 0], 2),
    ("lru", 6, [0, 0, 4, 0, 2], 3),
    ("fifo", 6, [0, 0, 4, 0, 2], 3),
    ("s3fifo", 6, [0, 0, 0, 0, 2], 2),
])
def test_run_hits_by_hand(policy, capacity, hits, final, engine):
    rep = run_json(LVF, "--policy", policy, "--capacity", capacity, "--block-size", 4, "--engine", engine)
    assert [r["hit_tokens"] for r in rep["per_request"]] == hits
    assert [r["hit_blocks"] for r in rep["per_request"]] == [min(h, 1) for h in hits]
    assert [r["prompt_tokens"] for r in rep["per_request"]] == [3, 4, 5, 6, 2]
    assert rep["total_hit_tokens"] == sum(hits)
    assert rep["total_prompt_tokens"] == 20
    assert rep["hit_rate"] == pytest.approx(sum(hits) / 20)
    assert rep["final_cache_blocks"] == final
    assert rep["engine"] == engine
    assert rep["policy"] == policy
    assert rep["stranded_blocks"] == 0  # one-block requests: no block has a chain predecessor


def test_run_s3fifo_details():
    rep = run_json(LVF, "--capacity", 6, "--block-size", 4)  # s3fifo is the default policy
    assert rep["policy"] == "s3fifo"
    assert rep["params"] == {"small_ratio": 0.1, "max_freq": 3, "ghost_freq": 0}
    assert rep["sizes"] == {"small_cap": 1, "main_cap": 5, "ghost_cap": 5}
    assert rep["counters"] == {"admissions": 3, "promotions": 0, "ghost_hits": 1, "requeues": 0, "evictions": 2}


@pytest.mark.parametrize("policy", ["lru", "fifo"])
def test_run_multiblock_prefix(policy):
    rep = run_json(MULTI, "--policy", policy, "--capacity", 3, "--block-size", 4)
    assert [r["hit_blocks"] for r in rep["per_request"]] == [0, 0, 0, 2, 0, 3]
    assert [r["hit_tokens"] for r in rep["per_request"]] == [0, 0, 0, 6, 0, 10]
    assert rep["total_hit_tokens"] == 16 and rep["total_prompt_tokens"] == 52
    assert rep["counters"] == {"admissions": 10, "evictions": 7}
    assert rep["final_cache_blocks"] == 3
    # predecessors: 1 none (opens r1), 2 <- 1, 3 <- 2, 4 none, 9 none (opens r5).
    # final cache {9, 1, 2}: 2's predecessor 1 is resident -> nothing stranded
    assert rep["stranded_blocks"] == 0


def test_stranded_blocks(tmp_path):
    # one request [1, 2, 3], LRU capacity 2: 1, 2 admitted; 3 evicts 1 -> final {2, 3}.
    # 2's chain predecessor 1 is gone -> 2 is stranded, and 3 behind it (its predecessor 2 is
    # resident, but unreachable): 2 stranded blocks.
    p = tmp_path / "chain.jsonl"
    p.write_text('{"input_length": 12, "hash_ids": [1, 2, 3]}\n')
    rep = run_json(p, "--policy", "lru", "--capacity", 2, "--block-size", 4)
    assert rep["final_cache_blocks"] == 2 and rep["stranded_blocks"] == 2
    assert rep["total_hit_tokens"] == 0


def test_run_default_block_size_is_512(tmp_path):
    # Hashed at 512: the resend hits both blocks, min(2 * 512, 1000) = 1000 tokens.
    path = tmp_path / "t512.jsonl"
    path.write_text('{"input_length": 1000, "hash_ids": [1, 2]}\n{"input_length": 1000, "hash_ids": [1, 2]}\n')
    rep = run_json(path, "--policy", "lru", "--capacity", 3)
    assert rep["block_size"] == 512
    assert rep["total_hit_tokens"] == 1000
    # MULTI has 4-token blocks: at the default 512 most of its requests misfit, so no number is
    # printed (it used to print hits capped at input_length: 16 tokens, silently).
    r = kv("run", MULTI, "--policy", "lru", "--capacity", 3)
    assert r.returncode == 2 and r.stdout == b""
    assert "5 of 6 requests have a number of hash ids that does not fit their input_length at 512-token blocks" in r.stderr.decode()


def test_run_human_summary():
    out = ok("run", LVF, "--policy", "lru", "--capacity", 2, "--block-size", 4)
    lines = out.splitlines()
    assert lines[0] == f"trace     {LVF}: 5 requests, 20 prompt tokens, 5 block accesses, 3 unique blocks"
    assert "policy    lru" in lines
    assert "cache     2 blocks x 4 tokens" in lines
    assert "window    whole trace (5 requests)" in lines
    assert "hits      6 of 20 prompt tokens = 30.00% (token-weighted)" in lines
    assert "final     2 blocks resident" in lines
    # admissions 1, 2, 3 -> 3; one eviction (block 2 at r4)
    assert "counters  admissions=3, evictions=1" in lines
    assert not any(line.startswith("skipped") for line in lines)


def test_run_json_fields():
    rep = run_json(LVF, "--policy", "lru", "--capacity", 2, "--block-size", 4)
    assert set(rep) == REPORT_FIELDS | {"per_request"}
    assert rep["block_size"] == 4 and rep["cache_capacity_blocks"] == 2 and rep["num_requests"] == 5
    assert rep["params"] == {} and rep["sizes"] == {}
    assert rep["trace"] == str(LVF)
    assert rep["window"] == {"warmup_requests": 0, "measured_requests": 5, "description": "whole trace (5 requests)"}
    assert len(rep["per_request"]) == 5
    assert all(set(r) == {"prompt_tokens", "hit_tokens", "hit_blocks", "misses"} for r in rep["per_request"])
    # the miss account (block size 4, one hash id per request): r1, r2 and r4 are first uses (3 + 4 + 4); r3 and
    # r4 have 1 and 2 tokens past their hash id (partial blocks); lru at 2: 3 evicts 2, 1 stays: nothing evicted
    assert [r["misses"] for r in rep["per_request"]] == [
        {"first_use": 3, "evicted": 0, "behind_hole": 0, "partial_block": 0},
        {"first_use": 4, "evicted": 0, "behind_hole": 0, "partial_block": 0},
        {"first_use": 0, "evicted": 0, "behind_hole": 0, "partial_block": 1},
        {"first_use": 4, "evicted": 0, "behind_hole": 0, "partial_block": 2},
        {"first_use": 0, "evicted": 0, "behind_hole": 0, "partial_block": 0}]
    assert rep["misses"]["tokens"]["first_use"] == 11 and rep["misses"]["tokens"]["partial_block"] == 3
    assert set(rep["misses"]["not_measured"]) == {"namespace", "layer_groups", "concurrency"}
    assert sum(r["hit_tokens"] for r in rep["per_request"]) == rep["total_hit_tokens"] == 6


def test_summary_only_drops_per_request():
    rep = run_json(LVF, "--policy", "lru", "--capacity", 2, "--block-size", 4, "--summary-only")
    assert set(rep) == REPORT_FIELDS
    assert rep["total_hit_tokens"] == 6


def test_output_file_equals_json_stdout(tmp_path):
    out = tmp_path / "report.json"
    r = kv("run", LVF, "--policy", "lru", "--capacity", 2, "--block-size", 4, "--json", "--output", out)
    assert r.returncode == 0, r.stderr
    assert out.read_bytes() == r.stdout
    # --output alone: human summary on stdout, same JSON in the file
    out2 = tmp_path / "only.json"
    text = ok("run", LVF, "--policy", "lru", "--capacity", 2, "--block-size", 4, "-o", out2)
    assert "window    whole trace (5 requests)" in text
    assert out2.read_bytes() == r.stdout
    assert json.loads(out2.read_bytes())["total_hit_tokens"] == 6
    assert no_temp_files(tmp_path)


def test_output_summary_only(tmp_path):
    out = tmp_path / "s.json"
    ok("run", LVF, "--policy", "fifo", "--capacity", 2, "--block-size", 4, "--summary-only", "--output", out)
    rep = json.loads(out.read_text())
    assert set(rep) == REPORT_FIELDS and rep["total_hit_tokens"] == 4


def test_output_replaces_existing_file_with_usual_permissions(tmp_path):
    out = tmp_path / "r.json"
    out.write_text("old")
    r = subprocess.run(
        [sys.executable, "-m", "kvreplay.cli", "run", str(LVF), "--policy", "lru", "--capacity", "2",
         "--block-size", "4", "--output", str(out)],
        capture_output=True, preexec_fn=lambda: os.umask(0o022), timeout=300,
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(out.read_text())["total_hit_tokens"] == 6
    assert out.stat().st_mode & 0o777 == 0o644  # 0666 & ~022, not mkstemp's 0600
    assert no_temp_files(tmp_path)


@pytest.mark.parametrize("spelling", ["S3FIFO", "S3fifo", "Lru", "LRU", "FIFO", "  lru "])
def test_policy_name_case_insensitive(spelling):
    capacity = 6
    rep = run_json(LVF, "--policy", spelling, "--capacity", capacity, "--block-size", 4, "--summary-only")
    assert rep["policy"] == spelling.strip().lower()
    assert rep["total_hit_tokens"] == {"s3fifo": 2, "lru": 6, "fifo": 6}[rep["policy"]]


def test_small_ratio_changes_queues():
    # capacity 2, small_ratio 0.5: small_cap round(1.0)=1, main_cap 1. Same walk as capacity 6 above
    # (S never holds more than 1, M never more than 1): only r5 hits -> 2.
    rep = run_json(LVF, "--capacity", 2, "--small-ratio", 0.5, "--block-size", 4, "--summary-only")
    assert rep["params"]["small_ratio"] == 0.5
    assert rep["sizes"] == {"small_cap": 1, "main_cap": 1, "ghost_cap": 1}
    assert rep["total_hit_tokens"] == 2


def test_stdin_trace():
    data = LVF.read_bytes()
    rep = run_json("-", "--policy", "lru", "--capacity", 2, "--block-size", 4, input=data)
    assert rep["trace"] == "<stdin>"
    assert rep["total_hit_tokens"] == 6 and rep["total_prompt_tokens"] == 20


def test_stdin_bad_record():
    line = fails("run", "-", "--policy", "lru", input=BAD3.read_bytes())
    assert line == "<stdin>:3: input_length: expected a non-negative integer, got -4"


def test_stdin_empty():
    assert fails("run", "-", input=b"") == "<stdin>: no requests (empty trace)"


def test_gzip_trace_file(tmp_path):
    gz = tmp_path / "t.jsonl.gz"
    gz.write_bytes(gzip.compress(LVF.read_bytes()))
    rep = run_json(gz, "--policy", "lru", "--capacity", 2, "--block-size", 4)
    assert rep["total_hit_tokens"] == 6


def test_sort_by_time_changes_replay_order(tmp_path):
    # file order: [1] t=2, [2] t=1, [1] t=3. capacity 1 LRU:
    #   file order: 1, 2 (evicts 1), 1 -> miss: hits 0
    #   time order: 2, 1 (evicts 2), 1 -> hit 4
    p = tmp_path / "t.jsonl"
    p.write_text('{"timestamp": 2, "input_length": 4, "hash_ids": [1]}\n'
                 '{"timestamp": 1, "input_length": 4, "hash_ids": [2]}\n'
                 '{"timestamp": 3, "input_length": 4, "hash_ids": [1]}\n')
    assert run_json(p, "--policy", "lru", "--capacity", 1, "--block-size", 4)["total_hit_tokens"] == 0
    rep = run_json(p, "--policy", "lru", "--capacity", 1, "--block-size", 4, "--sort-by-time")
    assert [r["hit_tokens"] for r in rep["per_request"]] == [0, 0, 4]


def test_run_warmup():
    # N=5, F=0.5 -> floor(2.5) = 2 warm-up requests; measured r3..r5: prompt 5+6+2 = 13, LRU hits 4+2 = 6
    rep = run_json(LVF, "--policy", "lru", "--capacity", 2, "--block-size", 4, "--warmup-fraction", 0.5)
    assert rep["total_prompt_tokens"] == 13 and rep["total_hit_tokens"] == 6
    assert rep["num_requests"] == 5 and len(rep["per_request"]) == 5
    assert rep["window"] == {
        "warmup_requests": 2, "measured_requests": 3,
        "description": "after warm-up: requests 3-5 of 5 (first 2 only warm the cache)",
    }
    assert sum(r["hit_tokens"] for r in rep["per_request"][2:]) == rep["total_hit_tokens"]
    out = ok("run", LVF, "--policy", "lru", "--capacity", 2, "--block-size", 4, "--warmup-fraction", 0.5)
    assert "window    after warm-up: requests 3-5 of 5 (first 2 only warm the cache)" in out.splitlines()
    assert "hits      6 of 13 prompt tokens = 46.15% (token-weighted)" in out.splitlines()


# ---------------------------------------------------------------- run: bad input and options


def test_bad_record_exit_2_one_line(tmp_path):
    out = tmp_path / "r.json"
    line = fails("run", BAD3, "--output", out)
    assert line == f"{BAD3}:3: input_length: expected a non-negative integer, got -4"
    assert not out.exists()
    assert no_temp_files(tmp_path)


@pytest.mark.parametrize("text,expected", [
    ('{"input_length": 1, "hash_ids": [1]}\n{"input_length": 1, "hash_ids": [2.5]}\n',
     "{p}:2: hash_ids: item 0 is 2.5, expected an integer or a string"),
    ('{"input_length": 1}\n', "{p}:1: hash_ids: missing"),
    ('[1]\n', "{p}:1: expected a JSON object, got [1]"),
    ('{"input_length": 1, "hash_ids": [1], "timestamp": "now"}\n', '{p}:1: timestamp: expected a number, got "now"'),
])
def test_bad_records_messages(tmp_path, text, expected):
    p = tmp_path / "t.jsonl"
    p.write_text(text)
    assert fails("run", p) == expected.format(p=p)


def test_failed_run_leaves_existing_output_untouched(tmp_path):
    out = tmp_path / "r.json"
    out.write_text("previous report")
    fails("run", BAD3, "--json", "--output", out)
    assert out.read_text() == "previous report"
    fails("run", LVF, "--capacity", 5, "--output", out)
    assert out.read_text() == "previous report"
    assert no_temp_files(tmp_path)


def test_bad_json_run_prints_nothing_on_stdout():
    r = kv("run", BAD3, "--json")
    assert r.returncode == 2 and r.stdout == b""


def test_on_invalid_skip(tmp_path):
    rep = run_json(BAD3, "--on-invalid", "skip", "--policy", "lru", "--capacity", 4, "--block-size", 4)
    assert rep["invalid_records"] == {"count": 1, "first_lines": [3]}
    # lines 1 and 4 remain: [1] then [2] -> no hits, 8 prompt tokens
    assert rep["num_requests"] == 2 and rep["total_prompt_tokens"] == 8 and rep["total_hit_tokens"] == 0
    out = ok("run", BAD3, "--on-invalid", "skip", "--policy", "lru", "--capacity", 4)
    assert "skipped   1 invalid records (first lines: 3)" in out.splitlines()


def test_on_invalid_skip_everything_invalid(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text("x\ny\n")
    assert fails("run", p, "--on-invalid", "skip") == f"{p}: no valid records (2 invalid)"


def test_missing_trace_file(tmp_path):
    p = tmp_path / "missing.jsonl"
    assert fails("run", p) == f"{p}: no such file"


def test_directory_as_trace(tmp_path):
    assert fails("run", tmp_path) == f"{tmp_path}: is a directory, expected a trace file"


def test_truncated_gzip_trace(tmp_path):
    p = tmp_path / "t.jsonl.gz"
    data = b"".join(b'{"input_length": %d, "hash_ids": [%d]}\n' % (i, i) for i in range(300))
    p.write_bytes(gzip.compress(data)[:-20])
    assert fails("run", p).startswith(f"{p}: truncated or corrupt gzip data (")


def test_garbage_binary_trace(tmp_path):
    p = tmp_path / "blob.bin"
    p.write_bytes(bytes(range(256)) * 4)
    assert fails("run", p).startswith(f"{p}:1: invalid JSON (")


@pytest.mark.parametrize("policy", ["lru", "FIFO"])
def test_small_ratio_only_for_s3fifo(policy, tmp_path):
    assert "s3fifo" in owners("small_ratio").split(", ") and "lru" not in owners("small_ratio")
    out = tmp_path / "r.json"
    assert fails("run", LVF, "--policy", policy, "--small-ratio", 0.2, "-o", out) == \
        f"kvreplay: --small-ratio applies to {owners('small_ratio')}, not {policy.lower()}"
    assert fails("run", LVF, "--policy", policy, "--max-freq", 2) == \
        f"kvreplay: --max-freq applies to {owners('max_freq')}, not {policy.lower()}"
    assert not out.exists()


def test_s3fifo_capacity_too_small():
    # capacity 5 x 0.1 = 0.5 -> round half to even -> small queue of 0 blocks
    line = fails("run", LVF, "--capacity", 5)
    assert line == ("kvreplay: s3fifo: capacity 5 with small_ratio 0.1 gives small_cap 0 and main_cap 5 "
                    "(round half to even); both queues need at least 1 block")


@pytest.mark.parametrize("args,expected", [
    (["--small-ratio", "1.5"], "kvreplay: s3fifo: small_ratio (--small-ratio) must be < 1, got 1.5"),
    (["--small-ratio", "0"], "kvreplay: s3fifo: small_ratio (--small-ratio) must be > 0, got 0.0"),
    (["--max-freq", "1", "--ghost-freq", "2"], None),
])
def test_bad_s3fifo_params(args, expected):
    line = fails("run", LVF, "--capacity", 20, *args)
    if expected is not None:
        assert line == expected
    else:
        assert line.startswith("kvreplay: s3fifo: ghost_freq") and "max_freq" in line


def test_unknown_policy():
    assert fails("run", LVF, "--policy", "bogus") == f"kvreplay: unknown policy 'bogus' (known: {KNOWN})"


@pytest.mark.parametrize("args", [
    ["--capacity", "0"], ["--capacity", "x"], ["--block-size", "0"], ["--warmup-fraction", "1"],
    ["--on-invalid", "ignore"], ["--engine", "gpu"],
])
def test_bad_options_exit_2(args):
    r = kv("run", LVF, *args)
    assert r.returncode == 2
    # the message first, naming the flag, then one usage line
    first, usage = r.stderr.decode().splitlines()
    assert first.startswith(f"kvreplay run: {args[0]}: ")
    assert usage == "usage: kvreplay run TRACE [TRACE ...] [options]  (kvreplay run --help: every option)"


def test_small_ratio_nan_is_rejected():
    assert "small_ratio" in fails("run", LVF, "--capacity", 20, "--small-ratio", "nan")


def test_output_in_missing_directory(tmp_path):
    out = tmp_path / "no" / "such" / "dir" / "r.json"
    line = fails("run", LVF, "--policy", "lru", "--capacity", 2, "--output", out)
    assert str(out) in line


def test_output_is_a_directory(tmp_path):
    target = tmp_path / "adir"
    target.mkdir()
    fails("sweep", LVF, "--capacities", "2", "--policies", "lru", "--output", target)
    assert target.is_dir() and no_temp_files(tmp_path)


def test_gzip_on_stdin_does_not_traceback():
    # gzip is only recognised for files, not for "-" (see report); whatever happens, no traceback
    r = kv("run", "-", "--policy", "lru", input=gzip.compress(LVF.read_bytes()))
    assert r.returncode in (0, 2) and b"Traceback" not in r.stderr


def test_huge_hash_id_does_not_traceback(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text('{"input_length": 4, "hash_ids": [%d]}\n' % 2**64)
    r = kv("run", p, "--policy", "lru")
    assert r.returncode in (0, 2) and b"Traceback" not in r.stderr


# ---------------------------------------------------------------- sweep

# The tidy table (docs/formats.md, "Output tables"); lru and fifo have no parameters, so no parameter columns.
SWEEP_CSV_HEADER = ("trace,policy,params,bound,capacity_kind,cache_capacity_blocks,kv_bytes,kv_gib,total_hit_tokens,"
                    "total_prompt_tokens,hit_rate,final_cache_blocks,admissions,evictions,oversize_requests,"
                    "miss_first_use_tokens,miss_evicted_tokens,miss_behind_hole_tokens,miss_partial_block_tokens,miss_namespace_tokens,miss_layer_groups_tokens,miss_concurrency_tokens,block_size,"
                    "window,warmup_fraction,warmup_requests,measured_requests")
SWEEP_KEYS = {"trace", "block_size", "warmup_fraction", "window", "num_requests", "results"}
RESULT_KEYS = set(SWEEP_CSV_HEADER.split(",")) | {"counters"}
WHOLE_LVF = {"warmup_requests": 0, "measured_requests": 5, "description": "whole trace (5 requests)"}
# (policy, capacity, hit tokens, final blocks) for LVF at block size 4 (see the top of this file)
LVF_SWEEP = [("lru", 2, 6, 2), ("lru", 6, 6, 3), ("fifo", 2, 4, 2), ("fifo", 6, 6, 3)]


def test_sweep_csv(tmp_path):
    out = tmp_path / "x.csv"
    text = ok("sweep", LVF, "--capacities", "2,6", "--policies", "lru,fifo", "--block-size", 4, "--output", out)
    lines = out.read_text().splitlines()
    assert lines[0] == SWEEP_CSV_HEADER
    rows = list(csv.DictReader(io.StringIO(out.read_text())))
    got = [(r["policy"], int(r["cache_capacity_blocks"]), int(r["total_hit_tokens"]), int(r["final_cache_blocks"]))
           for r in rows]
    assert got == LVF_SWEEP
    assert [int(r["total_prompt_tokens"]) for r in rows] == [20] * 4
    assert [float(r["hit_rate"]) for r in rows] == pytest.approx([0.3, 0.3, 0.2, 0.3])
    assert [r["params"] for r in rows] == [""] * 4
    # every row names its trace and window; no budget: kv_bytes and kv_gib are empty, not "0"
    assert {(r["trace"], r["window"], r["warmup_fraction"], r["warmup_requests"], r["measured_requests"],
             r["block_size"], r["bound"], r["capacity_kind"], r["kv_bytes"], r["kv_gib"]) for r in rows} == {
        (str(LVF), "whole trace (5 requests)", "0.0", "0", "5", "4", "false", "limit", "", "")}
    # LRU at 2: 1, 2, 3 are admitted, 3 evicts 2 -> (3, 1); FIFO at 2: 1, 2, 3 (evicts 1), then 1 again
    # (evicts 2) -> (4, 2); at 6 nothing is evicted
    assert [(int(r["admissions"]), int(r["evictions"])) for r in rows] == [(3, 1), (3, 0), (4, 2), (3, 0)]
    assert text.splitlines()[0] == f"trace {LVF}, block size 4, window: whole trace (5 requests); hit rate is token-weighted"
    assert no_temp_files(tmp_path)


def test_sweep_csv_s3fifo_params(tmp_path):
    out = tmp_path / "x.CSV"  # suffix check is case-insensitive
    ok("sweep", LVF, "--capacities", "6", "--policies", "s3fifo,s3fifo:small_ratio=0.5", "--block-size", 4, "-o", out)
    rows = list(csv.DictReader(io.StringIO(out.read_text())))
    assert [r["params"] for r in rows] == ["small_ratio=0.1;max_freq=3;ghost_freq=0",
                                           "small_ratio=0.5;max_freq=3;ghost_freq=0"]
    # each parameter also has its own column, right after the packed label
    assert list(rows[0])[:6] == ["trace", "policy", "params", "small_ratio", "max_freq", "ghost_freq"]
    assert [(r["small_ratio"], r["max_freq"], r["ghost_freq"]) for r in rows] == [("0.1", "3", "0"), ("0.5", "3", "0")]
    # small_ratio 0.1 at 6: 2 hit tokens (hand-worked at the top).
    # small_ratio 0.5 at 6: small_cap 3, main_cap 3. r1..r2: S=[1,2]; r3: 1 in S -> hit 4 (freq 1);
    # r4: S=[1,2,3]; r5: 1 still in S -> hit 2.  Total 6.
    assert [int(r["total_hit_tokens"]) for r in rows] == [2, 6]


def test_sweep_json_output_and_stdout(tmp_path):
    out = tmp_path / "x.json"
    r = kv("sweep", LVF, "--capacities", "2,6", "--policies", "lru,fifo", "--block-size", 4, "--json", "--output", out)
    assert r.returncode == 0, r.stderr
    assert out.read_bytes() == r.stdout
    data = json.loads(out.read_text())
    assert set(data) == SWEEP_KEYS
    assert data["block_size"] == 4 and data["num_requests"] == 5 and data["warmup_fraction"] == 0.0
    assert data["window"] == WHOLE_LVF and data["trace"] == str(LVF)
    assert all(set(x) == RESULT_KEYS for x in data["results"])
    # the JSON rows are the CSV rows (as JSON values), plus each policy's counters
    assert [x["counters"] for x in data["results"]] == [{"admissions": 3, "evictions": 1}, {"admissions": 3, "evictions": 0},
                                                        {"admissions": 4, "evictions": 2}, {"admissions": 3, "evictions": 0}]
    assert {(x["trace"], x["window"], x["warmup_requests"], x["bound"], x["kv_bytes"]) for x in data["results"]} == {
        (str(LVF), "whole trace (5 requests)", 0, False, None)}
    got = [(x["policy"], x["cache_capacity_blocks"], x["total_hit_tokens"], x["final_cache_blocks"]) for x in data["results"]]
    assert got == LVF_SWEEP
    assert [x["total_prompt_tokens"] for x in data["results"]] == [20] * 4


def test_sweep_warmup():
    # floor(0.5 * 5) = 2 warm-up requests; prompt tokens of r3..r5 = 5 + 6 + 2 = 13.
    # All hits (r3 and r5) fall in the window, so hit tokens match the whole-trace sweep.
    lengths = [json.loads(line)["input_length"] for line in LVF.read_text().splitlines()]
    assert lengths == [3, 4, 5, 6, 2]
    second_half = sum(lengths[2:])
    assert second_half == 13
    data = json.loads(ok("sweep", LVF, "--capacities", "2,6", "--policies", "lru,fifo", "--block-size", 4,
                         "--warmup-fraction", 0.5, "--json"))
    assert data["warmup_fraction"] == 0.5
    window = "after warm-up: requests 3-5 of 5 (first 2 only warm the cache)"
    assert data["window"] == {"warmup_requests": 2, "measured_requests": 3, "description": window}
    assert {(x["window"], x["warmup_fraction"], x["warmup_requests"], x["measured_requests"]) for x in data["results"]} == {
        (window, 0.5, 2, 3)}
    assert [x["total_prompt_tokens"] for x in data["results"]] == [second_half] * 4
    assert [x["total_hit_tokens"] for x in data["results"]] == [6, 6, 4, 6]
    text = ok("sweep", LVF, "--capacities", "2", "--policies", "lru", "--block-size", 4, "--warmup-fraction", 0.5)
    assert "window: after warm-up: requests 3-5 of 5 (first 2 only warm the cache)" in text.splitlines()[0]


def test_sweep_capacities_auto():
    # 3 unique blocks <= 16 -> auto gives the single capacity 16; nothing is evicted.
    # s3fifo at 16: small_cap round(1.6)=2: r3 finds 1 in S -> 4; r4 promotes 1 (freq 1) to M; r5 -> 2.
    for args in ([], ["--capacities", "auto"], ["--capacities", " AUTO "]):
        data = json.loads(ok("sweep", LVF, "--block-size", 4, "--json", *args))
        got = [(x["policy"], x["cache_capacity_blocks"], x["total_hit_tokens"], x["final_cache_blocks"])
               for x in data["results"]]
        assert got == [("s3fifo", 16, 6, 3), ("lru", 16, 6, 3), ("fifo", 16, 6, 3)]


def test_sweep_table_output():
    text = ok("sweep", LVF, "--capacities", "2,6", "--policies", "lru,fifo", "--block-size", 4)
    lines = text.splitlines()
    assert lines[1].split() == ["policy", "params", "capacity", "hit", "tokens", "prompt", "tokens", "hit", "rate", "%",
                                "first", "use", "%", "evicted", "%", "behind", "hole", "%", "final", "blocks"]
    rows = [line.split() for line in lines[3:]]
    # The terminal table speaks percent, as the summaries (machine outputs keep fractions). The miss
    # account: r1, r2, r4 are first uses (3 + 4 + 4 of 20 tokens: 55%); fifo at 2 evicts 1 at r4, so
    # r5 (2 tokens) misses it (10%); the tokens past each request's one hash id are partial blocks.
    assert [(r[0], int(r[1]), int(r[2]), int(r[3]), r[4], r[5], r[6], r[7], int(r[8])) for r in rows] == [
        ("lru", 2, 6, 20, "30.00", "55.00", "0.00", "0.00", 2), ("lru", 6, 6, 20, "30.00", "55.00", "0.00", "0.00", 3),
        ("fifo", 2, 4, 20, "20.00", "55.00", "10.00", "0.00", 2), ("fifo", 6, 6, 20, "30.00", "55.00", "0.00", "0.00", 3),
    ]


def test_sweep_jobs_same_result():
    args = ("sweep", LVF, "--capacities", "2,6", "--policies", "lru,fifo,s3fifo:small_ratio=0.5", "--block-size", 4, "--json")
    assert json.loads(ok(*args, "--jobs", 3)) == json.loads(ok(*args))


def test_sweep_bad_input_leaves_no_output(tmp_path):
    out = tmp_path / "x.csv"
    assert fails("sweep", BAD3, "--output", out) == f"{BAD3}:3: input_length: expected a non-negative integer, got -4"
    assert not out.exists()
    # capacity 5 is impossible for s3fifo: fails before any replay, no file
    line = fails("sweep", LVF, "--capacities", "5,50", "--output", out)
    assert line.startswith("kvreplay: s3fifo: capacity 5 with small_ratio 0.1 gives small_cap 0")
    assert not out.exists()
    out.write_text("keep me")
    fails("sweep", LVF, "--policies", "lru,nope", "--output", out)
    assert out.read_text() == "keep me"
    assert no_temp_files(tmp_path)


@pytest.mark.parametrize("args,expected", [
    (["--policies", "lru,nope"], f"kvreplay: unknown policy 'nope' (known: {KNOWN})"),
    (["--policies", "s3fifo:small_ratio"], "kvreplay: 's3fifo:small_ratio': expected key=value after ':', got 'small_ratio'"),
    (["--policies", "lru:foo=1"], "kvreplay: lru: unknown parameter 'foo' (parameters: none)"),
    (["--capacities", ","], "kvreplay: no capacities to sweep"),
])
def test_sweep_bad_options(args, expected):
    assert fails("sweep", LVF, *args) == expected


def test_sweep_bad_capacity_list():
    r = kv("sweep", LVF, "--capacities", "10,zero")
    assert r.returncode == 2 and b"capacities:" in r.stderr and b"Traceback" not in r.stderr


# ---------------------------------------------------------------- demo, policies, version


def test_demo():
    out = ok("demo")
    lines = out.splitlines()
    assert lines[0].startswith("kvreplay demo:")
    header = next(i for i, line in enumerate(lines) if line.startswith("policy"))
    assert set(lines[header + 1]) == {"-", " "}
    end = lines.index("", header)
    rows = [line.split() for line in lines[header + 2:end]]
    names = {r[0] for r in rows}
    assert {"s3fifo", "lru", "fifo"} <= names
    assert names == set(POLICIES)  # "every policy"
    assert any(line == f"{len(rows)} replays" or line.startswith(f"{len(rows)} replays in ") for line in lines[end:])
    num = lambda cell: int(cell.replace(",", ""))  # noqa: E731
    # columns from the end: hit tokens, prompt tokens, hit rate %, first use %, evicted %, behind hole %, final
    prompt = {num(r[-6]) for r in rows}
    assert len(prompt) == 1  # every row covers the same trace
    for r in rows:
        hit, rate = num(r[-7]), float(r[-5])
        assert 0 <= hit <= num(r[-6])
        assert rate == pytest.approx(100 * hit / num(r[-6]), abs=5e-3)  # a percentage with 2 decimals
        assert rate + sum(float(x) for x in r[-4:-1]) <= 100.05  # hits and misses by cause share the prompt
    if "infinite" in names:  # the ceiling: no policy hits more than a cache that never evicts
        ceiling = max(num(r[-7]) for r in rows if r[0] == "infinite")
        assert all(num(r[-7]) <= ceiling for r in rows)


def test_policies():
    out = ok("policies")
    lines = out.splitlines()
    names = [line.split()[0] for line in lines if not line.startswith(" ")]
    assert names[:3] == ["s3fifo", "lru", "fifo"]
    assert names == list(POLICIES)
    s3 = lines.index(next(line for line in lines if line.startswith("s3fifo ")))
    params = [line.split(":")[0].strip() for line in lines[s3 + 1:s3 + 4]]
    assert params == ["--small-ratio 0.1", "--max-freq 3", "--ghost-freq 0"]
    assert not lines[s3 + 4].startswith(" ")  # s3fifo has exactly these three


def test_version():
    assert ok("--version") == f"kvreplay {kvreplay.__version__}\n"


def test_console_script_if_installed():
    script = Path(sys.executable).parent / "kvreplay"
    if not script.exists():
        pytest.skip("no kvreplay console script next to this python")
    r = subprocess.run([str(script), "--version"], capture_output=True, timeout=60)
    assert r.returncode == 0 and r.stdout.decode() == f"kvreplay {kvreplay.__version__}\n"


def test_no_command_is_usage_error():
    r = kv()
    assert r.returncode == 2 and b"usage:" in r.stderr


# ---------------------------------------------------------------- real traces (skip without ../shared)


@pytest.mark.parametrize("name", ["conversation_trace.jsonl", "synthetic_trace.jsonl"])
def test_real_trace_run(name, tmp_path):
    p = SHARED_TRACES / name
    if not p.is_file():
        pytest.skip(f"{p} not present (../shared is absent)")
    recs = [json.loads(line) for line in p.read_text().splitlines() if line.strip()]
    unique = len({h for r in recs for h in r["hash_ids"]})
    rep = run_json(p, "--policy", "lru", "--capacity", 4096, "--block-size", 512)
    assert rep["num_requests"] == len(recs)
    assert rep["total_prompt_tokens"] == sum(r["input_length"] for r in recs)
    assert sum(r["hit_tokens"] for r in rep["per_request"]) == rep["total_hit_tokens"]
    assert [r["prompt_tokens"] for r in rep["per_request"]] == [r["input_length"] for r in recs]
    assert rep["final_cache_blocks"] == min(4096, unique)
    # the reference engine agrees with the compiled one
    ref = run_json(p, "--policy", "lru", "--capacity", 4096, "--block-size", 512, "--engine", "reference", "--summary-only")
    assert ref["total_hit_tokens"] == rep["total_hit_tokens"]


def test_run_output_says_what_it_is(tmp_path):
    # run writes its JSON report: a .csv name is refused (it used to get JSON inside), nothing is
    # written; - is standard output, as for the other commands; the input is never overwritten.
    csv_out = tmp_path / "r.csv"
    r = kv("run", LVF, "--policy", "lru", "--capacity", 2, "--block-size", 4, "--output", csv_out)
    assert r.returncode == 2 and not csv_out.exists()
    assert "run writes its JSON report: name the file .json" in r.stderr.decode()
    doc = json.loads(ok("run", LVF, "--policy", "lru", "--capacity", 2, "--block-size", 4, "--output", "-"))
    assert doc["total_hit_tokens"] == 6 and not (Path.cwd() / "-").exists()
    trace = tmp_path / "t.json"
    trace.write_bytes(Path(LVF).read_bytes())
    r = kv("run", trace, "--policy", "lru", "--capacity", 2, "--block-size", 4, "--output", trace)
    assert r.returncode == 2 and "that is the input file" in r.stderr.decode()
    assert trace.read_bytes() == Path(LVF).read_bytes()


def test_run_says_when_the_capacity_is_the_default():
    out = ok("run", LVF, "--policy", "lru", "--block-size", 4)
    assert "cache     4,096 blocks x 4 tokens" in out
    assert "note      no --capacity given: 4,096 blocks, the default" in out
    assert "note" not in ok("run", LVF, "--policy", "lru", "--capacity", 2, "--block-size", 4)
    assert "(at USD 0.07 hit / 0.27 miss per million tokens)" in out and "cost      input USD " in out
