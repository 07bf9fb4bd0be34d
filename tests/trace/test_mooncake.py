"""The Mooncake JSONL reader: columns, id remapping, chunking, the two parse paths, validation."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import msgspec
import numpy as np
import pytest

from conftest import jsonl, write
from kvreplay.errors import ConfigError, TraceError
from kvreplay.trace import jsonl as line_reading, load_trace, mooncake

DATA = Path(__file__).resolve().parents[1] / "data"
REPO = Path(__file__).resolve().parents[2]
SHARED_TRACES = REPO.parent / "shared" / "traces" / "mooncake"
COLUMNS = DATA / "mooncake_columns.jsonl"


def decoded(trace) -> list[list]:
    """Every request's ids as the file spelled them (needs keep_ids=True)."""
    orig = trace.original_ids
    return [[orig[b] for b in trace.request_blocks(i).tolist()] for i in range(len(trace))]


def assert_same_trace(a, b) -> None:
    for col in ("offsets", "blocks", "input_length", "output_length", "timestamp"):
        x, y = getattr(a, col), getattr(b, col)
        assert x.dtype == y.dtype, col
        assert np.array_equal(x, y), col
    assert a.num_blocks == b.num_blocks
    assert a.invalid_records == b.invalid_records
    if a.original_ids is None or b.original_ids is None:
        assert a.original_ids is None and b.original_ids is None
    else:
        assert list(a.original_ids) == list(b.original_ids)


def assert_dense_remap(trace, expected_ids: list[list]) -> None:
    """ids are dense 0..U-1, one per distinct file id, and decode back to the file's ids."""
    assert decoded(trace) == expected_ids
    distinct = {(type(h), h) for req in expected_ids for h in req}
    assert trace.num_blocks == len(distinct) == len(trace.original_ids)
    if trace.blocks.size:
        assert trace.blocks.min() == 0 and trace.blocks.max() == trace.num_blocks - 1
    assert sorted(set(trace.blocks.tolist())) == list(range(trace.num_blocks))


def force_slow_path(monkeypatch) -> None:
    monkeypatch.setattr(mooncake, "_fast_chunk", lambda lines: None)


def count_slow_calls(monkeypatch) -> list:
    calls = []
    real = mooncake._slow_chunk

    def spy(path, first_line, *rest, **kw):
        calls.append(first_line)
        return real(path, first_line, *rest, **kw)

    monkeypatch.setattr(mooncake, "_slow_chunk", spy)
    return calls


# ---------------------------------------------------------------- columns


def test_columns_by_hand():
    t = load_trace(COLUMNS)
    # 4 records with 3, 1, 0 and 2 hash_ids -> offsets 0, 3, 4, 4, 6.
    assert t.offsets.tolist() == [0, 3, 4, 4, 6]
    # distinct ids 100, 200, 300, 400 -> 0, 1, 2, 3 (first appearance and sorted order agree here):
    # [100,200,300] [100] [] [300,400] -> [0,1,2] [0] [] [2,3]
    assert t.blocks.tolist() == [0, 1, 2, 0, 2, 3]
    assert t.num_blocks == 4
    assert t.input_length.tolist() == [10, 5, 0, 8]
    assert t.output_length.tolist() == [7, 0, 3, 0]  # missing output_length -> 0
    assert t.timestamp.tolist() == [30.0, 10.0, 20.5, 0.0]  # missing timestamp -> 0
    assert t.offsets.dtype == np.int64 and t.blocks.dtype == np.int32
    assert t.input_length.dtype == np.int64 and t.output_length.dtype == np.int64
    assert t.timestamp.dtype == np.float64
    assert t.source == str(COLUMNS) and t.format == "mooncake"
    assert t.original_ids is None  # keep_ids defaults to False
    assert t.invalid_records is None
    assert t.total_prompt_tokens == 23  # 10 + 5 + 0 + 8
    assert t.num_accesses == 6


