"""The policy contract, checked over the whole registry: a policy added to src/kvreplay/policies
is checked here without anyone adding it to a list.

For every registered policy, on hypothesis-generated traces with shared prefixes:
- both engines agree on every request (hit blocks and tokens), the final size, the counters and
  the stranded blocks;
- ``resident`` changes nothing: probing extra blocks before every request (reference engine)
  leaves every result and counter as it was;
- counters keep their keys: the same names whatever the trace, the capacity or the engine;
- the spec's invariants hold (Report.check_invariants runs on every replay).
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kvreplay
from kvreplay.engine import driver
from kvreplay.errors import ConfigError
from kvreplay.policies.registry import POLICIES, get_policy
from strategies import engines_agree, requests

NAMES = sorted(POLICIES)
CAPACITIES = st.one_of(st.integers(1, 12), st.sampled_from([20, 64, 4096]))
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def replay_or_none(trace, name, capacity, block_size, engine):
    try:
        return kvreplay.replay(trace, name, capacity, block_size, engine=engine)
    except ConfigError:
        return None  # e.g. s3fifo at a capacity that leaves a queue empty: both engines must refuse


@pytest.mark.parametrize("name", NAMES)
@SETTINGS
@given(case=requests(), capacity=CAPACITIES)
def test_engines_agree_on_every_request(name, case, capacity):
    reqs, block_size = case
    trace = kvreplay.Trace.from_requests(reqs)
    ref = replay_or_none(trace, name, capacity, block_size, "reference")
    comp = replay_or_none(trace, name, capacity, block_size, "compiled")
    assert (ref is None) == (comp is None), "the engines disagree on whether the configuration is valid"
    if ref is not None:
        engines_agree(trace, name, capacity, block_size)


class Probing:
    """A reference policy whose every request is preceded by residency probes of other blocks."""

    def __init__(self, inner, probes):
        self.inner, self.probes = inner, probes

    def __getattr__(self, attr):
        return getattr(self.inner, attr)

    def access_request(self, request, blocks, hits, input_length, block_size):
        for b in self.probes:
            self.inner.resident(b)
        return self.inner.access_request(request, blocks, hits, input_length, block_size)


@pytest.mark.parametrize("name", NAMES)
@SETTINGS
@given(case=requests(), capacity=CAPACITIES, data=st.data())
def test_resident_changes_nothing(name, case, capacity, data):
    import numpy as np

    reqs, block_size = case
    trace = kvreplay.Trace.from_requests(reqs)
    spec = get_policy(name)
    try:
        params = spec.resolve({})
        plain = spec.reference(capacity, trace, **params)
        probed = spec.reference(capacity, trace, **params)
    except ConfigError:
        return
    probes = data.draw(st.lists(st.integers(0, max(0, trace.num_blocks - 1)), max_size=8)) if trace.num_blocks else []
    results = []
    for policy in (plain, Probing(probed, probes)):
        hit_blocks = np.zeros(len(trace), dtype=np.int64)
        hit_tokens = np.zeros(len(trace), dtype=np.int64)
        driver.replay_reference(trace.offsets, trace.blocks, trace.input_length, block_size, policy, hit_blocks, hit_tokens)
        results.append((hit_blocks.tolist(), policy.size(), policy.counters(), sorted(policy.resident_blocks())))
    assert results[0] == results[1]


@pytest.mark.parametrize("name", NAMES)
def test_counters_keep_their_keys(name):
    traces = [
        kvreplay.Trace.from_requests([(["a", "b", "c"], 10), (["a", "b", "d"], 12), (["e"], 3)] * 3),
        kvreplay.Trace.from_requests([([i, i + 1], 8) for i in range(40)]),
    ]
    keys = set()
    for trace in traces:
        for capacity in (6, 50):
            for engine in ("reference", "compiled"):
                keys.add(tuple(sorted(kvreplay.replay(trace, name, capacity, 4, engine=engine).counters)))
    assert len(keys) == 1, keys
    assert keys.pop(), f"{name} reports no counters"


def test_every_registered_policy_is_checked():
    # The parametrisations above come from the registry itself; guard against an empty registry
    # making them pass vacuously.
    assert len(NAMES) >= 14 and {"s3fifo", "lru", "fifo", "vllm", "radix"} <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_the_compiled_layout_is_the_python_one(name):
    # Python builds and reads a state by the layout its C file declares (native.py): every field C
    # names exists with its dtype, and every meta slot C names has the index Python uses.
    import importlib

    from kvreplay import native
    from kvreplay.trace.model import Trace

    spec = get_policy(name)
    if not spec.native:
        pytest.skip(f"{name} is not ported to the compiled core yet")
    table, layout = native.policy(spec.native)
    state = spec.make_state(64, Trace.from_requests([([1, 2, 3], 3)]), **spec.resolve({}))
    native.bind(state, layout, name)  # raises on a missing or retyped field
    assert sorted(f for f, _ in layout.fields) == sorted(state._fields)
    module = importlib.import_module(spec.reference.__module__)
    for index, slot in enumerate(layout.slots["meta"]):
        assert getattr(module, slot) == index, f"{name}: meta slot {slot}"
