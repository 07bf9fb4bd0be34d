"""The miss account: every prompt token that did not hit, and why (docs/metrics.md, "Why the
cache missed").

For every request, ``prompt_tokens = hit_tokens + sum of its missed tokens over CAUSES``, in
tokens, exactly. The replay records the cause of each missed block (engine/account.py gives the
rules, in the order they are applied); a block's tokens are ``min(block_size, L - j*block_size)``
(the last block capped by the prompt), and tokens past the last hash id are ``partial_block``.
Two causes come from other replays: ``layer_groups`` (a hybrid model's groups,
hybrid/coordinator.py) and ``concurrency`` (serving/simulate.py: the served run against the
sequential one). A cause this run cannot see is named in ``not_measured`` with the reason, and
is 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import InvariantError
from ..trace.model import exact_sum
from .distances import distances_at

CAUSES = ("first_use", "evicted", "behind_hole", "partial_block", "namespace", "layer_groups", "concurrency")
HIT = 0  # cause codes per access: 0 hit, 1 + the index in CAUSES
CODE = {name: i + 1 for i, name in enumerate(CAUSES)}

CAUSE_TEXT = {
    "first_use": "never seen before (compulsory: no cache size helps)",
    "evicted": "seen before, evicted for capacity (or never kept)",
    "behind_hole": "in the cache, behind an earlier miss of the prompt (the chain rule)",
    "partial_block": "the prompt's last block, which the engine never serves (partial, or the last token)",
    "namespace": "cached under another namespace (salt, tenant, LoRA)",
    "layer_groups": "full attention had it; a sliding-window or Mamba group did not",
    "concurrency": "the sequential replay hit it; under load it was evicted by running requests or still computing",
}

NO_NAMESPACES = ("no namespaces to compare (a hashed trace carries none; a token log's namespace or salt fields "
                 "give them to kvreplay diagnose)")
NO_GROUPS = "every layer replayed as full attention (a hybrid --model under hybrid semantics has layer groups)"
SEQUENTIAL = "a sequential replay (kvreplay simulate serves requests concurrently)"

#: Multiples of the capacity at which the evicted tokens' reuse distances are summed.
MULTIPLES = (1, 2, 4, 8)


def request_of(trace, positions: np.ndarray) -> np.ndarray:
    """The request of each flat access position."""
    return np.searchsorted(trace.offsets, positions, side="right") - 1


def block_tokens(trace, block_size: int, positions: np.ndarray) -> np.ndarray:
    """int64 per access at flat `positions`: the prompt tokens of that block,
    ``min(block_size, L - j*block_size)`` and at least 0 (j its position in its request)."""
    request = request_of(trace, positions)
    j = positions - trace.offsets[request]
    return np.clip(np.asarray(trace.input_length, dtype=np.int64)[request] - j * block_size, 0, block_size)


def _weighted_percentiles(values: np.ndarray, weights: np.ndarray, qs=(50, 90)) -> dict:
    """Token-weighted percentiles (the smallest value whose cumulative weight reaches q%)."""
    if values.size == 0 or weights.sum() == 0:
        return {f"p{q}": None for q in qs}
    order = np.argsort(values, kind="stable")
    cum = np.cumsum(weights[order])
    return {f"p{q}": float(values[order][np.searchsorted(cum, q / 100 * cum[-1])]) for q in qs}


@dataclass(eq=False)
class MissAccount:
    """Why the misses missed, per request and in total.

    tokens: int64 [requests, len(CAUSES)]: each request's missed tokens per cause.
    cause: int8 per access (trace order): 0 for a hit block, else 1 + the index in CAUSES.
    evicted_gone: int32 per ``evicted`` access (those of `cause`, in trace order): the request the
    block left the cache at. gone (a property): the same per access, -1 where the cause is another.
    not_measured: cause -> why this run cannot see it (its tokens are then 0).
    stranded: the cache's stranded blocks over time (engine/account.py), or None.
    evicted (a property): for the window, the evicted tokens by reuse distance and by time gone
    (evicted_detail).
    """

    tokens: np.ndarray
    cause: np.ndarray
    evicted_gone: np.ndarray
    warmup_requests: int
    capacity: int
    not_measured: dict = field(default_factory=dict)
    stranded: dict | None = None
    detail: tuple | None = field(default=None, repr=False)  # (trace, block_size): what evicted_detail needs, computed on first use

    @property
    def gone(self) -> np.ndarray:
        """int32 per access: for an ``evicted`` block, the request it left the cache at (-1 otherwise);
        expanded from evicted_gone on each call (the account keeps the evicted accesses' only)."""
        out = np.full(self.cause.shape[0], -1, dtype=np.int32)
        out[self.cause == CODE["evicted"]] = self.evicted_gone
        return out

    @property
    def evicted(self) -> dict:
        """evicted_detail() of this account (computed once, when first asked for)."""
        if not isinstance(self.detail, dict):
            trace, block_size = self.detail
            self.detail = evicted_detail(trace, block_size, self.cause, self.evicted_gone, self.warmup_requests,
                                         self.capacity)
        return self.detail

    def totals(self) -> dict:
        """Missed tokens per cause over the window."""
        window = self.tokens[self.warmup_requests:]
        return {name: exact_sum(window[:, c]) for c, name in enumerate(CAUSES)}

    def measured(self) -> list[str]:
        return [c for c in CAUSES if c not in self.not_measured]

    def request_misses(self) -> list[dict]:
        """Per request (trace order): {cause: tokens} over the measured causes."""
        names = self.measured()
        columns = [self.tokens[:, CAUSES.index(c)].tolist() for c in names]
        return [dict(zip(names, values)) for values in zip(*columns)] if names else [{} for _ in self.tokens]

    def check(self, hit_tokens: np.ndarray, prompt_tokens: np.ndarray, what: str) -> None:
        """InvariantError unless every request's hit and missed tokens add up to its prompt."""
        total = np.asarray(hit_tokens, dtype=np.int64) + self.tokens.sum(axis=1)
        bad = np.flatnonzero(total != np.asarray(prompt_tokens, dtype=np.int64))
        if bad.size:
            i = int(bad[0])
            raise InvariantError(f"{what}: the miss account of request {i} adds up to {int(total[i])} tokens, "
                                 f"not its {int(prompt_tokens[i])} prompt tokens ({bad.size} requests)")
        if (self.tokens < 0).any():
            raise InvariantError(f"{what}: a negative count in the miss account")

    def to_dict(self) -> dict:
        out = {"tokens": self.totals(), "not_measured": dict(self.not_measured), "evicted": self.evicted}
        if self.stranded is not None:
            out["stranded_over_time"] = self.stranded
        return out


def evicted_detail(trace, block_size: int, cause: np.ndarray, evicted_gone: np.ndarray, warmup: int,
                   capacity: int) -> dict:
    """The window's evicted tokens: by reuse distance (engine/distances.py: the smallest LRU cache
    that would have kept the block), summed within 1, 2, 4 and 8 times the capacity, and by how
    long they had been gone (requests and seconds of trace time, token-weighted percentiles).
    evicted_gone: per ``evicted`` access of `cause` (trace order), the request it left at."""
    pick = np.flatnonzero(cause == CODE["evicted"])
    in_window = pick >= trace.offsets[warmup]
    pick, gone_at = pick[in_window], evicted_gone[in_window]
    request = request_of(trace, pick)
    tokens = block_tokens(trace, block_size, pick)
    distance = distances_at(trace, pick)
    gone_requests = request - gone_at
    stamps = np.asarray(trace.timestamp, dtype=np.float64)
    gone_s = (stamps[request] - stamps[np.maximum(gone_at, 0)]) / 1000.0
    within = {f"{m}x": exact_sum(tokens[distance <= m * capacity]) for m in MULTIPLES}
    return {"tokens": exact_sum(tokens), "capacity_blocks": int(capacity),
            "reuse_distance_within": within,
            "reuse_distance_blocks": _weighted_percentiles(distance.astype(np.float64), tokens),
            "gone_requests": _weighted_percentiles(gone_requests.astype(np.float64), tokens),
            "gone_seconds": _weighted_percentiles(gone_s, tokens)}


def from_recorded(recorded, trace, block_size: int, warmup: int, capacity: int, *, namespaces: bool) -> MissAccount:
    """The account of one replay from what engine/account.py recorded."""
    n = len(trace)
    tokens = np.zeros((n, len(CAUSES)), dtype=np.int64)
    tokens[:, :recorded.tokens.shape[1] - 1] = recorded.tokens[:, 1:]  # recorded: hit, then CAUSES in order
    not_measured = {"layer_groups": NO_GROUPS, "concurrency": SEQUENTIAL}
    if not namespaces:
        not_measured["namespace"] = NO_NAMESPACES
    return MissAccount(tokens=tokens, cause=recorded.cause, evicted_gone=recorded.gone, warmup_requests=warmup,
                       capacity=capacity, not_measured=dict(sorted(not_measured.items(), key=lambda kv: CAUSES.index(kv[0]))),
                       stranded=recorded.stranded, detail=(trace, block_size))


def previous_request(trace) -> np.ndarray:
    """Per access, the latest earlier request that accessed the same block (-1: none)."""
    request = np.repeat(np.arange(len(trace), dtype=np.int64), np.diff(trace.offsets))
    order = np.lexsort((np.arange(trace.num_accesses), trace.blocks))  # by block, then in trace order
    b, r = trace.blocks[order], request[order]
    new_run = np.ones(order.size, dtype=bool)  # runs of one block within one request
    new_run[1:] = (b[1:] != b[:-1]) | (r[1:] != r[:-1])
    starts = np.flatnonzero(new_run)
    before = np.full(starts.size, -1, dtype=np.int64)
    inner = starts > 0
    same_block = np.zeros(starts.size, dtype=bool)
    same_block[inner] = b[starts[inner] - 1] == b[starts[inner]]
    before[same_block] = r[starts[same_block] - 1]
    out = np.empty(trace.num_accesses, dtype=np.int64)
    out[order] = before[np.cumsum(new_run) - 1]
    return out


def hybrid_account(trace, block_size: int, hit_blocks: np.ndarray, in_full: np.ndarray, warmup: int,
                   capacity: int) -> MissAccount:
    """The miss account of vLLM's hybrid manager (hybrid/coordinator.py), from its hits and, per
    access, whether every full-attention group had the block when its request arrived. For a
    request of n hash ids and L tokens, hit k, cap c = min(n, (L - 1) // block_size) (the last
    token is recomputed), and f = k plus the run of blocks full attention had from k on (below c):

    - blocks k .. f - 1: ``layer_groups`` (full attention had them, a sliding-window or Mamba
      group's rule ended the hit earlier);
    - from f on, as engine/account.py's rules with full attention's cache: past the cap and the
      last block, ``partial_block``; held by full attention after f, ``behind_hole``; else
      ``first_use`` when no earlier request accessed it, else ``evicted`` (gone since its last
      access: the hybrid pool logs no evictions).
    """
    counts = np.diff(trace.offsets)
    request = np.repeat(np.arange(len(trace), dtype=np.int64), counts)
    position = np.arange(trace.num_accesses, dtype=np.int64) - np.repeat(trace.offsets[:-1], counts)
    lengths = np.asarray(trace.input_length, dtype=np.int64)
    k = np.asarray(hit_blocks, dtype=np.int64)[request]
    cap = np.minimum(counts, np.maximum(lengths - 1, 0) // block_size)[request]
    held = np.asarray(in_full, dtype=bool)
    stop = np.where((position >= k) & ((position >= cap) | ~held), position, counts[request])
    full_run = counts.copy()
    np.minimum.at(full_run, request, stop)
    f = np.maximum(full_run[request], k)
    last_block = np.where(lengths > 0, (lengths - 1) // block_size, -1)[request]
    earlier = previous_request(trace)
    code = np.full(trace.num_accesses, CODE["evicted"], dtype=np.int8)
    code[earlier < 0] = CODE["first_use"]
    code[(position > f) & held] = CODE["behind_hole"]
    code[(position >= cap) & (position == last_block)] = CODE["partial_block"]
    code[(position >= k) & (position < f)] = CODE["layer_groups"]
    code[position < k] = HIT
    tokens = np.zeros((len(trace), len(CAUSES)), dtype=np.int64)
    miss = code != HIT
    np.add.at(tokens, (request[miss], code[miss].astype(np.int64) - 1),
              np.clip(lengths[request] - position * block_size, 0, block_size)[miss])
    tokens[:, CAUSES.index("partial_block")] += np.maximum(0, lengths - counts * block_size)
    gone = earlier[code == CODE["evicted"]].astype(np.int32)
    return MissAccount(tokens=tokens, cause=code, evicted_gone=gone, warmup_requests=warmup, capacity=capacity,
                       not_measured={"namespace": NO_NAMESPACES, "concurrency": SEQUENTIAL}, stranded=None,
                       detail=(trace, block_size))