def test_file_order_by_default_and_sort_by_time():
    t = load_trace(COLUMNS)
    assert t.timestamp.tolist() == [30.0, 10.0, 20.5, 0.0]  # file order, not time order
    s = load_trace(COLUMNS, sort_by_time=True)
    # timestamps 30, 10, 20.5, 0 -> order lines 4, 2, 3, 1
    assert s.timestamp.tolist() == [0.0, 10.0, 20.5, 30.0]
    assert s.input_length.tolist() == [8, 5, 0, 10]
    assert s.output_length.tolist() == [0, 0, 3, 7]
    assert s.offsets.tolist() == [0, 2, 3, 3, 6]
    # blocks keep their dense ids: [2,3] [0] [] [0,1,2]
    assert s.blocks.tolist() == [2, 3, 0, 0, 1, 2]
    assert s.num_blocks == 4


def test_sort_by_time_is_stable_on_ties(tmp_path):
    p = write(tmp_path, "ties.jsonl", jsonl(
        {"timestamp": 5, "input_length": 1, "hash_ids": [1]},
        {"timestamp": 1, "input_length": 2, "hash_ids": [2]},
        {"timestamp": 5, "input_length": 3, "hash_ids": [3]},
        {"timestamp": 1, "input_length": 4, "hash_ids": [4]},
        {"timestamp": 5, "input_length": 5, "hash_ids": [5]},
    ))
    s = load_trace(p, sort_by_time=True)
    # ts 1: lines 2, 4 (file order kept); ts 5: lines 1, 3, 5
    assert s.input_length.tolist() == [2, 4, 1, 3, 5]
    assert s.timestamp.tolist() == [1.0, 1.0, 5.0, 5.0, 5.0]
    t = load_trace(p)
    assert t.input_length.tolist() == [1, 2, 3, 4, 5]


def test_blank_lines_are_skipped(tmp_path):
    p = write(tmp_path, "blank.jsonl",
              '\n{"input_length": 1, "hash_ids": [7]}\n   \n\r\n\t\n{"input_length": 2, "hash_ids": [7, 8]}\n\n')
    t = load_trace(p)
    assert t.input_length.tolist() == [1, 2]
    assert t.offsets.tolist() == [0, 1, 3]
    assert t.blocks.tolist() == [0, 0, 1]
    assert t.invalid_records is None


def test_last_line_without_newline_and_crlf(tmp_path):
    p = write(tmp_path, "crlf.jsonl", '{"input_length": 1, "hash_ids": [1]}\r\n{"input_length": 2, "hash_ids": [2]}')
    t = load_trace(p)
    assert t.input_length.tolist() == [1, 2]
    assert t.offsets.tolist() == [0, 1, 2]


def test_integral_float_lengths_are_accepted(tmp_path):
    # 2.0 and 3.0 are whole numbers: accepted as 2 and 3, on both parse paths.
    p = write(tmp_path, "f.jsonl", '{"input_length": 2.0, "hash_ids": [1], "output_length": 3.0, "timestamp": null}\n')
    t = load_trace(p)
    assert t.input_length.tolist() == [2] and t.output_length.tolist() == [3] and t.timestamp.tolist() == [0.0]


def test_unknown_format_is_config_error():
    with pytest.raises(ConfigError, match="unknown trace format 'csv'"):
        load_trace(COLUMNS, format="csv")
    assert len(load_trace(COLUMNS, format="mooncake")) == 4


def test_bad_on_invalid_value():
    with pytest.raises(ValueError, match="on_invalid must be 'error' or 'skip'"):
        load_trace(COLUMNS, on_invalid="ignore")


# ---------------------------------------------------------------- dense id remap


@pytest.mark.parametrize("ids", [
    pytest.param([[5, 3], [3, 9, 5], [0]], id="small-ints-lookup-table"),
    pytest.param([[2**62, -5, 1], [1, 2**62]], id="big-and-negative-unique"),
    pytest.param([[-1, -2], [-1]], id="negative-only"),
    pytest.param([[50_000_000, 3], [3]], id="large-nonnegative-unique"),
    pytest.param([[999_999_999_999_999_999, -999_999_999_999_999_999]], id="just-below-fast-path-limit"),
    pytest.param([[10**18 + 1, 2**63 - 1, -(2**63)]], id="int64-extremes"),
])
def test_integer_ids_remap(tmp_path, ids):
    p = write(tmp_path, "ints.jsonl", jsonl(*({"input_length": 4, "hash_ids": r} for r in ids)))
    t = load_trace(p, keep_ids=True)
    assert_dense_remap(t, ids)
    assert t.offsets.tolist() == np.cumsum([0] + [len(r) for r in ids]).tolist()


