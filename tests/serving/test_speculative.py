"""Speculative decoding: the acceptance model (serving/speculative.py) and the kernel's schedule
(kernel/vllm.c, batch.c): 1 + k tokens a decode step, the drafter's lookahead slots, accepted
tokens out together, rejected ones taken back."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sim_cases import ONE_SECOND, small_traces, trace_of

from kvreplay.errors import ConfigError
from kvreplay.serving.simulate import simulate
from kvreplay.serving.speculative import expected_tokens_per_step, resolve


def run(t, capacity=100, **spec):
    return simulate(t, capacity=capacity, time_model=ONE_SECOND, compare_sequential=False, **spec)


# ---- the acceptance model ----

def test_expected_tokens_per_step_by_hand():
    # k = 2, conditional rates 0.8 and 0.6: 1 + 0.8 + 0.8 x 0.6
    assert expected_tokens_per_step([0.8, 0.6]) == pytest.approx(2.28)
    assert resolve("ngram", 2, acceptance="0.8,0.6").expected_tokens() == pytest.approx(2.28)
    # one rate for every position: 1 + 0.5 + 0.25 + 0.125
    assert resolve("eagle", 3, acceptance="0.5").acceptance == (0.5, 0.5, 0.5)
    assert resolve("eagle", 3, acceptance="0.5").expected_tokens() == pytest.approx(1.875)
    assert expected_tokens_per_step([]) == 1.0


def test_published_mtp_rates_for_deepseek_v3_cite_the_paper():
    s = resolve("mtp", 2, model="DeepSeek-V3")
    assert s.acceptance[0] == 0.875  # the report's 85-90%, its middle
    assert s.acceptance[1] == pytest.approx(0.3807 / 0.7694)
    assert "2412.19437" in s.source and "41044" in s.source
    d = s.to_dict()
    assert d["expected_tokens_band"]["low"] == pytest.approx(1 + 0.85 + 0.85 * 0.3807 / 0.7694)
    assert d["expected_tokens_band"]["high"] == pytest.approx(1 + 0.90 + 0.90 * 0.3807 / 0.7694)
    assert s.lookahead == 2  # vllm.py num_lookahead_tokens: k for MTP


def test_vllm_per_position_figures_become_conditional_rates():
    # vLLM prints the fraction of drafts accepted through position p; the model keeps their ratios,
    # so the published products come back
    s = resolve("ngram", 5)
    assert np.cumprod(s.acceptance) == pytest.approx([0.81, 0.74, 0.70, 0.68, 0.66])
    assert s.lookahead == 0  # n-gram proposes on the CPU: no lookahead slots
    # positions beyond the source repeat its last conditional rate
    longer = resolve("ngram", 7)
    assert longer.acceptance[5] == longer.acceptance[6] == pytest.approx(0.66 / 0.68)


@pytest.mark.parametrize("args, message", [
    (dict(speculative="medusa", k=2), "unknown method"),
    (dict(speculative="eagle", k=0), "from 1 to"),
    (dict(speculative="eagle", k=None), "needs num_speculative_tokens"),
    (dict(speculative=None, k=2), "add speculative"),
    (dict(speculative="mtp", k=2, model="Llama-3.1-70B"), "no multi-token prediction module"),
    (dict(speculative="draft:", k=2), "needs the draft model"),
    (dict(speculative="draft:Llama-3.1-70B", k=2, model="Llama-3.1-70B"), "the target model itself"),
    (dict(speculative="draft:no-such-model", k=2), "unknown model"),
    (dict(speculative="eagle", k=3, acceptance="0.9,0.8"), "2 rates for 3"),
    (dict(speculative="eagle", k=2, acceptance="0.9,1.2"), r"in \[0, 1\]"),
    (dict(speculative="eagle", k=2, acceptance="a,b"), "comma-separated"),
    (dict(speculative="draft:Llama-3.2-1B-Instruct", k=2), "no published acceptance"),
])
def test_refusals_name_the_argument(args, message):
    with pytest.raises(ConfigError, match=message):
        resolve(args["speculative"], args["k"], model=args.get("model"), acceptance=args.get("acceptance"))


# ---- the kernel's schedule ----

def test_all_accepted_outputs_one_plus_k_tokens_a_step():
    # prompt 8 tokens, 10 outputs, 1 s a step: the prefill gives token 1 at 1 s, then 3 steps of
    # 1 + 2 tokens give tokens 2-4, 5-7, 8-10: finished at 4 s (10 s without speculation)
    t = trace_of((["a", "b"], 8, 0, 10))
    assert run(t).finish_s[0] == 10.0
    r = run(t, speculative="ngram", num_speculative_tokens=2, acceptance="1")
    assert r.first_token_s[0] == 1.0 and r.finish_s[0] == 4.0
    m = r.speculative["measured"]
    assert (m["verification_steps"], m["drafted_tokens"], m["accepted_tokens"]) == (3, 6, 6)
    assert m["tokens_per_step"] == 3.0


def test_the_last_step_outputs_only_what_is_left():
    # 4 outputs, k = 2, all accepted: token 1 at 1 s, tokens 2-4 at 2 s (3 of the 3 the step gives)
    t = trace_of((["a"], 4, 0, 4))
    r = run(t, speculative="ngram", num_speculative_tokens=2, acceptance="1")
    assert r.finish_s[0] == 2.0
    # 3 outputs: the step verifies 2 drafts, both accepted, one token more than is asked is dropped
    r = run(trace_of((["a"], 4, 0, 3)), speculative="ngram", num_speculative_tokens=2, acceptance="1")
    assert r.finish_s[0] == 2.0 and r.speculative["measured"]["accepted_tokens"] == 2


def test_acceptance_zero_is_the_plain_token_schedule_plus_the_lookahead_kv():
    reqs = [(["a", "b"], 8, 0, 10), (["a", "c"], 8, 500, 7), (["d"], 4, 700, 12)]
    t = trace_of(*reqs)
    plain = run(t)
    for method, lookahead in (("ngram", 0), ("eagle", 3)):
        r = run(t, speculative=method, num_speculative_tokens=3, acceptance="0")
        assert np.array_equal(r.first_token_s, plain.first_token_s)
        assert np.array_equal(r.finish_s, plain.finish_s)
        assert r.counters["steps"] == plain.counters["steps"]
        assert r.speculative["measured"]["accepted_tokens"] == 0
        # each decoding request holds the KV of its 1 + k scheduled tokens and its lookahead slots:
        # request 3 (4 prompt tokens, 12 outputs) at its last step holds 4 + 10 + 1 + 3 + lookahead
        # tokens, 5 blocks of 4 without lookahead, 5 with 3 more (19 + 3 = 21 tokens: 6 blocks)
        assert r.counters["peak_held_blocks"] >= plain.counters["peak_held_blocks"]
    ngram = run(trace_of((["d"], 4, 0, 12)), speculative="ngram", num_speculative_tokens=3, acceptance="0")
    eagle = run(trace_of((["d"], 4, 0, 12)), speculative="eagle", num_speculative_tokens=3, acceptance="0")
    alone = run(trace_of((["d"], 4, 0, 12)))
    # alone: 4 + 11 tokens in KV at the last step (15: 4 blocks); ngram: the step also holds its 3
    # drafts (4 + 10 + 4 = 18: 5 blocks); eagle: and 3 lookahead slots (21: 6 blocks)
    assert (alone.counters["peak_held_blocks"], ngram.counters["peak_held_blocks"],
            eagle.counters["peak_held_blocks"]) == (4, 5, 6)


def test_the_token_budget_counts_the_verified_tokens():
    # budget 4 tokens a step, k = 3: a decoding request's verification (1 + 3 tokens) takes the
    # whole budget, so the waiting request is not admitted beside it (running requests first)
    t = trace_of((["a"], 4, 0, 9), (["b"], 4, 0, 9))
    from kvreplay.serving.simulate import Scheduler

    sched = Scheduler(style="vllm", max_num_batched_tokens=4)
    r = simulate(t, capacity=100, time_model=ONE_SECOND, compare_sequential=False, scheduler=sched,
                 speculative="ngram", num_speculative_tokens=3, acceptance="1")
    m = r.speculative["measured"]
    assert m["drafted_tokens"] == 3 * m["verification_steps"]  # every verification had its 3 drafts
    # request 1: its prompt (step 1, token 1 at 1 s), then 2 verifications (tokens 2-5, 6-9): done
    # at 3 s; only then request 2 starts: prompt at 4 s, verifications at 5 and 6 s
    assert r.counters["steps"] == 6
    assert r.finish_s.tolist() == [3.0, 6.0]
    assert r.first_token_s.tolist() == [1.0, 4.0]


def test_acceptances_are_seeded_per_request():
    reqs = [(["a", "b"], 8, 0, 40), (["c"], 4, 0, 40), (["d"], 4, 100, 40)]
    t = trace_of(*reqs)
    kw = dict(speculative="eagle", num_speculative_tokens=2, acceptance="0.7,0.5")
    a, b = run(t, **kw), run(t, **kw)
    assert np.array_equal(a.finish_s, b.finish_s)
    # request 1 alone draws the same acceptances as beside the others: its output steps are the same
    alone = run(trace_of(reqs[0]), **kw)
    assert alone.finish_s[0] - alone.first_token_s[0] == pytest.approx(a.finish_s[0] - a.first_token_s[0])
    c = run(t, seed=1, **kw)
    assert not np.array_equal(c.finish_s, a.finish_s)


def test_measured_tokens_per_step_converge_on_the_expected():
    t = trace_of(*[([f"r{i}"], 4, 10 * i, 200) for i in range(20)])
    r = run(t, capacity=10_000, speculative="eagle", num_speculative_tokens=2, acceptance="0.8,0.6")
    m = r.speculative["measured"]
    assert m["tokens_per_step"] == pytest.approx(2.28, abs=0.05)
    assert m["accepted_at_position"] == pytest.approx([0.8, 0.48], abs=0.03)


def test_refused_where_it_cannot_apply():
    t = trace_of((["a"], 4, 0, 4))
    with pytest.raises(ConfigError, match="vLLM scheduler style"):
        simulate(t, capacity=100, time_model=ONE_SECOND, engine_style="sglang", speculative="ngram",
                 num_speculative_tokens=2, acceptance="0.5")


# ---- the draft's cost and budget ----

def _verify_agg(c: int, m: int):
    from kvreplay.serving.timing.packed import AGG, NUM_AGG

    agg = np.zeros(NUM_AGG)
    agg[AGG.AGG_DECODE_REQS] = 1
    agg[AGG.AGG_SPEC_TOKENS] = m - 1
    agg[AGG.AGG_DECODE_CTX] = agg[AGG.AGG_ACTIVE_KV] = agg[AGG.AGG_TOUCHED_FULL] = c + m
    agg[AGG.AGG_KEYS_FULL] = m * c + m * (m + 1) // 2
    return agg


def _decode_agg(ctx: int):
    from kvreplay.serving.timing.packed import AGG, NUM_AGG

    agg = np.zeros(NUM_AGG)
    agg[AGG.AGG_DECODE_REQS] = 1
    agg[AGG.AGG_DECODE_CTX] = agg[AGG.AGG_ACTIVE_KV] = agg[AGG.AGG_TOUCHED_FULL] = agg[AGG.AGG_KEYS_FULL] = ctx
    return agg


def test_a_verification_step_and_the_eagle_head_priced_by_hand():
    # one request, prompt 8 tokens, 3 outputs, k = 2, nothing accepted: two verifications (over 8
    # and 9 computed tokens, 3 query tokens each), each followed by the head's 2 passes, each pass
    # one layer of Llama-3.1-8B's 32 (1/32 of a plain decode step over the same KV)
    from kvreplay.serving.timing import load_time_model, packed
    from kvreplay.serving.timing.packed import step_seconds

    tm = load_time_model("roofline-raw", model="Llama-3.1-8B", gpu="H100")
    t = trace_of((["a", "b"], 8, 0, 3))
    r = simulate(t, capacity=100, time_model=tm, model="Llama-3.1-8B", compare_sequential=False,
                 speculative="eagle", num_speculative_tokens=2, acceptance="0")
    p = packed(tm)
    want = sum(step_seconds(p, _verify_agg(c, 3)) + 2 * step_seconds(p, _decode_agg(c + 3)) / 32 for c in (8, 9))
    assert r.finish_s[0] - r.first_token_s[0] == pytest.approx(want, rel=1e-9)
    assert r.speculative["measured"]["draft_s"] == pytest.approx(
        sum(2 * step_seconds(p, _decode_agg(c + 3)) / 32 for c in (8, 9)), abs=2e-6)
    # the verification of 3 tokens costs more than a plain decode step over the same KV
    assert step_seconds(p, _verify_agg(8, 3)) > step_seconds(p, _decode_agg(9))


def test_a_draft_model_is_priced_by_its_own_roofline_and_takes_a_slot_of_the_budget():
    from kvreplay.serving.timing import load_time_model, packed
    from kvreplay.serving.timing.packed import step_seconds

    t = trace_of((["a", "b"], 8, 0, 3))
    r = simulate(t, capacity=100, time_model="roofline-raw", model="Llama-3.1-8B", gpu="H100",
                 compare_sequential=False, speculative="draft:Llama-3.2-1B-Instruct", num_speculative_tokens=2,
                 acceptance="0")
    target = packed(load_time_model("roofline-raw", model="Llama-3.1-8B", gpu="H100"))
    draft = packed(load_time_model("roofline-raw", model="Llama-3.2-1B-Instruct", gpu="H100"))
    want = sum(step_seconds(target, _verify_agg(c, 3)) + 2 * step_seconds(draft, _decode_agg(c + 3)) for c in (8, 9))
    assert r.finish_s[0] - r.first_token_s[0] == pytest.approx(want, rel=1e-9)
    # the input budget: a step of 4 tokens leaves 3 for a request's tokens (1 drafting slot):
    # a 7-token prompt takes 3 + 3 + 1 tokens, three steps (two without the draft's slot)
    from kvreplay.serving.simulate import Scheduler

    sched = Scheduler(style="vllm", max_num_batched_tokens=4)
    kw = dict(capacity=100, time_model=ONE_SECOND, compare_sequential=False, scheduler=sched)
    p7 = trace_of((["a", "b"], 7, 0, 1))
    assert simulate(p7, **kw).first_token_s[0] == 2.0
    with_draft = simulate(p7, model="Llama-3.1-8B", speculative="draft:Llama-3.2-1B-Instruct",
                          num_speculative_tokens=2, acceptance="0.5", **kw)
    assert with_draft.first_token_s[0] == 3.0


# ---- the command line ----

@pytest.fixture
def small_trace(tmp_path):
    from conftest import jsonl, write

    rows = [{"timestamp": 100 * i, "input_length": 1000, "output_length": 30, "hash_ids": [i, i + 1]} for i in range(6)]
    return write(tmp_path, "t.jsonl", jsonl(*rows))


@pytest.mark.parametrize("flags, message", [
    (["--num-speculative-tokens", "2"], "add speculative"),
    (["--acceptance", "0.5"], "add speculative"),
    (["--speculative", "eagle"], "needs num_speculative_tokens"),
    (["--speculative", "medusa", "--num-speculative-tokens", "2"], "unknown method 'medusa'"),
    (["--speculative", "ngram", "--num-speculative-tokens", "2", "--acceptance", "0.5,2"], r"in \[0, 1\]"),
    (["--speculative", "ngram", "--num-speculative-tokens", "2", "--acceptance", "0.5", "--engine-style", "sglang"],
     "vLLM scheduler style"),
    (["--speculative", "mtp", "--num-speculative-tokens", "2", "--model", "Llama-3.1-8B", "--gpu", "H100"],
     "no multi-token prediction module"),
])
def test_the_flags_are_refused_where_they_cannot_apply(small_trace, flags, message):
    from test_cli import fails

    err = fails("simulate", small_trace, "--capacity", "100", "--time-model", "instant", *flags)
    assert re.search(message, err), err


def test_the_flags_do_not_exist_elsewhere(small_trace):
    from test_cli import kv

    r = kv("simulate", small_trace, "--capacity", "100", "--time-model", "instant", "--speculative", "ngram",
           "--num-speculative-tokens", "0")
    assert r.returncode == 2 and b"--num-speculative-tokens: must be >= 1, got 0" in r.stderr

    r = kv("run", small_trace, "--speculative", "ngram")
    assert r.returncode == 2 and b"--speculative" in r.stderr


def test_the_summary_states_the_acceptance_and_the_tpot_change(small_trace):
    from test_cli import ok

    out = ok("simulate", small_trace, "--model", "Llama-3.1-8B", "--gpu", "H100", "--speculative", "ngram",
             "--num-speculative-tokens", "2", "--acceptance", "0.8,0.6")
    assert "speculative ngram, k=2: conditional acceptance per position 0.800, 0.600 (given (--acceptance)); " \
           "expected 2.280 tokens per verification step" in out
    assert re.search(r"measured \d\.\d{3} tokens per verification step over \d+ of them", out)
    assert re.search(r"TPOT p50 [\d.]+ ms \[[\d.]+-[\d.]+\] with speculation, [\d.]+ ms \[[\d.]+-[\d.]+\] without", out)
    assert "drafter: not priced: vLLM's n-gram proposer is a lookup on the host CPU" in out


def test_the_drafter_takes_its_weights_and_kv_out_of_the_pool():
    # Llama-3.1-70B on 4 x H100 at 512-token blocks: 41,651,524,018 bytes left for KV per GPU,
    # 81,920 KV bytes per token per GPU (80 layers): 993 blocks. An EAGLE head as one layer: its
    # weights (35,310,407,680 / 80 = 441,380,096 bytes per GPU) out, its KV (1,024 bytes a token)
    # in: floor((41,651,524,018 - 441,380,096) / (82,944 x 512)) = 970
    from kvreplay.serving.config import resolve as resolve_sizes
    from kvreplay.serving.speculative import pool_with_drafter

    src = resolve_sizes(None, block_size=512, model="Llama-3.1-70B", gpu="H100", tp=4).capacity_source
    assert (src["blocks"], src["kv_bytes_available"], src["weight_bytes_per_gpu"]) == (993, 41651524018, 35310407680)
    eagle = pool_with_drafter(resolve("eagle", 3, model="Llama-3.1-70B"), src, "bf16", "bf16")
    assert eagle[0] == (41651524018 - 441380096) // (82944 * 512) == 970
    assert pool_with_drafter(resolve("ngram", 3, acceptance="0.5"), src, "bf16", "bf16") is None
    # a draft model: Llama-3.2-1B-Instruct's weights / 4 and its KV per token per GPU join (16
    # layers x 2 of its 8 KV heads per GPU x 64 x 2 (K and V) x 2 bytes = 8,192)
    draft = pool_with_drafter(resolve("draft:Llama-3.2-1B-Instruct", 3, acceptance="0.5"), src, "bf16", "bf16")
    w, kv = draft[1]["drafter_weight_bytes_per_gpu"], draft[1]["drafter_kv_bytes_per_token_per_gpu"]
    assert kv == 8192
    assert draft[0] == int((41651524018 - w) // ((81920 + kv) * 512)) < 970
    # the run uses it
    t = trace_of((["a"], 4, 0, 4), block_size=512)
    r = simulate(t, model="Llama-3.1-70B", gpu="H100", tp=4, time_model="roofline-raw", compare_sequential=False,
                 speculative="eagle", num_speculative_tokens=3, acceptance="0.5")
    assert r.capacity_blocks == 970 and r.speculative["pool"]["blocks_without_drafter"] == 993


def test_a_request_whose_last_verification_cannot_fit_is_rejected():
    # 3 blocks of 4 tokens: a prompt of 8 and 4 outputs holds 11 tokens at its last token (3
    # blocks), so it runs without speculation; with EAGLE k=2 its last verification holds 11 + 2
    # drafts + 2 lookahead slots = 15 tokens (4 blocks): it could never run, and is rejected
    t = trace_of((["a", "b"], 8, 0, 4))
    assert run(t, capacity=3).finish_s[0] == 4.0
    r = run(t, capacity=3, speculative="eagle", num_speculative_tokens=2, acceptance="0.5")
    assert r.num_rejected == 1 and np.isnan(r.finish_s[0])
    # n-gram has no lookahead: 11 + 2 = 13 tokens, 4 blocks as well; 4 blocks hold it
    assert run(t, capacity=3, speculative="ngram", num_speculative_tokens=2, acceptance="0.5").num_rejected == 1
    assert run(t, capacity=4, speculative="ngram", num_speculative_tokens=2, acceptance="0.5").num_rejected == 0
    # admission with the lookahead: 8 prompt tokens + 2 slots = 3 blocks; 2 free blocks and a
    # whole sequence of 2 blocks (8 tokens, 1 output) still waits for the third
    one = trace_of((["a", "b"], 8, 0, 1))
    assert run(one, capacity=2, speculative="eagle", num_speculative_tokens=2, acceptance="0.5").num_rejected == 1
    assert run(one, capacity=3, speculative="eagle", num_speculative_tokens=2, acceptance="0.5").finish_s[0] == 1.0


@settings(max_examples=60, deadline=None)
@given(trace=small_traces(), capacity=st.integers(3, 30), method=st.sampled_from(["ngram", "eagle", "draft"]),
       k=st.integers(1, 4), rate=st.sampled_from(["0", "0.5", "1"]), budget=st.sampled_from([4, 8, 64]))
def test_every_request_is_served_or_rejected_under_pressure(trace, capacity, method, k, rate, budget):
    # small pools, small budgets: preemptions, lookahead at admission, drafting slots; the run's
    # own checks (check_invariants, tokens conserved) hold, and every request ends
    from kvreplay.serving.simulate import Scheduler

    spec = "draft:Llama-3.2-1B-Instruct" if method == "draft" else method
    r = simulate(trace, capacity=capacity, time_model=ONE_SECOND, compare_sequential=False,
                 scheduler=Scheduler(style="vllm", max_num_batched_tokens=budget), speculative=spec,
                 num_speculative_tokens=k, acceptance=rate)
    assert r.num_finished + r.num_rejected == r.num_requests
    m = r.speculative["measured"]
    if rate == "0":
        assert m["accepted_tokens"] == 0
    if rate == "1":
        assert m["accepted_tokens"] <= m["drafted_tokens"]
