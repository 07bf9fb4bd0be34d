"""The eviction log (policies/base.py, "The eviction log"), over the whole registry.

A memory tier under the cache demotes what the cache evicts, so the log must say exactly which
blocks left the resident set, in order. For every registered policy (and belady with bypass,
ttl with a short ttl so that blocks expire, s3fifo with a larger S), at small capacities:
1. sequential replay, one request at a time: the compiled log equals the reference log (same
   ids, same order), and it is what left the resident set (``check_log``);
2. the same for random interleavings of request starts and finishes (pin_request/unpin_request);
3. with the log off, nothing changes (hits, counters, residents);
4. a log too small for what was evicted makes take_evictions raise;
5. hand-worked eviction orders for lru and s3fifo.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kvreplay
from kvreplay.engine import driver, lifecycle
from kvreplay.errors import ConfigError
from kvreplay.policies.base import LOG_COUNT, LOG_HEAD, LOG_LOST, hold_arrays, take_evictions, with_eviction_log
from kvreplay.policies.registry import POLICIES, get_policy
from strategies import lifecycles, requests


NAMES = sorted(POLICIES)
# Variants whose evictions differ: bypassed blocks (never logged), expiring blocks, a larger S.
CONFIGS = [(name, {}) for name in NAMES] + [("belady", {"admit_bypass": 1}), ("ttl", {"ttl": 0.003}),
                                             ("s3fifo", {"small_ratio": 0.3})]
IDS = [name + "".join(f"-{k}={v}" for k, v in params.items()) for name, params in CONFIGS]
CAPACITIES = st.one_of(st.integers(1, 12), st.sampled_from([20, 64]))
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

@st.composite
def timed(draw, case):
    """Trace-time stamps (ms) for the requests of `case`: small steps, sometimes backwards."""
    reqs, *rest = case
    stamps = np.cumsum(draw(st.lists(st.integers(-2, 3), min_size=len(reqs), max_size=len(reqs)))).tolist()
    return kvreplay.Trace.from_requests([(ids, length, float(t), 0) for (ids, length), t in zip(reqs, stamps)]), *rest


def engines(name, params, trace, capacity):
    """(spec, reference with its log on, compiled held state with its log on), or None when the
    configuration is refused (both engines refuse it: test_contract checks that)."""
    spec = get_policy(name)
    if not spec.native:  # the log feeds tiers, which need the compiled core (a reference-only policy has none)
        pytest.skip(f"{name} is not ported to the compiled core yet")
    if spec.capacity == "ignored":
        capacity = max(1, trace.num_blocks)
    params = spec.resolve(params)
    try:
        ref = spec.reference(capacity, trace, **params)
        state = spec.make_state(capacity, trace, **params)
    except ConfigError:
        return None
    ref.evicted = []

    def note(b):  # at the moment it is logged, the block is no longer resident
        assert b not in set(ref.resident_blocks()), f"block {b} logged while resident"
        type(ref).note_evicted(ref, b)

    ref.note_evicted = note
    # A request may evict at most every resident block and each of its own; a ttl tick, the capacity.
    return spec, ref, with_eviction_log(state, capacity + trace.num_accesses)


def residents(spec, ref, state):
    """The resident set of both engines, which must agree."""
    comp = set(np.flatnonzero(spec.resident_mask(state)).tolist())
    assert comp == set(ref.resident_blocks())
    return comp


def check_log(log, before, after, admitted):
    """`log` is exactly what left the resident set during one operation that admitted at most
    `admitted` (block -> accesses): a block not accessed is logged iff it was resident before and
    is not after; an accessed one, as often as it went from resident to not (so, when none of
    them was evicted and re-admitted, set(log) == before - after)."""
    logged = Counter(log)
    for b in before | after | set(logged) | set(admitted):
        admissions = logged[b] - (b in before) + (b in after)
        assert 0 <= admissions <= admitted.get(b, 0), (b, logged[b], b in before, b in after, admitted.get(b, 0))
    if not any(logged[b] > 1 or b in after or b not in before for b in logged):
        assert set(log) == before - after


@pytest.mark.parametrize("name, params", CONFIGS, ids=IDS)
@SETTINGS
@given(data=st.data(), capacity=CAPACITIES)
def test_sequential_logs_agree_request_by_request(name, params, data, capacity):
    trace, block_size = data.draw(timed(data.draw(requests(max_requests=40))))
    made = engines(name, params, trace, capacity)
    if made is None:
        return
    spec, ref, state = made
    offsets, blocks, lengths = trace.offsets.tolist(), trace.blocks.tolist(), trace.input_length.tolist()
    before = residents(spec, ref, state)
    for i in range(len(trace)):
        request = blocks[offsets[i]:offsets[i + 1]]
        k = driver.prefix_reference(ref, ref.resident, request, lengths[i], block_size)
        ref.access_request(i, request, k, lengths[i], block_size)
        assert driver.one_request(spec, state, trace.offsets, trace.blocks, trace.input_length, block_size, i) == k
        log = take_evictions(state).tolist()
        assert log == ref.evicted, f"request {i}"
        ref.evicted.clear()
        after = residents(spec, ref, state)
        check_log(log, before, after, Counter(request))
        before = after


@pytest.mark.parametrize("name, params", CONFIGS, ids=IDS)
@SETTINGS
@given(data=st.data(), capacity=CAPACITIES)
def test_logs_agree_under_holds_event_by_event(name, params, data, capacity):
    case = data.draw(lifecycles(max_requests=25))
    trace, block_size, events = data.draw(timed(case))
    made = engines(name, params, trace, capacity)
    if made is None:
        return
    spec, ref, state = made
    offsets, blocks, lengths = trace.offsets.tolist(), trace.blocks.tolist(), trace.input_length.tolist()
    n = len(trace)
    hit_blocks, held, refused = np.zeros(n, np.int64), np.zeros(n, np.int64), np.zeros(n, np.bool_)
    handles = np.zeros(trace.num_accesses + n, np.int64)
    ref_handles = {}
    before = residents(spec, ref, state)
    for e in events:
        i = e if e >= 0 else -e - 1
        request = blocks[offsets[i]:offsets[i + 1]]
        if e >= 0:
            k, ref_handles[i], ref_refused = lifecycle.start_reference(ref, i, request, lengths[i], block_size)
            admitted = Counter(request)
        else:
            ref.unpin_request(i, request, lengths[i], block_size, ref_handles.pop(i))
            admitted = Counter(request) if spec.caches_at_release else Counter()  # (trtllm stores at its end)
        lifecycle.run_state(spec, state, trace, block_size, [e], hit_blocks, held, refused, handles)
        if e >= 0:
            assert (hit_blocks[i], held[i], refused[i]) == (k, len(ref_handles[i]), ref_refused)
        log = take_evictions(state).tolist()
        assert log == ref.evicted, f"event {e}"
        ref.evicted.clear()
        after = residents(spec, ref, state)
        check_log(log, before, after, admitted)
        before = after


@pytest.mark.parametrize("name, params", CONFIGS, ids=IDS)
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), capacity=CAPACITIES)
def test_the_log_changes_nothing(name, params, data, capacity):
    case = data.draw(lifecycles(max_requests=25))
    trace, block_size, events = data.draw(timed(case))
    spec = get_policy(name)
    if not spec.native:
        pytest.skip(f"{name} is not ported to the compiled core yet")
    if spec.capacity == "ignored":
        capacity = max(1, trace.num_blocks)
    params = spec.resolve(params)
    try:
        make = spec.make_state
        make(capacity, trace, **params)
    except ConfigError:
        return
    n = len(trace)
    results = []
    for logged in (False, True):
        out = []
        for kernel in ("replay", "lifecycle"):
            state = make(capacity, trace, **params)
            assert state.hold.shape == (3,)  # hold_arrays: the log is off unless asked for
            if logged:
                state = with_eviction_log(state, 1)  # far too small: overflowing changes nothing either
            hit_blocks = np.zeros(n, np.int64)
            if kernel == "replay":
                driver.replay_state(spec, state, trace.offsets, trace.blocks, trace.input_length, block_size, hit_blocks,
                                    np.zeros(n, np.int64))
            else:
                lifecycle.run_state(spec, state, trace, block_size, events, hit_blocks, np.zeros(n, np.int64),
                                    np.zeros(n, np.bool_), np.zeros(trace.num_accesses + n, np.int64))
            out.append((hit_blocks.tolist(), spec.read_state(state), spec.resident_mask(state).tolist(),
                        state.hold[:3].tolist()))
        results.append(out)
    assert results[0] == results[1]


def test_a_full_log_loses_blocks_and_says_so():
    # lru, capacity 1: each request of one new block evicts the previous one.
    trace = kvreplay.Trace.from_requests([([b], 1) for b in "abcd"])
    state = with_eviction_log(get_policy("lru").make_state(1, trace), 2)
    driver.replay_state(get_policy("lru"), state, trace.offsets, trace.blocks, trace.input_length, 1, np.zeros(4, np.int64),
                        np.zeros(4, np.int64))
    assert state.hold[LOG_COUNT] == 2 and state.hold[LOG_LOST] == 1  # a, b logged; c found the log full
    assert state.hold[LOG_HEAD:].tolist() == [0, 1]
    with pytest.raises(RuntimeError, match="1 evictions were not logged"):
        take_evictions(state)
    with pytest.raises(RuntimeError):  # the loss stays counted: a later take raises too
        take_evictions(state)


def log_eviction(state, b):
    """The C log_eviction (include/holds.h) on `state`'s hold array."""
    import ctypes

    from kvreplay import native

    p, i = ctypes.c_void_p, ctypes.c_int64
    native.function("kv_log_eviction_into", None, p, i, i)(state.hold.ctypes.data, state.hold.shape[0], b)