def test_integer_ids_are_sorted_by_value_in_the_dense_space(tmp_path):
    # ints remap in value order: -5 < 1 < 2**62 -> 0, 1, 2
    p = write(tmp_path, "big.jsonl", jsonl({"input_length": 4, "hash_ids": [2**62, -5, 1, 2**62]}))
    t = load_trace(p, keep_ids=True)
    assert t.blocks.tolist() == [2, 0, 1, 2]
    assert [int(x) for x in t.original_ids] == [-5, 1, 2**62]


def test_string_ids(tmp_path):
    ids = [["a", "bb", "a"], ["ccc"], ["bb", ""]]
    p = write(tmp_path, "s.jsonl", jsonl(*({"input_length": 3, "hash_ids": r} for r in ids)))
    t = load_trace(p, keep_ids=True)
    assert_dense_remap(t, ids)
    # a, bb, a | ccc | bb, "" -> blocks equal exactly where the strings are equal
    b = t.blocks.tolist()
    assert b[0] == b[2] and b[1] == b[4] and len({b[0], b[1], b[3], b[5]}) == 4


def test_int_and_string_one_are_different_blocks(tmp_path):
    ids = [[1, "1", 1, "x"], ["1", 2]]
    p = write(tmp_path, "mixed.jsonl", jsonl(*({"input_length": 3, "hash_ids": r} for r in ids)))
    t = load_trace(p, keep_ids=True)
    assert_dense_remap(t, ids)
    b = t.blocks.tolist()
    assert b[0] == b[2] != b[1] == b[4]
    assert t.num_blocks == 4  # 1, "1", "x", 2


def test_keep_ids_false_gives_same_blocks(tmp_path):
    ids = [[2**62, -5], ["s", 1]]
    p = write(tmp_path, "k.jsonl", jsonl(*({"input_length": 3, "hash_ids": r} for r in ids)))
    a, b = load_trace(p), load_trace(p, keep_ids=True)
    assert a.original_ids is None
    assert np.array_equal(a.blocks, b.blocks) and a.num_blocks == b.num_blocks == 4


def test_empty_hash_ids_everywhere(tmp_path):
    p = write(tmp_path, "e.jsonl", jsonl({"input_length": 3, "hash_ids": []}, {"input_length": 0, "hash_ids": []}))
    t = load_trace(p, keep_ids=True)
    assert t.offsets.tolist() == [0, 0, 0]
    assert t.blocks.size == 0 and t.num_blocks == 0
    assert list(t.original_ids) == []
    assert t.input_length.tolist() == [3, 0]


# ---------------------------------------------------------------- gzip and stdin


@pytest.mark.parametrize("name", ["trace.jsonl.gz", "no_suffix.jsonl"])
def test_gzip_input_recognised_by_magic(tmp_path, name):
    p = write(tmp_path, name, gzip.compress(COLUMNS.read_bytes()))
    assert_same_trace(load_trace(p), load_trace(COLUMNS))


def test_gzip_with_tiny_chunks(tmp_path, monkeypatch):
    p = write(tmp_path, "t.gz", gzip.compress(COLUMNS.read_bytes()))
    plain = load_trace(COLUMNS)
    monkeypatch.setattr(line_reading, "CHUNK_BYTES", 50)
    assert_same_trace(load_trace(p), plain)


def test_truncated_gzip(tmp_path):
    data = jsonl(*({"input_length": i, "hash_ids": [i, i + 1]} for i in range(200))).encode()
    p = write(tmp_path, "cut.jsonl.gz", gzip.compress(data)[:-20])
    with pytest.raises(TraceError) as e:
        load_trace(p)
    assert str(e.value).startswith(f"{p}: truncated or corrupt gzip data (")
    assert e.value.line is None and e.value.path == str(p)


def test_corrupt_gzip_after_magic(tmp_path):
    p = write(tmp_path, "bad.gz", b"\x1f\x8b" + bytes(range(256)))
    with pytest.raises(TraceError) as e:
        load_trace(p)
    assert str(e.value).startswith(f"{p}: truncated or corrupt gzip data (")


