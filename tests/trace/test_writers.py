"""Trace writers (Mooncake and Bailian JSONL), atomic output, and `kvreplay convert`."""

from __future__ import annotations

import gzip
import json
import os
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
from kvreplay.errors import ConfigError, OutputError
import kvreplay
from kvreplay.trace import FORMATS, Trace, load_trace, writers
from kvreplay.trace.writers import encode_trace, refuse_overwrite, write_trace
from strategies import requests as request_lists

COLUMNS = ("offsets", "blocks", "input_length", "output_length", "timestamp")


def assert_same_columns(a: Trace, b: Trace) -> None:
    for col in COLUMNS:
        x, y = getattr(a, col), getattr(b, col)
        assert x.dtype == y.dtype, col
        assert np.array_equal(x, y), col
    assert a.num_blocks == b.num_blocks


def leftovers(directory: Path) -> list[str]:
    return [p.name for p in directory.iterdir() if p.name.startswith(".kvreplay-")]


# Two requests over blocks "a", "b", "c" (dense 0, 1, 2 by first appearance).
HAND = Trace.from_requests([(["a", "b"], 10, 0.0, 5), (["a", "c"], 7, 1.5, 0)])
HAND_MOONCAKE = (
    '{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": [0, 1]}\n'
    '{"timestamp": 1.5, "input_length": 7, "output_length": 0, "hash_ids": [0, 2]}\n'
)


# ---------------------------------------------------------------- exact text


def test_mooncake_text_by_hand(tmp_path):
    out = tmp_path / "t.jsonl"
    write_trace(HAND, out)
    assert out.read_text() == HAND_MOONCAKE


def test_mooncake_original_ids_are_the_files(tmp_path):
    out = tmp_path / "t.jsonl"
    write_trace(HAND, out, original_ids=True)
    assert out.read_text() == (
        '{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": ["a", "b"]}\n'
        '{"timestamp": 1.5, "input_length": 7, "output_length": 0, "hash_ids": ["a", "c"]}\n'
    )


def test_mooncake_numeric_original_ids(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text('{"input_length": 3, "hash_ids": [70, 9]}\n{"input_length": 4, "hash_ids": [9, 123456789012]}\n')
    trace = load_trace(src, keep_ids=True)  # dense ids by numeric order: 9 -> 0, 70 -> 1, 123456789012 -> 2
    assert trace.blocks.tolist() == [1, 0, 0, 2]
    write_trace(trace, tmp_path / "dense.jsonl")
    write_trace(trace, tmp_path / "orig.jsonl", original_ids=True)
    assert (tmp_path / "dense.jsonl").read_text() == (
        '{"timestamp": 0, "input_length": 3, "output_length": 0, "hash_ids": [1, 0]}\n'
        '{"timestamp": 0, "input_length": 4, "output_length": 0, "hash_ids": [0, 2]}\n'
    )
    assert (tmp_path / "orig.jsonl").read_text() == (
        '{"timestamp": 0, "input_length": 3, "output_length": 0, "hash_ids": [70, 9]}\n'
        '{"timestamp": 0, "input_length": 4, "output_length": 0, "hash_ids": [9, 123456789012]}\n'
    )


def test_original_ids_keep_commas_colons_and_huge_ints(tmp_path):
    base = Trace.from_requests([(["x", "y"], 3)])
    for ids, text in [
        (np.array(["a, b", "c: d"]), '["a, b", "c: d"]'),      # numpy strings: spaces inside are not touched
        (["a,b", "c:d"], '["a,b", "c:d"]'),
        ([2**64 - 1, 5], "[18446744073709551615, 5]"),          # beyond int64: the reader keeps them in a dict
    ]:
        out = tmp_path / "t.jsonl"
        write_trace(replace(base, original_ids=ids), out, original_ids=True)
        assert out.read_text() == f'{{"timestamp": 0, "input_length": 3, "output_length": 0, "hash_ids": {text}}}\n'
        assert list(load_trace(out, keep_ids=True).original_ids) == list(ids)


def test_timestamps_whole_as_int_fractional_as_float():
    trace = Trace(offsets=np.zeros(6, np.int64), blocks=np.zeros(0, np.int32), input_length=np.zeros(5, np.int64),
                  output_length=np.zeros(5, np.int64), timestamp=np.array([3.0, -2.0, 0.25, 2.0**60, 1e-3]), num_blocks=0)
    stamps = [json.loads(line)["timestamp"] for line in b"".join(encode_trace(trace)).decode().splitlines()]
    assert stamps == [3, -2, 0.25, 2.0**60, 0.001]
    assert [type(s) for s in stamps] == [int, int, float, float, float]  # 2**60 is beyond exact ints in a double


def test_bailian_text_by_hand(tmp_path):
    out = tmp_path / "t.jsonl"
    write_trace(replace(HAND, block_size=16), out, "bailian")
    assert out.read_text() == (
        '{"chat_id": 0, "parent_chat_id": -1, "timestamp": 0.0, "input_length": 10, "output_length": 5, '
        '"type": "text", "turn": 1, "hash_ids": [0, 1]}\n'
        '{"chat_id": 1, "parent_chat_id": -1, "timestamp": 0.0015, "input_length": 7, "output_length": 0, '
        '"type": "text", "turn": 1, "hash_ids": [0, 2]}\n'
    )


def test_bailian_sessions_give_parents_and_turns(tmp_path):
    # session 0: r0, r2, r5; session 1: r1, r4; session 2: r3.
    base = Trace.from_requests([([i], 1, 1000.0 * i) for i in range(6)])
    trace = replace(base, session=np.array([0, 1, 0, 2, 1, 0]), block_size=16)
    out = tmp_path / "t.jsonl"
    write_trace(trace, out, "bailian")
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["chat_id"] for r in rows] == [0, 1, 2, 3, 4, 5]
    assert [r["parent_chat_id"] for r in rows] == [-1, -1, 0, -1, 1, 2]
    assert [r["turn"] for r in rows] == [1, 1, 2, 1, 2, 3]
    assert [r["timestamp"] for r in rows] == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