def test_log_helpers_from_python():
    trace = kvreplay.Trace.from_requests([([1, 2], 2)])
    state = get_policy("lru").make_state(2, trace)
    log_eviction(state, 1)  # the log is off: nothing happens
    assert state.hold.tolist() == [0, 0, 0]
    with pytest.raises(ConfigError, match="logs no evictions"):
        take_evictions(state)
    state.hold[:3] = 4, 5, 6
    logged = with_eviction_log(state, 3)
    assert logged.hold.tolist() == [4, 5, 6, 0, 0, 0, 0, 0] and type(logged) is type(state)
    log_eviction(logged, 1)
    log_eviction(logged, 0)
    assert take_evictions(logged).tolist() == [1, 0]
    assert take_evictions(logged).tolist() == []
    with pytest.raises(ConfigError, match=">= 1"):
        with_eviction_log(state, 0)
    assert hold_arrays(5)["hold"].shape == (3,)


def test_every_policy_state_has_holds_and_can_log():
    trace = kvreplay.Trace.from_requests([([1, 2], 2)])
    for name, spec in POLICIES.items():
        if not spec.native:  # (reference only: test_contract skips its compiled checks too)
            continue
        state = spec.make_state(20, trace, **spec.resolve({}))
        assert state.hold.shape == (3,), name
        assert with_eviction_log(state, 4).hold.shape == (LOG_HEAD + 4,), name