def test_garbage_binary_file(tmp_path):
    blob = bytes(range(256)) * 4  # not gzip; first "line" is bytes 0..9
    p = write(tmp_path, "garbage.bin", blob)
    first_line = blob.split(b"\n")[0]
    with pytest.raises(msgspec.DecodeError) as inner:
        msgspec.json.decode(first_line)
    with pytest.raises(TraceError) as e:
        load_trace(p)
    assert str(e.value) == f"{p}:1: invalid JSON ({inner.value})"
    assert e.value.line == 1


# ---------------------------------------------------------------- chunk boundaries and the two paths


def many_records(n: int, string_at: int | None = None) -> list[dict]:
    recs = []
    for i in range(n):
        ids = [i % 7, (i * 3) % 11 + 100, i + 1000][: 1 + i % 3]
        if i == string_at:
            ids = ids + ["str-id"]
        recs.append({"timestamp": (i * 37) % 5, "input_length": 10 + i, "output_length": i % 4, "hash_ids": ids})
    return recs


def test_tiny_chunks_give_identical_trace(tmp_path, monkeypatch):
    text = jsonl(*many_records(40))
    text = text.replace("\n", "\n\n", 3)  # a few blank lines too
    p = write(tmp_path, "m.jsonl", text)
    normal = load_trace(p, keep_ids=True)
    monkeypatch.setattr(line_reading, "CHUNK_BYTES", 50)
    calls = count_slow_calls(monkeypatch)
    chunked = load_trace(p, keep_ids=True)
    assert calls == []  # all-int chunks took the fast path
    assert_same_trace(chunked, normal)
    assert len(chunked) == 40


def test_line_longer_than_chunk(tmp_path, monkeypatch):
    recs = [{"input_length": 1, "hash_ids": list(range(60))}, {"input_length": 2, "hash_ids": [3]}]
    p = write(tmp_path, "long.jsonl", jsonl(*recs))
    normal = load_trace(p, keep_ids=True)
    monkeypatch.setattr(line_reading, "CHUNK_BYTES", 50)
    assert_same_trace(load_trace(p, keep_ids=True), normal)
    assert normal.offsets.tolist() == [0, 60, 61]


@pytest.mark.parametrize("chunk", [50, 64, 97, 1 << 20])
def test_error_line_number_across_chunks(tmp_path, monkeypatch, chunk):
    lines = [json.dumps({"input_length": i, "hash_ids": [i, i + 1]}) for i in range(12)]
    lines[4] = ""  # blank line 5 still counts as a line
    lines.insert(9, '{"input_length": 3, "hash_ids": [1, null]}')  # line 10
    p = write(tmp_path, "bad.jsonl", "\n".join(lines) + "\n")
    monkeypatch.setattr(line_reading, "CHUNK_BYTES", chunk)
    with pytest.raises(TraceError) as e:
        load_trace(p)
    assert str(e.value) == f"{p}:10: hash_ids: item 1 is null, expected an integer or a string"
    assert (e.value.line, e.value.field) == (10, "hash_ids")


@pytest.mark.parametrize("chunk", [50, 1 << 20])
def test_skip_line_numbers_across_chunks(tmp_path, monkeypatch, chunk):
    lines = [json.dumps({"input_length": i, "hash_ids": [i]}) for i in range(10)]
    lines[2] = "not json"             # line 3
    lines[6] = ""                     # line 7 blank: not invalid
    lines[8] = '{"hash_ids": [1]}'    # line 9
    p = write(tmp_path, "skip.jsonl", "\n".join(lines) + "\nnope\n")  # line 11
    monkeypatch.setattr(line_reading, "CHUNK_BYTES", chunk)
    t = load_trace(p, on_invalid="skip")
    assert t.invalid_records == {"count": 3, "first_lines": [3, 9, 11]}
    # valid: input_length 0,1,3,4,5,7,9 (2, 6 and 8 were replaced)
    assert t.input_length.tolist() == [0, 1, 3, 4, 5, 7, 9]


