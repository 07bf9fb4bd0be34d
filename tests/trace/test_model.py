"""The columnar Trace: construction, invariants, take/sort, immutability, summary."""

from __future__ import annotations

import numpy as np
import pytest

from kvreplay.trace import Trace


def make(offsets, blocks, input_length, output_length=None, timestamp=None, num_blocks=None, **kw) -> Trace:
    n = len(input_length)
    return Trace(
        offsets=np.asarray(offsets), blocks=np.asarray(blocks, dtype=np.int32),
        input_length=np.asarray(input_length),
        output_length=np.zeros(n, np.int64) if output_length is None else np.asarray(output_length),
        timestamp=np.zeros(n) if timestamp is None else np.asarray(timestamp, dtype=np.float64),
        num_blocks=(max(blocks) + 1 if len(blocks) else 0) if num_blocks is None else num_blocks,
        **kw,
    )


@pytest.fixture
def abc() -> Trace:
    # request 0: a b    (10 tokens, t=5)
    # request 1: b c    (5 tokens, t=3, 7 output tokens)
    # request 2: (none) (2 tokens, t=5)
    # request 3: c a a  (9 tokens, t=1)
    # ids by first appearance: a=0 b=1 c=2
    return Trace.from_requests([
        (["a", "b"], 10, 5.0),
        (["b", "c"], 5, 3.0, 7),
        ([], 2, 5.0, 0),
        (["c", "a", "a"], 9, 1.0, 4),
    ], block_size=16, source="hand-made")


def test_from_requests(abc):
    assert abc.offsets.tolist() == [0, 2, 4, 4, 7]
    assert abc.blocks.tolist() == [0, 1, 1, 2, 2, 0, 0]
    assert abc.num_blocks == 3
    assert abc.original_ids == ["a", "b", "c"]
    assert abc.input_length.tolist() == [10, 5, 2, 9]
    assert abc.output_length.tolist() == [0, 7, 0, 4]  # first request has no output_length -> 0
    assert abc.timestamp.tolist() == [5.0, 3.0, 5.0, 1.0]
    assert abc.block_size == 16 and abc.source == "hand-made" and abc.format == "memory"
    assert abc.invalid_records is None
    assert len(abc) == abc.num_requests == 4
    assert abc.num_accesses == 7
    assert abc.total_prompt_tokens == 26  # 10 + 5 + 2 + 9
    assert abc.request_blocks(3).tolist() == [2, 0, 0]
    assert abc.request_blocks(2).tolist() == []
    # dtypes are fixed whatever the input was
    assert (abc.offsets.dtype, abc.blocks.dtype, abc.input_length.dtype, abc.output_length.dtype, abc.timestamp.dtype) == (
        np.int64, np.int32, np.int64, np.int64, np.float64)


def test_from_requests_two_tuple_defaults_and_hashable_ids():
    t = Trace.from_requests([((1, "1", (2, 3)), 4), (((2, 3), 1), 6)])
    # 1 and "1" differ; the tuple (2, 3) is one id
    assert t.blocks.tolist() == [0, 1, 2, 2, 0]
    assert t.num_blocks == 3
    assert t.timestamp.tolist() == [0.0, 0.0] and t.output_length.tolist() == [0, 0]
    assert t.block_size is None and t.source == "<memory>"


def test_from_requests_empty():
    t = Trace.from_requests([])
    assert len(t) == 0 and t.offsets.tolist() == [0] and t.num_blocks == 0
    assert t.total_prompt_tokens == 0 and t.num_accesses == 0


def test_nbytes(abc):
    # offsets 5*8 + blocks 7*4 + input 4*8 + output 4*8 + timestamp 4*8 = 40 + 28 + 96
    assert abc.nbytes() == 164


def test_summary(abc):
    assert abc.summary() == {
        "source": "hand-made",
        "format": "memory",
        "num_requests": 4,
        "total_prompt_tokens": 26,
        "num_block_accesses": 7,
        "num_unique_blocks": 3,
        "declared_block_size": 16,
    }


