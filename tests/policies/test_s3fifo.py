"""S3FIFO, rule by rule, on tiny hand-built traces (both engines).

Notation in comments: S=[..] small queue head first, M=[x(f)] main with freq,
G=[..] ghost. Unless said otherwise block_size=1 and every request has
input_length = len(hash_ids), so hit tokens = hit blocks.
"""

from __future__ import annotations

import pytest

import kvreplay
from kvreplay.errors import ConfigError
from kvreplay.policies.s3fifo import queue_sizes
from spec_model import spec_replay
from strategies import replay_blocks


def run(requests, capacity, engine, block_size=1, **params):
    return replay_blocks("s3fifo", requests, capacity, engine, block_size, **params)


def singles(*blocks):
    """One single-block request per argument."""
    return [([b], None) for b in blocks]


def test_queue_sizes_round_half_to_even():
    # round(1.5) = 2 (int() would give 1), round(2.5) = 2, round(4.5) = 4, round(409.6) = 410 (int: 409)
    assert queue_sizes(15) == (2, 13, 13)
    assert queue_sizes(25) == (2, 23, 23)
    assert queue_sizes(45) == (4, 41, 41)
    assert queue_sizes(4096) == (410, 3686, 3686)
    assert queue_sizes(4096, 0.25) == (1024, 3072, 3072)


def test_small_cap_uses_round_not_int(engine):
    # capacity 15 -> small_cap 2. [a] [b] [a]: S=[a] then S=[a,b]; a is still in S -> hit.
    # With int(1.5) = 1, b would push a to G and the third request would miss.
    assert run(singles("a", "b", "a"), 15, engine).hit_tokens.tolist() == [0, 0, 1]


@pytest.mark.parametrize("capacity", [1, 5])
def test_empty_queue_is_a_clear_error(capacity, engine):
    # capacity 5 at ratio 0.1: round(0.5) = 0 -> no small queue; capacity 1: same. Never loops.
    with pytest.raises(ConfigError, match="small_cap 0"):
        run(singles("a"), capacity, engine)


def test_small_ratio_one_leaves_no_main_queue(engine):
    with pytest.raises(ConfigError, match="small_ratio"):
        run(singles("a"), 10, engine, small_ratio=1.0)


def test_ghost_is_not_resident(engine):
    # capacity 4, ratio 0.5: small_cap 2, main_cap 2, ghost_cap 2.
    # [a] S=[a]; [b] S=[a,b]; [c] pops a (freq 0) -> G=[a], S=[b,c]
    # [a] a is only in G: NOT resident -> 0 hits; the access moves it to M=[a(0)]
    # [a] a in M -> 1 hit
    r = run(singles("a", "b", "c", "a", "a"), 4, engine, small_ratio=0.5)
    assert r.hit_tokens.tolist() == [0, 0, 0, 0, 1]
    assert r.counters["ghost_hits"] == 1


def test_final_size_excludes_ghost(engine):
    # After [a] [b] [c]: S=[b,c], G=[a] -> final_cache_blocks = 2, not 3.
    r = run(singles("a", "b", "c"), 4, engine, small_ratio=0.5)
    assert r.final_cache_blocks == 2


def test_freq_updates_on_every_access_not_just_the_prefix(engine):
    # [a] S=[a]
    # [x, a] prefix stops at x (k=0); x admitted S=[a,x]; a is resident in S -> freq 1
    # [c] S full: pops a (freq 1) -> M=[a(1)], S=[x,c]
    # [a] a in M -> 1 hit. Updating freq only inside the prefix window would leave a at
    # freq 0, send it to G on [c], and this request would miss.
    r = run([(["a"], None), (["x", "a"], None), (["c"], None), (["a"], None)], 4, engine, small_ratio=0.5)
    assert r.hit_tokens.tolist() == [0, 0, 0, 1]
    assert r.counters["promotions"] == 1


