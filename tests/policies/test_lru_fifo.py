"""LRU and FIFO on hand-worked traces (both engines)."""

from __future__ import annotations

from strategies import replay_singles


run = replay_singles  # run(policy, blocks, capacity, engine)


def test_lru_hit_refreshes_recency(engine):
    # capacity 2: [a] [b] [a] (hit, a most recent) [c] (evicts b) [a] (hit) [b] (miss)
    r = run("lru", "abacab", 2, engine)
    assert r.hit_tokens.tolist() == [0, 0, 1, 0, 1, 0]
    assert r.counters == {"admissions": 4, "evictions": 2}
    assert r.final_cache_blocks == 2


def test_fifo_hit_does_not_refresh(engine):
    # capacity 2: [a] [b] [a] (hit, no change) [c] (evicts a: oldest admitted) [a] (miss) [b] (miss: a's
    # readmission evicted b)
    r = run("fifo", "abacab", 2, engine)
    assert r.hit_tokens.tolist() == [0, 0, 1, 0, 0, 0]
    assert r.counters == {"admissions": 5, "evictions": 3}


def test_capacity_one(engine):
    # A single block: only an immediate repeat hits.
    for policy in ("lru", "fifo"):
        assert run(policy, "aabba", 1, engine).hit_tokens.tolist() == [0, 1, 0, 1, 0]


def test_capacity_beyond_unique_blocks(engine):
    # Capacity 10**9 with 3 distinct blocks: nothing is evicted and no state is sized by capacity.
    r = run("lru", "abcabc", 10**9, engine)
    assert r.hit_tokens.tolist() == [0, 0, 0, 1, 1, 1]
    assert r.final_cache_blocks == 3
