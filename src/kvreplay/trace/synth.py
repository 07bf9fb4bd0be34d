"""Small deterministic synthetic workloads (used by `kvreplay demo` and tests).

Blocks are identified the way engines identify them: a block's id is a function
of its own content and the id of the block before it, so requests that share
their first k blocks of content share their first k block ids.
"""

from __future__ import annotations

import numpy as np

from .model import Trace


def chat_workload(
    num_conversations: int = 300,
    num_system_prompts: int = 8,
    turns: tuple[int, int] = (1, 8),
    block_size: int = 512,
    seed: int = 0,
) -> Trace:
    """Multi-turn chats over a few shared system prompts.

    System prompts are picked with Zipf-like popularity (a few are very common);
    each conversation resends its whole history every turn and appends a new user
    message; conversations interleave in time. Deterministic for a given seed.
    """
    rng = np.random.default_rng(seed)
    ids: dict[tuple[int, int], int] = {}

    def chain(content: list[int]) -> list[int]:
        out, prev = [], -1
        for c in content:
            prev = ids.setdefault((prev, c), len(ids))
            out.append(prev)
        return out

    next_content = iter(range(10**12))
    system = [[next(next_content) for _ in range(int(rng.integers(2, 9)))] for _ in range(num_system_prompts)]
    popularity = 1.0 / np.arange(1, num_system_prompts + 1) ** 1.1
    popularity /= popularity.sum()
    events = []  # (time_ms, hash ids, input tokens, output tokens)
    for _ in range(num_conversations):
        t = float(rng.uniform(0, 600_000))
        history = list(system[int(rng.choice(num_system_prompts, p=popularity))])
        for _ in range(int(rng.integers(turns[0], turns[1] + 1))):
            history += [next(next_content) for _ in range(int(rng.integers(1, 4)))]
            tokens = len(history) * block_size - int(rng.integers(0, block_size))
            events.append((t, chain(history), tokens, int(rng.integers(50, 600))))
            history.append(next(next_content))  # the reply becomes part of the next prompt
            t += float(rng.exponential(30_000))
    events.sort(key=lambda e: e[0])
    offsets = np.zeros(len(events) + 1, dtype=np.int64)
    np.cumsum([len(e[1]) for e in events], out=offsets[1:])
    return Trace(
        offsets=offsets,
        blocks=np.fromiter((b for e in events for b in e[1]), dtype=np.int32, count=int(offsets[-1])),
        input_length=np.array([e[2] for e in events], dtype=np.int64),
        output_length=np.array([e[3] for e in events], dtype=np.int64),
        timestamp=np.array([e[0] for e in events], dtype=np.float64),
        num_blocks=len(ids),
        block_size=block_size,
        source=f"synthetic chat workload (seed {seed})",
        format="synthetic",
    )