# [a] [a]: a freq 1 in S              [b]: S=[a,b]
# [c]: pops a(1) -> M=[a(1)], S=[b,c]  [d]: pops b(0) -> G=[b], S=[c,d]
# [b]: ghost hit -> M=[a(1), b(0)]     [e]: pops c(0) -> G=[c], S=[d,e]
# [c]: ghost hit, M full: head a(1) is requeued at the tail as a(0): M=[b(0), a(0)];
#      head b(0) is evicted to G; M=[a(0), c(0)]
# [a]: a in M -> 1 hit.
SECOND_CHANCE = singles("a", "a", "b", "c", "d", "b", "e", "c", "a")


def test_main_uses_second_chance(engine):
    # Plain FIFO eviction in M, resetting freq on S->M promotion, or requeueing at the head
    # (re-popping a at once) would all evict a at the 8th request and miss the last one.
    r = run(SECOND_CHANCE, 4, engine, small_ratio=0.5)
    assert r.hit_tokens.tolist() == [0, 1, 0, 0, 0, 0, 0, 0, 1]
    assert r.counters["requeues"] == 1
    assert r.final_cache_blocks == 4  # S=[d,e], M=[a,c]


def test_freq_saturates_at_max_freq(engine):
    # max_freq 1. [a] x4: a's freq saturates at 1 (unclamped it would be 3).
    # [b] S=[a,b]; [c] a(1) -> M=[a(1)], S=[b,c]; [d] b -> G, S=[c,d]; [b] ghost hit M=[a(1), b(0)]
    # [e] c -> G; [c] ghost hit: a requeued as a(0), b evicted: M=[a(0), c(0)]
    # [f] d -> G=[b,d]; [d] ghost hit: head a(0) is evicted: M=[c(0), d(0)], G=[b,a]
    # [a] a is a ghost -> miss. Unclamped (freq 3) a would have survived both rounds and hit.
    blocks = ["a"] * 4 + ["b", "c", "d", "b", "e", "c", "f", "d", "a"]
    r = run(singles(*blocks), 4, engine, small_ratio=0.5, max_freq=1)
    assert r.hit_tokens.tolist()[-1] == 0
    assert r.hit_tokens.tolist()[:4] == [0, 1, 1, 1]
    # Same trace at max_freq 3: a enters M with freq 3 and is still resident at the end.
    r3 = run(singles(*blocks), 4, engine, small_ratio=0.5, max_freq=3)
    assert r3.hit_tokens.tolist()[-1] == 1


def test_ghost_capacity_is_main_cap_not_small_cap(engine):
    # capacity 10, ratio 0.1: small_cap 1, main_cap 9, ghost_cap 9.
    # [a] [b] [c] [d]: each pushes the previous one to G -> G=[a,b,c], S=[d]
    # [a]: ghost hit -> M=[a(0)]; [e]: d -> G; [a]: a in M -> hit.
    # With ghost_cap = small_cap = 1, a would have fallen out of G, re-entered S, been pushed
    # to G by [e], and missed.
    r = run(singles("a", "b", "c", "d", "a", "e", "a"), 10, engine)
    assert r.hit_tokens.tolist() == [0, 0, 0, 0, 0, 0, 1]


def test_ghost_freq_parameter(engine):
    # capacity 4 ratio 0.5, ghost_freq 1: a ghost-hit block enters M with freq 1.
    # [a] [b] [c]: a -> G. [a]: ghost hit -> M=[a(1)]. [b] hit in S (b freq 1).
    # [d]: S=[b,c] full, pops b(1) -> M=[a(1), b(1)]; S=[c,d]
    # [e]: pops c(0) -> G=[c]; [c]: ghost hit, M full: a(1)->a(0) tail, b(1)->b(0) tail,
    #      a(0) evicted. With ghost_freq 0, a(0) at the head would be evicted straight away;
    #      either way a goes, so look at b: it must still be resident.
    reqs = singles("a", "b", "c", "a", "b", "d", "e", "c", "b")
    assert run(reqs, 4, engine, small_ratio=0.5, ghost_freq=1).hit_tokens.tolist()[-1] == 1
    assert run(reqs, 4, engine, small_ratio=0.5, ghost_freq=1).counters["requeues"] == 2
    assert run(reqs, 4, engine, small_ratio=0.5, ghost_freq=0).counters["requeues"] == 0
    with pytest.raises(ConfigError, match="ghost_freq"):
        run(reqs, 4, engine, small_ratio=0.5, max_freq=1, ghost_freq=2)