def test_fast_and_slow_paths_identical(tmp_path, monkeypatch):
    p = write(tmp_path, "ints.jsonl", jsonl(*many_records(30)))
    calls = count_slow_calls(monkeypatch)
    fast = load_trace(p, keep_ids=True)
    assert calls == []
    force_slow_path(monkeypatch)
    slow = load_trace(p, keep_ids=True)
    assert len(calls) == 1
    assert_same_trace(fast, slow)


def test_fast_and_slow_paths_identical_with_small_chunks(tmp_path, monkeypatch):
    p = write(tmp_path, "ints.jsonl", jsonl(*many_records(30)))
    monkeypatch.setattr(line_reading, "CHUNK_BYTES", 80)
    fast = load_trace(p, sort_by_time=True)
    force_slow_path(monkeypatch)
    assert_same_trace(fast, load_trace(p, sort_by_time=True))


def test_one_string_id_forces_slow_path_for_its_chunk_only(tmp_path, monkeypatch):
    recs = many_records(30, string_at=17)
    p = write(tmp_path, "onestr.jsonl", jsonl(*recs))
    monkeypatch.setattr(line_reading, "CHUNK_BYTES", 200)
    calls = count_slow_calls(monkeypatch)
    t = load_trace(p, keep_ids=True)
    assert len(calls) == 1 and calls[0] <= 18  # only the chunk holding line 18
    assert_dense_remap(t, [r["hash_ids"] for r in recs])
    ints = load_trace(write(tmp_path, "ints.jsonl", jsonl(*many_records(30))), keep_ids=True)
    # same requests apart from the extra id: columns agree
    for col in ("input_length", "output_length", "timestamp"):
        assert np.array_equal(getattr(t, col), getattr(ints, col))
    assert t.num_blocks == ints.num_blocks + 1


def test_whitespace_inside_lists(tmp_path, monkeypatch):
    # "[ ]" is an empty list and "[ 1 ,2 ]" two ids, whichever path parses them
    text = ('{"input_length": 1, "hash_ids": [ ]}\n{"input_length": 2, "hash_ids": [ 1 ,2 ]}\n'
            '{"input_length": 3, "hash_ids": []}\n{"input_length": 4, "hash_ids":[3]}\n')
    p = write(tmp_path, "ws.jsonl", text)
    t = load_trace(p, keep_ids=True)
    assert t.offsets.tolist() == [0, 0, 2, 2, 3]
    assert decoded(t) == [[], [1, 2], [], [3]]
    force_slow_path(monkeypatch)
    assert_same_trace(load_trace(p, keep_ids=True), t)


def test_fast_path_ids_are_exact_near_limit(tmp_path, monkeypatch):
    ids = [999_999_999_999_999_999, -999_999_999_999_999_998, 0, -0, 123456789012345678]
    p = write(tmp_path, "near.jsonl", '{"input_length": 1, "hash_ids": [%s]}\n' % ", ".join(map(str, ids)))
    calls = count_slow_calls(monkeypatch)
    t = load_trace(p, keep_ids=True)
    assert calls == []  # parsed by the fast path
    assert decoded(t) == [[999_999_999_999_999_999, -999_999_999_999_999_998, 0, 0, 123456789012345678]]
    assert t.num_blocks == 4  # 0 and -0 are one id


@pytest.mark.parametrize("line", [
    '{"input_length": 1, "hash_ids": [1]},{"input_length": 2, "hash_ids": [2]}',
    '{"input_length": 1, "hash_ids": [1]}, {"input_length": 2, "hash_ids": [2]}',
])
def test_two_records_on_one_line_are_rejected(tmp_path, line):
    p = write(tmp_path, "two.jsonl", line + "\n")
    with pytest.raises(TraceError) as e:
        load_trace(p)
    assert e.value.line == 1 and str(e.value).startswith(f"{p}:1: invalid JSON (")


def test_record_split_across_lines_is_rejected(tmp_path):
    p = write(tmp_path, "split.jsonl", '{"input_length": 1\n"hash_ids": [1]}\n')
    with pytest.raises(TraceError) as e:
        load_trace(p)
    assert str(e.value).startswith(f"{p}:1: invalid JSON (")


