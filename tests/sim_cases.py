"""Shared cases of the serving tests (tests/serving/): a time model whose every step takes 1 s,
tiny traces by hand, and hypothesis traces small enough to work out."""

from __future__ import annotations

from hypothesis import strategies as st

import kvreplay
from kvreplay.serving.timing import PolynomialProfile

ONE_SECOND = PolynomialProfile(document={"format": "kvreplay-step-polynomial", "unit": "s", "terms": [{"coef": 1.0}]})


def trace_of(*requests, block_size=4):
    """requests: (hash_ids, input_length, arrival_ms, output_length)."""
    return kvreplay.Trace.from_requests(list(requests), block_size=block_size)


@st.composite
def small_traces(draw):
    n = draw(st.integers(1, 14))
    reqs = []
    t = 0
    for _ in range(n):
        ids = draw(st.lists(st.integers(0, 11), min_size=1, max_size=5))
        length = draw(st.integers(max(1, 4 * len(ids) - 3), 4 * len(ids)))
        t += draw(st.integers(0, 2000))
        reqs.append((ids, length, t, draw(st.integers(0, 9))))
    return trace_of(*reqs)


#: Policies whose sequential replay holds a request's blocks while it accesses them, as an engine
#: does (vllm, radix: pin_request then unpin_request), or never evicts them (lru: they are the
#: most recent; infinite). For the others a request that nearly fills the cache may, in the
#: sequential replay, evict its own hit blocks while admitting its misses, which a running request
#: never does (docs/serving.md, "Limits").
HOLDS_IN_SEQUENCE = ("vllm", "radix", "lru", "infinite")
