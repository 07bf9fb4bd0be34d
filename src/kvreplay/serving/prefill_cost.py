"""The GPU time a prompt's prefill takes, from the serving time model: what a gap in hit tokens
costs (analysis/headroom.py's ``cost``).

A request of L prompt tokens with h of them hit prefills ``max(L - h, 1)`` tokens (the last one
is always computed), in chunks of at most ``chunk`` tokens (vLLM's max_num_batched_tokens), each
chunk one step of its own on the time model after the tokens before it: GPU-seconds = the steps'
seconds x the tensor-parallel GPUs. A request alone on the GPU: batching with other requests
shares the weights' reads, so this is the prefill's cost, not a latency.
"""

from __future__ import annotations

import numpy as np

from .timing import StepBatch, load_time_model

DEFAULT_CHUNK = 8192


class PrefillCost:
    """``cost(prompt_tokens, hit_tokens) -> GPU-seconds`` summed over the requests (arrays)."""

    def __init__(self, model, gpu, tp: int = 1, *, chunk: int = DEFAULT_CHUNK, time_model="roofline", **options):
        self.time_model = load_time_model(time_model, model=model, gpu=gpu, tp=tp, **options)
        self.tp, self.chunk = int(tp), int(chunk)
        self.note = (f"each request's prefill alone on {self.tp} x {gpu} with {model} ({self.time_model.name} time "
                     f"model), in chunks of {self.chunk:,} tokens")
        self._memo: dict = {}

    def request_seconds(self, prompt: int, hits: int) -> float:
        key = (prompt, hits)
        seconds = self._memo.get(key)
        if seconds is None:
            seconds, cached, left = 0.0, hits, max(prompt - hits, 1)
            while left > 0:
                n = min(self.chunk, left)
                seconds += self.time_model.step_time(StepBatch((n,), (min(cached, prompt - n),)))
                cached, left = cached + n, left - n
            self._memo[key] = seconds
        return seconds

    def __call__(self, prompt, hits) -> float:
        prompt = np.asarray(prompt, dtype=np.int64).tolist()
        hits = np.asarray(hits, dtype=np.int64).tolist()
        return self.tp * sum(self.request_seconds(p, h) for p, h in zip(prompt, hits))