def test_take(abc):
    t = abc.take(np.array([3, 0]))
    # request 3 (c a a) then request 0 (a b)
    assert t.offsets.tolist() == [0, 3, 5]
    assert t.blocks.tolist() == [2, 0, 0, 0, 1]
    assert t.input_length.tolist() == [9, 10]
    assert t.output_length.tolist() == [4, 0]
    assert t.timestamp.tolist() == [1.0, 5.0]
    # ids are not renumbered; everything else carries over
    assert t.num_blocks == 3 and t.original_ids == ["a", "b", "c"]
    assert t.block_size == 16 and t.source == "hand-made"
    # the original is unchanged
    assert abc.input_length.tolist() == [10, 5, 2, 9]


def test_take_repeats_and_empty_requests(abc):
    t = abc.take([2, 1, 2, 1])
    assert t.offsets.tolist() == [0, 0, 2, 2, 4]
    assert t.blocks.tolist() == [1, 2, 1, 2]
    assert t.input_length.tolist() == [2, 5, 2, 5]
    e = abc.take(np.array([], dtype=np.int64))
    assert len(e) == 0 and e.offsets.tolist() == [0] and e.blocks.size == 0


def test_sorted_by_time_is_stable(abc):
    s = abc.sorted_by_time()
    # t = 5, 3, 5, 1 -> order 3 (t=1), 1 (t=3), 0 (t=5), 2 (t=5; after 0: stable)
    assert s.timestamp.tolist() == [1.0, 3.0, 5.0, 5.0]
    assert s.input_length.tolist() == [9, 5, 10, 2]
    assert s.offsets.tolist() == [0, 3, 5, 7, 7]
    assert s.blocks.tolist() == [2, 0, 0, 1, 2, 0, 1]
    assert s.output_length.tolist() == [4, 7, 0, 0]
    assert abc.timestamp.tolist() == [5.0, 3.0, 5.0, 1.0]  # original untouched


def test_sorted_by_time_when_already_sorted(abc):
    s = abc.sorted_by_time()
    again = s.sorted_by_time()
    for col in ("offsets", "blocks", "input_length", "output_length", "timestamp"):
        assert np.array_equal(getattr(again, col), getattr(s, col))


def test_invalid_records_survive_take_and_sort():
    t = make([0, 1, 2], [0, 1], [3, 4], timestamp=[2, 1], invalid_records={"count": 2, "first_lines": [1, 4]})
    assert t.sorted_by_time().invalid_records == {"count": 2, "first_lines": [1, 4]}
    assert t.take([1]).invalid_records == {"count": 2, "first_lines": [1, 4]}


@pytest.mark.parametrize("col", ["offsets", "blocks", "input_length", "output_length", "timestamp"])
def test_arrays_are_read_only(abc, col):
    a = getattr(abc, col)
    assert not a.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        a[0] = 1
    for derived in (abc.take([1, 0]), abc.sorted_by_time()):
        assert not getattr(derived, col).flags.writeable


def test_fields_cannot_be_reassigned(abc):
    with pytest.raises(AttributeError):
        abc.num_blocks = 5


def test_request_blocks_is_a_read_only_view(abc):
    with pytest.raises(ValueError):
        abc.request_blocks(0)[0] = 2


def test_inputs_are_converted_to_fixed_dtypes():
    t = make([0, 2], np.array([1, 0], dtype=np.int64), np.array([3], dtype=np.int32), timestamp=[7])
    assert t.blocks.dtype == np.int32 and t.input_length.dtype == np.int64 and t.timestamp.dtype == np.float64
    assert t.blocks.tolist() == [1, 0] and t.input_length.tolist() == [3]


def test_trace_does_not_alias_caller_arrays():
    base = np.array([5, 6], dtype=np.int64)
    t = make([0, 1, 2], [0, 1], base[:])
    base[0] = 99
    assert t.input_length.tolist() == [5, 6]


OFFSET_MSG = "offsets must have n+1 entries, start at 0 and end at len(blocks)"


