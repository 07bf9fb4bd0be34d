"""Random traces, small-trace builders and the agreement checks shared by the policy tests."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

import kvreplay
from conftest import MOONCAKE, shared_path
from spec_model import oracle_replay


@st.composite
def requests(draw, max_requests=60):
    """Requests that share prefixes like real ones: often a prefix of an earlier request plus new blocks."""
    alphabet = draw(st.integers(1, 40))
    block_size = draw(st.sampled_from([1, 4, 16, 512]))
    out = []
    for _ in range(draw(st.integers(1, max_requests))):
        if out and draw(st.booleans()):
            parent = draw(st.sampled_from(out))[0]
            ids = parent[: draw(st.integers(0, len(parent)))]
        else:
            ids = []
        ids = ids + draw(st.lists(st.integers(0, alphabet), max_size=6))
        n = len(ids)
        # Usually the last block is partial, sometimes exact, sometimes the length disagrees.
        length = draw(st.one_of(
            st.integers(max(0, (n - 1) * block_size + 1), max(0, n * block_size)),
            st.integers(0, (n + 2) * block_size),
        ))
        out.append((ids, length))
    return out, block_size


def engines_agree(trace, policy, capacity, block_size, **params):
    """Replay with both engines and assert they agree on everything a report holds; (ref, comp)."""
    ref = kvreplay.replay(trace, policy, capacity, block_size, engine="reference", **params)
    comp = kvreplay.replay(trace, policy, capacity, block_size, engine="compiled", **params)
    assert comp.hit_tokens.tolist() == ref.hit_tokens.tolist()
    assert comp.hit_blocks.tolist() == ref.hit_blocks.tolist()
    assert comp.final_cache_blocks == ref.final_cache_blocks
    assert comp.counters == ref.counters
    assert comp.stranded_blocks == ref.stranded_blocks
    accounts_agree(ref, comp)
    return ref, comp


def accounts_agree(ref, comp):
    """The two engines' miss accounts are the same: every block's cause, when an evicted block
    left, every request's tokens per cause, the stranded blocks over time."""
    a, b = ref.misses, comp.misses
    assert a.cause.tolist() == b.cause.tolist()
    assert a.gone.tolist() == b.gone.tolist()
    assert a.tokens.tolist() == b.tokens.tolist()
    assert a.stranded == b.stranded
    assert a.not_measured == b.not_measured


def zipf_requests(seed, num_requests=1500, num_blocks=300, pool=4000):
    """Thousands of requests over a few hundred blocks with Zipf-like reuse: (hash_ids,
    input_length) with 1 to 5 blocks each, block_size 16 with a partial last block."""
    rng = np.random.default_rng(seed)
    popular = (rng.zipf(1.3, size=pool) % num_blocks).tolist()
    reqs = []
    for i in range(num_requests):
        k = int(rng.integers(1, 6))
        ids = [popular[(i * 3 + j) % len(popular)] for j in range(k)]
        reqs.append((ids, k * 16 - int(rng.integers(0, 16))))
    return reqs


def zipf_trace(seed, num_requests=3000, num_blocks=300):
    """zipf_requests as a Trace (a longer variant)."""
    return kvreplay.Trace.from_requests(zipf_requests(seed, num_requests, num_blocks, pool=6000))


def replay_blocks(policy, reqs, capacity, engine, block_size=1, **params):
    """Replay hand-made requests: (hash_ids, input_length or None for len(hash_ids) * block_size)."""
    trace = kvreplay.Trace.from_requests([(ids, len(ids) * block_size if length is None else length) for ids, length in reqs])
    return kvreplay.replay(trace, policy, capacity, block_size, engine=engine, **params)


def replay_singles(policy, blocks, capacity, engine, **params):
    """Replay one single-block, one-token request per block (block_size 1)."""
    return replay_blocks(policy, [([b], 1) for b in blocks], capacity, engine, **params)


def assert_matches_oracle(report, reqs, oracle, block_size, size_of):
    """The report equals `oracle` (a fresh cache object) driven by the spec's loop: per-request
    hits, and the final size ``size_of(oracle)``."""
    tokens, blocks = oracle_replay(reqs, oracle, block_size)
    assert report.hit_tokens.tolist() == tokens
    assert report.hit_blocks.tolist() == blocks
    assert report.final_cache_blocks == size_of(oracle)


