"""Beam search: kvreplay's rounds (serving/beam.py) against vLLM 0.33.0's own online loop, request by request.

Opt-in (marker ``engines``). vLLM's BeamSearchOnlineMixin.beam_search
(entrypoints/generate/beam_search/online.py) runs as it is on CPU; only the engine behind it is a
stand-in returning kvreplay's seeded synthetic logprobs for each prompt (tests/real_engines/
vllm_beam_search.py says what is stubbed). For every request group, the requests vLLM sends, round
by round (its ids ``{request}-{round uuid}-beam-{i}``), must equal the rows kvreplay serves: the
same prompts (the prompt plus each beam's tokens, in the same order), so the same lengths, each
with max_tokens 1 and 2W logprobs; and the final answers (tokens, cumulative logprob, finish
reason) must equal kvreplay's search's.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import MOONCAKE, shared_path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # pytest runs with --import-mode=importlib
import per_request  # noqa: E402
import vllm_beam_search as harness  # noqa: E402
import vllm_scheduler  # noqa: E402

pytestmark = pytest.mark.engines


@pytest.fixture(scope="module")
def real():
    try:
        return harness.real_beam_search(download=True)
    except vllm_scheduler.VLLMMissing as e:
        pytest.skip(str(e))


def check_group(real, trace, p, width, seed, block_size):
    """vLLM's requests for trace request p against kvreplay's rows for it."""
    from kvreplay.serving import beam

    ids = [int(x) for x in trace.blocks[trace.offsets[p]:trace.offsets[p + 1]]]
    L, O = int(trace.input_length[p]), max(int(trace.output_length[p]), 1)
    prompt = vllm_scheduler.prompt_tokens(ids, L, block_size)
    root = beam.root_state(seed, trace.blocks[trace.offsets[p]:trace.offsets[p + 1]], L)

    def logprobs_of(tokens):
        state = root
        for t in tokens[L:]:
            state = beam.advance(state, t)
        return beam.synthetic_logprobs(state, width, O)

    sent, answers = real.run(prompt, width, O, logprobs_of)
    batches = []
    for request_id, tokens, max_tokens, logprobs in sent:
        batch, i = request_id.rsplit("-beam-", 1)
        if not batches or batches[-1][0] != batch:
            batches.append((batch, []))
        assert int(i) == len(batches[-1][1]) and max_tokens == 1 and logprobs == 2 * width
        assert tokens[:L] == prompt
        batches[-1][1].append(tuple(tokens[L:]))
    rounds, best = beam.search(root, width, O)
    assert [b for _, b in batches] == [[h.tokens for h in live] for live in rounds]
    assert answers == [(list(h.tokens), h.cum_logprob, "stop" if h.eos else "length") for h in best]
    # kvreplay's rows for the group: the same lengths, round by round
    widths = np.ones(len(trace), dtype=np.int64)
    widths[p] = width
    run = beam.expand(trace, widths, block_size, seed)
    rows = np.flatnonzero(run.parent == p)
    assert run.round[rows].tolist() == [r for r, live in enumerate(rounds) for _ in live]
    assert run.trace.input_length[rows].tolist() == [L + len(t) for _, b in batches for t in b]
    return len(sent)


def test_a_prompt_of_7_tokens_width_2_three_rounds(real):
    import kvreplay

    trace = kvreplay.Trace.from_requests([(["a", "b"], 7, 0.0, 3)], block_size=4)
    assert check_group(real, trace, 0, 2, 0, 4) == 1 + 2 + 2


@pytest.mark.parametrize("width", [2, 4, 10])
def test_mooncake_requests_as_vllm_sends_them(real, width):
    # the first 12 conversation requests, their output length cut to 40 rounds: every request of every round
    import kvreplay

    rows = per_request.slice_rows(shared_path(MOONCAKE / "conversation_trace.jsonl"), 0, 12)
    trace = kvreplay.Trace.from_requests([(r[0], r[1], r[2], min(r[3], 40)) for r in rows], block_size=512)
    total = sum(check_group(real, trace, p, width, 7, 512) for p in range(len(trace)))
    assert total == sum(1 + width * (max(int(o), 1) - 1) for o in trace.output_length)
