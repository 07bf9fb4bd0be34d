"""The miss account (engine/misses.py, engine/account.py): every request's prompt tokens = its hit
tokens + its missed tokens by cause, exactly; hand-worked causes for each rule; the two engines
agree on every block's cause for every policy (hypothesis); lru's one-pass account equals lru
replays; and on the real traces the account adds up for every request."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kvreplay
from kvreplay.engine.account import sample_points, stranded
from kvreplay.engine.misses import CAUSES
from kvreplay.errors import ConfigError
from kvreplay.policies.registry import POLICIES
from conftest import CLAUDE_CODE, MOONCAKE, shared_path
from strategies import accounts_agree, requests

NAMES = sorted(POLICIES)
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def causes(report, i):
    """Request i's measured causes with tokens, the zero ones left out."""
    return {c: t for c, t in report.to_dict()["per_request"][i]["misses"].items() if t}



def test_gone_kept_for_evicted_accesses_only(engine):
    # lru of 3 blocks over a cycle of 4 (one block per request): from request 4 on, every access
    # is evicted, the block having left at the request before (which evicted the least recent).
    # 196 of 200 accesses evicted: the compiled record of `gone` (a sixteenth of the accesses at
    # first) grows five times on the way, in the middle of the stranded samples' spans.
    trace = kvreplay.Trace.from_requests([([i % 4], 16) for i in range(200)])
    r = kvreplay.replay(trace, "lru", 3, 16, engine=engine)
    evicted = CAUSES.index("evicted") + 1
    assert r.misses.cause.tolist() == [1] * 4 + [evicted] * 196
    assert r.misses.evicted_gone.tolist() == list(range(3, 199))
    assert r.misses.gone.tolist() == [-1] * 4 + list(range(3, 199))
    assert r.misses.evicted["gone_requests"] == {"p50": 1.0, "p90": 1.0}

def test_hand_worked_lru(engine):
    # lru, 2 blocks of 4 tokens.
    # r0 [a b c] L=12: all first uses (12 tokens); c's admission evicts a: {b, c}.
    # r1 [a b] L=8: a is missing (seen in r0, evicted in r0: evicted, gone since request 0); b is in
    #    the cache behind it: behind a hole. a evicts b (least recent), b evicts c: {a, b}.
    # r2 [c] L=3: seen in r0, evicted during r1: evicted, gone since request 1. c evicts a: {b, c}.
    # r3 [a b d] L=10: a evicted during r2 (gone since 2), b behind it, d a first use with the
    #    last 2 tokens. a evicts b, b evicts c, d evicts a: {b, d}.
    trace = kvreplay.Trace.from_requests([(list("abc"), 12), (list("ab"), 8), (list("c"), 3), (list("abd"), 10)])
    r = kvreplay.replay(trace, "lru", 2, 4, engine=engine)
    assert r.hit_tokens.tolist() == [0, 0, 0, 0]
    assert causes(r, 0) == {"first_use": 12}
    assert causes(r, 1) == {"evicted": 4, "behind_hole": 4}
    assert causes(r, 2) == {"evicted": 3}
    assert causes(r, 3) == {"evicted": 4, "behind_hole": 4, "first_use": 2}
    assert r.misses.gone.tolist() == [-1, -1, -1, 0, -1, 1, 2, -1, -1]
    assert r.misses.totals() == {"first_use": 14, "evicted": 11, "behind_hole": 8, "partial_block": 0,
                                 "namespace": 0, "layer_groups": 0, "concurrency": 0}
    # stranded after each request: {b, c} (a gone: both unreachable), {a, b}, {b, c}, {b, d}
    assert r.misses.stranded["request"] == [0, 1, 2, 3]
    assert r.misses.stranded["stranded_blocks"] == [2, 0, 2, 2]
    assert r.misses.stranded["resident_blocks"] == [2, 2, 2, 2]
    # the per-request table has a column per measured cause
    cols = r.request_columns()
    assert cols["miss_evicted_tokens"].tolist() == [0, 4, 3, 4]
    assert "miss_namespace_tokens" not in cols
    assert set(r.misses.not_measured) == {"namespace", "layer_groups", "concurrency"}


