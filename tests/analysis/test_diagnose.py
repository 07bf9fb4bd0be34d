"""kvreplay diagnose (analysis/diagnose.py): the seed's production case reproduced on a synthetic
token log (a timestamp rendered at token 20 of the system prompt: a low hit rate, the span
found, the rewrite lifting it to the restructured template's rate), the what-if equal to a
replay of the rewritten log through kvreplay hash and run, a hand-made span of varying width
decoded with a tokenizer, the namespace cause from a token log, the symptom of a hashed trace."""

from __future__ import annotations

import json

import numpy as np
import pytest

import kvreplay
from kvreplay.analysis.diagnose import diagnose, find_breaks, rewrite, symptom
from kvreplay.cli import main
from kvreplay.trace.token_log import TokenLog, hashed, read_token_log
from kvreplay.trace.token_synth import token_log, timestamp_tokens


def log_of(prompts, namespaces=None) -> TokenLog:
    n = len(prompts)
    return TokenLog("<test>", [np.asarray(p, dtype=np.int64) for p in prompts], np.arange(n, dtype=np.float64),
                    np.ones(n, dtype=np.int64), namespaces or [""] * n, np.arange(1, n + 1))


def test_the_production_case():
    # 600 chat requests over 4 system prompts of 2,000 tokens; the template renders each request's
    # time (YYYY-MM-DD HH:MM, minutes) after token 20. The log spans a few hours of one day, so
    # "2024-05-01 0" is the same in every request and the span starts at the hour's last digit
    # (token 20 + 12 = 32): "H:MM", 4 tokens.
    log = token_log(600, timestamp_at=20)
    d = diagnose(log, block_size=16, policy="s3fifo", capacity=4096)
    assert 0.25 <= d["replay"]["hit_rate"] <= 0.55  # the seed's 30-55%
    assert len(d["spans"]) == 1
    span = d["spans"][0]
    assert span["start"] == 32 and span["widths"] == [4, 4] and span["variants"] == 4
    assert span["rewritten_requests"] == 600 and span["broken_requests"] >= 200
    assert log.tokens[0][20:36].tolist() == timestamp_tokens(log.timestamp[0] / 1000)
    # the restructured template (the time at the prompt's end) replayed: the what-if gets there
    restructured, _ = hashed(token_log(600, timestamp_at="end"), 16)
    target = kvreplay.replay(restructured, "s3fifo", 4096, 16).hit_rate
    assert target > 0.85 and abs(span["what_if"]["hit_rate"] - target) < 0.01
    # without the timestamp there is nothing to find
    assert diagnose(token_log(300, timestamp_at=None), block_size=16, policy="lru", capacity=4096)["spans"] == []


