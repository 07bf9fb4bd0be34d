"""Replay results: per-request arrays, totals, the spec's invariants, serialisation."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import InvariantError
from ..policies.registry import get_policy
from ..trace.model import exact_sum


def window_text(warmup_requests: int, num_requests: int) -> str:
    """How a figure's window is named everywhere it is printed."""
    if warmup_requests == 0:
        return f"whole trace ({num_requests} requests)"
    return f"after warm-up: requests {warmup_requests + 1}-{num_requests} of {num_requests} (first {warmup_requests} only warm the cache)"


def window_object(warmup_requests: int, num_requests: int) -> dict:
    """The window as every JSON output gives it (run's report, sweep and mrc documents)."""
    return {"warmup_requests": warmup_requests, "measured_requests": num_requests - warmup_requests,
            "description": window_text(warmup_requests, num_requests)}


@dataclass(eq=False)
class Report:
    """The result of one replay.

    ``stranded_blocks``: blocks resident at the end that no request can reach, because an
    earlier block of their chain (the blocks before them in the request where they first
    appear) is not resident: capacity that cannot serve a prefix hit until that block comes back.

    ``misses``: the miss account (engine/misses.MissAccount): every request's missed tokens by
    cause, adding up with its hit tokens to its prompt tokens; None with tiers.

    ``oversize_requests``: requests of the window whose prompt needs more blocks than the whole
    cache, ``ceil(input_length / block_size) > capacity``. A serving engine cannot run them; the
    policies differ in what they do with them (radix refuses them, vllm holds the whole cache,
    the others let them evict their own blocks), so their hits deserve a second look.

    Per-request arrays (trace order): ``prompt_tokens`` (the request's
    input_length), ``hit_tokens`` (= min(hit_blocks * block_size, prompt_tokens))
    and ``hit_blocks`` (the longest resident prefix, in blocks). Totals count
    the requests after ``warmup_requests`` (0: the whole trace).
    """

    policy: str
    params: dict
    block_size: int
    cache_capacity_blocks: int
    prompt_tokens: np.ndarray
    hit_tokens: np.ndarray
    hit_blocks: np.ndarray
    final_cache_blocks: int
    counters: dict = field(default_factory=dict)
    stranded_blocks: int = 0
    sizes: dict = field(default_factory=dict)
    warmup_requests: int = 0
    engine: str = "compiled"
    trace_source: str = "<memory>"
    invalid_records: dict | None = None
    block_size_mismatches: dict | None = None
    oversize_requests: int = 0  # measured requests needing more blocks than the cache: ceil(L / block_size) > capacity
    tiers: dict | None = None  # with tiers below the cache: hit tokens per tier (serving/tiers.py)
    kv_semantics: dict | None = None  # a hybrid model's groups under vLLM's hybrid manager (hybrid/coordinator.py)
    misses: object | None = None  # the miss account (engine/misses.MissAccount): why each missed token missed

    @property
    def num_requests(self) -> int:
        return int(self.prompt_tokens.shape[0])

    @property
    def total_prompt_tokens(self) -> int:
        return exact_sum(self.prompt_tokens[self.warmup_requests:])

    @property
    def total_hit_tokens(self) -> int:
        return exact_sum(self.hit_tokens[self.warmup_requests:])

    @property
    def hit_rate(self) -> float:
        """Token-weighted: total_hit_tokens / total_prompt_tokens over the window (0 when no tokens)."""
        prompt = self.total_prompt_tokens
        return self.total_hit_tokens / prompt if prompt else 0.0

    @property
    def window(self) -> str:
        return window_text(self.warmup_requests, self.num_requests)

    def check_invariants(self, trace) -> None:
        """Raise InvariantError if this result breaks a rule that holds for every policy."""
        lengths = np.diff(trace.offsets)
        problems = []
        if self.hit_blocks.min(initial=0) < 0 or np.any(self.hit_blocks > lengths):
            problems.append("hit_blocks outside 0..len(hash_ids)")
        capped = np.minimum(self.hit_blocks.astype(np.int64) * self.block_size, self.prompt_tokens)
        if not np.array_equal(capped, self.hit_tokens):
            problems.append("hit_tokens != min(hit_blocks * block_size, input_length)")
        if not np.array_equal(self.prompt_tokens, trace.input_length):
            problems.append("prompt_tokens != input_length")
        if not 0 <= self.final_cache_blocks <= self.cache_capacity_blocks:
            problems.append(f"final_cache_blocks {self.final_cache_blocks} outside 0..{self.cache_capacity_blocks}")
        # A request whose first block never appeared before cannot hit (it cannot be resident, nor in a ghost).
        if trace.num_accesses:
            first_seen = trace.first_seen
            nonempty = lengths > 0
            starts = trace.offsets[:-1][nonempty]
            new_first = first_seen[trace.blocks[starts]] == starts
            if np.any(self.hit_blocks[nonempty][new_first] != 0):
                problems.append("a request whose first block was never seen before has hits")
        if problems:
            raise InvariantError(f"{self.policy} at capacity {self.cache_capacity_blocks}: " + "; ".join(problems))

    def summary(self) -> dict:
        """The report without per-request data."""
        out = {
            "policy": self.policy,
            "params": dict(self.params),
            "block_size": self.block_size,
            "cache_capacity_blocks": self.cache_capacity_blocks,
            "num_requests": self.num_requests,
            "total_prompt_tokens": self.total_prompt_tokens,
            "total_hit_tokens": self.total_hit_tokens,
            "hit_rate": self.hit_rate,
            "final_cache_blocks": self.final_cache_blocks,
            "stranded_blocks": self.stranded_blocks,
            "window": window_object(self.warmup_requests, self.num_requests),
            "counters": dict(self.counters),
            "sizes": dict(self.sizes),
            "engine": self.engine,
            "trace": self.trace_source,
        }
        out["oversize_requests"] = self.oversize_requests
        out.update(get_policy(self.policy).report_fields(self))  # (deepseek: its API's usage fields)
        if self.misses is not None:
            out["misses"] = self.misses.to_dict()
        if self.tiers is not None:
            out["tiers"] = {k: v for k, v in self.tiers.items() if k != "tokens_per_tier"}
        if self.kv_semantics is not None:  # (hybrid only: a full-semantics report keeps the spec's fields)
            out["kv_semantics"] = self.kv_semantics
        if self.invalid_records:
            out["invalid_records"] = self.invalid_records
        if self.block_size_mismatches:
            out["block_size_mismatches"] = self.block_size_mismatches
        return out

    def to_dict(self, per_request: bool = True) -> dict:
        """JSON-ready dict; ``per_request`` is a list in trace order of
        ``{"prompt_tokens", "hit_tokens", "hit_blocks", "misses"}``, ``misses`` the request's
        missed tokens per measured cause (with the miss account: engine/misses.py)."""
        out = self.summary()
        if per_request:
            out["per_request"] = [
                {"prompt_tokens": p, "hit_tokens": h, "hit_blocks": k}
                for p, h, k in zip(self.prompt_tokens.tolist(), self.hit_tokens.tolist(), self.hit_blocks.tolist())
            ]
            if self.misses is not None:
                for row, misses in zip(out["per_request"], self.misses.request_misses()):
                    row["misses"] = misses
        return out

    # Per-request table columns (name -> kind); docs/formats.md, "Output tables". With the miss
    # account, one more per cause: miss_<cause>_tokens (engine/misses.py).
    REQUEST_COLUMNS = {"request": "int", "prompt_tokens": "int", "hit_tokens": "int", "hit_blocks": "int",
                       "hit_rate": "float", "measured": "bool"}

    def request_kinds(self) -> dict:
        """The per-request table's columns and their kinds."""
        if self.misses is None:
            return dict(self.REQUEST_COLUMNS)
        return {**self.REQUEST_COLUMNS, **{f"miss_{c}_tokens": "int" for c in self.misses.measured()}}

    def request_columns(self) -> dict:
        """The per-request table as numpy columns, in trace order: ``request`` (0-based index),
        ``prompt_tokens`` and ``hit_tokens`` (tokens), ``hit_blocks`` (blocks), ``hit_rate``
        (hit_tokens / prompt_tokens, a fraction 0..1; NaN for a request without prompt tokens) and
        ``measured`` (False for the warm-up requests, which the totals leave out); with the miss
        account, ``miss_<cause>_tokens`` per measured cause (tokens)."""
        prompt = np.asarray(self.prompt_tokens, dtype=np.int64)
        hits = np.asarray(self.hit_tokens, dtype=np.int64)
        with np.errstate(divide="ignore", invalid="ignore"):
            rate = np.where(prompt > 0, hits / np.where(prompt > 0, prompt, 1), np.nan)
        out = {"request": np.arange(self.num_requests, dtype=np.int64), "prompt_tokens": prompt, "hit_tokens": hits,
               "hit_blocks": np.asarray(self.hit_blocks, dtype=np.int64), "hit_rate": rate,
               "measured": np.arange(self.num_requests) >= self.warmup_requests}
        if self.misses is not None:
            from .misses import CAUSES

            for c in self.misses.measured():
                out[f"miss_{c}_tokens"] = np.ascontiguousarray(self.misses.tokens[:, CAUSES.index(c)])
        return out

    def to_pandas(self):
        """The per-request table (request_columns()) as a pandas DataFrame; needs pandas
        (pip install 'kvreplay[pandas]')."""
        from ..tables import to_pandas

        return to_pandas(self.request_columns(), self.request_kinds(), what="Report.to_pandas()")

    def to_polars(self):
        """The per-request table (request_columns()) as a polars DataFrame; needs polars
        (pip install 'kvreplay[polars]')."""
        from ..tables import to_polars

        return to_polars(self.request_columns(), self.request_kinds(), what="Report.to_polars()")