def test_two_records_on_one_line_slow_path_rejects(tmp_path, monkeypatch):
    # what the slow path (the spec) does with the same line
    force_slow_path(monkeypatch)
    line = '{"input_length": 1, "hash_ids": [1]},{"input_length": 2, "hash_ids": [2]}'
    p = write(tmp_path, "two.jsonl", line + "\n")
    with pytest.raises(TraceError) as e:
        load_trace(p)
    # msgspec stops at the ',' after the first object (byte 37)
    assert str(e.value) == f"{p}:1: {expected_message(line, None)}"
    assert "trailing characters" in str(e.value)


# ---------------------------------------------------------------- validation

BAD_RECORDS = [
    # (line, expected message after "FILE:1: ")
    ('{"input_length": 1, "hash_ids": [1]', None),  # invalid JSON: message from msgspec
    ("{'input_length': 1}", None),
    ("[1, 2]", "expected a JSON object, got [1,2]"),
    ("42", "expected a JSON object, got 42"),
    ('"text"', 'expected a JSON object, got "text"'),
    ("null", "expected a JSON object, got null"),
    ('{"hash_ids": [1]}', "input_length: missing"),
    ('{"input_length": -1, "hash_ids": [1]}', "input_length: expected a non-negative integer, got -1"),
    ('{"input_length": "5", "hash_ids": [1]}', 'input_length: expected a non-negative integer, got "5"'),
    ('{"input_length": 1.5, "hash_ids": [1]}', "input_length: expected a non-negative integer, got 1.5"),
    ('{"input_length": true, "hash_ids": [1]}', "input_length: expected a non-negative integer, got true"),
    ('{"input_length": null, "hash_ids": [1]}', "input_length: expected a non-negative integer, got null"),
    ('{"input_length": 1}', "hash_ids: missing"),
    ('{"input_length": 1, "hash_ids": 5}', "hash_ids: expected a list of integers or strings, got 5"),
    ('{"input_length": 1, "hash_ids": "1,2"}', 'hash_ids: expected a list of integers or strings, got "1,2"'),
    ('{"input_length": 1, "hash_ids": null}', "hash_ids: expected a list of integers or strings, got null"),
    ('{"input_length": 1, "hash_ids": {"a": 1}}', 'hash_ids: expected a list of integers or strings, got {"a":1}'),
    ('{"input_length": 1, "hash_ids": [1, 2.5]}', "hash_ids: item 1 is 2.5, expected an integer or a string"),
    ('{"input_length": 1, "hash_ids": [1.0]}', "hash_ids: item 0 is 1.0, expected an integer or a string"),
    ('{"input_length": 1, "hash_ids": [null]}', "hash_ids: item 0 is null, expected an integer or a string"),
    ('{"input_length": 1, "hash_ids": [1, [2]]}', "hash_ids: item 1 is [2], expected an integer or a string"),
    ('{"input_length": 1, "hash_ids": [3, 4, true]}', "hash_ids: item 2 is true, expected an integer or a string"),
    ('{"input_length": 1, "hash_ids": [1], "timestamp": "x"}', 'timestamp: expected a number, got "x"'),
    ('{"input_length": 1, "hash_ids": [1], "timestamp": true}', "timestamp: expected a number, got true"),
    ('{"input_length": 1, "hash_ids": [1], "timestamp": [1]}', "timestamp: expected a number, got [1]"),
    ('{"input_length": 1, "hash_ids": [1], "timestamp": NaN}', None),  # not JSON
    ('{"input_length": 1, "hash_ids": [1], "timestamp": 1e400}', None),  # out of range
    ('{"input_length": 1, "hash_ids": [1], "output_length": -3}', "output_length: expected a non-negative integer, got -3"),
    ('{"input_length": 1, "hash_ids": [1], "output_length": 2.5}', "output_length: expected a non-negative integer, got 2.5"),
    ('{"input_length": 1, "hash_ids": [1], "output_length": "2"}', 'output_length: expected a non-negative integer, got "2"'),
    ('{"input_length": 1, "hash_ids": [1], "output_length": false}', "output_length: expected a non-negative integer, got false"),
]


def expected_message(line: str, msg: str | None) -> str:
    if msg is not None:
        return msg
    with pytest.raises(msgspec.DecodeError) as e:
        msgspec.json.decode(line.encode())
    return f"invalid JSON ({e.value})"


