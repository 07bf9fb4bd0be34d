"""load_trace over several files and directories, format sniffing, and `kvreplay merge`."""

from __future__ import annotations

import gzip
import io
import json
import sys

import numpy as np
import pytest

from kvreplay import replay
from kvreplay.cli import main
from kvreplay.errors import ConfigError, TraceError
from kvreplay.trace import load_trace
from kvreplay.trace.formats import sniff_format
from kvreplay.trace.ops import trace_paths

from conftest import DATA, write

MOONCAKE = DATA / "mooncake_columns.jsonl"
BAILIAN = DATA / "bailian_chat.jsonl"
CLAUDE_A = DATA / "claude_a.json"
CLAUDE_B = DATA / "claude_b.json"


def test_sniff_each_format(tmp_path):
    assert sniff_format(str(MOONCAKE)) == "mooncake"
    assert sniff_format(str(BAILIAN)) == "bailian"
    assert sniff_format(str(CLAUDE_A)) == "claude-code"  # a document over several lines
    assert sniff_format(str(CLAUDE_B)) == "claude-code"  # one line
    assert sniff_format(str(write(tmp_path, "z.gz", gzip.compress(CLAUDE_B.read_bytes())))) == "claude-code"
    assert sniff_format(str(write(tmp_path, "blank.jsonl", b"\n\n" + BAILIAN.read_bytes()))) == "bailian"
    # a Bailian record without parent_chat_id is still Bailian by its chat_id and turn; a Mooncake
    # line with an extra chat_id is Mooncake (unknown fields are ignored there); no known keys
    # falls back to Mooncake
    assert sniff_format(str(write(tmp_path, "c.jsonl", '{"chat_id": 1, "turn": 1, "input_length": 3}\n'))) == "bailian"
    assert sniff_format(str(write(tmp_path, "m.jsonl", '{"chat_id": 1, "input_length": 3}\n'))) == "mooncake"
    assert sniff_format(str(write(tmp_path, "u.jsonl", '{"foo": 1}\n'))) == "mooncake"
    assert sniff_format(str(write(tmp_path, "g.jsonl", "not json\n"))) == "mooncake"
    # a first record longer than what is sniffed: decided from the keys seen so far
    big = {"chat_id": 1, "parent_chat_id": -1, "timestamp": 0, "input_length": 1, "hash_ids": list(range(300_000))}
    assert sniff_format(str(write(tmp_path, "big.jsonl", json.dumps(big) + "\n"))) == "bailian"


def test_auto_loads_each_format():
    assert load_trace(MOONCAKE).format == "mooncake" and load_trace(MOONCAKE).session is None
    assert load_trace(BAILIAN).format == "bailian"
    assert load_trace(CLAUDE_A).format == "claude-code"


def test_bad_format_reported_by_the_chosen_reader(tmp_path):
    # forcing a format on the wrong file gives that reader's message, file and line
    with pytest.raises(TraceError) as e:
        load_trace(MOONCAKE, format="bailian")
    assert str(e.value) == f"{MOONCAKE}:1: chat_id: missing"


def test_stdin_sniffed(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BufferedReader(io.BytesIO(BAILIAN.read_bytes()))))
    assert main(["run", "-", "--policy", "infinite", "--engine", "reference"]) == 0
    out = capsys.readouterr().out
    assert "trace     <stdin>: 5 requests, 179 prompt tokens" in out and "hits      80 of 179" in out


def test_trace_paths(tmp_path):
    for name in ("b.jsonl", "a.json", "c.jsonl.gz", ".hidden.json", "notes.txt"):
        write(tmp_path, name, "x")
    (tmp_path / "sub.json").mkdir()
    assert trace_paths(tmp_path) == [str(tmp_path / n) for n in ("a.json", "b.jsonl", "c.jsonl.gz")]
    assert trace_paths([str(tmp_path / "b.jsonl"), "-"]) == [str(tmp_path / "b.jsonl"), "-"]
    with pytest.raises(ConfigError, match="no trace files given"):
        trace_paths([])
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(TraceError) as e:
        load_trace(empty)
    assert str(e.value) == f"{empty}: is a directory, expected a trace file"


def test_several_line_format_files_are_namespaced(tmp_path):
    # the same Mooncake file twice: ids are private to each file, so the copy shares nothing
    one = load_trace(MOONCAKE)
    both = load_trace([MOONCAKE, MOONCAKE])
    assert len(both) == 2 * len(one) and both.num_blocks == 2 * one.num_blocks
    # merged files are ordered by time (stamps 30, 10, 20.5, 0 in each), ties: the first file first
    assert both.timestamp.tolist() == [0, 0, 10, 10, 20.5, 20.5, 30, 30]
    assert both.session.tolist() == [0, 1, 0, 1, 0, 1, 0, 1]
    # each file in time order: [300,400] L8, [100] L5, [] L0, [100,200,300] L10: the last hits 100 ->
    # min(4, 10) = 4 at 4-token blocks; the copy shares no block, so 4 + 4 = 8
    assert replay(both, "infinite", None, 4, engine="reference").total_hit_tokens == 8
    # line formats keep their timestamps (no session offsets): a Bailian file twice interleaves
    bb = load_trace([BAILIAN, BAILIAN])
    assert bb.timestamp.tolist() == [500, 500, 1000, 1000, 2250, 2250, 3000, 3000, 3500, 3500]
    assert bb.session.tolist() == [0, 3, 1, 4, 0, 3, 2, 5, 2, 5]  # 3 sessions per file
    assert bb.block_size == 16


