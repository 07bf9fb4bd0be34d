"""llamacpp: llama.cpp server's slots and host prompt cache (policies/llamacpp.py).

The workload of tests/real_engines/test_llamacpp_server.py, with a fixed one-token reply per
request instead of the server's: the reused prompt tokens per request under each server
configuration are the ones a real llama-server (llama.cpp 0c1e57098, built from
llama-cpp-python 0.3.36's sdist) returned as ``timings.cache_n`` on that workload (its replies
are single tokens too, new to every prompt, so only the prompts' structure matters). Block size
1: one id per token, each the token's prefix.
"""

from __future__ import annotations

import importlib.util
import random
from pathlib import Path

import pytest

import kvreplay
from kvreplay.errors import ConfigError

# the opt-in test's harness, loaded by path (tests/real_engines is not put on sys.path: its
# conftest would shadow this directory's)
_spec = importlib.util.spec_from_file_location(
    "llamacpp_harness", Path(__file__).resolve().parents[1] / "real_engines" / "llamacpp_server.py")
_harness = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_harness)
CONFIGS, workload = _harness.CONFIGS, _harness.workload

SERVER_CACHE_N = {  # observed on llama-server 0c1e57098 (tests/real_engines/test_llamacpp_server.py)
    "parallel-2": [0, 0, 60, 60, 30, 0, 73, 73, 83, 0, 9, 84],
    "default-4-unified": [0, 0, 60, 60, 30, 0, 73, 30, 83, 0, 0, 84],
    "no-host-cache": [0, 0, 60, 60, 30, 0, 0, 0, 83, 0, 9, 0],
    "lru-only": [0, 0, 60, 60, 30, 0, 73, 73, 30, 8, 9, 84],
}


def prompts() -> list:
    history, out = {}, []
    for k, (label, build) in enumerate(workload(random.Random(0))):
        prompt = build(history)
        history[label] = prompt + [100_000 + k]  # a one-token reply no prompt has
        out.append(prompt)
    return out


def replay(params, block_size=1):
    ps = prompts()
    reqs = [([tuple(p[:i + 1]) for i in range(len(p))], len(p), float(k), 1) for k, p in enumerate(ps)]
    return kvreplay.replay(kvreplay.Trace.from_requests(reqs), "llamacpp", 4096, block_size,
                           kv_bytes_per_token=268, **params)


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_the_servers_cache_n(config):
    assert replay(CONFIGS[config][1]).hit_tokens.tolist() == SERVER_CACHE_N[config]


def test_what_happens_where():
    # parallel-2: B3 comes back from the host cache (a load), A2 and B2 from their own slots
    c = replay({"slots": 2}).counters
    assert c["loads"] >= 1 and c["slot_hits"] >= 2
    # a prompt of at least a slot's context is rejected: 4096 tokens over 2 slots -> 2048 each
    long = [([tuple(range(i + 1)) for i in range(2048)], 2048)]
    r = kvreplay.replay(kvreplay.Trace.from_requests(long), "llamacpp", 4096, 1, slots=2)
    assert r.counters["rejected"] == 1 and r.hit_tokens.tolist() == [0]


def test_block_granularity():
    # 4-token blocks: a common prefix counts in whole blocks, at most floor((L - 1) / 4)
    reqs = [(["a", "b", "c"], 12), (["a", "b", "c"], 12), (["a", "b", "x"], 12)]
    r = kvreplay.replay(kvreplay.Trace.from_requests(reqs), "llamacpp", 64, 4, slots=1)
    assert r.hit_tokens.tolist() == [0, 8, 8]


def test_refused_in_simulate_and_checked():
    from kvreplay.serving.simulate import simulate

    t = kvreplay.Trace.from_requests([(["a"], 4)])
    with pytest.raises(ConfigError, match="llama.cpp"):
        simulate(t, "llamacpp", 10, 4)
    with pytest.raises(ConfigError, match="similarity"):
        kvreplay.replay(t, "llamacpp", 10, 4, similarity=1.5)
