"""Surprising but correct figures are explained where they appear (issue 11, items 3 and 8)."""

from __future__ import annotations

import json

import pytest

import kvreplay
from kvreplay.cli import main
from conftest import MOONCAKE, shared_path, write, jsonl


def trace_with_long_prompts():
    # block_size 4: prompts of 3, 9 and 17 tokens need 1, 3 and 5 blocks; at capacity 3 the last
    # one cannot fit (5 > 3); the 9-token one fits exactly.
    return kvreplay.Trace.from_requests([([1], 3), ([1, 2, 3], 9), ([1, 2, 3, 4, 5], 17), ([9], 2)])


@pytest.mark.parametrize("policy", ["lru", "s3fifo", "fifo", "vllm", "radix", "belady"])
def test_every_policy_counts_oversize_requests(policy):
    trace = trace_with_long_prompts()
    capacity = 6 if policy == "s3fifo" else 3  # s3fifo needs >= 6 blocks for two queues
    report = kvreplay.replay(trace, policy, capacity, 4)
    assert report.oversize_requests == (0 if policy == "s3fifo" else 1)
    assert report.summary()["oversize_requests"] == report.oversize_requests


def test_oversize_counts_only_the_window_and_never_for_unbounded():
    trace = trace_with_long_prompts()
    assert kvreplay.replay(trace, "lru", 3, 4, warmup_fraction=0.75).oversize_requests == 0  # only request 4 counts
    assert kvreplay.replay(trace, "lru", 2, 4, warmup_fraction=0.5).oversize_requests == 1  # 17 tokens: 5 > 2
    assert kvreplay.replay(trace, "infinite", None, 4).oversize_requests == 0


def test_summary_says_it_in_words(tmp_path, capsys):
    path = write(tmp_path, "t.jsonl", jsonl(
        {"timestamp": 0, "input_length": 3, "output_length": 1, "hash_ids": [1]},
        {"timestamp": 1, "input_length": 17, "output_length": 1, "hash_ids": [1, 2, 3, 4, 5]},
    ))
    assert main(["run", str(path), "--policy", "lru", "--capacity", "3", "--block-size", "4"]) == 0
    out = capsys.readouterr().out
    assert "oversize  1 of 2 requests (50.0%) need more than the cache's 3 blocks" in out
    assert main(["run", str(path), "--policy", "lru", "--capacity", "8", "--block-size", "4"]) == 0
    assert "oversize" not in capsys.readouterr().out


def test_s3fifo_below_capacity_is_explained(capsys):
    path = shared_path(MOONCAKE / "conversation_trace.jsonl")
    assert main(["run", str(path), "--policy", "s3fifo", "--capacity", "819"]) == 0
    out = capsys.readouterr().out
    # S3FIFO ends with 435 of 819 blocks: M fills only by promotion or a ghost hit.
    assert "note      435 of 819 blocks resident at the end (53%): S3FIFO's main queue M fills only" in out
    assert main(["run", str(path), "--policy", "lru", "--capacity", "819"]) == 0
    assert "note " not in capsys.readouterr().out


def test_run_json_has_the_count(tmp_path):
    path = write(tmp_path, "t.jsonl", jsonl({"timestamp": 0, "input_length": 17, "output_length": 1, "hash_ids": [1, 2, 3, 4, 5]}))
    out = tmp_path / "r.json"
    assert main(["run", str(path), "--policy", "lru", "--capacity", "3", "--block-size", "4", "--output", str(out)]) == 0
    assert json.loads(out.read_text())["oversize_requests"] == 1
