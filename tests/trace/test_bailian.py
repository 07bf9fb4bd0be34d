"""Bailian (Alibaba Qwen) reader: columns, sessions from parent links, 16-token blocks, errors."""

from __future__ import annotations

import gzip

import numpy as np
import pytest

from kvreplay import replay
from kvreplay.cli import main
from kvreplay.errors import TraceError
from kvreplay.trace import jsonl as line_reading, load_trace
from kvreplay.trace import bailian
from kvreplay.trace.bailian import read_bailian

from conftest import DATA, write

CHAT = DATA / "bailian_chat.jsonl"


def rec(chat, parent=-1, ts=0.0, length=16, ids=(1,), **extra):
    import json

    return json.dumps({"chat_id": chat, "parent_chat_id": parent, "timestamp": ts, "input_length": length,
                       "output_length": 1, "type": "text", "turn": 1, "hash_ids": list(ids), **extra})


def test_columns_and_sessions_by_hand():
    t = load_trace(CHAT, keep_ids=True)
    assert t.format == "bailian" and t.block_size == 16
    assert t.input_length.tolist() == [40, 20, 70, 16, 33]
    assert t.output_length.tolist() == [10, 5, 1, 0, 2]
    assert t.timestamp.tolist() == [500.0, 1000.0, 2250.0, 3000.0, 3500.0]  # seconds * 1000
    # ids 3 7 8 9 10 11 12 13 14 -> dense 0..8 in numeric order
    assert t.original_ids.tolist() == [3, 7, 8, 9, 10, 11, 12, 13, 14]
    assert t.blocks.tolist() == [1, 2, 3, 1, 0, 1, 2, 3, 4, 5, 6, 6, 7, 8]
    # chat 1 -> root 1 (s0); chat 2 -> s1; chat 3 -> parent 1 (s0); chat 5 -> parent 4 not in the
    # file: a root (s2); chat 6 -> parent 5 (s2)
    assert t.session.tolist() == [0, 1, 0, 2, 2]
    assert t.summary()["num_sessions"] == 3


def test_declared_block_size_is_used_and_overridable():
    # infinite cache, 16-token blocks:
    # r2 [7,3]: 7 resident -> min(16, 20) = 16; r3 [7,8,9,10,11]: 3 blocks -> min(48, 70) = 48
    # r5 [12,13,14]: 12 resident -> min(16, 33) = 16;  16 + 48 + 16 = 80 of 40+20+70+16+33 = 179
    rep = replay(load_trace(CHAT), "infinite", None, engine="reference")
    assert (rep.block_size, rep.total_hit_tokens, rep.total_prompt_tokens) == (16, 80, 179)
    # --block-size 4 overrides: min(4,20) + min(12,70) + min(4,33) = 4 + 12 + 4 = 20
    rep = replay(load_trace(CHAT), "infinite", None, 4, engine="reference")
    assert (rep.block_size, rep.total_hit_tokens) == (4, 20)


def test_lru_capacity_3_by_hand(engine):
    # LRU (oldest..newest), capacity 3:
    # r1 7 8 9 -> [7 8 9];  r2 [7,3]: hit 1 block (16): [8 9 7] then 3 evicts 8 -> [9 7 3]
    # r3 [7,8,...]: 7 hit, 8 missing -> 16; after the accesses [9 10 11]
    # r4 [12]: miss -> [10 11 12];  r5 [12,13,14]: 12 hit -> 16.   16 + 16 + 16 = 48
    assert replay(CHAT, "lru", 3, engine=engine).total_hit_tokens == 48


def test_cli_uses_16_and_block_size_overrides(capsys):
    assert main(["run", str(CHAT), "--policy", "infinite", "--engine", "reference"]) == 0
    out = capsys.readouterr().out
    assert "cache     9 blocks x 16 tokens" in out and "hits      80 of 179 prompt tokens" in out
    # The library takes another block size as told (hits capped at input_length) ...
    assert replay(load_trace(CHAT), "infinite", None, 4, engine="reference").total_hit_tokens == 20
    # ... and so does the CLI, the user's own --block-size, warning that most requests misfit it
    # (an inferred one is refused: tests/engine/test_block_size_check.py)
    with pytest.warns(UserWarning, match=r"\(they fit 16-token blocks\); replayed at --block-size 4 as given"):
        assert main(["run", str(CHAT), "--policy", "infinite", "--engine", "reference", "--block-size", "4"]) == 0
    assert "hits      20 of 179 prompt tokens" in capsys.readouterr().out