@pytest.mark.parametrize("offsets,blocks,lengths,msg", [
    ([0, 1], [0, 1], [3, 4], OFFSET_MSG),            # n+1 = 3 entries needed, got 2
    ([0, 1, 2, 2], [0, 1], [3, 4], OFFSET_MSG),      # 4 entries for 2 requests
    ([1, 1, 2], [0, 1], [3, 4], OFFSET_MSG),         # does not start at 0
    ([0, 1, 3], [0, 1], [3, 4], OFFSET_MSG),         # ends past len(blocks)
    ([0, 1, 1], [0, 1], [3, 4], OFFSET_MSG),         # ends before len(blocks)
    ([[0, 1, 2]], [0, 1], [3, 4], OFFSET_MSG),       # 2-D
    ([0, 2, 1, 2], [0, 1], [3, 4, 5], "offsets must be non-decreasing"),
    ([0, 3, 1, 3], [0, 1, 0], [3, 4, 5], "offsets must be non-decreasing"),
])
def test_bad_offsets_rejected(offsets, blocks, lengths, msg):
    with pytest.raises(ValueError) as e:
        make(offsets, blocks, lengths, num_blocks=2)
    assert str(e.value) == msg


def test_bad_column_lengths_rejected():
    msg = "every per-request column must have one entry per request"
    with pytest.raises(ValueError) as e:
        make([0, 1, 2], [0, 1], [3, 4], output_length=[1])
    assert str(e.value) == msg
    with pytest.raises(ValueError) as e:
        make([0, 1, 2], [0, 1], [3, 4], timestamp=[1, 2, 3])
    assert str(e.value) == msg


@pytest.mark.parametrize("blocks,num_blocks", [([0, 2], 2), ([-1, 0], 2), ([0, 0], 0)])
def test_block_ids_out_of_range_rejected(blocks, num_blocks):
    with pytest.raises(ValueError) as e:
        make([0, 1, 2], blocks, [3, 4], num_blocks=num_blocks)
    assert str(e.value) == "block ids must lie in 0..num_blocks-1"


def test_valid_edge_cases_accepted():
    # all requests empty
    t = make([0, 0, 0], [], [1, 2], num_blocks=0)
    assert t.num_accesses == 0 and t.offsets.tolist() == [0, 0, 0]


def test_first_seen_and_predecessors(abc):
    # flat blocks [a b | b c | - | c a a] = [0 1 1 2 2 0 0]
    # first accesses: a at 0, b at 1, c at 3
    assert abc.first_seen.tolist() == [0, 1, 3]
    # a opens request 0 -> -1; b follows a in request 0 -> 0; c first follows b in request 1 -> 1
    assert abc.predecessors.tolist() == [-1, 0, 1]
    # after reordering, "first appearance" follows the new order: c a a | a b
    t = abc.take([3, 0])
    assert t.first_seen.tolist() == [1, 4, 0]
    assert t.predecessors.tolist() == [2, 0, -1]


def test_first_seen_empty_trace():
    t = Trace.from_requests([([], 3)])
    assert t.first_seen.tolist() == [] and t.predecessors.tolist() == []


def test_unused_block_ids_have_no_predecessor():
    for nb in (3, 1000, 100_000):
        poison = np.full(nb, 12_345_678, dtype=np.int64)  # make np.empty's leftovers visible
        del poison
        try:
            t = make([0, 2], [1, 0], [3], num_blocks=nb)
        except ValueError:
            continue  # rejecting ids that never appear is a fine fix too
        # one request [1, 0]: block 0 follows block 1, block 1 starts the request
        assert t.predecessors[:2].tolist() == [1, -1]
        assert (t.predecessors[2:] == -1).all()


@pytest.mark.parametrize("given, declared, expected", [(None, None, 512), (None, 64, 64), (16, 64, 16), (np.int64(4), None, 4)])
def test_block_size_resolution(given, declared, expected):
    from kvreplay.trace.model import resolve_block_size

    trace = Trace.from_requests([([1], 8)], block_size=declared)
    assert resolve_block_size(given, trace) == expected


@pytest.mark.parametrize("bad", [0, -4, 1.5, 16.0, True, "16"])
def test_block_size_must_be_a_positive_whole_number(bad):
    import kvreplay
    from kvreplay.errors import ConfigError

    trace = Trace.from_requests([([1], 8)])
    with pytest.raises(ConfigError, match="block_size must be a whole number of tokens >= 1"):
        kvreplay.replay(trace, "lru", 4, bad)