def test_tokens_past_the_hash_ids_are_a_partial_block(engine):
    # Full blocks only (as the Claude Code corpus): L = 6 with one 4-token hash id: 2 tokens have no id.
    trace = kvreplay.Trace.from_requests([(list("x"), 6), (list("x"), 6)])
    r = kvreplay.replay(trace, "lru", 4, 4, engine=engine)
    assert causes(r, 0) == {"first_use": 4, "partial_block": 2}
    assert r.hit_tokens.tolist() == [0, 4]
    assert causes(r, 1) == {"partial_block": 2}


def test_vllm_never_serves_the_last_block(engine):
    # vllm, 4-token blocks: a prompt of 8 tokens hits at most (8 - 1) // 4 = 1 block; block 1 holds
    # the last token, so it is a partial block in both requests (vLLM recomputes the last token).
    trace = kvreplay.Trace.from_requests([(list("ab"), 8), (list("ab"), 8)])
    r = kvreplay.replay(trace, "vllm", 8, 4, engine=engine)
    assert causes(r, 0) == {"first_use": 4, "partial_block": 4}
    assert r.hit_tokens.tolist() == [0, 4]
    assert causes(r, 1) == {"partial_block": 4}
    # the spec's lru serves the same block: no partial block
    assert kvreplay.replay(trace, "lru", 8, 4, engine=engine).hit_tokens.tolist() == [0, 8]


def test_namespace(engine):
    # blocks 0 (a1) and 1 (a2) are one content under two namespaces; b1 follows a1.
    trace = kvreplay.Trace.from_requests([(["a1", "b1"], 8), (["a2", "b2"], 8), (["a2", "b2"], 8)])
    content = np.array([0, 1, 0, 2])  # a1 b1 a2 b2 (ids in order of first appearance)
    r = kvreplay.replay(trace, "lru", 8, 4, engine=engine, block_content=content)
    assert causes(r, 0) == {"first_use": 8}
    assert causes(r, 1) == {"namespace": 4, "first_use": 4}  # a2's content is cached as a1; b2 is new content
    assert r.hit_tokens.tolist() == [0, 0, 8]
    assert "namespace" not in r.misses.not_measured
    with pytest.raises(ConfigError, match="content id"):
        kvreplay.replay(trace, "lru", 8, 4, block_content=np.array([0, 1]))


def test_stranded_is_transitive():
    # chain a -> b -> c -> d; resident {b, c, d, x}: a gone, so b, c and d are unreachable.
    trace = kvreplay.Trace.from_requests([(list("abcd"), 16), (list("x"), 4)])
    mask = np.array([False, True, True, True, True])
    assert stranded(trace, mask) == 3
    assert stranded(trace, np.array([True, True, False, True, True])) == 1  # only d, behind c
    assert sample_points(10, 4).tolist() == [1, 4, 7, 9] and sample_points(3, 64).tolist() == [0, 1, 2]


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(requests(max_requests=30), st.data())
def test_stranded_without_the_core_counts_as_the_core(case, data):
    from kvreplay.engine import account

    trace = kvreplay.Trace.from_requests(case[0])
    mask = np.array(data.draw(st.lists(st.booleans(), min_size=trace.num_blocks, max_size=trace.num_blocks)),
                    dtype=bool)
    after = data.draw(st.one_of(st.none(), st.integers(0, len(trace) - 1))) if len(trace) else None
    compiled = stranded(trace, mask, after)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(account.native, "available", lambda: False)
        assert stranded(trace, mask, after) == compiled


@st.composite
def with_contents(draw):
    reqs, block_size = draw(requests(max_requests=40))
    trace = kvreplay.Trace.from_requests(reqs)
    kinds = draw(st.integers(1, max(1, trace.num_blocks)))
    content = draw(st.lists(st.integers(0, kinds - 1), min_size=trace.num_blocks, max_size=trace.num_blocks))
    return trace, block_size, np.array(content, dtype=np.int64)


