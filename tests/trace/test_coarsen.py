"""trace/coarsen.py: k chained ids become one block, identified by its last fine id."""

from __future__ import annotations

import pytest

import kvreplay
from kvreplay.errors import ConfigError
from kvreplay.trace.coarsen import coarsen


def test_coarse_blocks_by_hand():
    # block size 4 -> 8. a..e (20 tokens): coarse blocks end at b and d, and e is the partial tail;
    # a, b, c, x (16 tokens): b, x; a, b (7 tokens): b. Dense ids in first-use order: b 0, d 1, e 2, x 3
    t = kvreplay.Trace.from_requests([(["a", "b", "c", "d", "e"], 20), (["a", "b", "c", "x"], 16), (["a", "b"], 7)])
    c = coarsen(t, 2, 4)
    assert c.offsets.tolist() == [0, 3, 5, 6] and c.blocks.tolist() == [0, 1, 2, 0, 3, 0]
    assert c.block_size == 8 and c.num_blocks == 4 and c.input_length.tolist() == [20, 16, 7]
    # the shared 8-token prefix (a, b) is one coarse block: the second and third requests hit it
    # (the third: min(1 x 8, 7) = 7 tokens, the spec's cap)
    assert kvreplay.replay(c, "lru", 10, 8).hit_tokens.tolist() == [0, 8, 7]
    assert coarsen(t, 1, 4) is t
    with pytest.raises(ConfigError, match="factor"):
        coarsen(t, 0, 4)