def test_empty_trace_writes_an_empty_file(tmp_path):
    trace = Trace(offsets=np.zeros(1, np.int64), blocks=np.zeros(0, np.int32), input_length=np.zeros(0, np.int64),
                  output_length=np.zeros(0, np.int64), timestamp=np.zeros(0), num_blocks=0)
    write_trace(trace, tmp_path / "e.jsonl")
    assert (tmp_path / "e.jsonl").read_bytes() == b""


def test_chunks_join_into_the_same_text(tmp_path, monkeypatch):
    monkeypatch.setattr(writers, "CHUNK_REQUESTS", 1)
    write_trace(HAND, tmp_path / "t.jsonl")
    assert (tmp_path / "t.jsonl").read_text() == HAND_MOONCAKE


# ---------------------------------------------------------------- gzip, stdout


def test_gz_name_compresses_deterministically(tmp_path):
    a, b = tmp_path / "a.jsonl.gz", tmp_path / "b.jsonl.gz"
    write_trace(HAND, a)
    write_trace(HAND, b)
    assert a.read_bytes()[:2] == b"\x1f\x8b"
    assert gzip.decompress(a.read_bytes()).decode() == HAND_MOONCAKE
    assert a.read_bytes() == b.read_bytes()
    assert_same_columns(load_trace(a), HAND)


def test_dash_writes_stdout(capsysbinary):
    write_trace(HAND, "-")
    assert capsysbinary.readouterr().out.decode() == HAND_MOONCAKE


# ---------------------------------------------------------------- errors and atomicity


def test_unknown_format_and_missing_ids_are_config_errors(tmp_path):
    out = tmp_path / "t.jsonl"
    with pytest.raises(ConfigError, match="cannot write format 'csv'"):
        write_trace(HAND, out, "csv")
    with pytest.raises(ConfigError, match="keep_ids=True"):
        write_trace(replace(HAND, original_ids=None), out, original_ids=True)
    assert not out.exists() and leftovers(tmp_path) == []


def test_failure_midway_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    out = tmp_path / "t.jsonl"
    out.write_text("old\n")
    monkeypatch.setattr(writers, "CHUNK_REQUESTS", 1)
    real, calls = writers._records_for, []

    def fail_second(*args):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("injected")
        return real(*args)

    monkeypatch.setattr(writers, "_records_for", fail_second)
    with pytest.raises(RuntimeError, match="injected"):
        write_trace(HAND, out)
    assert out.read_text() == "old\n"
    assert leftovers(tmp_path) == []
    calls.clear()
    with pytest.raises(RuntimeError):
        write_trace(HAND, tmp_path / "new.jsonl")
    assert not (tmp_path / "new.jsonl").exists() and leftovers(tmp_path) == []


