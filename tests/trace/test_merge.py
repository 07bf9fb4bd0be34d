"""trace.ops.merge and the Trace session column."""

from __future__ import annotations

import numpy as np
import pytest

from kvreplay import replay
from kvreplay.errors import ConfigError
from kvreplay.trace import Trace
from kvreplay.trace.ops import merge, session_offsets_ms


def two():
    # x: [a b] t=0, [a b c] t=20 ms;  y: [a b] t=10, [a d] t=20 (same ids as x, different sessions)
    x = Trace.from_requests([(["a", "b"], 8, 0.0), (["a", "b", "c"], 12, 20.0)], block_size=4, source="x")
    y = Trace.from_requests([(["a", "b"], 8, 10.0), (["a", "d"], 8, 20.0)], block_size=4, source="y")
    return x, y


def test_session_column_validated_and_carried():
    t = Trace.from_requests([([1], 4, 3.0), ([2], 4, 1.0), ([1], 4, 2.0)])
    assert t.session is None and "num_sessions" not in t.summary() and t.num_sessions is None
    s = Trace(offsets=t.offsets, blocks=t.blocks, input_length=t.input_length, output_length=t.output_length,
              timestamp=t.timestamp, num_blocks=t.num_blocks, session=[5, 7, 5])
    assert s.session.dtype == np.int64 and not s.session.flags.writeable
    assert s.summary()["num_sessions"] == 2
    assert s.sorted_by_time().session.tolist() == [7, 5, 5]  # times 1, 2, 3
    assert s.take(np.array([2, 0])).session.tolist() == [5, 5]
    assert s.nbytes() == t.nbytes() + 3 * 8
    common = dict(offsets=t.offsets, blocks=t.blocks, input_length=t.input_length, output_length=t.output_length,
                  timestamp=t.timestamp, num_blocks=t.num_blocks)
    with pytest.raises(ValueError, match="one entry per request"):
        Trace(**common, session=[0, 1])
    with pytest.raises(ValueError, match="integers"):
        Trace(**common, session=[0.5, 1, 2])
    with pytest.raises(ValueError, match="non-negative"):
        Trace(**common, session=[0, -1, 2])


def test_merge_namespaced_by_default():
    x, y = two()
    m = merge([x, y])
    # time order (stable): x0 (0), y0 (10), x1 (20), y1 (20: tie, x first)
    assert m.timestamp.tolist() == [0.0, 10.0, 20.0, 20.0]
    assert m.input_length.tolist() == [8, 8, 12, 8]
    assert m.session.tolist() == [0, 1, 0, 1]
    # x's ids a b c -> 0 1 2; y's a b d -> 3 4 5
    assert m.blocks.tolist() == [0, 1, 3, 4, 0, 1, 2, 3, 5]
    assert m.num_blocks == 6 and m.original_ids is None and m.block_size == 4 and m.source == "x, y"
    # infinite, 4-token blocks: x1 hits a b -> min(8, 12) = 8; y1 hits a -> min(4, 8) = 4; y0 shares nothing
    assert replay(m, "infinite", None, engine="reference").total_hit_tokens == 12


def test_merge_shared_ids():
    x, y = two()
    m = merge([x, y], namespace=False)
    assert m.original_ids == ["a", "b", "c", "d"] and m.num_blocks == 4
    assert m.blocks.tolist() == [0, 1, 0, 1, 0, 1, 2, 0, 3]
    # now y0 hits x's a b: 8; x1: 8; y1: 4  -> 20
    assert replay(m, "infinite", None, engine="reference").total_hit_tokens == 20


def test_merge_shared_integer_ids_stay_an_array():
    x = Trace(offsets=[0, 2], blocks=[0, 1], input_length=[2], output_length=[0], timestamp=[0.0], num_blocks=2,
              original_ids=np.array([10, 30]))
    y = Trace(offsets=[0, 2], blocks=[1, 0], input_length=[2], output_length=[0], timestamp=[1.0], num_blocks=2,
              original_ids=np.array([20, 30]))
    m = merge([x, y], namespace=False)
    assert m.original_ids.tolist() == [10, 20, 30] and m.blocks.tolist() == [0, 2, 2, 1]


def test_merge_offsets_and_session_renumbering():
    x, y = two()
    xs = Trace(**{k: getattr(x, k) for k in ("offsets", "blocks", "input_length", "output_length", "timestamp",
                                            "num_blocks", "block_size")}, session=[4, 9])
    m = merge([xs, y, x], offsets_ms=[0, 100, 5])
    # xs: sessions 4, 9 -> 0, 1; y -> 2; x (no column) -> 3.  times: xs 0, 20; y 110, 120; x 5, 25
    assert m.timestamp.tolist() == [0, 5, 20, 25, 110, 120]
    assert m.session.tolist() == [0, 3, 1, 3, 2, 2]


def test_merge_errors():
    x, y = two()
    with pytest.raises(ConfigError, match="different block sizes"):
        merge([x, Trace.from_requests([([1], 4)], block_size=16)])
    with pytest.raises(ConfigError, match="keep_ids=True"):
        merge([x, Trace(offsets=[0, 1], blocks=[0], input_length=[1], output_length=[0], timestamp=[0.0],
                        num_blocks=1, block_size=4)], namespace=False)
    with pytest.raises(ConfigError, match="2 offsets for 1 traces"):
        merge([x], offsets_ms=[0, 1])
    with pytest.raises(ConfigError, match="at least one"):
        merge([])


def test_merge_invalid_records_name_their_source():
    from dataclasses import replace

    x, y = two()
    x = replace(x, invalid_records={"count": 2, "first_lines": [3, 9]})
    y = replace(y, invalid_records={"count": 1, "first_lines": [1]})
    assert merge([x, y]).invalid_records == {"count": 3, "first_lines": ["x:3", "x:9", "y:1"]}


def test_session_offsets():
    assert session_offsets_ms(3, "fixed", 2.5).tolist() == [0.0, 2500.0, 5000.0]
    assert session_offsets_ms(3, "zero", 2.5).tolist() == [0.0, 0.0, 0.0]
    gaps = np.random.default_rng(1).exponential(10.0, size=2)
    assert session_offsets_ms(3, "poisson", 10.0, seed=1).tolist() == pytest.approx([0.0, gaps[0] * 1e3, gaps.sum() * 1e3])
    with pytest.raises(ConfigError):
        session_offsets_ms(2, "uniform")
    with pytest.raises(ConfigError):
        session_offsets_ms(2, "fixed", -1.0)
