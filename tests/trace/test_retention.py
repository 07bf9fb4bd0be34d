"""Retention priorities in traces (trace/retention.py): read, checked, kept by take, merge,
slice and the Mooncake writer, refused where a format cannot hold them."""

from __future__ import annotations

import pytest

import kvreplay
from kvreplay.errors import ConfigError, TraceError
from kvreplay.trace.ops import merge
from kvreplay.trace.slicing import slice_trace
from kvreplay.trace.writers import write_trace

RECORDS = [
    '{"timestamp": 0, "input_length": 100, "hash_ids": [1, 2], "priority": 90}',
    '{"timestamp": 5, "input_length": 100, "hash_ids": [1, 3], "priority_ranges": [[0, 64, 80, 30000], [64, null, 20, null]]}',
    '{"timestamp": 9, "input_length": 100, "hash_ids": [1, 4]}',
]
RANGES = [[(0, None, 90, None)], [(0, 64, 80, 30000.0), (64, None, 20, None)], []]


def write(tmp_path, lines, name="t.jsonl"):
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


def ranges(trace):
    return [trace.retention.ranges(i) for i in range(len(trace))]


def test_read_and_written_back(tmp_path):
    t = kvreplay.load_trace(str(write(tmp_path, RECORDS)))
    assert ranges(t) == RANGES
    assert t.summary()["requests_with_priorities"] == 2
    out = tmp_path / "out.jsonl"
    write_trace(t, str(out))
    assert ranges(kvreplay.load_trace(str(out))) == RANGES
    # a file without priorities has no column
    plain = kvreplay.load_trace(str(write(tmp_path, [RECORDS[2]], "plain.jsonl")))
    assert plain.retention is None and "requests_with_priorities" not in plain.summary()


def test_kept_by_take_slice_and_merge(tmp_path):
    t = kvreplay.load_trace(str(write(tmp_path, RECORDS)))
    assert ranges(t.take([2, 0])) == [[], RANGES[0]]
    assert ranges(slice_trace(t, requests=(1, 3))) == RANGES[1:]
    plain = kvreplay.load_trace(str(write(tmp_path, [RECORDS[2]], "plain.jsonl")))
    merged = merge([t, plain])
    assert sorted(map(str, ranges(merged))) == sorted(map(str, RANGES + [[]]))


@pytest.mark.parametrize("record, message", [
    ('{"input_length": 1, "hash_ids": [1], "priority": 101}', "priority: a priority must be a whole number from 0 to 100"),
    ('{"input_length": 1, "hash_ids": [1], "priority": 9.5}', "priority: a priority must be a whole number"),
    ('{"input_length": 1, "hash_ids": [1], "priority_ranges": [[5, 5, 50, null]]}', "priority_ranges: a range's end"),
    ('{"input_length": 1, "hash_ids": [1], "priority_ranges": [[0, null, 50, 0]]}', "priority_ranges: a duration"),
    ('{"input_length": 1, "hash_ids": [1], "priority_ranges": [[0, 50]]}', "priority_ranges: expected a list of"),
    ('{"input_length": 1, "hash_ids": [1], "priority": 1, "priority_ranges": []}', "priority: give priority or"),
])
def test_bad_priorities_name_the_line_and_field(tmp_path, record, message):
    path = write(tmp_path, ['{"input_length": 1, "hash_ids": [0]}', record])
    with pytest.raises(TraceError, match=f":2: {message}"):
        kvreplay.load_trace(str(path))


def test_bailian_cannot_hold_them(tmp_path):
    from dataclasses import replace

    t = replace(kvreplay.load_trace(str(write(tmp_path, RECORDS))), block_size=16)
    with pytest.raises(ConfigError, match="cannot hold"):
        write_trace(t, str(tmp_path / "b.jsonl"), "bailian")
    assert not (tmp_path / "b.jsonl").exists()


def test_synth_gives_system_prompts_a_priority_class():
    from kvreplay.trace.synth import synth

    t = synth(300, block_size=64, system_priority=90, system_priority_ms=60_000.0)
    plain = synth(300, block_size=64)
    assert plain.retention is None and t.blocks.tolist() == plain.blocks.tolist()  # the same workload
    rows = ranges(t)
    assert all(len(r) <= 1 for r in rows) and sum(map(len, rows)) > 250
    for r, length in zip(rows, t.input_length.tolist()):
        for start, end, priority, duration in r:
            assert (start, priority, duration) == (0, 90, 60_000.0) and 0 < end <= length
    # requests of one session share their system prompt, so their ranges end at the same token
    ends = {}
    for sess, r in zip(t.session.tolist(), rows):
        if r:
            ends.setdefault(sess, set()).add(r[0][1])
    assert all(len(v) == 1 for v in ends.values())
    with pytest.raises(ConfigError, match=r"system_priority_ms \(--system-priority-ms\) needs system_priority"):
        synth(10, system_priority_ms=5.0)