def test_os_error_becomes_output_error(tmp_path, monkeypatch):
    def no_space(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(writers.os, "replace", no_space)
    with pytest.raises(OutputError, match="No space left on device"):
        write_trace(HAND, tmp_path / "t.jsonl")
    assert list(tmp_path.iterdir()) == []


def test_missing_directory_and_directory_target(tmp_path):
    with pytest.raises(OutputError, match="cannot write"):
        write_trace(HAND, tmp_path / "nope" / "t.jsonl")
    with pytest.raises(OutputError, match="is a directory"):
        write_trace(HAND, tmp_path)


def test_refuse_overwrite(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text(HAND_MOONCAKE)
    with pytest.raises(ConfigError, match="that is the input file"):
        refuse_overwrite(str(src), [str(src)])
    with pytest.raises(ConfigError):
        refuse_overwrite(str(tmp_path / "." / "in.jsonl"), [str(src)])  # another spelling of the same file
    os.link(src, tmp_path / "hard.jsonl")
    with pytest.raises(ConfigError):
        refuse_overwrite(str(tmp_path / "hard.jsonl"), [str(src)])
    refuse_overwrite(str(tmp_path / "other.jsonl"), [str(src)])
    refuse_overwrite("-", ["-"])


# ---------------------------------------------------------------- round trips


@st.composite
def traces(draw):
    reqs, _ = draw(request_lists(max_requests=30))
    n = len(reqs)
    stamps = draw(st.lists(st.one_of(
        st.integers(-(10**12), 10**12).map(float),
        st.floats(-1e15, 1e15, allow_nan=False, allow_infinity=False),
    ), min_size=n, max_size=n))
    # The Mooncake reader's fast path decodes output_length as a float: exact up to 2**53 only.
    outs = draw(st.lists(st.integers(0, 2**53), min_size=n, max_size=n))
    lengths = draw(st.lists(st.integers(0, 2**63 - 1), min_size=n, max_size=n))
    return Trace.from_requests([(ids, lengths[i] if i % 3 == 0 else length, stamps[i], outs[i])
                                for i, (ids, length) in enumerate(reqs)])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(trace=traces())
def test_mooncake_round_trip(tmp_path, trace):
    out = tmp_path / "t.jsonl"
    write_trace(trace, out)
    again = load_trace(out)
    assert_same_columns(trace, again)
    write_trace(again, tmp_path / "u.jsonl")
    assert (tmp_path / "u.jsonl").read_bytes() == out.read_bytes()


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(trace=traces())
def test_mooncake_round_trip_original_string_ids(tmp_path, trace):
    trace = replace(trace, original_ids=[f"h{b}" for b in trace.original_ids])  # strings keep first-appearance order
    out = tmp_path / "t.jsonl"
    write_trace(trace, out, original_ids=True)
    again = load_trace(out, keep_ids=True)
    assert_same_columns(trace, again)
    assert list(again.original_ids) == list(trace.original_ids)


@pytest.mark.skipif("bailian" not in FORMATS, reason="the bailian reader has not landed yet")
@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(trace=traces(), sessions=st.lists(st.integers(0, 4), min_size=30, max_size=30))
def test_bailian_round_trip(tmp_path, trace, sessions):
    session = np.array(sessions[: len(trace)])
    # Microsecond timestamps, as real traces have (a subnormal number of ms loses digits as seconds).
    trace = replace(trace, session=session, timestamp=np.round(trace.timestamp, 3), block_size=16)
    out = tmp_path / "t.jsonl"
    write_trace(trace, out, "bailian")
    again = load_trace(out, format="bailian")
    for col in ("offsets", "blocks", "input_length", "output_length"):
        assert np.array_equal(getattr(trace, col), getattr(again, col)), col
    # Seconds in the file: ms * 1e-3 * 1e3 can be one ulp off.
    np.testing.assert_allclose(again.timestamp, trace.timestamp, rtol=1e-15, atol=0)
    # The same partition into sessions (the reader numbers them itself).
    same = session[:, None] == session[None, :]
    assert np.array_equal(same, again.session[:, None] == again.session[None, :])


@pytest.mark.parametrize("name", ["conversation_trace.jsonl", "synthetic_trace.jsonl"])
def test_shared_traces_write_back_byte_for_byte(tmp_path, name):
    src = shared_path(MOONCAKE / name)
    trace = load_trace(src)
    out = tmp_path / name
    write_trace(trace, out)
    assert out.read_bytes() == src.read_bytes()  # dense ids there are the file's ids (0..U-1, all used)
    write_trace(trace, tmp_path / "t.jsonl.gz")
    assert_same_columns(load_trace(tmp_path / "t.jsonl.gz"), trace)


# ---------------------------------------------------------------- kvreplay convert


def cli(*args, stdin: bytes | None = None):
    return subprocess.run([sys.executable, "-m", "kvreplay.cli", *map(str, args)], input=stdin, capture_output=True)


def in_process(capsysbinary, *args):
    """(exit code, stderr) of `kvreplay ...` run in this process (a subprocess costs a second of imports)."""
    code = main([str(a) for a in args])
    return code, capsysbinary.readouterr().err.decode()


def test_convert_cli(tmp_path, capsysbinary):
    src = tmp_path / "in.jsonl"
    src.write_text('{"timestamp": 1500, "input_length": 10, "hash_ids": [7, 3]}\n')
    out, bailian, back = tmp_path / "out.jsonl", tmp_path / "b.jsonl", tmp_path / "back.jsonl"
    assert in_process(capsysbinary, "convert", src, "-o", out) == (0, f"{src}: 1 requests (mooncake) -> {out} (mooncake)\n")
    assert out.read_text() == '{"timestamp": 1500, "input_length": 10, "output_length": 0, "hash_ids": [1, 0]}\n'
    assert in_process(capsysbinary, "convert", src, "-o", bailian, "--to", "bailian", "--keep-ids", "--block-size", "16")[0] == 0
    assert bailian.read_text() == (
        '{"chat_id": 0, "parent_chat_id": -1, "timestamp": 1.5, "input_length": 10, "output_length": 0, '
        '"type": "text", "turn": 1, "hash_ids": [7, 3]}\n')
    # and back: the format is recognised from the first record
    assert in_process(capsysbinary, "convert", bailian, "-o", back, "--keep-ids") == \
        (0, f"{bailian}: 1 requests (bailian) -> {back} (mooncake)\n")
    # the Bailian trace's 16-token blocks travel in the record: a replay of `back` needs no flag
    assert back.read_text() == '{"timestamp": 1500, "input_length": 10, "output_length": 0, "hash_ids": [7, 3], "block_size": 16}\n'


def test_convert_cli_stdin_to_stdout_subprocess(tmp_path):
    r = cli("convert", "-", "-o", "-", stdin=b'{"timestamp": 1500, "input_length": 10, "hash_ids": [7, 3]}\n')
    assert r.returncode == 0 and r.stdout == b'{"timestamp": 1500, "input_length": 10, "output_length": 0, "hash_ids": [1, 0]}\n'
    r = cli("convert", tmp_path / "missing.jsonl", "-o", tmp_path / "out.jsonl")
    assert (r.returncode, r.stderr.decode()) == (2, f"{tmp_path / 'missing.jsonl'}: no such file\n")


def test_convert_cli_errors(tmp_path, capsysbinary):
    src = tmp_path / "in.jsonl"
    src.write_text('{"input_length": 10, "hash_ids": [7]}\n{"input_length": -1, "hash_ids": []}\n')
    before = src.read_bytes()
    assert in_process(capsysbinary, "convert", src, "-o", src) == \
        (2, f"kvreplay: -o {src}: that is the input file; write to another name\n")
    assert src.read_bytes() == before
    out = tmp_path / "out.jsonl"
    assert in_process(capsysbinary, "convert", src, "-o", out) == \
        (2, f"{src}:2: input_length: expected a non-negative integer, got -1\n")
    assert not out.exists() and leftovers(tmp_path) == []
    assert in_process(capsysbinary, "convert", src, "-o", out, "--on-invalid", "skip")[0] == 0
    assert out.read_text() == '{"timestamp": 0, "input_length": 10, "output_length": 0, "hash_ids": [0]}\n'
    missing = tmp_path / "missing" / "out.jsonl"
    assert in_process(capsysbinary, "convert", src, "-o", missing, "--on-invalid", "skip") == \
        (2, f"{missing}: cannot write: No such file or directory\n")
    with pytest.raises(SystemExit) as exit_:
        main(["convert", str(src), "-o", str(out), "--to", "csv"])
    assert exit_.value.code == 2 and b"invalid choice: 'csv'" in capsysbinary.readouterr().err


def test_block_size_is_not_lost_silently(tmp_path, capsys):
    from kvreplay.cli import main

    # A trace of 64-token blocks: Bailian's reader would assume 16, so writing it as Bailian is
    # refused; as Mooncake it is written with its block size in every record, so it replays at 64
    # without a flag (it used to need --block-size 64, with a note on stderr).
    trace = kvreplay.Trace.from_requests([([1, 2], 100), ([1, 2], 100)], block_size=64)
    with pytest.raises(ConfigError, match="16-token blocks; this trace's are 64"):
        write_trace(trace, tmp_path / "t.bailian.jsonl", "bailian")
    assert not (tmp_path / "t.bailian.jsonl").exists()
    write_trace(trace, tmp_path / "t.jsonl")
    source = tmp_path / "claude.json"
    source.write_text('{"block_size": 64, "hash_id_scope": "local", "requests": ['
                      '{"t": 0, "type": "n", "in": 130, "out": 5, "hash_ids": [1, 2]},'
                      '{"t": 1, "type": "n", "in": 130, "out": 5, "hash_ids": [1, 2]}]}')
    assert main(["convert", str(source), "-o", str(tmp_path / "c.jsonl")]) == 0
    assert '"block_size": 64}' in (tmp_path / "c.jsonl").read_text().splitlines()[0]
    assert main(["convert", str(source), "-o", str(tmp_path / "c.b.jsonl"), "--to", "bailian"]) == 2
    assert "16-token blocks" in capsys.readouterr().err
    # Replayed at 64 the copy gives the original's hits: 2 blocks x 64 = 128 of 130 tokens.
    assert kvreplay.replay(kvreplay.load_trace(tmp_path / "c.jsonl"), "infinite", None).total_hit_tokens == 128


def test_convert_to_bailian_needs_16_token_blocks(tmp_path, capsys):
    # docs/formats.md's command on a Mooncake trace (no declared block size: 512 is assumed) is
    # refused and writes nothing; it used to write a file whose replay gave 0.33% instead of 10.48%.
    lines = ['{"timestamp": 0, "input_length": 1000, "hash_ids": [1, 2]}',
             '{"timestamp": 1, "input_length": 1000, "hash_ids": [1, 2]}']
    src = tmp_path / "trace.jsonl"
    src.write_text("\n".join(lines) + "\n")
    out = tmp_path / "trace.bailian.jsonl.gz"
    assert main(["convert", str(src), "-o", str(out), "--to", "bailian"]) == 2
    err = capsys.readouterr().err
    assert "does not say its block size, so it is taken as 512 tokens" in err and "--block-size 16" in err
    assert not out.exists()
    for command in (["slice", str(src), "-o", str(out), "--to", "bailian", "--requests", "0:1"],
                    ["merge", str(src), "-o", str(out), "--to", "bailian"]):
        assert main(command) == 2 and not out.exists()
        capsys.readouterr()
    # Declared 16-token blocks: written, and the Bailian file replays like the original at 16.
    assert main(["convert", str(src), "-o", str(out), "--to", "bailian", "--block-size", "16"]) == 0
    again = kvreplay.load_trace(out)
    assert again.format == "bailian" and again.block_size == 16
    original = kvreplay.replay(kvreplay.load_trace(src), "lru", 8, 16)
    assert kvreplay.replay(again, "lru", 8).hit_tokens.tolist() == original.hit_tokens.tolist() == [0, 32]


def test_declared_block_size_must_agree_with_the_file(tmp_path, capsys):
    source = tmp_path / "claude.json"
    source.write_text('{"block_size": 64, "hash_id_scope": "local", "requests": ['
                      '{"t": 0, "type": "n", "in": 130, "out": 5, "hash_ids": [1, 2]}]}')
    assert main(["convert", str(source), "-o", str(tmp_path / "c.jsonl"), "--block-size", "16"]) == 2
    assert "--block-size 16: " in capsys.readouterr().err
    assert not (tmp_path / "c.jsonl").exists()
