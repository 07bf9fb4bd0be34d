"""Workloads the hybrid engine tests share (test_vllm_hybrid.py, test_sglang_hybrid.py): request
lists of (hash ids, prompt tokens) at 16-token blocks."""

from __future__ import annotations

import random

import kvreplay

BS = 16


def multi_turn(seed: int = 1, n: int = 300) -> list:
    """Conversations that grow by a few blocks per turn over three shared system prompts."""
    rng = random.Random(seed)
    counter = iter(range(1, 10**9))
    new = lambda k: [next(counter) for _ in range(k)]  # noqa: E731
    systems = [new(rng.randrange(5, 30)) for _ in range(3)]
    conversations, out = [], []
    for _ in range(n):
        if conversations and rng.random() < 0.6:
            c = rng.choice(conversations)
            c.extend(new(rng.randrange(1, 12)))
        else:
            c = list(rng.choice(systems)) + new(rng.randrange(1, 20))
            conversations.append(c)
        out.append((list(c), len(c) * BS - rng.randrange(0, BS)))
    return out


def mooncake(path, n: int = 400) -> list:
    """The first n requests of the conversation trace at `path` (conftest.shared_path's, which
    skips cleanly without ../shared), each 512-token block a 16-token one."""
    trace = kvreplay.load_trace(path, keep_ids=True)
    ids = trace.original_ids
    out = []
    for k in range(n):
        blocks = [int(ids[b]) for b in trace.blocks[trace.offsets[k]:trace.offsets[k + 1]]]
        out.append((blocks, -(-int(trace.input_length[k]) // 32)))
    return out