@pytest.mark.parametrize("slow", [False, True], ids=["auto", "slow-only"])
@pytest.mark.parametrize("line,msg", BAD_RECORDS)
def test_bad_record_message(tmp_path, monkeypatch, line, msg, slow):
    if slow:
        force_slow_path(monkeypatch)
    p = write(tmp_path, "bad.jsonl", line + "\n")
    with pytest.raises(TraceError) as e:
        load_trace(p)
    assert str(e.value) == f"{p}:1: {expected_message(line, msg)}"
    assert e.value.line == 1
    assert e.value.path == str(p)


def test_invalid_json_message_exact(tmp_path):
    p = write(tmp_path, "trunc.jsonl", '{"input_length": 5, "hash_ids": [1,2]\n')
    with pytest.raises(TraceError) as e:
        load_trace(p)
    assert str(e.value) == f"{p}:1: invalid JSON (Input data was truncated)"
    assert e.value.field is None


def test_long_value_is_shortened_in_message(tmp_path):
    p = write(tmp_path, "long.jsonl", '{"input_length": 1, "hash_ids": "%s"}\n' % ("x" * 100))
    with pytest.raises(TraceError) as e:
        load_trace(p)
    # 40 characters max: the first 37 of the JSON text + "..."
    assert str(e.value) == f'{p}:1: hash_ids: expected a list of integers or strings, got "{"x" * 36}...'


def test_first_bad_line_after_blank_line():
    p = DATA / "bad_line3.jsonl"  # line 1 ok, line 2 blank, line 3 input_length -4
    with pytest.raises(TraceError) as e:
        load_trace(p)
    assert str(e.value) == f"{p}:3: input_length: expected a non-negative integer, got -4"
    assert (e.value.line, e.value.field) == (3, "input_length")


def test_first_of_several_bad_lines_is_reported(tmp_path):
    p = write(tmp_path, "several.jsonl",
              '{"input_length": 1, "hash_ids": [1]}\n\n{"input_length": 1}\n{"hash_ids": [1]}\n')
    with pytest.raises(TraceError) as e:
        load_trace(p)
    assert str(e.value) == f"{p}:3: hash_ids: missing"


def test_skip_invalid_records():
    t = load_trace(DATA / "bad_line3.jsonl", on_invalid="skip")
    assert t.invalid_records == {"count": 1, "first_lines": [3]}
    assert t.input_length.tolist() == [4, 4]
    assert t.offsets.tolist() == [0, 1, 2]
    assert t.num_blocks == 2


def test_skip_reports_at_most_20_first_lines(tmp_path):
    text = "bad\n" * 25 + '{"input_length": 7, "hash_ids": [1]}\n' + "{}\n"
    t = load_trace(write(tmp_path, "many.jsonl", text), on_invalid="skip")
    assert t.invalid_records == {"count": 26, "first_lines": list(range(1, 21))}
    assert t.input_length.tolist() == [7]


def test_skip_with_everything_invalid(tmp_path):
    p = write(tmp_path, "allbad.jsonl", 'x\n\n{"input_length": -1, "hash_ids": []}\n[]\n')
    with pytest.raises(TraceError) as e:
        load_trace(p, on_invalid="skip")
    assert str(e.value) == f"{p}: no valid records (3 invalid)"


@pytest.mark.parametrize("content", ["", "\n", "\n  \n\r\n"])
def test_empty_file(tmp_path, content):
    p = write(tmp_path, "empty.jsonl", content)
    with pytest.raises(TraceError) as e:
        load_trace(p)
    assert str(e.value) == f"{p}: no requests (empty trace)"
    with pytest.raises(TraceError) as e:
        load_trace(p, on_invalid="skip")
    assert str(e.value) == f"{p}: no requests (empty trace)"


def test_empty_gzip(tmp_path):
    p = write(tmp_path, "empty.gz", gzip.compress(b""))
    with pytest.raises(TraceError) as e:
        load_trace(p)
    assert str(e.value) == f"{p}: no requests (empty trace)"


def test_missing_file(tmp_path):
    p = tmp_path / "nope.jsonl"
    with pytest.raises(TraceError) as e:
        load_trace(p)
    assert str(e.value) == f"{p}: no such file"


