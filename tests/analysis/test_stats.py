"""kvreplay.stats: hand-worked values on a tiny trace, agreement with the infinite replay, the Mooncake figure."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from conftest import MOONCAKE, shared_path
from hypothesis import given, settings
from strategies import requests

import kvreplay
from kvreplay.analysis.stats import bucket_label, bucket_of, format_stats, stats
from kvreplay.cli import main
from kvreplay.trace import Trace
from kvreplay.trace.synth import synth


@pytest.fixture
def tiny() -> Trace:
    # block size 4. Ids a=0 b=1 c=2. Flat accesses: a b | a b c | b a | a c
    t = Trace.from_requests([
        (["a", "b"], 10, 0.0, 3),
        (["a", "b", "c"], 11, 1000.0, 5),
        (["b", "a"], 8, 2000.0, 1),
        (["a", "c"], 6, 4000.0, 2),
    ], block_size=4)
    return Trace(offsets=t.offsets, blocks=t.blocks, input_length=t.input_length, output_length=t.output_length,
                 timestamp=t.timestamp, num_blocks=t.num_blocks, block_size=4, session=np.array([0, 0, 1, 1]))


def test_hand_worked(tiny):
    s = stats(tiny)
    assert s["block_size"] == 4
    assert (s["num_requests"], s["total_prompt_tokens"], s["total_output_tokens"]) == (4, 35, 11)
    assert (s["num_block_accesses"], s["num_unique_blocks"]) == (9, 3)
    # infinite cache: r0 k=0 -> 0; r1 a,b seen -> min(8, 11) = 8; r2 b,a seen -> min(8, 8) = 8; r3 a,c seen -> min(8, 6) = 6
    assert s["infinite_cache_hit_tokens"] == 22
    assert s["infinite_cache_hit_rate"] == 22 / 35
    assert s["duration_s"] == 4.0 and s["request_rate_per_s"] == 0.75
    # lengths 10 11 8 6: inverted-CDF percentiles are values of the data
    assert s["input_length"] == {"mean": 8.75, "min": 6, "p50": 8, "p90": 11, "p99": 11, "max": 11}
    # reuse: a3 (b between) 1, b4 (a) 1, b6 (c) 1, a7 (b, c) 2, a8 0, c9 (b, a) 2; three first uses
    reuse = s["reuse_distance"]
    assert reuse["first_use"] == 3
    assert [(h["range"], h["count"]) for h in reuse["histogram"]] == [("0", 1), ("1", 3), ("2-3", 2)]
    # trie sharing: r1 shares a,b with r0 (2); r2 starts with b, which no request started with (0,
    # though the infinite cache hits both its blocks: these ids are not chained); r3 shares a (1)
    sharing = s["prefix_sharing"]
    at_least = {r["blocks"]: r["requests"] for r in sharing["requests_sharing_at_least"]}
    assert (at_least[1], at_least[2], at_least[4]) == (2, 1, 0)
    assert [(h["range"], h["count"]) for h in sharing["shared_blocks_histogram"]] == [("0", 2), ("1", 1), ("2-3", 1)]
    assert sharing["shared_prefix_tokens"] == 8 + 4
    sess = s["sessions"]
    assert (sess["num_sessions"], sess["mean_turns"]) == (2, 2.0)
    text = format_stats(s)
    assert "block size           4 tokens (rates are token-weighted over the whole trace)" in text
    assert "22 of 35 prompt tokens hit = 62.86%" in text


def test_block_size_argument_and_no_sessions(tiny):
    plain = Trace.from_requests([(["a", "b"], 10), (["a", "b", "c"], 11)], block_size=4)
    s = stats(plain, block_size=3)
    assert s["block_size"] == 3 and s["infinite_cache_hit_tokens"] == 6  # min(2*3, 11)
    assert s["sessions"] is None and s["request_rate_per_s"] is None


def test_buckets():
    assert bucket_of(np.array([0, 1, 2, 3, 4, 7, 8, 2**40 - 1, 2**40])).tolist() == [0, 1, 2, 2, 3, 3, 4, 40, 41]
    assert [bucket_label(k) for k in range(5)] == ["0", "1", "2-3", "4-7", "8-15"]


@pytest.mark.parametrize("block_size", [16, 512])
def test_agrees_with_the_infinite_replay(block_size):
    trace = synth(3000, seed=2, block_size=block_size)
    s = stats(trace)
    report = kvreplay.replay(trace, "infinite", None, block_size, engine="reference")
    assert s["infinite_cache_hit_tokens"] == report.total_hit_tokens
    from kvreplay.analysis.stats import infinite_hits

    hit_tokens, hit_blocks, shared, _ = infinite_hits(trace)
    assert np.array_equal(hit_tokens, report.hit_tokens)
    assert np.array_equal(hit_blocks, report.hit_blocks)
    assert np.array_equal(shared, hit_blocks)  # chained ids: the trie and the cache agree


def test_mooncake_conversation_figure():
    path = shared_path(MOONCAKE / "conversation_trace.jsonl")
    s = stats(kvreplay.load_trace(path), block_size=512)
    assert s["infinite_cache_hit_tokens"] == 54_098_411
    assert s["total_prompt_tokens"] == 144_793_823
    assert round(100 * s["infinite_cache_hit_rate"], 2) == 37.36
    assert s["num_requests"] == 12_031 and s["num_unique_blocks"] == 182_790


def test_cli(tmp_path, capsys):
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 10, "hash_ids": [7, 8]}\n'
                     '{"timestamp": 1000, "input_length": 11, "hash_ids": [7, 8, 9]}\n')
    assert main(["stats", str(trace), "--block-size", "4", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["total_prompt_tokens"], data["infinite_cache_hit_tokens"]) == (21, 8)
    assert data["infinite_cache_hit_rate"] == 8 / 21
    assert main(["stats", str(trace), "--block-size", "4"]) == 0
    assert "8 of 21 prompt tokens hit = 38.10%" in capsys.readouterr().out
    assert main(["stats", str(tmp_path / "missing.jsonl")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_requests_per_session_is_one_figure():
    # Three sessions of 1, 2 and 5 requests: mean 2.67, printed once, with two decimals (it used to
    # say "mean 2.67 requests per session; ... mean 3").
    reqs = [([i], 4) for i in range(8)]
    base = kvreplay.Trace.from_requests(reqs)
    trace = dataclasses.replace(base, session=np.array([0, 1, 1, 2, 2, 2, 2, 2]))
    line = [x for x in format_stats(stats(trace, block_size=4)).splitlines() if x.startswith("sessions")][0]
    assert line == "sessions             3; requests per session mean 2.67  min 1  p50 2  p90 5  p99 5  max 5"


# --- the compiled pass (stats.c) against its plain-Python reference ------------------------------

def both_passes(trace, block_size):
    """(first uses, hit tokens, hit blocks, shared blocks, reuse histogram) of each pass."""
    from kvreplay.analysis.stats import NUM_BUCKETS, _pass_compiled, _pass_reference

    out = []
    for one_pass in (_pass_reference, _pass_compiled):
        per_request = [np.zeros(len(trace), np.int64) for _ in range(3)]
        reuse = np.zeros(NUM_BUCKETS + 1, np.int64)
        first = one_pass(trace, block_size, *per_request, reuse, max(1, trace.num_blocks))
        out.append((first, *(a.tolist() for a in per_request), reuse.tolist()))
    return out


@settings(max_examples=200, deadline=None)
@given(requests())
def test_compiled_pass_equals_the_reference(trace_and_size):
    reqs, block_size = trace_and_size
    reference, compiled = both_passes(kvreplay.Trace.from_requests(reqs), block_size)
    assert compiled == reference


def test_compiled_pass_on_ids_that_are_not_chained():
    # The trie tells "the same ids in the same order" from "the same ids": [a b] then [b a] share
    # nothing in the trie, though b and a both hit the infinite cache. Many requests make the
    # compiled trie's table grow (it doubles from 1,024 entries).
    rng = np.random.default_rng(7)
    reqs = [([int(x) for x in rng.integers(0, 50, int(rng.integers(1, 12)))], 40) for _ in range(3000)]
    reqs += [(["a", "b"], 8), (["b", "a"], 8)]
    reference, compiled = both_passes(kvreplay.Trace.from_requests(reqs), 4)
    assert compiled == reference
    assert reference[3][-1] == 0 and reference[2][-1] == 2  # [b a]: trie-shared 0 blocks, infinite hits 2


@pytest.mark.parametrize("name", ["synthetic_trace.jsonl", "conversation_trace.jsonl"])
def test_compiled_pass_equals_the_reference_on_real_traces(name):
    trace = kvreplay.load_trace(shared_path(MOONCAKE / name))
    reference, compiled = both_passes(trace, 512)
    assert compiled == reference
    assert reference[0] == trace.num_blocks
