"""Beam search (serving/beam.py): hand-worked rounds, blocks and hits; refusals; reproducibility.
vLLM's own loop is checked in tests/real_engines/test_vllm_beam_search.py."""

from __future__ import annotations

import numpy as np
import pytest

import kvreplay
from kvreplay.errors import ConfigError
from kvreplay.serving import beam
from kvreplay.serving.simulate import simulate
from kvreplay.serving.timing import PolynomialProfile

STEP = PolynomialProfile(document={"format": "kvreplay-step-polynomial", "version": 1, "unit": "s",
                                   "terms": [{"coef": 0.01}]})


ROOT = beam.root_state(0, [0, 1], 7)  # tiny()'s prompt, seed 0


def hand_logprobs(state, width, max_tokens):
    # the prompt: token 1 at 0.8, 2 at 0.1, 3 at 0.06, 4 at 0.04; any later state: 0.5, 0.3, 0.1, 0.05.
    # Round 2's candidates: (1,1) 0.4, (1,2) 0.24, (2,1) 0.05, ...: both survivors descend from beam (1,)
    p = [0.8, 0.1, 0.06, 0.04] if state == ROOT else [0.5, 0.3, 0.1, 0.05]
    return [(t, float(np.log(v))) for t, v in zip((1, 2, 3, 4), p)]


def tiny():
    # L = 7 tokens, blocks of 4: prompt blocks A (full) and B' (3 tokens); max_tokens 3, W = 2
    return kvreplay.Trace.from_requests([(["A", "B'"], 7, 0.0, 3)], block_size=4)


def test_hand_worked_rounds_and_blocks_width_2_three_rounds():
    # round 0: the prompt [A, B'] (7 tokens); candidates 1 (0.8) and 2 (0.1) survive.
    # round 1: beams (1,) and (2,), 8 tokens each: [A, B(1)], [A, B(2)] (block 1 is now full:
    # the prompt's last 3 tokens plus the beam's first token).
    # round 2: (1,1) and (1,2), 9 tokens each: [A, B(1), C(1,1)], [A, B(1), C(1,2)].
    run = beam.expand(tiny(), np.array([2]), 4, seed=0, logprobs=hand_logprobs)
    t = run.trace
    assert run.round.tolist() == [0, 1, 1, 2, 2] and run.beam.tolist() == [0, 0, 1, 0, 1]
    assert t.input_length.tolist() == [7, 8, 8, 9, 9] and t.output_length.tolist() == [1] * 5
    rows = [t.blocks[t.offsets[c]:t.offsets[c + 1]].tolist() for c in range(5)]
    A, Bp = 0, 1
    assert rows[0] == [A, Bp]
    # round 1's second blocks are new (prompt tail + a generated token), one per beam
    assert rows[1][0] == rows[2][0] == A and len({rows[1][1], rows[2][1], Bp}) == 3
    # round 2: the two survivors both descend from beam (1,): they share its block 1; block 2 (one token) is each one's own
    rounds, _ = beam.search(ROOT, 2, 3, hand_logprobs)
    assert [h.tokens for h in rounds[2]] == [(1, 1), (1, 2)]
    assert rows[3][:2] == rows[4][:2] == [A, rows[1][1]] and rows[3][2] != rows[4][2]
    assert t.num_blocks == 2 + 2 + 2  # B(1), B(2), C(1,1), C(1,2)


def test_hand_worked_hits_and_summary_when_served():
    # seeded synthetic logprobs (seed 0); served on a constant 10 ms step, pool of 100 blocks.
    # hits: round 0 none; round 1 the prompt's full block A (vLLM's hit stops at num_tokens - 1 =
    # 7: one block, 4 tokens); round 2 A and the parent beam's block 1 (8 of 8 tokens): 0 + 4 + 4 + 8 + 8
    r = simulate(tiny(), capacity=100, block_size=4, beam_width=2, compare_sequential=False, time_model=STEP)
    assert r.prompt_tokens.tolist() == [7, 8, 8, 9, 9]
    assert r.hit_tokens.tolist() == [0, 4, 4, 8, 8]
    # each round is sent when the last one ended: one step each
    assert np.allclose(r.arrival_s, [0, 0.01, 0.01, 0.02, 0.02]) and np.allclose(r.finish_s, [0.01, 0.02, 0.02, 0.03, 0.03])
    s = r.beam
    rounds, _ = beam.search(ROOT, 2, 3)
    assert [h.tokens[0] for h in rounds[2]] == [1, 2]  # seed 0: the two survivors descend from different beams
    assert (s["requests"], s["prompt_tokens_sent"], s["prompt_tokens_hit"]) == (5, 41, 24)
    # last round: [A, B(1), C(1,x)] and [A, B(2), C(2,y)]: A shared, 4 held by one; 6 as independent requests
    assert (s["final_shared_blocks"], s["final_divergent_blocks"], s["final_independent_blocks"]) == (1, 4, 6)
    assert s["search_blocks"] == 3  # full blocks: A, B(1), B(2) (B' and the Cs are partial, never cached)
    assert s["median_time_to_answer_s"] == pytest.approx(0.03)
    assert s["per_group"]["rounds"].tolist() == [3]