# ---- hand-worked cases --------------------------------------------------------------------------

def logs_per_request(name, reqs, capacity, **params):
    """Both engines' per-request logs (original ids), one request at a time; asserts they agree."""
    trace = kvreplay.Trace.from_requests([(ids, len(ids)) for ids in reqs])
    spec, ref, state = engines(name, params, trace, capacity)
    ids = trace.original_ids
    out = []
    for i, request in enumerate(trace.blocks[o:e].tolist() for o, e in zip(trace.offsets[:-1], trace.offsets[1:])):
        k = driver.prefix_reference(ref, ref.resident, request, len(request), 1)
        ref.access_request(i, request, k, len(request), 1)
        driver.one_request(spec, state, trace.offsets, trace.blocks, trace.input_length, 1, i)
        log = take_evictions(state).tolist()
        assert log == ref.evicted
        ref.evicted.clear()
        out.append([ids[b] for b in log])
    return out


def test_lru_eviction_order_by_hand():
    # Capacity 3, recency order least recent first.
    # [a b c]: a, b, c.                    nothing evicted
    # [a d]:   a hit -> b, c, a; d evicts b -> c, a, d.                  [b]
    # [e f]:   e evicts c -> a, d, e; f evicts a -> d, e, f.             [c, a]
    # [b d]:   b evicts d (least recent) -> e, f, b; then d, missing now, evicts e -> f, b, d:
    #          d is logged, re-admitted by the same request.             [d, e]
    assert logs_per_request("lru", [list("abc"), list("ad"), list("ef"), list("bd")], 3) == [[], ["b"], ["c", "a"], ["d", "e"]]


def test_s3fifo_eviction_order_by_hand():
    # Capacity 4, small_ratio 0.25: small_cap 1, main_cap 3, ghost_cap 3. One block per request.
    # a: S=[a].           b: S full: a (freq 0) -> G, logged. S=[b].                 [a]
    # b: hit, b freq 1.   c: b (freq 1) -> M, not logged (still resident). S=[c] M=[b(1)]
    # a: in G: -> M with freq 0, not logged (it was not resident). M=[b(1) a(0)]
    # d: c (freq 0) -> G, logged. S=[d].                                             [c]
    # d: hit, d freq 1.   e: d -> M. S=[e] M=[b(1) a(0) d(1)]
    # e: hit, e freq 1.   f: e -> M, which is full: b's second chance (freq 0, to the tail),
    #    then a (freq 0) -> G, logged. M=[d(1) b(0) e(1)] S=[f].                     [a]
    reqs = [[x] for x in "abbcaddeef"]
    logs = logs_per_request("s3fifo", reqs, 4, small_ratio=0.25)
    assert logs == [[], ["a"], [], [], [], ["c"], [], [], [], ["a"]]
