"""The miss account's replay: the driver's loop (engine/driver.py) that also records, for every
block of a request from its first miss on, why it missed; and the cache's stranded blocks over
time. Both engines: the reference loop below, written to be read, and account.c, the same loop
through a policy's compiled table. analysis/misses.py turns what they record into the account.

For request i (block size B, prompt L, n hash ids), the scan is the driver's: the hit limit,
then the longest resident run k. Before anything is touched, block j >= k gets one cause, the
first that applies:

1. ``partial_block``: j is past the policy's hit limit and holds the prompt's last token (vllm and
   radix never serve that block: it is partial and never cached, or the last token is recomputed);
2. ``behind_hole``: the block is in the cache (anywhere: a radix tree's page counts), but an
   earlier block of the prompt missed, so the prefix cannot reach it (the chain rule);
3. ``namespace``: not in the cache, but a block of the same content under another namespace
   (salt, tenant, LoRA) is: it would have hit without isolation (needs the blocks' contents);
4. ``first_use``: no earlier request accessed the block;
5. ``evicted``: an earlier request accessed it and it is gone: evicted (the policy's eviction log
   says when), or never kept (belady's bypass; vllm and radix never cache a prompt's partial
   tail). ``gone``: the request it left at, its last eviction if after its last access, else its
   last access (kept for the evicted accesses only, in trace order: most accesses hit).

Tokens: block j carries ``min(B, L - j*B)`` tokens (at least 0), and the tokens past the last
hash id, ``L - n*B`` when positive (a trace of full blocks only), are ``partial_block`` too, so
``hit_tokens + sum over causes = L`` for every request, exactly.

After the access phase the eviction log (policies/base.py) is drained into per-block eviction
stamps, and every block of the request is stamped with its last access: the account costs the
driver one store per access and one probe per missed block, no policy code. (The compiled record
keeps one stamp per block, the later of the two: a block is evicted only after an access, and
the stamps come in request order. The loop below keeps both, as the rule says.)
"""

from __future__ import annotations

import ctypes
import weakref
from dataclasses import dataclass

import numpy as np

from .. import native
from ..errors import ConfigError
from ..policies.base import take_evictions, with_eviction_log
from .driver import trace_arrays
from .tiers.replay import in_hbm

#: Causes the replay records, in account.c's order (HIT first): names as the reports give them.
#: Written here so the reference engine runs without the core; the compiled replay checks them
#: against the core's layout (same_causes_as_the_core).
RECORDED = ("hit", "first_use", "evicted", "behind_hole", "partial_block", "namespace")
HIT, FIRST_USE, EVICTED, BEHIND_HOLE, PARTIAL_BLOCK, NAMESPACE = range(len(RECORDED))
NUM_STRANDED_SAMPLES = 32


@dataclass
class Recorded:
    """What one replay recorded (trace order).

    cause: int8 per access (index into RECORDED; HIT for a hit block); gone: int32 per ``evicted``
    access (those of `cause`, in trace order), the request the block left at; tokens: int64
    [requests, causes], hit tokens then each cause's; stranded: the samples of
    stranded_over_time(), or None.
    """

    cause: np.ndarray
    gone: np.ndarray
    tokens: np.ndarray
    stranded: dict | None = None