def test_requests_per_group_and_reproducible_by_seed():
    trace = kvreplay.Trace.from_requests([(list(range(5)), 300, 0.0, 20), (list(range(5)), 300, 0.0, 20),
                                          ([9, 10], 100, 1.0, 1)], block_size=64)
    a = beam.expand(trace, np.array([4, 4, 4]), 64, seed=3)
    # 1 + W x (max_tokens - 1) requests per group; one round for a one-token answer
    assert np.bincount(a.parent).tolist() == [1 + 4 * 19, 1 + 4 * 19, 1]
    assert a.trace.offsets.tolist() == beam.expand(trace, np.array([4, 4, 4]), 64, seed=3).trace.offsets.tolist()
    # identical prompts search identically, and share every block (beam search is deterministic given the model)
    t = a.trace
    g0, g1 = ([t.blocks[t.offsets[c]:t.offsets[c + 1]].tolist() for c in np.flatnonzero(a.parent == g)] for g in (0, 1))
    assert g0 == g1
    other = beam.expand(trace, np.array([4, 4, 4]), 64, seed=4)
    assert [h.tokens for h in other.answers[0]] != [h.tokens for h in a.answers[0]]  # (another search)


def test_release_links_wait_for_the_whole_previous_round():
    trace = kvreplay.Trace.from_requests([(list(range(3)), 130, 0.0, 3), ([7], 10, 0.0, 5)], block_size=64)
    run = beam.expand(trace, np.array([3, 1]), 64, seed=0)
    links = run.release_links(np.array([0.5] * len(run.parent)), 0.002)
    assert run.round.tolist() == [0, 1, 1, 1, 2, 2, 2, -1]
    assert links["waits"].tolist() == [0, 1, 1, 1, 3, 3, 3, 0]
    assert links["next_offsets"].tolist() == [0, 3, 6, 9, 12, 12, 12, 12, 12]
    assert links["next_ids"].tolist() == [1, 2, 3] + [4, 5, 6] * 3
    assert links["arrival"].tolist() == [0.5, 0, 0, 0, 0, 0, 0, 0.5] and set(links["next_delay_s"]) == {0.002}


@pytest.mark.parametrize("kwargs,match", [
    (dict(engine_style="sglang", policy="radix"), "SGLang 0.5.23 runs it inside its scheduler"),
    (dict(n=2), "beam search and n > 1 together"),
    (dict(instances=2), "beam search needs one instance"),
    (dict(beam_width=11), r"beam_width \(--beam-width\) must be a whole number of beams in 1..10"),
])
def test_refused_with_the_reason(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        simulate(tiny(), capacity=100, block_size=4, **{"beam_width": 2, **kwargs})


def test_the_cli_prints_the_groups(tmp_path, capsys):
    from kvreplay.cli import main

    path = tmp_path / "t.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 7, "hash_ids": [1, 2], "output_length": 3, "beam_width": 2}\n')
    assert main(["simulate", str(path), "--block-size", "4", "--capacity", "100", "--time-model", "instant"]) == 0
    out = capsys.readouterr().out
    assert "beam       the trace's 1 beam-search requests (width up to 2): 5 one-token requests" in out
    assert "prompt tokens sent 41, served from cache 24 (58.5%)" in out


def test_the_documented_run(tmp_path):
    # docs/engines.md, "Beam search": its commands, and every figure it quotes from them
    from conftest import MOONCAKE, ROOT, shared_path
    from test_cli import kv, ok

    source = shared_path(MOONCAKE / "conversation_trace.jsonl")
    doc = (ROOT / "docs" / "engines.md").read_text()
    section = doc[doc.index("### Beam search"):]
    section = section[:section.find("\n## ")] if "\n## " in section else section
    blocks = section.split("```")
    assert blocks[1].strip().splitlines() == ["kvreplay slice conversation_trace.jsonl --requests 0:10 -o conv10.jsonl",
                                              "kvreplay simulate conv10.jsonl --gpu H100 --model Llama-3.1-8B --beam-width 4"]

    conv = tmp_path / "conv10.jsonl"
    assert kv("slice", source, "--requests", "0:10", "-o", conv).returncode == 0
    out = ok("simulate", conv, "--gpu", "H100", "--model", "Llama-3.1-8B", "--beam-width", "4")
    quoted = blocks[3].strip().splitlines()
    assert len(quoted) == 4 and all(line in out.splitlines() for line in quoted), quoted
    assert "(2.13%)" in out and "TTFT        258.5 ms  281.5 ms" in out
    base = ok("simulate", conv, "--gpu", "H100", "--model", "Llama-3.1-8B")
    rows = {line.split("  ")[0]: line.split() for line in base.splitlines()}
    assert rows["end to end"][5:11] == ["7.89", "s", "7.51", "s", "-", "9.41"]
    text = " ".join(section.split())
    for figure in ("(the 2.13% of prompt tokens missed)", "7.89 s after their arrival (p50, band 7.51-9.41 s)",
                   "1.82 ms + 6.97 ms of latency", "226 + 40 blocks, against 944", "(16,766 of them; TTFT p50 281.5 ms",
                   "hit 0, 4, 4, 8, 8"):
        assert figure in text, figure
