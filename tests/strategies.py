"""Hypothesis strategies shared by the differential tests."""

from __future__ import annotations

from hypothesis import strategies as st


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