@pytest.mark.parametrize("name", NAMES)
@SETTINGS
@given(case=with_contents(), capacity=st.one_of(st.integers(1, 12), st.sampled_from([20, 64])))
def test_engines_agree_on_the_account(name, case, capacity):
    trace, block_size, content = case
    out = []
    for engine in ("reference", "compiled"):
        try:
            out.append(kvreplay.replay(trace, name, capacity, block_size, engine=engine, block_content=content,
                                       stranded_samples=5))
        except ConfigError:
            out.append(None)
    ref, comp = out
    assert (ref is None) == (comp is None)
    if ref is None:
        return
    accounts_agree(ref, comp)
    for r in (ref, comp):  # every request adds up (replay checks it too: here by hand)
        assert (r.hit_tokens + r.misses.tokens.sum(axis=1)).tolist() == trace.input_length.tolist()


@SETTINGS
@given(case=requests(), capacities=st.lists(st.integers(1, 40), min_size=1, max_size=4),
       warmup=st.sampled_from([0.0, 0.3]))
def test_lru_in_one_pass_equals_lru_replays(case, capacities, warmup):
    from kvreplay.analysis.misses import column, lru_account
    from kvreplay.engine.replay import warmup_count

    reqs, block_size = case
    trace = kvreplay.Trace.from_requests(reqs)
    rows = lru_account(trace, capacities, block_size, warmup_count(len(trace), warmup))
    for c, row in zip(capacities, rows):
        r = kvreplay.replay(trace, "lru", c, block_size, warmup_fraction=warmup)
        assert row["total_hit_tokens"] == r.total_hit_tokens
        totals = r.misses.totals()
        for cause in ("first_use", "evicted", "behind_hole", "partial_block"):
            assert row[column(cause)] == totals[cause], (c, cause)


def test_sweep_rows_carry_the_account():
    trace = kvreplay.Trace.from_requests([(list("abc"), 12), (list("ab"), 8), (list("c"), 3), (list("abd"), 10)])
    rows = kvreplay.sweep(trace, [2], ["lru", "fifo"], 4).rows()
    lru = next(r for r in rows if r["policy"] == "lru")
    assert (lru["miss_first_use_tokens"], lru["miss_evicted_tokens"], lru["miss_behind_hole_tokens"]) == (14, 11, 8)
    assert lru["miss_namespace_tokens"] is None and lru["miss_concurrency_tokens"] is None
    for r in rows:
        missed = sum(r[f"miss_{c}_tokens"] or 0 for c in CAUSES)
        assert r["total_hit_tokens"] + missed == r["total_prompt_tokens"]
    point = kvreplay.mrc(trace, [2], 4)["points"][0]
    assert point["miss_evicted_tokens"] == 11 and point["miss_behind_hole_tokens"] == 8


REAL = [(MOONCAKE / "conversation_trace.jsonl", (1024, 4096, 16384)),
        (MOONCAKE / "synthetic_trace.jsonl", (1024, 4096, 16384)),
        (CLAUDE_CODE, (256, 1024, 2048))]


@pytest.mark.parametrize("path, capacities", REAL, ids=["conversation", "synthetic", "claude-code"])
@pytest.mark.parametrize("policy", ["s3fifo", "lru", "vllm", "radix"])
def test_real_traces_add_up(path, capacities, policy):
    trace = kvreplay.load_trace(shared_path(path))
    for capacity in capacities:
        comp = kvreplay.replay(trace, policy, capacity)  # replay checks every request adds up
        assert comp.misses.totals()["first_use"] > 0
        assert comp.total_hit_tokens + sum(comp.misses.totals().values()) == comp.total_prompt_tokens
        if capacity == capacities[1] or path == CLAUDE_CODE:  # the reference engine is slower: one capacity
            ref = kvreplay.replay(trace, policy, capacity, engine="reference")
            accounts_agree(ref, comp)


def test_layer_groups_by_hand(engine):
    # vLLM's hybrid manager, full attention + a sliding window of 5 tokens (1 block of 4), retention
    # 0: the window caches only the block ending at (P - 1) // 4. r1 [a b c d] 16 tokens: a, b, c
    # first uses, d holds the last token (partial block). Full attention then has a-d, the window
    # only c. r2 [a b c d e] 20 tokens: full attention could serve 4 blocks, the window's last
    # cached block is c, so the hit is 3 blocks (12 tokens): d is the layer groups' (4 tokens); e
    # holds the last token (partial block).
    from kvreplay.hybrid.coordinator import Group

    trace = kvreplay.Trace.from_requests([(list("abcd"), 16), (list("abcde"), 20)])
    r = kvreplay.replay(trace, "vllm", 100, 4, kv_groups=[Group("full"), Group("sliding_window", window=5)],
                        engine=engine)
    assert r.hit_tokens.tolist() == [0, 12]
    assert causes(r, 0) == {"first_use": 12, "partial_block": 4}
    assert causes(r, 1) == {"layer_groups": 4, "partial_block": 4}
    assert "layer_groups" not in r.misses.not_measured and "namespace" in r.misses.not_measured


