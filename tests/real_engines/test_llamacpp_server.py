"""kvreplay's llamacpp policy against a real llama-server, request by request (opt-in).

A llama-server built for CPU from the llama.cpp that llama-cpp-python 0.3.36 vendors
(llamacpp_server.py; the first run builds it, about 11 minutes on 2 cores, then it is cached in
tests/real_engines/.cache/; $KVREPLAY_LLAMA_SERVER names a binary instead) serves a tiny
random-weights model. A multi-turn workload of token-id prompts (two conversations interleaved,
a prompt that diverges inside a system prompt, unrelated prompts, an exact repeat, prompts just
under and over the similarity threshold) goes to it one request at a time, under four server
configurations. Each response's ``timings.cache_n`` (the prompt tokens the server reused) must
equal kvreplay's hit tokens for that request, replayed at block size 1 (one id per token, each
the token's prefix, so ids are chained as hashes are).

Needs: ``pip install gguf cmake ninja`` (and a C++ compiler). Each reply is one token
(``n_predict`` 1), so a slot holds exactly its prompt, as a hash-id trace describes it.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

import kvreplay

sys.path.insert(0, str(Path(__file__).resolve().parent))  # pytest runs with --import-mode=importlib
from llamacpp_server import CONFIGS  # noqa: E402

pytestmark = pytest.mark.engines

CTX = 4096
@pytest.fixture(scope="module")
def server_and_model(tmp_path_factory):
    pytest.importorskip("gguf")
    from llamacpp_server import server_binary, tiny_model

    try:
        binary = server_binary()
    except Exception as e:  # noqa: BLE001 - no compiler, no cmake, no network: skip with the reason
        pytest.skip(f"llama-server could not be built: {e}")
    return binary, tiny_model(tmp_path_factory.mktemp("model") / "tiny.gguf")


def served(binary, model, flags) -> tuple[list, list]:
    """(prompts, cache_n per request) from the real server."""
    from llamacpp_server import Server, workload

    rng = random.Random(0)
    history, prompts, cached = {}, [], []
    with Server(binary, model, flags, ctx=CTX) as srv:
        for label, build in workload(rng):
            prompt = build(history)
            reply = srv.complete(prompt, n_predict=1)
            history[label] = prompt + reply["tokens"]
            prompts.append(prompt)
            cached.append(reply["timings"]["cache_n"])
    return prompts, cached


def replayed(prompts, params) -> list:
    """kvreplay's hit tokens, one id per token (the token's prefix: chained like a hash)."""
    reqs = [([tuple(p[:i + 1]) for i in range(len(p))], len(p), float(k), 1) for k, p in enumerate(prompts)]
    trace = kvreplay.Trace.from_requests(reqs)
    return kvreplay.replay(trace, "llamacpp", CTX, 1, kv_bytes_per_token=268, **params).hit_tokens.tolist()


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_cache_n_request_by_request(server_and_model, config):
    binary, model = server_and_model
    flags, params = CONFIGS[config]
    prompts, cached = served(binary, model, flags)
    assert replayed(prompts, params) == cached
    assert any(cached)  # (the workload reuses something under every configuration)
