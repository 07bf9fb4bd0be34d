"""Claude Code session reader: subagent timing, 64-token blocks, namespacing, errors, real samples."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from kvreplay import replay
from kvreplay.cli import main
from kvreplay.errors import TraceError
from kvreplay.trace import load_trace
from kvreplay.trace.claude_code import read_claude_code

from conftest import CLAUDE_CODE, DATA, shared_path, write

A = DATA / "claude_a.json"
B = DATA / "claude_b.json"
SAMPLES = ["trace_0026.json", "trace_0291.json", "trace_0504.json"]


def test_columns_by_hand():
    t = load_trace(A, keep_ids=True)
    assert t.format == "claude-code" and t.block_size == 64
    # absolute times (s): main 0, 10, 15; subagent starts at 12: its requests at 12+0, 12+5.
    # time order: main0 (0), main1 (10), sub0 (12), main2 (15), sub1 (17)
    assert t.timestamp.tolist() == [0.0, 10000.0, 12000.0, 15000.0, 17000.0]
    assert t.input_length.tolist() == [150, 200, 100, 260, 140]
    assert t.output_length.tolist() == [10, 5, 1, 7, 1]
    assert t.original_ids.tolist() == [1, 2, 3, 4, 50, 51]  # subagent ids share the file's id space
    assert [t.original_ids[t.request_blocks(i)].tolist() for i in range(5)] == [[1, 2], [1, 2, 3], [50], [1, 2, 3, 4], [50, 51]]
    assert t.session.tolist() == [0, 0, 0, 0, 0]
    assert read_claude_code(str(A), subagent_sessions=True).session.tolist() == [0, 0, 1, 0, 1]


def test_declared_block_size_is_used_and_overridable(capsys):
    # infinite cache, 64-token blocks, time order:
    # main1 [1,2,3]: 1,2 resident -> min(128, 200) = 128;  main2 [1,2,3,4]: 3 -> min(192, 260) = 192
    # sub1 [50,51]: 50 resident -> min(64, 140) = 64.  128 + 192 + 64 = 384 of 150+200+100+260+140 = 850
    rep = replay(load_trace(A), "infinite", None, engine="reference")
    assert (rep.block_size, rep.total_hit_tokens, rep.total_prompt_tokens) == (64, 384, 850)
    # block size 16: min(32,200) + min(48,260) + min(16,140) = 32 + 48 + 16 = 96
    assert replay(load_trace(A), "infinite", None, 16, engine="reference").total_hit_tokens == 96
    assert main(["run", str(A), "--policy", "infinite", "--engine", "reference"]) == 0
    out = capsys.readouterr().out
    assert "x 64 tokens" in out and "hits      384 of 850 prompt tokens" in out
    # the CLI replays a --block-size the user gives that most requests misfit, warning with the
    # count (an inferred one is refused: tests/engine/test_block_size_check.py)
    with pytest.warns(UserWarning, match="requests have a number of hash ids that does not fit their input_length at "
                                         "16-token blocks"):
        assert main(["run", str(A), "--policy", "infinite", "--engine", "reference", "--block-size", "16"]) == 0
    assert "hits      96 of 850 prompt tokens" in capsys.readouterr().out


def test_two_sessions_with_the_same_ids_share_nothing():
    # b alone: [1,2] then [1,2,3] -> 128. Merged with a (ids namespaced per file): b's first request
    # misses although a used ids 1 and 2: 384 + 0 + 128 = 512 of 850 + 130 + 200 = 1180
    t = load_trace([A, B])
    assert t.num_blocks == 6 + 3 and t.session.tolist().count(1) == 2
    rep = replay(t, "infinite", None, engine="reference")
    assert (rep.total_hit_tokens, rep.total_prompt_tokens) == (512, 1180)
    # (were the ids shared, b would hit 128 + min(192, 200) = 320 instead of 128)


def test_session_arrivals():
    # fixed (default 60 s): b starts at 60 s: a's five requests, then b at 60 and 90 s
    t = load_trace([A, B])
    assert t.timestamp.tolist() == [0, 10000, 12000, 15000, 17000, 60000, 90000]
    assert t.session.tolist() == [0, 0, 0, 0, 0, 1, 1]
    t = load_trace([A, B], session_spacing=5)  # b at 5 and 35 s
    assert t.timestamp.tolist() == [0, 5000, 10000, 12000, 15000, 17000, 35000]
    assert t.session.tolist() == [0, 1, 0, 0, 0, 0, 1]
    t = load_trace([A, B], session_arrivals="zero")  # ties keep input order: a's first, then b's
    assert t.timestamp.tolist() == [0, 0, 10000, 12000, 15000, 17000, 30000]
    assert t.session.tolist() == [0, 1, 0, 0, 0, 0, 1]
    p1 = load_trace([A, B, A], session_arrivals="poisson", session_spacing=100, seed=7)
    p2 = load_trace([A, B, A], session_arrivals="poisson", session_spacing=100, seed=7)
    p3 = load_trace([A, B, A], session_arrivals="poisson", session_spacing=100, seed=8)
    assert np.array_equal(p1.timestamp, p2.timestamp) and not np.array_equal(p1.timestamp, p3.timestamp)
    gaps = np.random.default_rng(7).exponential(100.0, size=2)
    starts = [p1.timestamp[p1.session == s].min() for s in range(3)]
    assert starts == pytest.approx([0.0, gaps[0] * 1000, (gaps[0] + gaps[1]) * 1000])


def test_directory_and_cli_session_options(tmp_path, capsys):
    for name in ("s1.json", "s2.json"):
        write(tmp_path, name, B.read_bytes())
    write(tmp_path, "README.md", "not a trace")  # ignored: not *.json / *.jsonl
    t = load_trace(tmp_path, session_arrivals="zero")
    assert t.source == str(tmp_path) and len(t) == 4 and t.num_sessions == 2
    assert t.timestamp.tolist() == [0, 0, 30000, 30000]
    # two namespaced copies of b: 128 each
    assert main(["run", str(tmp_path), "--policy", "infinite", "--engine", "reference", "--session-arrivals", "poisson",
                 "--seed", "3", "--session-spacing", "10s"]) == 0
    assert "hits      256 of 660 prompt tokens" in capsys.readouterr().out
    assert main(["run", str(A), str(B), "--policy", "infinite", "--engine", "reference", "--format", "claude-code"]) == 0
    assert "hits      512 of 1,180 prompt tokens" in capsys.readouterr().out


def test_gzip_and_pretty_printed(tmp_path):
    doc = json.loads(A.read_text())
    pretty = write(tmp_path, "p.json", json.dumps(doc, indent=2))
    gz = write(tmp_path, "p.json.gz", gzip.compress(A.read_bytes()))
    base = load_trace(A)
    for p in (pretty, gz):
        t = load_trace(p)
        assert t.format == "claude-code"
        assert np.array_equal(t.blocks, base.blocks) and np.array_equal(t.timestamp, base.timestamp)


PRETTY_HEAD = '{"block_size": 64,\n "requests": [\n  {"t": 0, "in": 10, "hash_ids": [1]},\n'
BAD = [
    # (document, expected message after "FILE:")
    (PRETTY_HEAD + '  {"t": 1, "in": -5, "hash_ids": [1]}\n]}\n', "4: requests[1].in: expected a non-negative integer, got -5"),
    (PRETTY_HEAD + '  {"t": 1, "hash_ids": [1]}\n]}\n', "4: requests[1].in: missing"),
    (PRETTY_HEAD + '  {"t": 1, "in": 5, "hash_ids": 3}\n]}\n', "4: requests[1].hash_ids: expected a list of integers or strings, got 3"),
    (PRETTY_HEAD + '  {"t": "x", "in": 5, "hash_ids": []}\n]}\n', '4: requests[1].t: expected a number of seconds, got "x"'),
    (PRETTY_HEAD + '  {"t": 1, "in": 5, "out": 1.5, "hash_ids": []}\n]}\n', "4: requests[1].out: expected a non-negative integer, got 1.5"),
    (PRETTY_HEAD + '  {"t": 1, "type": "subagent", "requests": [\n    {"t": 0, "in": 1, "hash_ids": [1, null]}]}\n]}\n',
     "5: requests[1].requests[0].hash_ids: item 1 is null, expected an integer or a string"),
    (PRETTY_HEAD + '  {"t": 1, "type": "subagent"}\n]}\n', "4: requests[1].requests: missing (a subagent entry needs its own requests)"),
    (PRETTY_HEAD + '  7\n]}\n', "4: requests[1]: expected a JSON object, got 7"),
    ('{"requests": []}', "1: block_size: missing"),
    ('{"block_size": 0, "requests": []}', "1: block_size: expected a positive integer, got 0"),
    ('{"block_size": 64, "hash_id_scope": "global", "requests": []}',
     '1: hash_id_scope: only "local" is supported (ids private to the file), got "global"'),
    ('{"block_size": 64,\n "requests": {}}', "2: requests: expected a list, got {}"),
    ('[1]', "1: expected one JSON object (a Claude Code session), got [1]"),
    ('{"block_size": 64, "requests": []}', " no requests (empty trace)"),
]


@pytest.mark.parametrize("doc, msg", BAD, ids=[m[:40] for _, m in BAD])
def test_bad_document_message_and_cli_exit_2(tmp_path, capsys, doc, msg):
    p = write(tmp_path, "bad.json", doc)
    expected = f"{p}:{msg}"
    with pytest.raises(TraceError) as e:
        load_trace(p, format="claude-code")
    assert str(e.value) == expected
    assert main(["run", str(p), "--format", "claude-code", "--policy", "lru", "--engine", "reference"]) == 2
    assert capsys.readouterr().err.strip() == expected


def test_invalid_json_names_the_line(tmp_path, capsys):
    p = write(tmp_path, "j.json", '{"block_size": 64,\n "requests": [\n  {"t": 0, "in": 10 "hash_ids": []}]}\n')
    with pytest.raises(TraceError) as e:
        load_trace(p, format="claude-code")
    assert str(e.value).startswith(f"{p}:3: invalid JSON (")
    assert main(["run", str(p), "--format", "claude-code"]) == 2
    assert capsys.readouterr().err.startswith(f"{p}:3: invalid JSON (")


def test_skip_bad_requests(tmp_path):
    doc = PRETTY_HEAD + '  {"t": 1, "in": -5, "hash_ids": [1]},\n  {"t": 2, "in": 64, "hash_ids": [1]}\n]}\n'
    t = load_trace(write(tmp_path, "s.json", doc), on_invalid="skip")
    assert t.input_length.tolist() == [10, 64] and t.invalid_records == {"count": 1, "first_lines": [4]}


def _leaf_requests(entries, start=0.0):
    """(absolute seconds, in, hash_ids) of every request, following subagents (independent of the reader)."""
    out = []
    for e in entries:
        if "requests" in e:
            out += _leaf_requests(e["requests"], start + e["t"])
        else:
            out.append((start + e["t"], e["in"], e["hash_ids"]))
    return out


def _infinite_hits(requests, block_size):
    """Infinite cache straight from the spec: longest prefix of ids seen before, min(k*B, L)."""
    seen, hits = set(), 0
    for _, length, ids in sorted(requests, key=lambda r: r[0]):
        k = 0
        while k < len(ids) and ids[k] in seen:
            k += 1
        hits += min(k * block_size, length)
        seen.update(ids)
    return hits


@pytest.mark.parametrize("name", SAMPLES)
def test_real_samples_end_to_end(name, capsys):
    path = shared_path(CLAUDE_CODE / name)
    doc = json.loads(path.read_text())
    requests = _leaf_requests(doc["requests"])
    prompt = sum(length for _, length, _ in requests)
    assert doc["block_size"] == 64
    t = load_trace(path)
    assert (t.format, t.block_size, len(t), t.total_prompt_tokens) == ("claude-code", 64, len(requests), prompt)
    assert t.total_prompt_tokens == doc["totals"]["combined_tokens"]["input"]  # the file's own bookkeeping agrees
    rep = replay(t, "infinite", None)
    assert rep.block_size == 64
    assert rep.total_hit_tokens == _infinite_hits(requests, 64) <= prompt
    assert main(["run", str(path), "--policy", "infinite", "--json", "--summary-only"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["block_size"], data["total_hit_tokens"], data["total_prompt_tokens"]) == (64, rep.total_hit_tokens, prompt)


def test_real_sample_directory():
    directory = shared_path(CLAUDE_CODE)
    per_file = [_leaf_requests(json.loads((directory / n).read_text())["requests"]) for n in SAMPLES]
    t = load_trace(directory)
    assert len(t) == sum(map(len, per_file)) and t.num_sessions == 3
    assert t.total_prompt_tokens == sum(length for reqs in per_file for _, length, _ in reqs)
    # ids are private to each file, so with an infinite cache the files' hits simply add up
    expected = sum(_infinite_hits(reqs, 64) for reqs in per_file)
    assert replay(t, "infinite", None).total_hit_tokens == expected
    assert bool(np.all(np.diff(t.timestamp) >= 0))


def test_a_jsonl_corpus_is_one_session_per_line(tmp_path, capsys):
    """Weka's Claude Code traces (NVIDIA AISimulate's "weka" format) hold one session document per
    line of a JSONL file: read as that many files would be, sessions apart, ids namespaced."""
    one_line = lambda path: json.dumps(json.loads(path.read_text()))  # noqa: E731
    corpus = write(tmp_path, "corpus.jsonl", one_line(A) + "\n" + one_line(B) + "\n\n")
    for options in ({}, {"session_arrivals": "zero"}, {"session_spacing": 5}):
        t, files = load_trace(corpus, **options), load_trace([A, B], **options)
        for name in ("timestamp", "session", "input_length", "output_length", "blocks", "offsets"):
            assert np.array_equal(getattr(t, name), getattr(files, name)), name
        assert t.dependencies.offsets.tolist() == files.dependencies.offsets.tolist()
        assert t.source == str(corpus)
    # the CLI's session options count the sessions a corpus holds (two here, in one file)
    assert main(["run", str(corpus), "--policy", "infinite", "--engine", "reference", "--session-arrivals",
                 "zero"]) == 0
    assert "hits      512 of 1,180 prompt tokens" in capsys.readouterr().out
    # an error names the file's line
    bad = json.loads(one_line(B))
    bad["requests"][1]["in"] = -5
    corpus = write(tmp_path, "bad.jsonl", one_line(A) + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(TraceError, match=r"bad\.jsonl:2: requests\[1\]\.in: expected a non-negative integer"):
        load_trace(corpus)
    corpus = write(tmp_path, "broken.jsonl", one_line(A) + "\n{\"block_size\": 4,\n")
    with pytest.raises(TraceError, match=r"broken\.jsonl:2: invalid JSON .*one Claude Code session per line"):
        load_trace(corpus)