def real_trace_engines_agree(policy, capacity, **params):
    """Both engines on the Mooncake conversation trace at block size 512 (skips without
    ../shared); the cache ends full. Returns the reference report."""
    trace = kvreplay.load_trace(shared_path(MOONCAKE / "conversation_trace.jsonl"))
    ref, comp = engines_agree(trace, policy, capacity, 512, **params)
    assert ref.final_cache_blocks == capacity
    return ref


# ---- overlapping requests (the holding contract, policies/base.py) --------------------------------

@st.composite
def overlapping_events(draw, num_requests, width=None):
    """Lifecycle events for `num_requests` requests: they start in trace order, finishes are
    interleaved at random (at most `width` run at once, when given), and some never finish."""
    events, running = [], []
    for i in range(num_requests):
        while running and ((width is not None and len(running) >= width) or draw(st.booleans())):
            j = draw(st.sampled_from(running))
            running.remove(j)
            events.append(-j - 1)
        events.append(i)
        running.append(i)
    keep = draw(st.integers(0, len(running)))
    events += [-i - 1 for i in draw(st.permutations(running))[keep:]]
    return events


@st.composite
def lifecycles(draw, max_requests=30):
    """(requests, block_size, events) for replay_lifecycle."""
    reqs, block_size = draw(requests(max_requests=max_requests))
    return reqs, block_size, draw(overlapping_events(len(reqs), draw(st.integers(1, 6))))


def hold_checks(capacity):
    """An on_event check of the holding invariants (reference engine): the cache stays within its
    capacity, held blocks are resident, and a refusal finds every resident block held."""
    seen = [0]

    def check(k, cache):
        assert cache.size() <= capacity
        assert set(cache.pins) <= set(cache.resident_blocks()), "a held block was evicted"
        if cache.refusals != seen[0]:
            assert cache.everything_held(), "refused while an unheld block could go"
        seen[0] = cache.refusals

    return check


def lifecycles_agree(trace, policy, capacity, events, block_size, *, check=None, **params):
    """Run `events` in both engines (the reference one with `check` after every event) and assert
    they agree on everything a Lifecycle holds; (ref, comp)."""
    from kvreplay.engine.lifecycle import replay_lifecycle

    ref = replay_lifecycle(trace, policy, capacity, events, block_size, engine="reference", on_event=check, **params)
    comp = replay_lifecycle(trace, policy, capacity, events, block_size, engine="compiled", **params)
    for name in ("hit_blocks", "held_blocks", "refused", "resident"):
        assert getattr(ref, name).tolist() == getattr(comp, name).tolist(), name
    assert (ref.final_cache_blocks, ref.counters, ref.held_at_end, ref.refusals) == \
        (comp.final_cache_blocks, comp.counters, comp.held_at_end, comp.refusals)
    return ref, comp


@st.composite
def chained_requests(draw, max_requests=40, max_fresh=8):
    """(requests, block size): each request a prefix of an earlier one (or nothing) plus fresh
    ids, so prefixes are shared and no id repeats within a request, as with vLLM's chained block
    hashes; lengths usually end in a partial block, sometimes aligned, sometimes disagreeing."""
    block_size = draw(st.sampled_from([1, 2, 4, 16]))
    fresh = iter(range(10**9))
    out = []
    for _ in range(draw(st.integers(1, max_requests))):
        ids = []
        if out and draw(st.booleans()):
            parent = draw(st.sampled_from(out))[0]
            ids = parent[: draw(st.integers(0, len(parent)))]
        ids = ids + [next(fresh) for _ in range(draw(st.integers(0 if ids else 1, max_fresh)))]
        n = len(ids)
        length = draw(st.one_of(
            st.integers(max(1, (n - 1) * block_size + 1), max(1, n * block_size)),
            st.just(n * block_size),
            st.integers(0, (n + 2) * block_size),
        ))
        out.append((ids, length))
    return out, block_size