def test_mixed_block_sizes_refused():
    with pytest.raises(ConfigError, match="different block sizes"):
        load_trace([BAILIAN, CLAUDE_A])


def test_merge_cli_writes_a_mooncake_trace(tmp_path, capsys):
    out = tmp_path / "m.jsonl"
    assert main(["merge", str(CLAUDE_A), str(CLAUDE_B), "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert "merged 2 inputs: 7 requests, 2 sessions, 9 unique blocks" in err
    assert load_trace(out).block_size == 64  # written in the records: the replay needs no flag
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["timestamp"] for r in rows] == [0, 10000, 12000, 15000, 17000, 60000, 90000]
    assert rows[5]["hash_ids"] == [6, 7]  # b's ids 1 2 after a's six dense ids
    # replayed at 64 tokens it gives what the merged in-memory trace gives: 512
    assert main(["run", str(out), "--policy", "infinite", "--block-size", "64", "--engine", "reference"]) == 0
    assert "hits      512 of 1,180 prompt tokens" in capsys.readouterr().out


def test_merge_cli_shared_ids_and_offsets(tmp_path, capsys):
    out = tmp_path / "s.jsonl"
    assert main(["merge", str(CLAUDE_A), str(CLAUDE_B), "-o", str(out), "--shared-ids", "--offsets", "0s,1s"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    # b at 1 s and 31 s; ids shared by value: b's first request reuses a's 1 and 2
    assert [r["timestamp"] for r in rows] == [0, 1000, 10000, 12000, 15000, 17000, 31000]
    assert rows[1]["hash_ids"] == [1, 2]
    capsys.readouterr()
    assert main(["merge", str(CLAUDE_A), "-o", str(out), "--offsets", "0s,1s"]) == 2
    assert capsys.readouterr().err.strip() == "kvreplay: --offsets: got 2 offsets for 1 inputs"
    assert main(["merge", str(CLAUDE_A), str(CLAUDE_B), "-o", str(out), "--offsets", "0,1"]) == 2
    assert capsys.readouterr().err.strip() == "kvreplay: --offsets: 1 what? write 1s or 1ms"
    assert main(["merge", str(CLAUDE_A), "-o", str(CLAUDE_A)]) == 2  # never replaces an input


def test_merge_cli_bad_input_exit_2(tmp_path, capsys):
    bad = write(tmp_path, "bad.jsonl", '{"chat_id": 1, "parent_chat_id": -1, "timestamp": 0, "input_length": -1, "hash_ids": []}\n')
    out = tmp_path / "o.jsonl"
    assert main(["merge", str(BAILIAN), str(bad), "-o", str(out)]) == 2
    assert capsys.readouterr().err.strip() == f"{bad}:1: input_length: expected a non-negative integer, got -1"
    assert not out.exists()


def test_cli_format_choice_and_spacing_checked(capsys):
    with pytest.raises(SystemExit) as e:
        main(["run", str(MOONCAKE), "--format", "csv"])
    assert e.value.code == 2
    with pytest.raises(SystemExit) as e:
        main(["run", str(MOONCAKE), "--session-spacing", "-1"])
    assert e.value.code == 2
    capsys.readouterr()


def test_sort_by_time_on_single_files_unchanged():
    t = load_trace(BAILIAN, sort_by_time=True)
    assert np.all(np.diff(t.timestamp) >= 0) and t.session.tolist() == [0, 1, 0, 2, 2]


def test_formats_come_from_the_reader_registry(monkeypatch, tmp_path, capsys):
    # Every module of kvreplay.trace with a READER is a format: listed (by name, without importing
    # the readers), sniffed and dispatched from the registry alone. A stand-in format registered at
    # runtime is sniffed and read.
    from kvreplay.trace import FORMATS, formats
    from kvreplay.trace.model import Reader, Trace

    assert FORMATS == ("mooncake", "bailian", "claude-code", "agentic-mooncake") == formats.FORMATS
    discovered = formats.discovered()
    assert list(discovered) == ["agentic-mooncake", "claude-code", "bailian", "mooncake"]  # rank order, catch-all last
    assert formats.readers() == discovered and formats.CATCH_ALL == "mooncake"
    assert {name: reader.read.__module__ for name, reader in discovered.items()} == {
        name: f"kvreplay.trace.{module}" for name, module in formats.MODULES.items()}
    with pytest.raises(SystemExit):
        main(["run", str(MOONCAKE), "--format", "nope"])
    assert "invalid choice: 'nope' (choose from 'auto', 'mooncake', 'bailian', 'claude-code', 'agentic-mooncake')" in capsys.readouterr().err

    def read_toy(path, *, on_invalid, keep_ids):
        return Trace.from_requests([([1, 2], 8), ([1, 2], 8)], block_size=4, source=path)

    toy = Reader(name="toy", read=read_toy, rank=5, sniff=lambda keys: "toy" in keys, sniff_keys=("toy",))
    monkeypatch.setitem(formats.readers(), "toy", toy)
    path = write(tmp_path, "t.jsonl", '{"toy": 1}\n')
    assert sniff_format(str(path)) == "toy"
    assert replay(load_trace(path), "lru", 4).total_hit_tokens == 8