@st.composite
def hybrid_case(draw):
    from kvreplay.hybrid.coordinator import Group
    from strategies import chained_requests

    reqs, bs = draw(chained_requests())
    other = draw(st.sampled_from(["sliding_window", "mamba", "chunked_local"]))
    groups = [Group("full"), Group(other, window=draw(st.integers(1, 6 * bs)) if other == "sliding_window" else None,
                                   chunk=draw(st.integers(1, 4)) * bs if other == "chunked_local" else None)]
    return kvreplay.Trace.from_requests(reqs), bs, draw(st.permutations(groups)), draw(st.integers(1, 80))


@SETTINGS
@given(case=hybrid_case())
def test_engines_agree_on_the_hybrid_account(case):
    trace, bs, groups, capacity = case
    ref = kvreplay.replay(trace, "vllm", capacity, bs, kv_groups=groups, engine="reference")
    comp = kvreplay.replay(trace, "vllm", capacity, bs, kv_groups=groups)
    assert comp.hit_tokens.tolist() == ref.hit_tokens.tolist()
    accounts_agree(ref, comp)
    # without the window's or Mamba's rule, nothing is the layer groups'
    full = kvreplay.replay(trace, "vllm", capacity, bs, kv_groups=[g for g in groups if g.kind == "full"])
    assert full.misses.totals()["layer_groups"] == 0


@pytest.mark.parametrize("policy, lines", [
    ("s3fifo", ["first use      90,695,412  62.64%", "evicted        38,918,507  26.88%", "behind a hole      11,264   0.01%",
                "within 1x / 2x / 4x the capacity: 10.67% / 39.50% / 65.77%", "mean 1.2%, peak 4.8% of the capacity",
                "of the 26.9 points between your 10.5% and the 37.4% ceiling (4,096 blocks), 4.3 are capacity, 22.6 are "
                "the policy",
                "advice    70% of the missed tokens are first uses (content never seen before): no cache size helps them.",
                "A 2x cache (8,192 blocks) recovers 6.4 points (10.5% -> 16.9%, a replay of s3fifo at that size); 40% "
                "of the evicted tokens had a reuse distance within 2x the capacity."]),
    ("lru", ["evicted        41,130,741  28.41%", "within 1x / 2x / 4x the capacity: 0.00% / 33.64%",
             "mean 0.8%, peak 3.6% of the capacity"]),
    ("vllm", ["first use      87,489,024  60.42%", "partial block   3,241,695   2.24%", "behind a hole           0",
              "mean 0.0%, peak 0.0% of the capacity"]),
])
def test_the_documented_account_on_the_conversation_trace(policy, lines, capsys):
    # docs/metrics.md, "Why the cache missed", and docs/policies.md, "Ordering within a request"
    from kvreplay.cli import main

    path = shared_path(MOONCAKE / "conversation_trace.jsonl")
    assert main(["run", str(path), "--policy", policy, "--capacity", "4096"]) == 0
    out = capsys.readouterr().out
    for line in lines:
        assert line in out, line