def test_what_if_is_the_replay_of_the_rewritten_log(tmp_path, capsys):
    log_path, fixed, trace = tmp_path / "log.jsonl", tmp_path / "fixed.jsonl", tmp_path / "trace.jsonl"
    assert main(["synth", "--token-log", "--requests", "300", "-o", str(log_path)]) == 0
    assert "300 requests" in capsys.readouterr().out
    assert main(["diagnose", str(log_path), "--policy", "lru", "--capacity", "2000", "--rewrite", str(fixed),
                 "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert len(d["spans"]) == 1 and len(d["advice"]) <= 3
    assert main(["hash", str(fixed), "--block-size", "16", "-o", str(trace)]) == 0
    assert main(["run", str(trace), "--policy", "lru", "--capacity", "2000", "--json", "--summary-only"]) == 0
    run = json.loads(capsys.readouterr().out)
    assert run["total_hit_tokens"] == d["spans"][0]["what_if"]["hit_tokens"]
    assert run["hit_rate"] == d["spans"][0]["what_if"]["hit_rate"]
    # the original log through hash and run gives the diagnosis's own replay
    assert main(["hash", str(log_path), "--block-size", "16", "-o", str(trace)]) == 0
    assert main(["run", str(trace), "--policy", "lru", "--capacity", "2000", "--json", "--summary-only"]) == 0
    assert json.loads(capsys.readouterr().out)["total_hit_tokens"] == d["replay"]["hit_tokens"]


def test_a_span_of_varying_width_decoded(tmp_path):
    pytest.importorskip("tokenizers")
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel

    # 40 words of preamble, each request's user name (1 or 2 words), 100 shared words, then its own.
    names = [[f"n{k}"] if k % 2 == 0 else [f"n{k}", "jr"] for k in range(20)]
    words = [f"w{i}" for i in range(400)] + [w for name in names for w in name if w != "jr"] + ["jr"]
    vocab = {w: i for i, w in enumerate(words)}
    tok = Tokenizer(WordLevel(vocab, unk_token="w0"))
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    prompts = []
    for k, name in enumerate(names):
        own = [vocab[f"w{200 + (7 * k + j) % 190}"] for j in range(20)]
        prompts.append([vocab[f"w{i}"] for i in range(40)] + [vocab[w] for w in name]
                       + [vocab[f"w{100 + i}"] for i in range(100)] + own)
    log = log_of(prompts)
    breaks = find_breaks(log)
    # each request breaks against the one before it: the name, then 100 shared words
    assert [(b.request, b.earlier, b.start, b.resume - b.start) for b in breaks[:3]] == [
        (1, 0, 40, 2), (2, 1, 40, 1), (3, 2, 40, 2)]
    d = diagnose(log, block_size=4, policy="lru", capacity=1000, min_requests=3,
                 decode=lambda ids: tok.decode(ids))
    span = d["spans"][0]
    assert span["start"] == 40 and span["widths"] == [1, 2] and span["broken_requests"] == 19
    assert span["examples"] == ["n1 jr", "n2", "n3 jr"]
    moved, changed = rewrite(log, [span["span"]])
    assert changed == 20 and moved.tokens[1].tolist() == prompts[1][:40] + prompts[1][42:] + prompts[1][40:42]
    assert span["what_if"]["hit_rate"] > d["replay"]["hit_rate"]


def test_namespaces_from_a_token_log(tmp_path):
    # the same 3 prompts under tenants a and b: every request of b misses what a cached
    path = tmp_path / "ns.jsonl"
    prompts = [list(range(100 * k, 100 * k + 64)) for k in range(3)]
    lines = [{"token_ids": p, "namespace": ns} for ns in ("a", "b") for p in prompts]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    log = read_token_log(path)
    trace, content = hashed(log, 16)
    assert trace.num_blocks == 24 and content.tolist() == list(range(12)) * 2
    d = diagnose(log, block_size=16, policy="lru", capacity=100)
    assert d["replay"]["misses"]["namespace"] == 3 * 64 and d["replay"]["misses"]["first_use"] == 3 * 64


def test_the_symptom_of_a_hashed_trace():
    # sessions 0 and 1 change their first block every turn; session 2 keeps it
    t = kvreplay.Trace(offsets=np.array([0, 2, 4, 6, 8, 10, 12]),
                       blocks=np.array([0, 1, 2, 1, 3, 4, 5, 4, 6, 7, 6, 8], dtype=np.int32),
                       input_length=np.full(6, 8), output_length=np.zeros(6, dtype=np.int64),
                       timestamp=np.arange(6, dtype=np.float64), num_blocks=9, block_size=4,
                       session=np.array([0, 0, 1, 1, 2, 2]))
    s = symptom(t)
    assert s["new_first_block"] == 5 and s["sessions"] == {"multi_turn": 3, "first_block_changes_every_turn": 2}


def test_a_hashed_trace_refuses_token_log_flags(tmp_path, capsys):
    from conftest import DATA

    assert main(["diagnose", str(DATA / "prefix_multiblock.jsonl"), "--policy", "lru"]) == 2
    assert "--policy" in capsys.readouterr().err
    assert main(["diagnose", str(DATA / "prefix_multiblock.jsonl")]) == 0
    assert "the symptom, not the cause" in capsys.readouterr().out


def test_the_documented_production_case(tmp_path, capsys):
    # docs/metrics.md, "Prompt structure" and docs/synth.md: the commands as written there
    chats, fixed, trace, end = (tmp_path / n for n in ("chats.jsonl", "fixed.jsonl", "fixed_trace.jsonl", "end.jsonl"))
    assert main(["synth", "--token-log", "-o", str(chats)]) == 0
    assert main(["diagnose", str(chats), "--rewrite", str(fixed)]) == 0
    out = capsys.readouterr().out
    assert "replay    30.47% of the prompt tokens hit (2,366,064 of 7,765,362" in out
    assert ("span 1    at token 32, 4 tokens wide, in 4 prompt variants: breaks 834 of 2,000 requests (41.7%)"
            in out)
    assert "what-if   moved to the end of the 2,000 prompts that have it: 89.79% (+59.32 points" in out
    assert main(["hash", str(fixed), "--block-size", "16", "-o", str(trace)]) == 0
    assert main(["run", str(trace), "--capacity", "4096"]) == 0
    assert "= 89.79% (token-weighted)" in capsys.readouterr().out
    assert main(["synth", "--token-log", "--timestamp-at", "end", "-o", str(end)]) == 0
    assert main(["hash", str(end), "--block-size", "16", "-o", str(trace)]) == 0
    assert main(["run", str(trace), "--capacity", "4096"]) == 0
    assert "= 89.48% (token-weighted)" in capsys.readouterr().out


def test_the_documented_symptom_of_the_conversation_trace(capsys):
    from conftest import MOONCAKE, shared_path

    assert main(["diagnose", str(shared_path(MOONCAKE / "conversation_trace.jsonl"))]) == 0
    assert "stop      7,372 requests (61.3%) share their first 1 block with an earlier request" in capsys.readouterr().out


def test_a_vllm_request_log_is_a_token_log(tmp_path, capsys):
    # vLLM names the prompt's ids prompt_token_ids: diagnose reads them as hash does
    from conftest import DATA

    plain = DATA / "tokens_span_at_32.jsonl"
    vllm = tmp_path / "vllm.jsonl"
    vllm.write_text(plain.read_text().replace('"token_ids"', '"prompt_token_ids"'))
    assert main(["diagnose", str(plain), "--json"]) == 0
    expected = json.loads(capsys.readouterr().out)
    assert main(["diagnose", str(vllm), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["spans"][0]["start"] == 32 and got["spans"][0]["broken_requests"] == 38
    assert {k: v for k, v in got.items() if k != "source"} == {k: v for k, v in expected.items() if k != "source"}
