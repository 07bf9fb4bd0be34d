"""The held-out corpus's second round (issue 11 item 9): each case exits 2 with FILE:LINE: field:
message and no traceback, or is read correctly."""

from __future__ import annotations

import json

import pytest

import kvreplay
from conftest import jsonl, write
from kvreplay.cli import main
from kvreplay.errors import ConfigError

MOONCAKE_LINE = {"timestamp": 0, "input_length": 1000, "output_length": 1, "hash_ids": [1, 2]}


def run_cli(capsys, *argv):
    code = main(list(argv))
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return code, captured.out, captured.err


def test_deeply_nested_json_is_a_clean_error(tmp_path, capsys):
    deep = "[" * 100_000 + "]" * 100_000
    path = write(tmp_path, "t.jsonl", jsonl(MOONCAKE_LINE) + '{"timestamp": 1, "input_length": 10, "hash_ids": [1], "x": ' + deep + "}\n")
    code, _, err = run_cli(capsys, "run", str(path), "--policy", "lru", "--capacity", "4")
    assert code == 2
    assert err.strip() == f"{path}:2: invalid JSON (nested too deeply)"


def claude_code(**extra):
    return {"id": "s", "block_size": 64, **extra,
            "requests": [{"t": 0.0, "type": "n", "in": 100, "out": 1, "hash_ids": [1]},
                         {"t": 1.0, "type": "n", "in": 130, "out": 1, "hash_ids": [1, 2]}]}


def test_claude_code_with_a_large_field_first_is_recognised(tmp_path, capsys):
    # The keys that identify the format come after 2 MiB: sniffing used to read only the first MiB.
    doc = {"big": "x" * (2 << 20), **claude_code()}
    doc = {"big": doc.pop("big"), **doc}
    path = write(tmp_path, "s.json", json.dumps(doc))
    assert kvreplay.load_trace(str(path)).format == "claude-code"
    code, out, _ = run_cli(capsys, "run", str(path), "--policy", "lru", "--capacity", "4")
    assert code == 0 and "64 tokens" in out


def test_claude_code_without_block_size_says_so(tmp_path, capsys):
    doc = claude_code()
    del doc["block_size"]
    path = write(tmp_path, "s.json", json.dumps(doc))
    code, _, err = run_cli(capsys, "run", str(path), "--capacity", "4")
    assert code == 2 and err.strip() == f"{path}:1: block_size: missing"


def test_claude_code_block_size_beyond_any_engine(tmp_path, capsys):
    path = write(tmp_path, "s.json", json.dumps(claude_code(block_size=10**30)))
    code, _, err = run_cli(capsys, "run", str(path), "--capacity", "4")
    assert code == 2 and "block_size: 1,000,000,000,000,000,000,000,000,000,000 is beyond any engine's block" in err


def test_mooncake_line_with_an_extra_chat_id_stays_mooncake(tmp_path):
    path = write(tmp_path, "t.jsonl", jsonl(dict(MOONCAKE_LINE, chat_id=5)))
    trace = kvreplay.load_trace(str(path))
    assert trace.format == "mooncake" and trace.input_length.tolist() == [1000]


def test_an_unrecognised_file_names_the_formats_tried(tmp_path, capsys):
    path = write(tmp_path, "t.jsonl", jsonl({"foo": 1}))
    code, _, err = run_cli(capsys, "run", str(path), "--capacity", "4")
    assert code == 2
    assert err.strip() == (f"{path}:1: input_length: missing (no format recognised the first record: "
                           "tried agentic-mooncake, claude-code, bailian, mooncake; read as mooncake; see --format)")


@pytest.mark.parametrize("window, message", [
    ("0.0001s", "windows of 0.0001 s over a trace spanning 1 s make more than 10,000 windows: use windows of at least"),
])
def test_over_time_windows_are_bounded(tmp_path, capsys, window, message):
    path = write(tmp_path, "t.jsonl", jsonl(MOONCAKE_LINE, dict(MOONCAKE_LINE, timestamp=1000)))
    code, _, err = run_cli(capsys, "run", str(path), "--policy", "lru", "--capacity", "4", "--over-time", window)
    assert code == 2 and message in err