def test_parent_after_child_and_long_chain(tmp_path):
    # 4 -> 3 -> 2 -> 1 (root), listed child first; and a separate root 9
    lines = [rec(4, 3), rec(9), rec(3, 2), rec(2, 1), rec(1)]
    t = load_trace(write(tmp_path, "c.jsonl", "\n".join(lines) + "\n"))
    assert t.session.tolist() == [0, 1, 0, 0, 0]


def test_gzip_and_fast_slow_paths_agree(tmp_path, monkeypatch):
    text = CHAT.read_bytes()
    plain = read_bailian(str(CHAT), keep_ids=True)
    gz = read_bailian(str(write(tmp_path, "c.gz", gzip.compress(text))), keep_ids=True)
    monkeypatch.setattr(bailian, "_fast_chunk", lambda first_line, data: None)
    monkeypatch.setattr(line_reading, "CHUNK_BYTES", 64)  # many tiny chunks on the slow path
    slow = read_bailian(str(CHAT), keep_ids=True)
    for t in (gz, slow):
        for col in ("offsets", "blocks", "input_length", "output_length", "timestamp", "session", "original_ids"):
            assert np.array_equal(getattr(t, col), getattr(plain, col)), col


def test_fast_path_chunks_keep_line_numbers(tmp_path, monkeypatch):
    # a repeated chat_id found after the chunks were parsed on the fast path names the right line
    lines = [rec(k) for k in range(1, 8)] + [rec(3)]
    p = write(tmp_path, "d.jsonl", "\n\n".join(lines) + "\n")  # blank line between records
    monkeypatch.setattr(line_reading, "CHUNK_BYTES", 200)
    with pytest.raises(TraceError) as e:
        load_trace(p)
    assert str(e.value) == f"{p}:15: chat_id: 3 appears again (first on line 5)"


BAD = [
    ('{"chat_id": 2, "parent_chat_id": -1, "timestamp": 1, "input_length": 4 "hash_ids": [1]}', None, "invalid JSON ("),
    ('{"parent_chat_id": -1, "timestamp": 1, "input_length": 4, "hash_ids": [1]}', "chat_id", "missing"),
    ('{"chat_id": 2, "timestamp": 1, "input_length": 4, "hash_ids": [1]}', "parent_chat_id", "missing"),
    ('{"chat_id": 2, "parent_chat_id": -1, "input_length": 4, "hash_ids": [1]}', "timestamp", "missing"),
    ('{"chat_id": 2, "parent_chat_id": -1, "timestamp": 1, "hash_ids": [1]}', "input_length", "missing"),
    ('{"chat_id": 2, "parent_chat_id": -1, "timestamp": 1, "input_length": 4}', "hash_ids", "missing"),
    ('{"chat_id": "2", "parent_chat_id": -1, "timestamp": 1, "input_length": 4, "hash_ids": [1]}', "chat_id",
     'expected a non-negative integer, got "2"'),
    ('{"chat_id": 2, "parent_chat_id": -2, "timestamp": 1, "input_length": 4, "hash_ids": [1]}', "parent_chat_id",
     "expected -1 or a chat_id (a non-negative integer), got -2"),
    ('{"chat_id": 2, "parent_chat_id": -1, "timestamp": "x", "input_length": 4, "hash_ids": [1]}', "timestamp",
     'expected a number of seconds, got "x"'),
    ('{"chat_id": 2, "parent_chat_id": -1, "timestamp": 1, "input_length": -5, "hash_ids": [1]}', "input_length",
     "expected a non-negative integer, got -5"),
    ('{"chat_id": 2, "parent_chat_id": -1, "timestamp": 1, "input_length": 4, "hash_ids": 7}', "hash_ids",
     "expected a list of integers or strings, got 7"),
    ('{"chat_id": 2, "parent_chat_id": -1, "timestamp": 1, "input_length": 4, "hash_ids": [1, 2.5]}', "hash_ids",
     "item 1 is 2.5, expected an integer or a string"),
    ('{"chat_id": 2, "parent_chat_id": -1, "timestamp": 1, "input_length": 4, "hash_ids": [1], "output_length": -1}',
     "output_length", "expected a non-negative integer, got -1"),
    ('{"chat_id": 2, "parent_chat_id": -1, "timestamp": 1, "input_length": 4, "hash_ids": [1], "type": 3}', "type",
     "expected a string, got 3"),
    ('{"chat_id": 2, "parent_chat_id": -1, "timestamp": 1, "input_length": 4, "hash_ids": [1], "turn": "2"}', "turn",
     'expected an integer, got "2"'),
    ('[1, 2]', None, "expected a JSON object, got [1,2]"),
]


