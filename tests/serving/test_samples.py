"""Parallel sampling (n): vLLM 0.33.0's parent/child fan-out (serving/samples.py), worked by hand."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import jsonl, write
from test_cli import fails, kv, ok

from kvreplay.errors import ConfigError, TraceError
from kvreplay.serving.samples import group_memory
from kvreplay.serving.simulate import Scheduler, simulate
from kvreplay.trace import load_trace as load
from kvreplay.trace.model import Trace

ONE_SECOND = json.dumps({"format": "kvreplay-step-polynomial", "unit": "s", "terms": [{"coef": 1.0}]})


def one_request(length=1000, output=100, block_size=16):
    return Trace.from_requests([(list(range(-(-length // block_size))), length, 0.0, output)], block_size=block_size)


def test_eight_samples_of_a_1000_token_prompt_share_62_blocks(tmp_path):
    # L = 1000, blocks of 16: vLLM's hit stops at num_tokens - 1 = 999, so the children share
    # floor(999 / 16) = 62 full blocks (992 tokens); at its last token a child holds 1000 + 100 - 1
    # = 1099 tokens = 69 blocks, 7 of them its own: 8 x 7 = 56 divergent, 62 + 56 = 118 in all,
    # against 8 x 69 = 552 for eight independent requests: 434 saved = 7 x 62
    tm = write(tmp_path, "one_second.json", ONE_SECOND)
    r = simulate(one_request(), capacity=2000, block_size=16, n=8, time_model=str(tm))
    s = r.samples
    assert (s["groups"], s["children"], s["shared_blocks"], s["divergent_blocks"]) == (1, 8, 62, 56)
    assert (s["group_blocks"], s["independent_blocks"], s["saved_blocks"]) == (118, 552, 434)
    # the seven later children, admitted in the first child's step, hit its 62 blocks (vLLM caches
    # a block when it allocates it, kv_cache_manager.py:614-620)
    assert r.hit_tokens.tolist() == [0] + [992] * 7
    assert s["later_children_hit_tokens"] == s["later_children_shared_tokens"] == 7 * 992
    # all eight run together to the end: the pool held exactly the group's blocks
    assert r.counters["peak_held_blocks"] == 118
    # one step of 1 s prefills all eight (1000 + 7 x 8 tokens within the 8192 budget)
    assert s["median_ttft_first_child_s"] == s["median_ttft_last_child_s"] == 1.0


def test_a_prompt_of_whole_blocks_recomputes_its_last_block_per_child():
    # L = 992 = 62 blocks: the hit stops at 991 tokens, 61 blocks; each child computes block 62 itself
    r = simulate(one_request(992, 10), capacity=2000, block_size=16, n=4)
    assert r.samples["shared_blocks"] == 61
    assert r.hit_tokens.tolist() == [0] + [976] * 3
    mem = group_memory(np.array([992]), np.array([10]), np.array([4]), 16, True)
    assert mem["own_blocks_per_child"].tolist() == [63 - 61]  # 992 + 10 - 1 = 1001 tokens = 63 blocks


def test_the_last_child_waits_when_max_num_seqs_admits_four(tmp_path):
    # max_num_seqs 4: children 0-3 prefill in the step [0, 1 s), decode at 2 and 3 s and finish; the
    # other four start in the step from 3 s: first token at 4 s
    tm = write(tmp_path, "one_second.json", ONE_SECOND)
    r = simulate(one_request(100, 3), capacity=2000, block_size=16, n=8, time_model=str(tm),
                 scheduler=Scheduler(style="vllm", max_num_seqs=4))
    assert r.ttft_s.tolist() == [1.0] * 4 + [4.0] * 4
    assert r.samples["per_group"]["ttft_first_child_s"].tolist() == [1.0]
    assert r.samples["per_group"]["ttft_last_child_s"].tolist() == [4.0]
    assert r.samples["median_ttft_last_child_s"] == 4.0


def test_n_1_is_the_run_of_today():
    t = Trace.from_requests([([1, 2, 3], 40, 0.0, 5), ([1, 2, 4], 40, 10.0, 7)], block_size=16)
    before = simulate(t, capacity=50, block_size=16, rate=3.0).to_dict()
    assert simulate(t, capacity=50, block_size=16, rate=3.0, n=1).to_dict() == before
    assert "samples" not in before and "samples" not in before["summary"]


def test_children_share_the_parents_poisson_arrival():
    t = Trace.from_requests([([1, 2], 20, 0.0, 2), ([3, 4], 20, 0.0, 2), ([5], 10, 0.0, 2)], block_size=16)
    parents = simulate(t, capacity=50, block_size=16, rate=2.0, seed=3).arrival_s
    r = simulate(t, capacity=50, block_size=16, rate=2.0, seed=3, n=3)
    assert r.arrival_s.tolist() == np.repeat(parents, 3).tolist()


def test_the_trace_field_and_the_flag(tmp_path):
    # record 1 asks for 4 completions, record 2 gives none: --n 2 applies to it
    trace = write(tmp_path, "t.jsonl", jsonl(
        {"timestamp": 0, "input_length": 40, "output_length": 3, "hash_ids": [1, 2, 3], "block_size": 16, "n": 4},
        {"timestamp": 0, "input_length": 40, "output_length": 3, "hash_ids": [7, 8, 9], "block_size": 16}))
    t = load(str(trace))
    assert t.samples.tolist() == [4, 0]
    doc = json.loads(ok("simulate", trace, "--capacity", 100, "--time-model", "instant", "--n", "2", "--json"))
    s = doc["samples"]
    assert (s["groups"], s["children"], s["max_n"]) == (2, 6, 4)
    assert s["per_group"]["n"] == [4, 2] and s["per_group"]["shared_blocks"] == [2, 2]
    assert len(doc["per_request"]["hit_tokens"]) == 6
    assert doc["summary"]["samples"]["shared_blocks"] == 4
    out = ok("simulate", trace, "--capacity", 100, "--time-model", "instant")  # the field alone: record 1
    assert "samples    the trace's 1 requests with n > 1 (4 children, n up to 4)" in out
    assert "shared prompt 2 (counted once) + divergent 4 = 6, against 12 for independent requests: 6 saved" in out


def test_bad_n_is_named(tmp_path):
    trace = write(tmp_path, "t.jsonl", jsonl(
        {"timestamp": 0, "input_length": 40, "hash_ids": [1, 2, 3]},
        {"timestamp": 0, "input_length": 40, "hash_ids": [1, 2, 3], "n": 0}))
    with pytest.raises(TraceError, match="t.jsonl:2: n: expected a whole number of completions in 1..1024, got 0"):
        load(str(trace))
    good = write(tmp_path, "g.jsonl", jsonl({"timestamp": 0, "input_length": 40, "hash_ids": [1, 2, 3]}))
    assert fails("simulate", good, "--capacity", 100, "--time-model", "instant", "--n", "0").startswith(
        "kvreplay: n (--n) must be a whole number of completions per request in 1..1024, got 0")


@pytest.mark.parametrize("options, message", [
    (dict(engine_style="trtllm"), "modelled for --engine-style vllm and sglang"),
    (dict(instances=2), "needs one instance"),
    (dict(arrivals="closed"), "open-loop arrivals only"),
    (dict(sessions=2), "open-loop arrivals only"),
])
def test_refused_where_it_cannot_apply(options, message):
    t = one_request(100, 3)
    with pytest.raises(ConfigError, match=message):
        simulate(t, capacity=200, block_size=16, n=2, **options)
    simulate(t, capacity=200, block_size=16, n=1, **options)  # n = 1 is served as before


def test_sglang_sends_the_samples_when_its_prefill_only_request_ends(tmp_path):
    # SGLang 0.5.23 (serving/samples.py): the group is first a prefill-only request (max_new_tokens
    # 0) at the parent's arrival; with 1 s steps it prefills in [0, 1 s) and ends at 1 s, caching
    # the prompt's 62 whole pages of 16 tokens (its partial 63rd is its own, freed). The eight
    # samples are sent then; each one's match stops at input_len - 1 = 999 tokens: all eight hit
    # 992 (8 x 992, one more sharer than vLLM's children), prefill together in [1, 2 s), first
    # token at 2 s, and decode the other 99 tokens: finish at 101 s. Memory at the last token as
    # vLLM's: 62 shared + 8 x 7 own = 118, the run's peak.
    tm = write(tmp_path, "one_second.json", ONE_SECOND)
    r = simulate(one_request(), capacity=2000, block_size=16, n=8, time_model=str(tm), engine_style="sglang",
                 policy="radix")
    assert r.hit_tokens.tolist() == [0] + [992] * 8
    assert r.first_token_s.tolist() == [1.0] + [2.0] * 8
    assert r.scheduled_s.tolist() == [0.0] + [1.0] * 8  # (the samples: sent when the prefill-only one ended)
    assert r.ttft_s.tolist() == [1.0] + [2.0] * 8  # (from the parent's arrival, the client's send)
    assert r.finish_s.tolist() == [1.0] + [101.0] * 8
    assert r.output_tokens.tolist() == [1] + [100] * 8
    s = r.samples
    assert (s["groups"], s["children"], s["prefill_only_requests"], s["engine_style"]) == (1, 8, 1, "sglang")
    assert (s["shared_blocks"], s["divergent_blocks"], s["group_blocks"]) == (62, 56, 118)
    assert s["later_children_hit_tokens"] == s["later_children_shared_tokens"] == 8 * 992
    assert r.counters["peak_held_blocks"] == 118
    # the groups' TTFT is from the parent's arrival: it holds the prefill-only request's second
    assert s["median_ttft_first_child_s"] == s["median_ttft_last_child_s"] == 2.0


def test_sglang_prefill_only_request_reserves_no_output_tokens(tmp_path):
    # SGLang's admission needs extend + reserved outputs + a page below the pool's room
    # (PrefillAdder.add_one_req; a prefill-only request's max_new_tokens is 0). Pool of 4 pages of
    # 16 tokens = 64 tokens, a prompt of 40 tokens, n = 2, 1 output: the prefill-only request needs
    # 40 + 0 + 16 = 56 < 64 and is served; an ordinary request of the same prompt would need
    # 40 + 1 + 16 = 57, also below; with 47 prompt tokens the prefill-only request fits (63 < 64)
    # where a request reserving its output would not (64): the run serves the group's prefill
    # and refuses the samples as never fitting
    tm = write(tmp_path, "one_second.json", ONE_SECOND)
    t = one_request(47, 1)
    r = simulate(t, capacity=4, block_size=16, n=2, time_model=str(tm), engine_style="sglang", policy="radix")
    assert r.finished.tolist() == [True, False, False]
    alone = simulate(t, capacity=4, block_size=16, time_model=str(tm), engine_style="sglang", policy="radix")
    assert alone.finished.tolist() == [False]  # (the same prompt reserving its one output)


def test_n_survives_a_mooncake_round_trip_and_bailian_refuses_it(tmp_path):
    from kvreplay.trace.writers import write_trace

    trace = write(tmp_path, "t.jsonl", jsonl(
        {"timestamp": 0, "input_length": 40, "output_length": 3, "hash_ids": [1, 2, 3], "block_size": 16, "n": 4},
        {"timestamp": 5, "input_length": 40, "output_length": 3, "hash_ids": [7, 8, 9], "block_size": 16}))
    t = load(str(trace))
    write_trace(t, tmp_path / "back.jsonl")
    assert load(str(tmp_path / "back.jsonl")).samples.tolist() == [4, 0]
    with pytest.raises(ConfigError, match="Bailian files cannot hold"):
        write_trace(t, tmp_path / "b.jsonl", format="bailian")


def test_the_groups_ttft_carries_the_calibrated_rooflines_band():
    r = simulate(one_request(), capacity=2000, block_size=16, n=8, model="Llama-3.1-8B", gpu="H100",
                 time_model="roofline")
    s = r.samples
    assert r.counters["peak_held_blocks"] == s["group_blocks"] == 118
    low, high = s["median_ttft_band"]["first_child_s"]
    assert low < s["median_ttft_first_child_s"] < high
    # one step prefills all eight children: the last child's first token is the first one's
    assert s["median_ttft_last_child_s"] == s["median_ttft_first_child_s"]


def test_a_trace_beam_width_is_read_and_checked(tmp_path):
    # (serving/beam.py serves it; tests/serving/test_beam.py)
    trace = load(str(write(tmp_path, "t.jsonl", jsonl(
        {"timestamp": 0, "input_length": 40, "hash_ids": [1, 2, 3], "beam_width": 1},
        {"timestamp": 0, "input_length": 40, "hash_ids": [1, 2, 3], "beam_width": 4},
        {"timestamp": 0, "input_length": 40, "hash_ids": [1, 2, 3]}))))
    assert trace.beam_width.tolist() == [1, 4, 0] and trace.samples is None
    with pytest.raises(TraceError, match=r"t2.jsonl:1: beam_width: expected a whole number of beams in 1..10 "
                                         r"\(vLLM asks the engine for 2 x W logprobs"):
        load(str(write(tmp_path, "t2.jsonl", jsonl({"input_length": 40, "hash_ids": [1, 2, 3], "beam_width": 11}))))
    with pytest.raises(TraceError, match=r"t3.jsonl:1: beam_width: give n or beam_width, not both"):
        load(str(write(tmp_path, "t3.jsonl", jsonl({"input_length": 40, "hash_ids": [1, 2, 3], "beam_width": 2,
                                                     "n": 2}))))


def test_the_documented_run(tmp_path):
    # docs/engines.md, "Parallel sampling": its two commands, and every figure it quotes from them
    from conftest import MOONCAKE, ROOT, shared_path

    source = shared_path(MOONCAKE / "conversation_trace.jsonl")
    doc = (ROOT / "docs" / "engines.md").read_text()
    section = doc[doc.index("## Parallel sampling"):]
    assert "kvreplay slice conversation_trace.jsonl --requests 0:1000 -o conv1000.jsonl" in section
    command = "kvreplay simulate conv1000.jsonl --gpu H100 --model Llama-3.1-8B --speedup 0.1 --n 4"
    assert command in section
    conv = tmp_path / "conv1000.jsonl"
    assert kv("slice", source, "--requests", "0:1000", "-o", conv).returncode == 0
    args = [conv if a == "conv1000.jsonl" else a for a in command.split()[1:]]
    out = ok(*args)
    quoted = section.split("```")[3].strip().splitlines()  # the second block: the output
    assert len(quoted) == 4 and all(line in out.splitlines() for line in quoted), quoted
    rows = {line.split("  ")[0]: line.split() for line in out.splitlines()}
    assert rows["TTFT"][3:9] == ["1.79", "s", "1.72", "s", "-", "2.12"] and rows["TTFT"][-1] == "2,040"
    assert "peak held by running requests 903 blocks (100% of the pool); peak 80 running" in out
    assert "0 preemptions of 0 requests" in out and "74.44% of prompt tokens" in out
    base = ok(*args[:-2])
    rows = {line.split("  ")[0]: line.split() for line in base.splitlines()}
    assert rows["TTFT"][3:9] == ["1.67", "s", "1.60", "s", "-", "1.91"]
    assert "peak held by running requests 689 blocks (76% of the pool); peak 17 running" in base
    for figure in ("689 of the pool's 903 blocks with 17 requests running and TTFT p50 1.67 s",
                   "(band 1.60-1.91 s)", "(903 blocks, 80 running, no preemption)",
                   "children's TTFT p50 is 1.79 s (band 1.72-2.12 s)", "74.44% here",
                   "with `--host-cpu none` both are 1.82 s"):
        assert figure in " ".join(section.split()), figure
    none = ok(*args, "--host-cpu", "none")
    assert "first child 1.82 s (band 1.74 s - 2.08 s), last child 1.82 s" in none
    sglang = "kvreplay simulate conv1000.jsonl --gpu H100 --model Llama-3.1-8B --speedup 0.1 --n 4 --engine-style sglang"
    assert sglang in section
    args = [conv if a == "conv1000.jsonl" else a for a in sglang.split()[1:]]
    out = ok(*args)
    quoted = section.split("```")[7].strip().splitlines()  # the fourth block: its output
    assert len(quoted) == 2 and all(line.strip() in [o.strip() for o in out.splitlines()] for line in quoted), quoted
    assert "peak held by running requests 801 blocks (100% of the pool); peak 91 running" in out
    assert "4 preemptions of 4 requests" in out
    base = ok(*args[:-4], *args[-2:])
    rows = {line.split("  ")[0]: line.split() for line in base.splitlines()}
    assert rows["TTFT"][3:9] == ["1.63", "s", "1.51", "s", "-", "1.81"]
    assert "peak held by running requests 701 blocks" in base
    for figure in ("TTFT p50 1.63 s (band 1.51-1.81 s) and peaks at 701 of its 801 blocks",
                   "(801 blocks, 91 running, 4 preemptions)", "3.55 s after the parent's arrival, against 1.79 s"):
        assert figure in " ".join(section.split()), figure


def test_sglang_samples_on_a_hybrid_model_are_refused_with_full_semantics_served():
    # SGLang's hybrid (sliding-window) tree serving a group is not checked against SGLang: refused,
    # and served over full attention when asked for
    t = one_request(4000, 3, block_size=16)
    with pytest.raises(ConfigError, match="not simulated on a hybrid model's layer groups .* --kv-semantics full"):
        simulate(t, model="gpt-oss-120b", gpu="H200", tp=8, engine_style="sglang", capacity="40GiB", n=2)
    r = simulate(t, model="gpt-oss-120b", gpu="H200", tp=8, engine_style="sglang", capacity="40GiB", n=2,
                 kv_semantics="full")
    assert r.samples["prefill_only_requests"] == 1 and r.finished.all()