def test_directory(tmp_path):
    with pytest.raises(TraceError) as e:
        load_trace(tmp_path)
    assert str(e.value) == f"{tmp_path}: is a directory, expected a trace file"


@pytest.mark.parametrize("ids", [[2**63], [2**64 - 1], [10**30], [-(2**63) - 1]], ids=["2**63", "2**64-1", "10**30", "-2**63-1"])
def test_ids_outside_int64_do_not_crash(tmp_path, ids):
    p = write(tmp_path, "huge.jsonl", '{"input_length": 1, "hash_ids": [%d, 1, %d]}\n' % (ids[0], ids[0]))
    try:
        t = load_trace(p, keep_ids=True)
    except TraceError as e:
        assert e.line == 1 and e.field == "hash_ids"  # a clear rejection is acceptable
    else:
        assert decoded(t) == [[ids[0], 1, ids[0]]]
        assert t.num_blocks == 2


def test_input_length_beyond_int64_is_rejected(tmp_path):
    p = write(tmp_path, "hugelen.jsonl", '{"input_length": %d, "hash_ids": [1]}\n' % 2**63)
    with pytest.raises(TraceError) as e:
        load_trace(p)
    assert e.value.line == 1 and e.value.field == "input_length"


@pytest.mark.parametrize("value", ["1e300", str(2**63), str(2**64 + 5)])
def test_output_length_beyond_int64_is_rejected(tmp_path, value):
    p = write(tmp_path, "hugeout.jsonl", '{"input_length": 1, "hash_ids": [1], "output_length": %s}\n' % value)
    with pytest.raises(TraceError) as e:
        load_trace(p)
    assert e.value.line == 1 and e.value.field == "output_length"


def test_huge_integer_timestamp_is_rejected(tmp_path):
    p = write(tmp_path, "hugets.jsonl", '{"input_length": 1, "hash_ids": [1], "timestamp": %d}\n' % 10**400)
    with pytest.raises(TraceError) as e:
        load_trace(p)
    assert e.value.line == 1 and e.value.field == "timestamp"


# ---------------------------------------------------------------- real traces (skip without ../shared)


@pytest.fixture(params=["conversation_trace.jsonl", "synthetic_trace.jsonl"])
def real_trace(request) -> Path:
    p = SHARED_TRACES / request.param
    if not p.is_file():
        pytest.skip(f"{p} not present (../shared is absent)")
    return p


def test_real_trace_columns_match_plain_json(real_trace):
    recs = [json.loads(line) for line in real_trace.read_text().splitlines() if line.strip()]
    t = load_trace(real_trace, keep_ids=True)
    assert len(t) == len(recs)
    assert t.input_length.tolist() == [r["input_length"] for r in recs]
    assert t.output_length.tolist() == [r.get("output_length", 0) for r in recs]
    assert t.timestamp.tolist() == [float(r.get("timestamp", 0)) for r in recs]
    assert t.offsets.tolist() == np.cumsum([0] + [len(r["hash_ids"]) for r in recs]).tolist()
    assert decoded(t) == [r["hash_ids"] for r in recs]
    assert t.num_blocks == len({h for r in recs for h in r["hash_ids"]})


def test_real_trace_paths_and_chunks_agree(real_trace, monkeypatch):
    normal = load_trace(real_trace, keep_ids=True)
    monkeypatch.setattr(line_reading, "CHUNK_BYTES", 4096)
    assert_same_trace(load_trace(real_trace, keep_ids=True), normal)
    force_slow_path(monkeypatch)
    assert_same_trace(load_trace(real_trace, keep_ids=True), normal)


def test_real_trace_gzip_equals_plain(real_trace, tmp_path):
    p = write(tmp_path, "t.jsonl.gz", gzip.compress(real_trace.read_bytes(), compresslevel=1))
    assert_same_trace(load_trace(p), load_trace(real_trace))


def test_output_lengths_beyond_float_precision_stay_exact(tmp_path):
    # 2**53 + 1 is the first integer a float64 cannot hold; the fast path must not round it.
    path = tmp_path / "big_out.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 4, "output_length": 9007199254740993, "hash_ids": [1]}\n')
    assert load_trace(path).output_length.tolist() == [2**53 + 1]