@pytest.mark.parametrize("line, field, msg", BAD, ids=[f"{b[1]}:{b[2][:20]}" for b in BAD])
def test_bad_record_message_and_cli_exit_2(tmp_path, capsys, line, field, msg):
    p = write(tmp_path, "bad.jsonl", rec(1) + "\n" + line + "\n" + rec(3) + "\n")
    expected = f"{p}:2: {field}: {msg}" if field else f"{p}:2: {msg}"
    with pytest.raises(TraceError) as e:
        load_trace(p, format="bailian")
    assert str(e.value).startswith(expected) if msg.endswith("(") else str(e.value) == expected
    assert main(["run", str(p), "--policy", "lru", "--engine", "reference"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(expected) if msg.endswith("(") else err == expected
    # skip: the bad line is counted, the others replay
    t = load_trace(p, format="bailian", on_invalid="skip")
    assert len(t) == 2 and t.invalid_records == {"count": 1, "first_lines": [2]}


def test_repeated_chat_id(tmp_path):
    p = write(tmp_path, "r.jsonl", "\n".join([rec(1), rec(2), rec(1, ts=3.0)]) + "\n")
    with pytest.raises(TraceError) as e:
        load_trace(p)
    assert str(e.value) == f"{p}:3: chat_id: 1 appears again (first on line 1)"
    t = load_trace(p, on_invalid="skip")
    assert len(t) == 2 and t.invalid_records == {"count": 1, "first_lines": [3]}


def test_parent_loop(tmp_path):
    # 1 -> 2 -> 1 loops; 3 -> 1 hangs off the loop; 4 is its own parent; 5 is fine
    p = write(tmp_path, "l.jsonl", "\n".join([rec(5), rec(1, 2), rec(2, 1), rec(3, 1), rec(4, 4)]) + "\n")
    with pytest.raises(TraceError) as e:
        load_trace(p)
    assert str(e.value) == f"{p}:2: parent_chat_id: the chain of parents from chat_id 1 never reaches a root (it loops)"
    t = load_trace(p, on_invalid="skip")
    assert len(t) == 1 and t.invalid_records == {"count": 4, "first_lines": [2, 3, 4, 5]}


def test_skipped_parent_makes_child_a_root(tmp_path):
    p = write(tmp_path, "s.jsonl", "\n".join([rec(1), rec(2, 1, length=-1), rec(3, 2), rec(4, 1)]) + "\n")
    t = load_trace(p, on_invalid="skip")
    # chat 2 is invalid: chat 3 (parent 2) starts its own session; chat 4 continues chat 1
    assert t.session.tolist() == [0, 1, 0] and t.invalid_records == {"count": 1, "first_lines": [2]}


def test_empty_and_all_invalid(tmp_path):
    p = write(tmp_path, "e.jsonl", "\n\n")
    with pytest.raises(TraceError) as e:
        load_trace(p, format="bailian")
    assert str(e.value) == f"{p}: no requests (empty trace)"
    p = write(tmp_path, "i.jsonl", rec(1, length=-1) + "\n")
    with pytest.raises(TraceError) as e:
        load_trace(p, on_invalid="skip")
    assert str(e.value) == f"{p}: no valid records (1 invalid)"


def test_integral_floats_and_string_ids(tmp_path):
    p = write(tmp_path, "f.jsonl", rec(1.0, -1.0, length=4.0, ids=["x", 1]) + "\n" + rec(2, 1, ids=["x"]) + "\n")
    t = load_trace(p, keep_ids=True)
    assert t.input_length.tolist() == [4, 16] and t.session.tolist() == [0, 0]
    assert t.original_ids == ["x", 1] and t.blocks.tolist() == [0, 1, 0]
