"""The miss account of a served trace (kvreplay simulate): the sequential replay's account
(engine/misses.py) with the concurrency cause added, block by block.

For a finished request with n hash ids, k_s blocks hit when it was first scheduled and k_q hit in
the sequential replay of its instance's requests (same policy and capacity, one at a time):

- blocks before min(k_s, k_q) hit in both;
- blocks k_s .. k_q - 1 (when k_s < k_q) are ``concurrency``: one at a time they hit, served they
  did not. Split by what the request found: ``still_computing`` when the request that last put the
  block in (the previous request of the instance using it, in trace order) had not finished its
  prefill (its first token) when this one was scheduled; else ``evicted_under_load`` (running
  requests' KV forced it out, or the policy's order under the interleaving did);
- blocks from max(k_s, k_q) on keep their sequential cause (blocks k_q .. k_s - 1 hit served
  although they missed one at a time: they are hits);
- tokens past the last hash id stay ``partial_block``.

So for every finished request ``prompt = served hit tokens + missed tokens by cause``, exactly.
Requests that did not finish (rejected, refused) are left out, as from the served hit rate.
"""

from __future__ import annotations

import numpy as np

from ..engine.misses import CAUSES, CODE, HIT, MissAccount
from ..errors import InvariantError
from ..trace.model import exact_sum, ragged_take

CONCURRENCY = CODE["concurrency"]


def sequential_causes(trace, parts) -> tuple[np.ndarray, np.ndarray]:
    """The instances' sequential replays in trace positions: (cause per access, hit blocks per
    request). `parts`: (the instance's request indexes, its replay's Report) each."""
    cause = np.zeros(trace.num_accesses, dtype=np.int8)
    hits = np.zeros(len(trace), dtype=np.int64)
    for index, report in parts:
        _, flat = ragged_take(trace.offsets, index)
        cause[flat] = report.misses.cause
        hits[index] = report.hit_blocks
    return cause, hits


def served_account(trace, block_size: int, parts, served_hit_blocks, finished, scheduled_s, first_token_s,
                   instance=None) -> tuple[MissAccount, dict]:
    """(the served account, the concurrency cause's split in tokens): see the module doc."""
    seq_cause, seq_hits = sequential_causes(trace, parts)
    counts = np.diff(trace.offsets)
    request = np.repeat(np.arange(len(trace), dtype=np.int64), counts)
    position = np.arange(trace.num_accesses, dtype=np.int64) - np.repeat(trace.offsets[:-1], counts)
    served = np.asarray(served_hit_blocks, dtype=np.int64)
    ks, kq = served[request], seq_hits[request]
    code = np.where(position < ks, HIT, np.where(position < kq, CONCURRENCY, seq_cause)).astype(np.int8)
    lengths = np.asarray(trace.input_length, dtype=np.int64)
    tokens_of = np.clip(lengths[request] - position * block_size, 0, block_size)
    ok = np.asarray(finished, dtype=bool)
    keep = ok[request] & (code != HIT)
    tokens = np.zeros((len(trace), len(CAUSES)), dtype=np.int64)
    np.add.at(tokens, (request[keep], code[keep].astype(np.int64) - 1), tokens_of[keep])
    tokens[ok, CAUSES.index("partial_block")] += np.maximum(0, lengths - counts * block_size)[ok]
    split = _concurrency_split(trace, code, request, keep, tokens_of, scheduled_s, first_token_s, instance)
    hit_tokens = np.minimum(served * block_size, lengths)
    total = hit_tokens[ok] + tokens[ok].sum(axis=1)
    if not np.array_equal(total, lengths[ok]):
        i = int(np.flatnonzero(ok)[np.flatnonzero(total != lengths[ok])[0]])
        raise InvariantError(f"the served miss account of request {i} does not add up to its prompt tokens")
    account = MissAccount(tokens=tokens, cause=code,
                          evicted_gone=np.full(int(np.count_nonzero(code == CODE["evicted"])), -1, dtype=np.int32),
                          warmup_requests=0, capacity=0, not_measured={})
    return account, split


def _concurrency_split(trace, code, request, keep, tokens_of, scheduled_s, first_token_s, instance) -> dict:
    """The concurrency tokens by what the request found (module doc)."""
    picked = np.flatnonzero(keep & (code == CONCURRENCY))
    if picked.size == 0:
        return {"still_computing": 0, "evicted_under_load": 0}
    owner = np.zeros(len(trace), dtype=np.int64) if instance is None else np.asarray(instance, dtype=np.int64)
    # the previous access of the same block by the same instance's requests, in trace order
    key = owner[request] * (trace.num_blocks + 1) + trace.blocks
    order = np.lexsort((np.arange(trace.num_accesses), key))
    previous = np.full(trace.num_accesses, -1, dtype=np.int64)
    same = key[order][1:] == key[order][:-1]
    previous[order[1:][same]] = order[:-1][same]
    # of an earlier request (a block repeated within one request points back at itself: skip it)
    before = previous[picked]
    writer = np.where(before >= 0, request[np.maximum(before, 0)], -1)
    first = np.asarray(first_token_s, dtype=np.float64)
    start = np.asarray(scheduled_s, dtype=np.float64)[request[picked]]
    computing = (writer >= 0) & (writer != request[picked]) & ~(first[np.maximum(writer, 0)] <= start)
    t = tokens_of[picked]
    return {"still_computing": exact_sum(t[computing]), "evicted_under_load": exact_sum(t[~computing])}