def test_hand_worked_cases_agree_with_the_spec_oracle(engine):
    for reqs, cap, params in [
        (SECOND_CHANCE, 4, {"small_ratio": 0.5}),
        (singles("a", "b", "c", "d", "a", "e", "a"), 10, {}),
    ]:
        plain = [(ids, len(ids)) for ids, _ in reqs]
        expected, _, final = spec_replay(plain, "s3fifo", cap, 1, **params)
        r = run(reqs, cap, engine, **params)
        assert r.hit_tokens.tolist() == expected
        assert r.final_cache_blocks == final


def test_s3fifo_differs_from_lru(engine):
    # The SECOND_CHANCE trace under LRU (capacity 4): the last [a] misses (a was evicted by
    # the 8th request: a, b, c, d, e, c accesses pushed it out), while S3FIFO keeps it.
    trace = kvreplay.Trace.from_requests([(ids, len(ids)) for ids, _ in SECOND_CHANCE])
    lru = kvreplay.replay(trace, "lru", 4, 1, engine=engine)
    s3 = kvreplay.replay(trace, "s3fifo", 4, 1, engine=engine, small_ratio=0.5)
    assert lru.hit_tokens.tolist() != s3.hit_tokens.tolist()


def test_compiled_ghost_ring_matches_the_reference_queue_step_by_step():
    """The compiled ghost queue is a ring with lazy deletion and compaction (s3fifo.c); after
    every access (one single-block request at a time) its live entries, oldest first, must be the
    reference's ghost FIFO."""
    from types import SimpleNamespace

    import numpy as np

    from kvreplay.engine import driver
    from kvreplay.policies import s3fifo as s

    rng = np.random.default_rng(7)
    # capacity 4 at ratio 0.25: small 1, main 3, ghost 3 -> a ring of 2*3+2 = 8 slots.
    state = s.make_state(4, SimpleNamespace(num_blocks=12), small_ratio=0.25)
    ref = s.S3FIFO(4, small_ratio=0.25)
    ring_size = state.ghost.shape[0]
    full_before_insert = 0
    accesses = rng.integers(0, 12, 3000).astype(np.int32)
    offsets = np.arange(accesses.shape[0] + 1, dtype=np.int64)
    lengths = np.ones(accesses.shape[0], dtype=np.int64)
    for i, b in enumerate(accesses.tolist()):
        if state.meta[s.G_COUNT] == ring_size:
            full_before_insert += 1
        driver.one_request(s.POLICY, state, offsets, accesses, lengths, 1, i)  # its scan, then access(b)
        ref.access(b)
        m = state.meta
        live = []
        for k in range(m[s.G_COUNT]):
            slot = (m[s.G_HEAD] + k) % ring_size
            v = state.ghost[slot]
            if state.where[v] == s.IN_GHOST and state.ghost_slot[v] == slot:
                live.append(int(v))
        assert live == list(ref.ghost)
        assert m[s.G_SIZE] == len(ref.ghost)
        assert sorted(np.flatnonzero(s.resident_mask(state)).tolist()) == sorted(ref.resident_blocks())
    assert full_before_insert > 0  # the ring did fill up, so compaction ran


# ---- holds (pin/unpin): overlapping requests, engine/lifecycle.py ----

def lifecycle(requests, events, **params):
    """(trace, replay_lifecycle runner) for single-token blocks: input_length = len(hash_ids)."""
    from kvreplay.engine.lifecycle import replay_lifecycle

    trace = kvreplay.Trace.from_requests([(ids, len(ids)) for ids in requests])
    return trace, lambda engine: replay_lifecycle(trace, "s3fifo", 4, events, 1, engine=engine, small_ratio=0.5, **params)


def resident_ids(trace, out):
    return {b for b, r in zip(trace.original_ids, out.resident) if r}