def content_groups(content, num_blocks: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(content per block, CSR offsets per content id, members): the blocks of each content, for
    the namespace cause. `content` maps each block id to the id of its content without its
    namespace (blocks of one content under two namespaces share it); None: no namespaces."""
    if content is None:
        return np.zeros(0, dtype=np.int32), np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.int32)
    content = np.asarray(content)
    if content.shape != (num_blocks,) or content.dtype.kind not in "iu" or (content.size and content.min() < 0):
        raise ConfigError(f"block_content must give every block id (0..{num_blocks - 1}) a content id >= 0")
    content = np.ascontiguousarray(content, dtype=np.int32)
    counts = np.bincount(content, minlength=1)
    offsets = np.zeros(counts.size + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    members = np.argsort(content, kind="stable").astype(np.int32)
    return content, offsets, members


def sample_points(n: int, samples: int = NUM_STRANDED_SAMPLES) -> np.ndarray:
    """The requests after which the stranded blocks are counted: `samples` evenly spaced, the
    last request always."""
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    return np.unique(np.linspace(0, n, min(samples, n) + 1)[1:].round().astype(np.int64)) - 1


_ORDERS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def chain_order(trace) -> tuple[np.ndarray, np.ndarray]:
    """(the blocks the trace uses, int32, in the order of their first access, so each comes after
    its chain predecessor; per request r, how many of them requests before r first accessed)."""
    found = _ORDERS.get(trace)
    if found is None:
        positions = trace.first_seen[trace.first_seen >= 0]
        positions.sort()
        order = np.ascontiguousarray(trace.blocks[positions], dtype=np.int32)
        found = _ORDERS[trace] = (order, np.searchsorted(positions, trace.offsets))
    return found


def stranded(trace, mask: np.ndarray, after: int | None = None) -> int:
    """Resident blocks (`mask`, bool per block id) that no request can reach: an earlier block of
    their chain (the request where each first appears) is not resident. `after`: the last request
    replayed so far (only blocks seen by then can be resident: the scan stops there)."""
    resident = np.ascontiguousarray(mask, dtype=np.int8)
    pred = np.ascontiguousarray(trace.predecessors, dtype=np.int32)
    order, seen_before = chain_order(trace)
    n = order.shape[0] if after is None else int(seen_before[after + 1])
    reach = np.zeros(max(1, resident.shape[0]), dtype=np.int8)
    if not native.available():
        return stranded_reference(resident, pred, order[:n], reach)
    p, i = ctypes.c_void_p, ctypes.c_int64
    fn = native.function("kv_stranded", i, p, p, p, i, p)
    return int(fn(native.ptr(resident), native.ptr(pred), native.ptr(order), n, native.ptr(reach)))


def stranded_reference(resident, pred, order, reach) -> int:
    """kv_stranded (account.c) in Python: a block is reachable when resident and its chain
    predecessor (first seen before it) is; the stranded are resident and unreachable."""
    count = 0
    for b in order.tolist():
        before = pred[b]
        reach[b] = resident[b] and (before < 0 or reach[before])
        count += bool(resident[b]) and not reach[b]
    return count


def _arrays(trace, content):
    n, accesses = len(trace), trace.num_accesses
    content, content_offsets, members = content_groups(content, trace.num_blocks)
    if n >= 2**31:
        raise ConfigError(f"the miss account counts requests in 32 bits: {n:,} requests are too many (miss_account=False)")
    return {"left": np.full(max(1, trace.num_blocks), -1, dtype=np.int32),
            "cause": np.zeros(max(1, accesses), dtype=np.int8), "gone": np.empty(_gone_size(trace), dtype=np.int32),
            "gone_used": np.zeros(1, dtype=np.int64),
            "tokens": np.zeros(max(1, n * len(RECORDED)), dtype=np.int64), "content": content,
            "content_offsets": content_offsets, "content_members": members}


def _gone_size(trace) -> int:
    """gone's first size (it grows as needed): a sixteenth of the accesses, and the longest request."""
    return max(1, trace.num_accesses // 16, int(np.diff(trace.offsets).max(initial=0)))


def _grow_gone(arrays: dict, request_blocks: int) -> None:
    """gone twice as large, or large enough for one more request of `request_blocks` blocks (a
    fresh array: its pages past what is written are never touched)."""
    used = int(arrays["gone_used"][0])
    grown = np.empty(max(2 * arrays["gone"].shape[0], used + request_blocks), dtype=np.int32)
    grown[:used] = arrays["gone"][:used]
    arrays["gone"] = grown


def _recorded(trace, arrays, samples) -> Recorded:
    accesses = trace.num_accesses
    return Recorded(cause=arrays["cause"][:accesses], gone=arrays["gone"][:int(arrays["gone_used"][0])],
                    tokens=arrays["tokens"][:len(trace) * len(RECORDED)].reshape(len(trace), len(RECORDED)),
                    stranded=samples)


def _samples(trace, points: list, counts: list, resident: list) -> dict:
    at = np.asarray(points, dtype=np.int64)
    return {"request": at.tolist(), "time_ms": np.asarray(trace.timestamp)[at].tolist() if at.size else [],
            "stranded_blocks": counts, "resident_blocks": resident}


def log_size(trace, capacity: int) -> int:
    """An eviction log that one request's access phase cannot overflow (policies/base.py)."""
    longest = int(np.diff(trace.offsets).max(initial=0))
    return min(int(capacity), max(1, trace.num_blocks)) + longest + 1


def same_causes_as_the_core() -> None:
    """RECORDED is account.c's cause enum, in its order (a core built from other sources is refused)."""
    core = tuple(name.lower() for name in native.layout("account").slots["cause"])
    if core != RECORDED:
        raise ConfigError(f"kvreplay's compiled core records the causes {core}, this kvreplay {RECORDED}: "
                          "rebuild the core (pip install --force-reinstall kvreplay)")


def replay_compiled(spec, state, trace, block_size: int, hit_blocks, hit_tokens, *, capacity: int,
                    content=None, stranded_samples: int = NUM_STRANDED_SAMPLES):
    """The compiled replay with the account (account.c): (Recorded, the state, with its log on)."""
    same_causes_as_the_core()
    state = with_eviction_log(state, log_size(trace, capacity))
    arrays = _arrays(trace, content)
    table, policy_record = spec.compiled(state)
    offsets, blocks, lengths = trace_arrays(trace.offsets, trace.blocks, trace.input_length)
    p, i = ctypes.c_void_p, ctypes.c_int64
    fn = native.function("kv_replay_account", i, p, p, p, p, p, p, i, i, i, p, p)
    points = sample_points(len(trace), stranded_samples) if stranded_samples else np.zeros(0, dtype=np.int64)
    counts, resident, first = [], [], 0
    for last in [*(int(x) + 1 for x in points), len(trace)]:
        while first < last:
            record = native.bind(arrays, native.layout("account"), "the miss account",
                                 inputs=("content", "content_offsets", "content_members"))
            stop = fn(table, native.ptr(policy_record), native.ptr(record), native.ptr(offsets), native.ptr(blocks),
                      native.ptr(lengths), first, last, block_size, native.ptr(hit_blocks), native.ptr(hit_tokens))
            if stop < 0:
                raise RuntimeError(f"the miss account's eviction log overflowed ({spec.name}): a bug")
            if stop < last:  # gone might not hold request `stop`'s evicted blocks
                _grow_gone(arrays, int(offsets[stop + 1] - offsets[stop]))
            first = stop
        if len(counts) < points.size:
            mask = spec.resident_mask(state)
            counts.append(stranded(trace, mask, int(points[len(counts)])))
            resident.append(int(np.count_nonzero(mask)))
    take_evictions(state)
    samples = _samples(trace, points[:len(counts)], counts, resident) if stranded_samples else None
    return _recorded(trace, arrays, samples), state


def replay_reference(trace, block_size: int, policy, hit_blocks, hit_tokens, *, content=None,
                     stranded_samples: int = NUM_STRANDED_SAMPLES) -> Recorded:
    """The reference replay with the account: the driver's loop, then the causes (module doc)."""
    content, content_offsets, members = content_groups(content, trace.num_blocks)
    offsets, blocks, lengths = trace.offsets.tolist(), trace.blocks.tolist(), trace.input_length.tolist()
    n = len(lengths)
    cause = np.zeros(len(blocks), dtype=np.int8)
    gone: list = []
    tokens = np.zeros((n, len(RECORDED)), dtype=np.int64)
    last_seen: dict = {}
    evicted_at: dict = {}
    policy.evicted = []  # the eviction log on (policies/base.py); a policy that logs nothing leaves it empty
    points = set(sample_points(n, stranded_samples).tolist()) if stranded_samples else set()
    samples = {"points": [], "counts": [], "resident": []}

    def other_namespace(b) -> bool:
        if not content.size:
            return False
        c = content[b]
        return any(m != b and in_hbm(policy, m) for m in members[content_offsets[c]:content_offsets[c + 1]].tolist())

    for i in range(n):
        start, L = offsets[i], lengths[i]
        request = blocks[start:offsets[i + 1]]
        limit = policy.hit_limit(len(request), L, block_size)  # (first: a radix scan starts from its reset)
        k = 0
        while k < limit and policy.resident(request[k]):
            k += 1
        hit_blocks[i] = k
        hit_tokens[i] = tokens[i, HIT] = min(k * block_size, L)
        last_block = (L - 1) // block_size if L > 0 else -1
        for j in range(k, len(request)):
            b = request[j]
            if j >= limit and j == last_block:
                c = PARTIAL_BLOCK
            elif not (j == k and j < limit) and in_hbm(policy, b):
                c = BEHIND_HOLE
            elif other_namespace(b):
                c = NAMESPACE
            elif b not in last_seen:
                c = FIRST_USE
            else:
                c = EVICTED
                gone.append(max(last_seen[b], evicted_at.get(b, -1)))
            cause[start + j] = c
            tokens[i, c] += max(0, min(block_size, L - j * block_size))
        tokens[i, PARTIAL_BLOCK] += max(0, L - len(request) * block_size)
        policy.access_request(i, request, k, L, block_size)
        for b in policy.evicted:
            evicted_at[b] = i
        policy.evicted.clear()
        for b in request:
            last_seen[b] = i
        if i in points:
            mask = np.zeros(trace.num_blocks, dtype=bool)
            mask[list(policy.resident_blocks())] = True
            samples["points"].append(i)
            samples["counts"].append(stranded(trace, mask, i))
            samples["resident"].append(int(mask.sum()))
    policy.evicted = None
    stranded_samples_out = _samples(trace, samples["points"], samples["counts"], samples["resident"]) \
        if stranded_samples else None
    return Recorded(cause=cause, gone=np.array(gone, dtype=np.int32), tokens=tokens, stranded=stranded_samples_out)