def test_headroom_in_gpu_seconds(capsys):
    # run --model --gpu: each level's prefill on the serving time model, the gaps its differences;
    # more hits never cost more prefill (the ceiling hits the most here)
    from kvreplay.cli import main
    from conftest import DATA

    path = DATA / "prefix_multiblock.jsonl"
    assert main(["run", str(path), "--policy", "lru", "--capacity", "2", "--block-size", "4", "--model", "Llama-3.1-8B",
                 "--gpu", "H100", "--json", "--summary-only"]) == 0
    h = json.loads(capsys.readouterr().out)["headroom"]
    lv = h["levels"]
    assert lv["ceiling"]["prefill_gpu_seconds"] <= lv["policy"]["prefill_gpu_seconds"]
    assert h["gaps"]["capacity"]["prefill_gpu_seconds"] == pytest.approx(
        lv["belady"]["prefill_gpu_seconds"] - lv["ceiling"]["prefill_gpu_seconds"])
    assert h["gaps"]["capacity"]["tokens"] == lv["ceiling"]["hit_tokens"] - lv["belady"]["hit_tokens"]
    assert "H100" in h["cost_note"]
    assert main(["run", str(path), "--gpu", "H100"]) == 2
    assert "--gpu" in capsys.readouterr().err


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(requests(max_requests=30))
def test_scan_distances_without_the_core_are_the_cores(case):
    from kvreplay.engine import distances

    trace = kvreplay.Trace.from_requests(case[0])
    compiled = distances.scan_distances(trace).copy()
    with pytest.MonkeyPatch.context() as m:
        m.setattr(distances.native, "use_core", lambda: False)
        m.setattr(distances, "_CACHE", distances.weakref.WeakKeyDictionary())
        assert distances.scan_distances(trace).tolist() == compiled.tolist()


def test_scan_distances_by_hand():
    from kvreplay.engine.distances import scan_distances

    # a b | c a | b: a's second use saw {b} since (1 + 1 = 2); b's, {c, a} since its use (3)
    trace = kvreplay.Trace.from_requests([(list("ab"), 8), (list("ca"), 8), (list("b"), 4)])
    assert scan_distances(trace).tolist() == [-1, -1, -1, 2, 3]



@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(requests(max_requests=30), st.data())
def test_distances_at_are_the_scans(case, data):
    # distances_at (a tree of a few slots per block, renumbered when they run out) gives the one-pass
    # scan's distances at any ascending positions: with its default slots and with the fewest
    # (one more than the blocks: renumbered after nearly every access), the reference scan's
    # without the core.
    from kvreplay.engine import distances

    trace = kvreplay.Trace.from_requests(case[0])
    at = np.flatnonzero(data.draw(st.lists(st.booleans(), min_size=trace.num_accesses, max_size=trace.num_accesses)))
    fresh = distances.weakref.WeakKeyDictionary
    with pytest.MonkeyPatch.context() as m:
        m.setattr(distances, "_CACHE", fresh())
        expected = distances._CACHE.setdefault(trace, distances.scan_distances(trace))[at].tolist()
        m.setattr(distances, "_CACHE", fresh())  # not kept: distances_at computes
        for slots in (None, max(1, trace.num_blocks) + 1):
            assert distances.distances_at(trace, at, slots).tolist() == expected
        m.setattr(distances.native, "use_core", lambda: False)
        assert distances.distances_at(trace, at).tolist() == expected


def test_distances_at_by_hand():
    from kvreplay.engine.distances import distances_at

    # a b | c a | b | a, 4 slots for 3 blocks: a, b, c, a take slots 1 to 4 (a's first unmarked);
    # b's mark (request 2, after its distance 3 is read) finds them all used: renumbered b 1, c 2,
    # a 3, then b at 4. Request 3 reads a at slot 3 after the renumbering: {b} since, 2.
    trace = kvreplay.Trace.from_requests([(list("ab"), 8), (list("ca"), 8), (list("b"), 4), (list("a"), 4)])
    assert distances_at(trace, np.array([3, 4, 5]), slots=4).tolist() == [2, 3, 2]
    assert distances_at(trace, np.array([0, 5]), slots=4).tolist() == [-1, 2]

def test_a_gap_below_zero_is_said_as_what_it_gives_back():
    from kvreplay.analysis.headroom import headroom_sentence

    levels = {"ceiling": {"hit_rate": 0.374}, "served": {"hit_rate": 0.20}}
    h = {"levels": levels, "capacity_blocks": 4096,
         "gaps": {"capacity": {"points": 14.0}, "policy": {"points": 6.4}, "concurrency": {"points": -3.0}}}
    text = headroom_sentence(h)
    assert text == ("of the 17.4 points between your 20.0% and the 37.4% ceiling (4,096 blocks), 14.0 are capacity, "
                    "6.4 are the policy, concurrency gives back 3.0 (served, the cache hits more than the sequential "
                    "replay (another order of the same requests))")
    assert "-" not in text.replace("4,096", "")
