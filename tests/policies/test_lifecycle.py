"""The holding contract (pin/unpin, policies/base.py), over the whole registry.

Random prefix-sharing traces run as overlapping requests (random interleavings of starts and
finishes, some never finished). For every registered policy:
5. both engines agree on every start (hits, blocks held, refused), the final residents, the
   counters, what is still held and the refusals;
6. a held block stays resident, and resident blocks never exceed the capacity (checked after
   every event, reference engine);
7. a start is refused only when it cannot fit beside the held blocks (``everything_held()``:
   every resident block held; for vllm and radix, too few unheld blocks for the whole start);
8. once every request has finished, nothing is held;
and for vllm and radix, whose sequential access phase is pin_request then unpin_request, running
requests one at a time gives exactly the sequential replay.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kvreplay
from kvreplay.engine.lifecycle import replay_lifecycle
from kvreplay.errors import ConfigError
from kvreplay.policies.registry import POLICIES
from strategies import hold_checks, lifecycles, lifecycles_agree, requests

NAMES = sorted(POLICIES)
CAPACITIES = st.one_of(st.integers(1, 12), st.sampled_from([20, 64]))
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def run(trace, name, capacity, events, block_size, engine, **kw):
    try:
        return replay_lifecycle(trace, name, capacity, events, block_size, engine=engine, **kw)
    except ConfigError:
        return None


@pytest.mark.parametrize("name", NAMES)
@SETTINGS
@given(case=lifecycles(), capacity=CAPACITIES)
def test_engines_agree_on_overlapping_requests(name, case, capacity):
    reqs, block_size, events = case
    trace = kvreplay.Trace.from_requests(reqs)
    try:
        lifecycles_agree(trace, name, capacity, events, block_size)
    except ConfigError:  # e.g. s3fifo at a capacity that leaves a queue empty: both engines refuse
        assert run(trace, name, capacity, events, block_size, "compiled") is None


@pytest.mark.parametrize("name", NAMES)
@SETTINGS
@given(case=lifecycles(), capacity=CAPACITIES)
def test_holds_are_respected(name, case, capacity):
    reqs, block_size, events = case
    trace = kvreplay.Trace.from_requests(reqs)
    bound = max(1, trace.num_blocks) if POLICIES[name].capacity == "ignored" else capacity  # infinite
    out = run(trace, name, capacity, events, block_size, "reference", on_event=hold_checks(bound))
    if out is None:
        return
    finished = {-e - 1 for e in events if e < 0}
    if len(finished) == len(reqs):
        assert out.held_at_end == 0, "every request finished, yet blocks are held"
    assert out.refusals == int(out.refused.sum()), "one refusal per refused start"


@pytest.mark.parametrize("name", ["vllm", "radix"])
@SETTINGS
@given(case=requests(), capacity=CAPACITIES)
def test_one_at_a_time_is_the_sequential_replay(name, case, capacity):
    reqs, block_size = case
    trace = kvreplay.Trace.from_requests(reqs)
    events = [e for i in range(len(reqs)) for e in (i, -i - 1)]
    for engine in ("reference", "compiled"):
        seq = kvreplay.replay(trace, name, capacity, block_size, engine=engine)
        life = replay_lifecycle(trace, name, capacity, events, block_size, engine=engine)
        assert life.hit_blocks.tolist() == seq.hit_blocks.tolist()
        assert life.counters == seq.counters
        assert life.final_cache_blocks == seq.final_cache_blocks
        assert not life.refused.any() and life.held_at_end == 0


def test_events_out_of_order_are_refused():
    trace = kvreplay.Trace.from_requests([([1, 2], 8), ([1, 3], 8)])
    with pytest.raises(ConfigError, match="request 1 finishes before it starts"):
        replay_lifecycle(trace, "lru", 4, [0, -2], 4)
    with pytest.raises(ConfigError, match="request 0 starts twice"):
        replay_lifecycle(trace, "lru", 4, [0, 0], 4)
    with pytest.raises(ConfigError, match="request 5 does not exist"):
        replay_lifecycle(trace, "lru", 4, [5], 4)


# ---- hand-worked cases -------------------------------------------------------------------------

@pytest.mark.parametrize("engine", ["reference", "compiled"])
def test_lru_requeues_a_held_block_and_refuses_when_all_are_held(engine):
    # Capacity 3, block_size 1. Request 0 = [1, 2] runs throughout. Request 1 = [3] runs and
    # finishes: cache {1, 2, 3}. Request 2 = [4]: the LRU end is 1 (held: to the recent end), then
    # 2 (held: again), then 3: evicted. Request 3 = [5, 6] while 0 and 2 run: 5 finds 1, 2, 4 all
    # held: refused, holding nothing. After request 0 finishes, request 4 = [1, 7] hits 1 and
    # evicts 2 (the least recent unheld block: 1 and 2 were requeued before 4 was admitted; 1 is
    # refreshed by the hit).
    trace = kvreplay.Trace.from_requests([([1, 2], 2), ([3], 1), ([4], 1), ([5, 6], 2), ([1, 7], 2)])
    events = [0, 1, -2, 2, 3, -4, -1, 4]
    out = replay_lifecycle(trace, "lru", 3, events, 1, engine=engine)
    assert out.hit_blocks.tolist() == [0, 0, 0, 0, 1]
    assert out.held_blocks.tolist() == [2, 1, 1, 0, 2]
    assert out.refused.tolist() == [False, False, False, True, False]
    resident = {b for b, r in zip(trace.original_ids, out.resident) if r}
    assert resident == {1, 4, 7}
    assert out.counters == {"admissions": 5, "evictions": 2}
    assert (out.held_at_end, out.refusals) == (3, 1)  # 4 (request 2) and 1, 7 (request 4) still run


@pytest.mark.parametrize("engine", ["reference", "compiled"])
def test_fifo_requeues_a_held_head(engine):
    # Capacity 2: request 0 = [1] runs; request 1 = [2] runs and finishes; request 2 = [3]: the
    # head 1 is held, goes to the tail; 2 is evicted. Request 3 = [2]: head 1 held again, 3 goes.
    trace = kvreplay.Trace.from_requests([([1], 1), ([2], 1), ([3], 1), ([2], 1)])
    out = replay_lifecycle(trace, "fifo", 2, [0, 1, -2, 2, -3, 3], 1, engine=engine)
    assert out.hit_blocks.tolist() == [0, 0, 0, 0]
    resident = {b for b, r in zip(trace.original_ids, out.resident) if r}
    assert resident == {1, 2}
    assert out.counters == {"admissions": 4, "evictions": 2}