def test_held_blocks_stay_in_s_s_grows_over_small_cap_then_drains(engine):
    # capacity 4, ratio 0.5: small_cap 2, main_cap 2, ghost_cap 2. R<i> = request i.
    # R0=[a] starts and runs: S=[a(0)], a held.
    # R1=[a] runs and finishes: 1 hit, a(1).  R2=[b] runs and finishes: S=[a(1), b(0)].
    # R3=[c] (runs, finishes): S full; its head a is held: back to the tail with freq 1 (no
    #   decrement, no requeue counted): S=[b, a]; b(0) -> G=[b]; S=[a, c].
    # R0 finishes. R4=[d]: head a(1) -> M=[a(1)] (its freq kept); S=[c, d]. promotions 1.
    # R5=[e, f, g] starts and runs: e: c -> G=[b, c], S=[d, e]; f: d -> G=[c, d] (b dropped),
    #   S=[e, f]; g: S holds only held blocks: g joins them, S=[e, f, g] (1 over small_cap),
    #   M's limit 2 - 1 = 1 and M=[a] holds 1: nothing to give up (|S| + |M| = 4).
    # R6=[h] starts: S holds only held blocks again: S=[e, f, g, h], M's limit 0, so M gives up
    #   a by second chance: a(1) -> a(0) at the tail (requeues 1), then a -> G=[d, a].
    # R7=[i] starts: e, f, g, h are held and the cache is full: refused, nothing moves.
    # R5 and R6 finish. R8=[j]: S=[e, f, g, h] drains as "while |S| >= small_cap" says:
    #   e, f -> G while S is over, then g -> G at small_cap: G=[f, g], S=[h, j], M=[].
    requests = [["a"], ["a"], ["b"], ["c"], ["d"], ["e", "f", "g"], ["h"], ["i"], ["j"]]
    events = [0, 1, -2, 2, -3, 3, -4, -1, 4, -5, 5, 6, 7, -8, -6, -7, 8, -9]
    trace, run_it = lifecycle(requests, events)
    out = run_it(engine)
    assert out.hit_blocks.tolist() == [0, 1, 0, 0, 0, 0, 0, 0, 0]
    assert out.held_blocks.tolist() == [1, 1, 1, 1, 1, 3, 1, 0, 1]
    assert out.refused.tolist() == [False] * 7 + [True, False]
    assert resident_ids(trace, out) == {"h", "j"}
    # admissions: a b c d e f g h j (i refused); evictions: b, c, d, a, e, f, g
    assert out.counters == {"admissions": 9, "promotions": 1, "ghost_hits": 0, "requeues": 1, "evictions": 7}
    assert (out.final_cache_blocks, out.held_at_end, out.refusals) == (2, 0, 1)


def test_when_m_holds_only_held_blocks_promotions_and_ghost_hits_go_elsewhere(engine):
    # capacity 4, ratio 0.5 (small_cap 2, main_cap 2, ghost_cap 2).
    # R0=[a, b], R1=[a, b] (2 hits: a(1), b(1)), R2=[c] (a -> M), R3=[d] (b -> M): M=[a(1), b(1)],
    #   S=[c(0), d(0)]; R4=[d]: 1 hit, d(1). Each runs and finishes.
    # R5=[a, b] starts and runs: 2 hits, both held: M is at its limit with only held blocks.
    # R6=[e]: c(0) -> G=[c]; S=[d(1), e].
    # R7=[f]: d(1) would move to M, which gives up nothing: d goes to G instead (an eviction,
    #   not a promotion): G=[c, d]; S=[e, f].
    # R8=[c]: a ghost hit (no prefix hit), but M gives up nothing: c leaves G and waits in S
    #   (a ghost hit, not an admission): e(0) -> G=[d, e]; S=[f, c].
    requests = [["a", "b"], ["a", "b"], ["c"], ["d"], ["d"], ["a", "b"], ["e"], ["f"], ["c"]]
    events = [0, -1, 1, -2, 2, -3, 3, -4, 4, -5, 5, 6, -7, 7, -8, 8, -9, -6]
    trace, run_it = lifecycle(requests, events)
    out = run_it(engine)
    assert out.hit_blocks.tolist() == [0, 2, 0, 0, 1, 2, 0, 0, 0]
    assert not out.refused.any()
    assert resident_ids(trace, out) == {"a", "b", "c", "f"}
    assert out.counters == {"admissions": 6, "promotions": 2, "ghost_hits": 1, "requeues": 0, "evictions": 3}