def test_over_time_on_a_trace_spanning_ages(tmp_path, capsys):
    path = write(tmp_path, "t.jsonl", jsonl(MOONCAKE_LINE, dict(MOONCAKE_LINE, timestamp=1e300)))
    code, _, err = run_cli(capsys, "run", str(path), "--policy", "lru", "--capacity", "4", "--over-time", "1s")
    assert code == 2 and "make more than 10,000 windows" in err


def test_stats_refuses_a_span_no_float_holds(tmp_path, capsys):
    path = write(tmp_path, "t.jsonl", jsonl(dict(MOONCAKE_LINE, timestamp=-1e308), dict(MOONCAKE_LINE, timestamp=1e308)))
    code, _, err = run_cli(capsys, "stats", str(path), "--json")
    assert code == 2 and "the timestamps span more than a float can hold" in err


def test_sweep_takes_a_policy_string_as_a_list():
    trace = kvreplay.Trace.from_requests([([1], 4), ([1], 4)])
    out = kvreplay.sweep(trace, policies="lru,fifo", capacities=[4], block_size=4)
    assert [(r["policy"], r["total_hit_tokens"]) for r in out["results"]] == [("lru", 4), ("fifo", 4)]


@pytest.mark.parametrize("kwargs", [{"block_size": 0}, {"block_size": 1.5}, {"block_size": -4}])
def test_api_block_size_is_checked(kwargs):
    trace = kvreplay.Trace.from_requests([([1], 4)])
    with pytest.raises(ConfigError, match="block_size"):
        kvreplay.replay(trace, "lru", 4, **kwargs)
    with pytest.raises(ConfigError, match="block_size"):
        kvreplay.stats(trace, **kwargs)


def test_report_on_a_single_request_without_timestamps(tmp_path, capsys):
    path = write(tmp_path, "t.jsonl", jsonl({"input_length": 1000, "hash_ids": [1, 2]}))
    out = tmp_path / "r.html"
    code, _, _ = run_cli(capsys, "report", str(path), "-o", str(out))
    assert code == 0 and out.read_text().startswith("<!DOCTYPE html>")


# ---- the Python API names the bad argument with a kvreplay error -----------------------------------

def _tiny():
    return kvreplay.Trace.from_requests([([1, 2], 8), ([1, 3], 8)])


@pytest.mark.parametrize("call, message", [
    (lambda t: kvreplay.replay(t, "lru", 4, 4, warmup_fraction="x"), "warmup fraction must be in"),
    (lambda t: kvreplay.replay(None, "lru", 4, 4), "trace must be a Trace or a path"),
    (lambda t: kvreplay.replay(5, "lru", 4, 4), "trace must be a Trace or a path"),
    (lambda t: kvreplay.stats(None), "trace must be a Trace or a path"),
    (lambda t: kvreplay.load_trace(None), "a trace is a path to a trace file"),
    (lambda t: kvreplay.sweep(t, capacities=None, policies=["lru"]), "capacities must be a list"),
    (lambda t: kvreplay.sweep(t, capacities=[4], policies=5), "policies must be a list"),
    (lambda t: kvreplay.mrc(t, capacities=None), "capacities must be a list"),
    (lambda t: kvreplay.Trace.from_requests([([1], -5)]), "must be non-negative"),
    (lambda t: kvreplay.Trace.from_requests([(5, 5)]), "request 0: hash_ids must be a list"),
    (lambda t: kvreplay.Trace.from_requests([([1], 2.5)]), "request 0: input_length must be a whole number"),
    (lambda t: kvreplay.Trace.from_requests(["ab"]), "request 0: expected (hash_ids, input_length"),
])
def test_api_arguments_raise_kvreplay_errors(call, message):
    with pytest.raises(kvreplay.KvreplayError) as e:
        call(_tiny())
    assert message in str(e.value)
    assert isinstance(e.value, ValueError)  # ConfigError is a ValueError: old `except ValueError` still works
