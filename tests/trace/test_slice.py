"""slice_trace: request ranges, time windows, sessions, dense renumbering; and `kvreplay slice`."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import MOONCAKE, shared_path
from kvreplay.cli import main
from kvreplay.errors import ConfigError
from kvreplay.trace import Trace, load_trace
from kvreplay.trace.slicing import parse_request_range, parse_time_range, slice_trace
from kvreplay.trace.writers import write_trace
from strategies import requests as request_lists

# Five requests, one second apart from t=5000 ms; file ids 10..15 are dense 0..5 (numeric order).
#   r0 [10, 11] L 20 t 5000 | r1 [10, 12] L 25 t 6000 | r2 [13] L 5 t 7000
#   r3 [10, 11, 14] L 30 t 8000 | r4 [15] L 8 t 9000                    prompt tokens 88
FIVE = (
    '{"timestamp": 5000, "input_length": 20, "output_length": 1, "hash_ids": [10, 11]}\n'
    '{"timestamp": 6000, "input_length": 25, "output_length": 2, "hash_ids": [10, 12]}\n'
    '{"timestamp": 7000, "input_length": 5, "output_length": 3, "hash_ids": [13]}\n'
    '{"timestamp": 8000, "input_length": 30, "output_length": 4, "hash_ids": [10, 11, 14]}\n'
    '{"timestamp": 9000, "input_length": 8, "output_length": 5, "hash_ids": [15]}\n'
)


@pytest.fixture
def five(tmp_path) -> Path:
    path = tmp_path / "five.jsonl"
    path.write_text(FIVE)
    return path


def original(trace) -> list[list]:
    return [[trace.original_ids[b] for b in trace.request_blocks(i).tolist()] for i in range(len(trace))]


def kept_lengths(trace) -> list[int]:
    return trace.input_length.tolist()


# ---------------------------------------------------------------- request ranges


def test_request_range_renumbers_densely(five):
    part = slice_trace(load_trace(five, keep_ids=True), (1, 3))
    assert kept_lengths(part) == [25, 5]
    assert part.blocks.tolist() == [0, 1, 2]  # dense 0, 2, 3 (file 10, 12, 13) become 0, 1, 2
    assert part.offsets.tolist() == [0, 2, 3]
    assert part.num_blocks == 3 and part.original_ids.tolist() == [10, 12, 13]
    assert part.timestamp.tolist() == [6000.0, 7000.0] and part.output_length.tolist() == [2, 3]


@pytest.mark.parametrize("requests, lengths", [
    ((-2, None), [30, 8]),          # the last two
    (slice(-2, None), [30, 8]),
    ((3, 100), [30, 8]),            # stop past the end clamps, as for a list
    ((-100, 1), [20]),              # start before the beginning clamps
    ((None, None), [20, 25, 5, 30, 8]),
    ((None, -4), [20]),
])
def test_request_ranges_follow_python(five, requests, lengths):
    assert kept_lengths(slice_trace(load_trace(five), requests)) == lengths


def test_last_two_keep_their_original_ids(five):
    part = slice_trace(load_trace(five, keep_ids=True), (-2, None))
    assert part.blocks.tolist() == [0, 1, 2, 3] and part.original_ids.tolist() == [10, 11, 14, 15]
    assert original(part) == [[10, 11, 14], [15]]


@pytest.mark.parametrize("requests", [(4, 2), (5, None), (100, 200), (-1, -1)])
def test_empty_range_is_a_clear_error(five, requests):
    with pytest.raises(ConfigError, match=r"the slice is empty: no request passes requests .* of 5\)"):
        slice_trace(load_trace(five), requests)


def test_bad_range_arguments(five):
    trace = load_trace(five)
    with pytest.raises(ConfigError, match="step"):
        slice_trace(trace, slice(0, 4, 2))
    with pytest.raises(ConfigError, match="integers"):
        slice_trace(trace, (0.5, 2))
    with pytest.raises(ConfigError, match=r"\(start, stop\)"):
        slice_trace(trace, 3)


def test_whole_trace_slice_is_the_same_trace(five):
    trace = load_trace(five)
    part = slice_trace(trace, (None, None))
    for col in ("offsets", "blocks", "input_length", "output_length", "timestamp"):
        assert np.array_equal(getattr(part, col), getattr(trace, col))
    assert part.num_blocks == trace.num_blocks


# ---------------------------------------------------------------- time windows


@pytest.mark.parametrize("time_ms, lengths", [
    ((6000, 8000), [25, 5]),        # half-open: 8000 is out
    ((None, 6000), [20]),
    ((8500, None), [8]),
    ((7000.5, 7999.9), None),       # nothing in between
])
def test_time_windows(five, time_ms, lengths):
    trace = load_trace(five)
    if lengths is None:
        with pytest.raises(ConfigError, match=r"the slice is empty: no request passes time 7000.5:7999.9 ms "
                                              r"\(the trace's timestamps span 5000..9000 ms\)"):
            slice_trace(trace, time_ms=time_ms)
    else:
        assert kept_lengths(slice_trace(trace, time_ms=time_ms)) == lengths


def test_time_keeps_file_order(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"timestamp": 30, "input_length": 1, "hash_ids": []}\n{"timestamp": 10, "input_length": 2, "hash_ids": []}\n'
                    '{"timestamp": 20, "input_length": 3, "hash_ids": []}\n')
    assert kept_lengths(slice_trace(load_trace(path), time_ms=(15, 31))) == [1, 3]


def test_requests_and_time_intersect(five):
    assert kept_lengths(slice_trace(load_trace(five), (0, 3), (6000, None))) == [25, 5]


def test_parse_ranges():
    assert parse_request_range("1:3") == (1, 3)
    assert parse_request_range("-100:") == (-100, None)
    assert parse_request_range(":1_000") == (None, 1000)
    stamps = np.array([5000.0, 9000.0])
    assert parse_time_range("1s:3s", stamps) == (6000.0, 8000.0)      # durations after the earliest request
    assert parse_time_range("1.5s:", stamps) == (6500.0, None)
    assert parse_time_range("0:3000ms", stamps) == (5000.0, 8000.0)   # 0 needs no unit
    assert parse_time_range("@6000ms:@8000MS", stamps) == (6000.0, 8000.0)  # timestamps on the file's clock
    assert parse_time_range("@6s:", stamps) == (6000.0, None)
    assert parse_time_range(":", stamps) == (None, None)
    for bad in ("3", "1:2:3", "a:"):
        with pytest.raises(ConfigError):
            parse_request_range(bad)
    for bad in ("3", "x:", "1:infms", "nan:", "1:3"):
        with pytest.raises(ConfigError):
            parse_time_range(bad, stamps)
    with pytest.raises(ConfigError, match="--time 1:3s: 1 what\\? write 1s or 1ms"):
        parse_time_range("1:3s", stamps)


# ---------------------------------------------------------------- sessions


def with_sessions(sessions) -> Trace:
    base = Trace.from_requests([([i, 100], 10 + i) for i in range(len(sessions))])
    return replace(base, session=np.array(sessions))


def test_first_sessions_by_appearance():
    trace = with_sessions([5, 3, 5, 9, 3])
    assert kept_lengths(slice_trace(trace, sessions=1)) == [10, 12]           # session 5 came first
    part = slice_trace(trace, sessions=2)
    assert kept_lengths(part) == [10, 11, 12, 14]
    assert part.session.tolist() == [0, 1, 0, 1]                              # renumbered 0..S-1
    assert kept_lengths(slice_trace(trace, sessions=10)) == [10, 11, 12, 13, 14]


def test_sessions_are_renumbered_in_any_slice():
    part = slice_trace(with_sessions([0, 1, 0, 2, 1]), (1, None))
    assert part.session.tolist() == [0, 1, 2, 0]
    # blocks: request i uses [i, 100] -> dense (i, 1) in from_requests order 0,1,2,...; request 0's id is gone
    assert part.num_blocks == 5 and part.blocks.tolist() == [1, 0, 2, 0, 3, 0, 4, 0]


def test_sessions_need_a_session_column(five):
    with pytest.raises(ConfigError, match=r"sessions: the trace \(mooncake\) has no sessions"):
        slice_trace(load_trace(five), sessions=1)
    with pytest.raises(ConfigError, match=">= 1"):
        slice_trace(with_sessions([0]), sessions=0)


# ---------------------------------------------------------------- properties


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=request_lists(max_requests=25), bounds=st.tuples(st.none() | st.integers(-30, 30), st.none() | st.integers(-30, 30)))
def test_slice_is_the_list_slice_and_round_trips(tmp_path, data, bounds):
    reqs, _ = data
    trace = Trace.from_requests(reqs)
    expected = reqs[bounds[0]:bounds[1]]
    if not expected:
        with pytest.raises(ConfigError, match="empty"):
            slice_trace(trace, bounds)
        return
    part = slice_trace(trace, bounds)
    assert [[part.original_ids[b] for b in part.request_blocks(i).tolist()] for i in range(len(part))] == [r[0] for r in expected]
    assert part.input_length.tolist() == [r[1] for r in expected]
    used = sorted(set(part.blocks.tolist()))
    assert used == list(range(part.num_blocks))  # dense: every id is used
    assert part.blocks.size == 0 or all(np.diff([trace.original_ids.index(h) for h in part.original_ids]) > 0)  # order kept
    write_trace(part, tmp_path / "p.jsonl")
    again = load_trace(tmp_path / "p.jsonl")
    for col in ("offsets", "blocks", "input_length", "output_length", "timestamp"):
        assert np.array_equal(getattr(part, col), getattr(again, col)), col
    assert again.num_blocks == part.num_blocks


def test_shared_trace_slices_replay_like_the_prefix(tmp_path):
    """A slice of the first N requests is the same workload: same accesses per request, read back exactly."""
    src = shared_path(MOONCAKE / "conversation_trace.jsonl")
    trace = load_trace(src, keep_ids=True)
    part = slice_trace(trace, (0, 1000))
    assert len(part) == 1000
    assert np.array_equal(part.original_ids[part.blocks], trace.original_ids[trace.blocks[: trace.offsets[1000]]])
    write_trace(part, tmp_path / "p.jsonl.gz")
    again = load_trace(tmp_path / "p.jsonl.gz")
    assert np.array_equal(again.blocks, part.blocks) and again.num_blocks == part.num_blocks


# ---------------------------------------------------------------- kvreplay slice


class Result:
    def __init__(self, returncode, stderr):
        self.returncode, self.stderr = returncode, stderr


@pytest.fixture
def cli(capsys):
    """`kvreplay ...` in this process (a subprocess per call costs a second of imports)."""
    def run(*args):
        code = main([str(a) for a in args])
        return Result(code, capsys.readouterr().err)
    return run


def test_slice_cli_subprocess_exit_code(five):
    r = subprocess.run([sys.executable, "-m", "kvreplay.cli", "slice", five, "-o", five, "--requests", "0:1"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr == f"kvreplay: -o {five}: that is the input file; write to another name\n"
    assert five.read_text() == FIVE


def test_slice_cli_requests(five, tmp_path, cli):
    out = tmp_path / "out.jsonl"
    r = cli("slice", five, "-o", out, "--requests", "1:3")
    assert r.returncode == 0, r.stderr
    assert out.read_text() == (
        '{"timestamp": 6000, "input_length": 25, "output_length": 2, "hash_ids": [0, 1]}\n'
        '{"timestamp": 7000, "input_length": 5, "output_length": 3, "hash_ids": [2]}\n'
    )
    # 25 + 5 = 30 of 88 prompt tokens = 34.09%
    assert r.stderr == f"kept 2 of 5 requests, 34.1% of prompt tokens -> {out} (mooncake)\n"
    r = cli("slice", five, "-o", out, "--requests=-1:", "--keep-ids")
    assert r.returncode == 0, r.stderr
    assert out.read_text() == '{"timestamp": 9000, "input_length": 8, "output_length": 5, "hash_ids": [15]}\n'


@pytest.mark.parametrize("window", ["1s:3s", "@6000ms:@8000ms", "1s:@8000ms", "1000ms:3000ms"])
def test_slice_cli_time(five, tmp_path, cli, window):
    out = tmp_path / "out.jsonl"
    r = cli("slice", five, "-o", out, "--time", window, "--keep-ids")
    assert r.returncode == 0, r.stderr
    assert out.read_text() == (
        '{"timestamp": 6000, "input_length": 25, "output_length": 2, "hash_ids": [10, 12]}\n'
        '{"timestamp": 7000, "input_length": 5, "output_length": 3, "hash_ids": [13]}\n'
    )


def test_slice_cli_errors(five, tmp_path, cli):
    before = five.read_bytes()
    r = cli("slice", five, "-o", five, "--requests", "0:1")
    assert r.returncode == 2 and "that is the input file" in r.stderr and "Traceback" not in r.stderr
    assert five.read_bytes() == before
    out = tmp_path / "out.jsonl"
    cases = {
        ("--requests", "3:3"): "kvreplay: the slice is empty: no request passes requests 3:3 (positions 3..3 of 5)\n",
        ("--time", "100s:"): "kvreplay: the slice is empty: no request passes time 105000: ms "
                            "(the trace's timestamps span 5000..9000 ms)\n",
        ("--sessions", "2"): f"kvreplay: --sessions 2: {five} (mooncake) has no sessions\n",
        ("--time", "1:3"): "kvreplay: --time 1:3: 1 what? write 1s or 1ms\n",
        ("--requests", "a:b"): "kvreplay: --requests a:b: 'a' is not a whole number\n",
        (): "kvreplay: slice: give --requests A:B, --time T0:T1 and/or --sessions N\n",
    }
    for args, message in cases.items():
        r = cli("slice", five, "-o", out, *args)
        assert (r.returncode, r.stderr) == (2, message), args
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".kvreplay-")]
    with pytest.raises(SystemExit) as exit_:  # argparse rejects it
        cli("slice", five, "-o", out, "--sessions", "0")
    assert exit_.value.code == 2


def test_slice_cli_bailian_keeps_format_and_sessions(tmp_path, cli):
    src = tmp_path / "b.jsonl"
    write_trace(replace(with_sessions([0, 1, 0, 2, 1]), block_size=16), src, "bailian")
    out = tmp_path / "out.jsonl"
    r = cli("slice", src, "-o", out, "--sessions", "2")
    assert r.returncode == 0, r.stderr
    assert r.stderr.endswith(f"-> {out} (bailian)\n")
    again = load_trace(out)
    assert again.format == "bailian" and again.input_length.tolist() == [10, 11, 12, 14]
    assert again.session.tolist() == [0, 1, 0, 1]
