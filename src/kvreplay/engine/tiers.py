"""Memory tiers below the GPU pool: CPU DRAM, SSD, a remote or global store (docs/serving.md, "Tiers").

Used by the sequential replay (`kvreplay run --tiers`) and the serving simulator alike.

The GPU pool (HBM) is the policy's cache. Below it, a chain of tiers, each a pool of blocks with
its own policy (LRU by default, or FIFO), size and load bandwidth:

- **Write-back.** A block the HBM policy evicts (its eviction log, policies/base.py) is demoted
  to the first tier; a block a tier evicts goes to the next one; the last tier drops it.
- **Promotion.** A request's hit prefix runs through every tier: the longest prefix of blocks
  each held by some tier (HBM first, then the tiers in order). Blocks found below HBM are
  loaded into HBM, as the request's other blocks are computed into it.
- **Copies.** ``copies="move"`` (default): a block that enters HBM leaves the tiers below, so a
  block lives in one place (an exclusive hierarchy: HBM + an LRU tier of D blocks behaves as
  one LRU cache of HBM + D blocks). ``copies="keep"``: the lower copy stays (and an LRU tier
  refreshes it), as vLLM's CPU offloading, SGLang's HiCache, LMCache and Mooncake Store keep it;
  a block then takes room in two tiers.
- **Global store.** A tier shared by every instance (``shared``): any instance's evictions land
  in it and any instance's requests hit in it (Mooncake Store, LMCache's remote backend).
- **Load time.** A block loaded from tier t costs block_bytes / bandwidth_t seconds. The
  simulator adds a request's load time to the step in which its prefill starts: to the step's
  time (``overlap=False``, default: the request waits for its KV, as vLLM's offloading connector
  loads before computing) or as max(compute, load) (``overlap=True``: layer by layer, as
  Mooncake and SGLang's HiCache overlap loading with compute).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError
from ..jit import HAVE_NUMBA, helper

POLICIES = ("lru", "fifo")
POOL_LRU, POOL_FIFO = 0, 1
# pool meta slots
(M_HEAD, M_TAIL, M_SIZE, M_CAP, M_POLICY, M_EVICTIONS, M_DEMOTED, M_PROMOTED) = range(8)
NUM_META = 8
# tier config slots (int64): the number of tiers, move (1) or keep (0) copies
(TC_TIERS, TC_MOVE) = range(2)


@dataclass(frozen=True)
class Tier:
    """One tier below HBM."""

    name: str
    blocks: int
    bandwidth: float | None = None  # bytes per second; None: loads take no time
    policy: str = "lru"
    shared: bool = False  # one pool for every instance (a global store)
    size_text: str = ""

    def to_dict(self, block_bytes: int | None = None) -> dict:
        out = {"name": self.name, "blocks": self.blocks, "policy": self.policy, "shared": self.shared,
               "bandwidth_bytes_per_s": self.bandwidth, "size": self.size_text or str(self.blocks)}
        if block_bytes and self.bandwidth:
            out["load_ms_per_block"] = 1e3 * block_bytes / self.bandwidth
        return out


_BANDWIDTH = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([KMGT]i?B)/s\s*$", re.IGNORECASE)
_BW_SCALE = {"kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12, "kib": 2.0**10, "mib": 2.0**20, "gib": 2.0**30,
             "tib": 2.0**40}


def parse_bandwidth(text: str) -> float:
    """Bytes per second in "64GB/s", "7 GB/s", "12.5GiB/s"; "inf" for loads that take no time."""
    if str(text).strip().lower() in ("inf", "unbounded"):
        return float("inf")
    m = _BANDWIDTH.match(str(text))
    if not m:
        raise ConfigError(f"not a bandwidth: {text!r} (use e.g. 64GB/s, 7GB/s, 25GiB/s, or inf)")
    value = float(m.group(1)) * _BW_SCALE[m.group(2).lower()]
    if not value > 0:
        raise ConfigError(f"a bandwidth must be positive, got {text!r}")
    return value


def tier_blocks(size, *, block_size: int, block_bytes: int | None, what: str) -> int:
    """A tier's size in blocks: a block count, or a size ("64GiB") with the model's block bytes."""
    from ..units import parse_size

    text = str(size).strip()
    if text.isdigit():
        blocks = int(text)
    else:
        if block_bytes is None:
            raise ConfigError(f"{what}: {text!r} is a size in bytes: give --model to turn it into blocks, "
                              "or give the size in blocks")
        blocks = parse_size(text) // block_bytes
    if blocks < 1:
        raise ConfigError(f"{what}: {text!r} holds no block")
    return int(blocks)


def parse_tiers(text: str, *, block_size: int, block_bytes: int | None = None) -> tuple[int | None, list[Tier]]:
    """``--tiers hbm=4096,dram=64GiB@64GB/s,ssd=2TiB@7GB/s:fifo``: the HBM pool in blocks (None
    when not given) and the tiers below it, in order. Each tier: NAME=SIZE[@BANDWIDTH][:POLICY];
    sizes in blocks, or bytes with a model; a tier named "global" is shared by every instance."""
    hbm = None
    tiers: list[Tier] = []
    for part in [p.strip() for p in str(text).split(",") if p.strip()]:
        name, sep, rest = part.partition("=")
        name = name.strip().lower()
        if not sep or not name or not rest.strip():
            raise ConfigError(f"--tiers: {part!r} is not NAME=SIZE[@BANDWIDTH][:POLICY]")
        policy = "lru"
        if ":" in rest:
            rest, policy = rest.rsplit(":", 1)
            policy = policy.strip().lower()
            if policy not in POLICIES:
                raise ConfigError(f"--tiers: {name}: unknown tier policy {policy!r} (known: {', '.join(POLICIES)})")
        size, _, bw = rest.partition("@")
        blocks = tier_blocks(size, block_size=block_size, block_bytes=block_bytes, what=f"--tiers {name}")
        if name == "hbm":
            if bw or policy != "lru" and ":" in part:
                raise ConfigError("--tiers hbm=SIZE: the GPU pool has no bandwidth here, and its policy is --policy")
            if hbm is not None or tiers:
                raise ConfigError("--tiers: hbm comes first, once")
            hbm = blocks
            continue
        if any(t.name == name for t in tiers):
            raise ConfigError(f"--tiers: tier {name!r} is given twice")
        bandwidth = parse_bandwidth(bw) if bw.strip() else None
        tiers.append(Tier(name=name, blocks=blocks, bandwidth=None if bandwidth == float("inf") else bandwidth,
                          policy=policy, shared=name == "global", size_text=size.strip()))
    if not tiers and hbm is None:
        raise ConfigError("--tiers: give at least one tier (e.g. dram=64GiB@64GB/s)")
    if any(t.shared for t in tiers[:-1]):
        raise ConfigError("--tiers: the global store is the last tier")
    return hbm, tiers


def global_store(text: str, *, block_size: int, block_bytes: int | None = None) -> Tier:
    """``--global-store SIZE[@BANDWIDTH][:POLICY]``: a tier every instance shares."""
    _, tiers = parse_tiers(f"global={text}", block_size=block_size, block_bytes=block_bytes)
    return tiers[0]


class Pools:
    """The tiers' compiled state for `instances` instances over block ids 0..num_ids-1: one pool
    per (tier, instance), one for a shared tier. ``arrays`` is what kernels take."""

    def __init__(self, tiers: list[Tier], instances: int, num_ids: int, *, block_bytes: int | None = None,
                 copies: str = "move", max_bytes: int = 8 << 30):
        if copies not in ("move", "keep"):
            raise ConfigError(f"copies must be 'move' or 'keep', got {copies!r}")
        self.tiers = list(tiers)
        T = len(self.tiers)
        pool_of = np.zeros((max(T, 1), instances), dtype=np.int64)
        caps, policies = [], []
        for t, tier in enumerate(self.tiers):
            if tier.shared:
                pool_of[t, :] = len(caps)
                caps.append(tier.blocks)
                policies.append(POOLS[tier.policy])
            else:
                for j in range(instances):
                    pool_of[t, j] = len(caps)
                    caps.append(tier.blocks)
                    policies.append(POOLS[tier.policy])
        npool = len(caps)
        ids = max(1, num_ids) if npool else 1
        need = npool * ids * 9
        if need > max_bytes:
            raise ConfigError(f"the tiers' state needs {need / 2**30:.1f} GiB ({npool} pools x {ids:,} block ids): "
                              "fewer instances or a shorter trace")
        self.nxt = np.full((max(npool, 1), ids), -1, dtype=np.int32)
        self.prv = np.full((max(npool, 1), ids), -1, dtype=np.int32)
        self.inn = np.zeros((max(npool, 1), ids), dtype=np.int8)
        self.meta = np.zeros((max(npool, 1), NUM_META), dtype=np.int64)
        self.meta[:, M_HEAD] = -1
        self.meta[:, M_TAIL] = -1
        for p, (cap, pol) in enumerate(zip(caps, policies)):
            self.meta[p, M_CAP] = cap
            self.meta[p, M_POLICY] = pol
        self.pool_of = pool_of
        # seconds to load one block from each tier (0: unbounded bandwidth, or no model)
        self.seconds = np.zeros(max(T, 1), dtype=np.float64)
        for t, tier in enumerate(self.tiers):
            if tier.bandwidth and block_bytes:
                self.seconds[t] = block_bytes / tier.bandwidth
        self.cfg = np.array([T, int(copies == "move")], dtype=np.int64)
        # the kv-aware router's credit per block found in each tier (Dynamo's KvRouterConfig:
        # host_cache_hit_weight 0.75 for the first tier, disk_cache_hit_weight 0.25 below it,
        # shared_cache_multiplier 0.5 for a shared store)
        self.credit = np.zeros(max(T, 1), dtype=np.float64)
        for t, tier in enumerate(self.tiers):
            self.credit[t] = 0.5 if tier.shared else (0.75 if t == 0 else 0.25)

    def record(self) -> np.ndarray:
        """The compiled core's view of the pools (engine/tiers/pools.h), checked against its layout."""
        from .. import native

        layout = native.layout("tiers")
        cfg_slots = layout.slot("cfg")
        cfg = np.zeros(len(cfg_slots), dtype=np.int64)
        cfg[cfg_slots.TIER_COUNT], cfg[cfg_slots.TIER_MOVE] = self.cfg
        cfg[cfg_slots.TIER_IDS], cfg[cfg_slots.TIER_INSTANCES] = self.nxt.shape[1], self.pool_of.shape[1]
        self._c_cfg = cfg  # kept alive with the pools
        arrays = {"next": self.nxt.reshape(-1), "prev": self.prv.reshape(-1), "inside": self.inn.reshape(-1),
                  "meta": self.meta.reshape(-1), "pool_of": self.pool_of.reshape(-1), "seconds": self.seconds,
                  "credit": self.credit, "cfg": cfg}
        return native.bind(arrays, layout, "tier pools")

    @property
    def arrays(self):
        return (self.nxt, self.prv, self.inn, self.meta, self.pool_of, self.seconds, self.cfg, self.credit)

    def totals(self, t: int) -> dict:
        """Tier t's counts summed over its pools: demoted into it, promoted out of it, evicted from it."""
        pools = np.unique(self.pool_of[t])
        m = self.meta[pools]
        return {"demoted": int(m[:, M_DEMOTED].sum()), "promoted": int(m[:, M_PROMOTED].sum()),
                "evicted": int(m[:, M_EVICTIONS].sum()), "resident": int(m[:, M_SIZE].sum())}


POOLS = {"lru": POOL_LRU, "fifo": POOL_FIFO}


def no_pools(instances: int = 1) -> Pools:
    """No tier below HBM (the kernels' arrays, empty)."""
    return Pools([], instances, 1)


# ---- compiled pools ----------------------------------------------------------------------------

def _unlink(nxt, prv, meta, p, b):
    a = prv[p, b]
    c = nxt[p, b]
    if a >= 0:
        nxt[p, a] = c
    else:
        meta[p, M_HEAD] = c
    if c >= 0:
        prv[p, c] = a
    else:
        meta[p, M_TAIL] = a
    nxt[p, b] = -1
    prv[p, b] = -1


def _append(nxt, prv, meta, p, b):
    t = meta[p, M_TAIL]
    prv[p, b] = t
    nxt[p, b] = -1
    if t >= 0:
        nxt[p, t] = b
    else:
        meta[p, M_HEAD] = b
    meta[p, M_TAIL] = b


def pool_remove(tiers, p, b):
    """Take block b out of pool p (it was promoted)."""
    nxt, prv, inn, meta = tiers[0], tiers[1], tiers[2], tiers[3]
    _unlink(nxt, prv, meta, p, b)
    inn[p, b] = 0
    meta[p, M_SIZE] -= 1
    meta[p, M_PROMOTED] += 1


def pool_touch(tiers, p, b):
    """A hit on b in pool p with copies kept: an LRU pool makes it most recent."""
    nxt, prv, meta = tiers[0], tiers[1], tiers[3]
    if meta[p, M_POLICY] == POOL_LRU and meta[p, M_TAIL] != b:
        _unlink(nxt, prv, meta, p, b)
        _append(nxt, prv, meta, p, b)


def demote(tiers, t, j, b):
    """Block b leaves the tier above t (HBM for t = 0) for tier t of instance j; what a full tier
    evicts goes down the chain, and out of the last tier."""
    nxt, prv, inn, meta, pool_of = tiers[0], tiers[1], tiers[2], tiers[3], tiers[4]
    T = tiers[6][TC_TIERS]
    while t < T and b >= 0:
        p = pool_of[t, j]
        if inn[p, b] != 0:
            pool_touch(tiers, p, b)  # already there (copies kept, or a block recomputed in HBM)
            return
        victim = -1
        if meta[p, M_SIZE] >= meta[p, M_CAP]:
            victim = meta[p, M_HEAD]
            _unlink(nxt, prv, meta, p, victim)
            inn[p, victim] = 0
            meta[p, M_SIZE] -= 1
            meta[p, M_EVICTIONS] += 1
        _append(nxt, prv, meta, p, b)
        inn[p, b] = 1
        meta[p, M_SIZE] += 1
        meta[p, M_DEMOTED] += 1
        b = victim
        t += 1


def tier_of(tiers, j, b):
    """The first tier of instance j holding block b, or -1."""
    inn, pool_of = tiers[2], tiers[4]
    T = tiers[6][TC_TIERS]
    for t in range(T):
        if inn[pool_of[t, j], b] != 0:
            return t
    return -1


def tier_prefix(state, tiers, j, blocks, start, k, limit, counts, touch=True):
    """How far the hit prefix reaches with the tiers: from position k (HBM's own prefix), the
    blocks each in HBM or in some tier of instance j, up to `limit` positions. counts[t] gets
    the blocks read from tier t (a block in HBM is read from HBM), counts[-1] 1 + the tier of the
    last hit block (0: HBM). With copies kept, an LRU tier refreshes the blocks read from it
    (`touch`; a router's look changes nothing)."""
    T = tiers[6][TC_TIERS]
    counts[:] = 0
    if T == 0:
        return k
    keep = tiers[6][TC_MOVE] == 0 and touch
    gaps = hbm_gaps(state)
    while k < limit:
        b = blocks[start + k]
        if gaps and in_hbm(state, b):
            counts[counts.shape[0] - 1] = 0
        else:
            t = tier_of(tiers, j, b)
            if t < 0:
                break
            counts[t] += 1
            counts[counts.shape[0] - 1] = t + 1
            if keep:
                pool_touch(tiers, tiers[4][t, j], b)
        k += 1
    return k


def _weighted(counts, weights, n):
    total = 0.0
    for t in range(n):
        total += counts[t] * weights[t]
    return total


def fetch_seconds(tiers, counts):
    """The load time of `counts[t]` blocks from each tier t."""
    return _weighted(counts, tiers[5], tiers[6][TC_TIERS])


def tier_credit(tiers, counts):
    """The kv-aware router's overlap credit for `counts[t]` blocks found in each tier t."""
    return _weighted(counts, tiers[7], tiers[6][TC_TIERS])


def tier_admitted(tiers, j, blocks, start, k, end, counts, row, first):
    """The request's blocks start+k..end entered HBM, `counts` of them read from the tiers
    (tier_prefix): their load seconds. With copies moved, each block that entered HBM leaves the
    tiers (the prefix's and any recomputed block found below). `first`: add counts to `row` (the
    request's split at its first schedule)."""
    pool_of = tiers[4]
    T = tiers[6][TC_TIERS]
    if T == 0:
        return 0.0
    load = fetch_seconds(tiers, counts)
    if first:
        for c in range(counts.shape[0]):
            row[c] = counts[c]
    if tiers[6][TC_MOVE] != 0:
        for q in range(k, end):
            b = blocks[start + q]
            for u in range(T):  # (a block sits in one tier while copies move)
                p = pool_of[u, j]
                if tiers[2][p, b] != 0:
                    pool_remove(tiers, p, b)
    return load


def drain(state, tiers, j):
    """Demote what the HBM policy evicted since the last drain (its eviction log), in order; a
    block evicted and admitted again within the operation is in HBM, and stays only there."""
    hold = state.hold
    if hold.shape[0] <= LOG_HEAD:
        return
    n = hold[LOG_COUNT]
    T = tiers[6][TC_TIERS]
    if T > 0:
        for q in range(n):
            b = hold[LOG_HEAD + q]
            if not in_hbm(state, b):
                demote(tiers, 0, j, b)
    hold[LOG_COUNT] = 0


from ..policies.base import LOG_COUNT, LOG_HEAD, hit_limit, resident  # noqa: E402


def prefix_limit(state, num_blocks, input_length, block_size):
    """The policy's hit limit, compiled apart (pasted into a large kernel it trips numba's
    pedantic SSA check into printing warnings)."""
    return hit_limit(state, num_blocks, input_length, block_size)


def in_hbm(state, b):
    """Is block b anywhere in the GPU cache? (A radix tree's `resident` follows one path, so its
    ids are read from its page counts.)"""
    if hasattr(state, "page_count"):
        return state.page_count.get(b, 0) > 0 if isinstance(state.page_count, dict) else state.page_count[b] > 0
    return state.resident(b) if hasattr(state, "resident") else resident(state, b)


def hbm_gaps(state) -> bool:
    """May a hit prefix continue through a GPU-cached block after a stretch loaded from a tier?
    Yes for a cache of blocks; not for a radix tree, whose path ends where its match ends."""
    return not hasattr(state, "page_count")


if HAVE_NUMBA:
    from numba.extending import overload

    @overload(in_hbm)
    def _in_hbm(state, b):
        if "page_count" in getattr(state, "fields", ()):
            return lambda state, b: state.page_count[b] > 0
        return lambda state, b: resident(state, b)

    @overload(hbm_gaps)
    def _hbm_gaps(state):
        gaps = "page_count" not in getattr(state, "fields", ())
        return lambda state: gaps

if HAVE_NUMBA:
    _unlink = helper(_unlink, inline=False)
    _append = helper(_append, inline=False)
    pool_remove = helper(pool_remove, inline=False)
    pool_touch = helper(pool_touch, inline=False)
    demote = helper(demote, inline=False)
    tier_of = helper(tier_of, inline=False)
    tier_prefix = helper(tier_prefix, inline=False)
    _weighted = helper(_weighted)
    fetch_seconds = helper(fetch_seconds, inline=False)
    prefix_limit = helper(prefix_limit, inline=False)
    tier_credit = helper(tier_credit, inline=False)
    tier_admitted = helper(tier_admitted, inline=False)
    drain = helper(drain, inline=False)


# ---- sequential replay with tiers (kvreplay run --tiers): the driver's loop, the prefix scan
# run through the tiers ----

def replay_reference(offsets, blocks, input_length, block_size, policy, tiers: list[Tier], hit_blocks, hit_tokens,
                     tier_hits, copies: str = "move") -> list:
    """The readable engine: `policy` a reference policy (its eviction log turned on here), each
    tier an OrderedDict in LRU or FIFO order. Returns the tiers' final contents."""
    from collections import OrderedDict

    policy.evicted = []
    pools = [OrderedDict() for _ in tiers]
    T = len(tiers)
    move = copies == "move"

    def demote(b):
        for t, pool in enumerate(pools):
            if b in pool:
                if tiers[t].policy == "lru":
                    pool.move_to_end(b)
                return
            victim = pool.popitem(last=False)[0] if len(pool) >= tiers[t].blocks else None
            pool[b] = None
            if victim is None:
                return
            b = victim

    for i in range(len(input_length)):
        request = [int(x) for x in blocks[offsets[i]:offsets[i + 1]]]
        L = int(input_length[i])
        limit = policy.hit_limit(len(request), L, block_size)
        k = 0
        while k < limit and policy.resident(request[k]):
            k += 1
        k2 = k
        counts = [0] * (T + 1)
        while k2 < limit:
            b = request[k2]
            if hbm_gaps(policy) and in_hbm(policy, b):
                counts[T] = 0
            else:
                t = next((t for t, pool in enumerate(pools) if b in pool), -1)
                if t < 0:
                    break
                counts[t] += 1
                counts[T] = t + 1
                if not move and tiers[t].policy == "lru":
                    pools[t].move_to_end(b)
            k2 += 1
        hit_blocks[i] = k2
        hit_tokens[i] = min(k2 * block_size, L)
        tier_hits[i, :] = counts
        policy.access_request(i, request, k, L, block_size)
        if move:
            for b in request[k:]:
                for pool in pools:
                    pool.pop(b, None)
        log, policy.evicted = policy.evicted, []
        for b in log:
            if not in_hbm(policy, b):
                demote(b)
    return [list(pool) for pool in pools]


if HAVE_NUMBA:
    from numba import njit

    from .driver import prefix_compiled
    from ..policies.base import access_request

    @njit(cache=True, nogil=True)
    def replay_compiled(offsets, blocks, input_length, block_size, state, tiers, hit_blocks, hit_tokens,
                        tier_hits):  # pragma: no cover - compiled
        """The compiled engine (replay_reference's loop)."""
        for i in range(input_length.shape[0]):
            start, end = offsets[i], offsets[i + 1]
            L = input_length[i]
            # the hit limit first: a radix state's scan leaves its cursor where access_request continues
            limit = prefix_limit(state, end - start, L, block_size)
            k = prefix_compiled(state, blocks, start, end, L, block_size)
            k2 = tier_prefix(state, tiers, 0, blocks, start, k, limit, tier_hits[i])
            hit_blocks[i] = k2
            hit_tokens[i] = min(k2 * block_size, L)
            access_request(state, i, blocks, start, end, k, L, block_size)
            tier_admitted(tiers, 0, blocks, start, k, end - start, tier_hits[i], tier_hits[i], False)
            drain(state, tiers, 0)

    from pathlib import Path as _Path

    from .. import policies as _policies
    from ..jit import key_cache_on_sources

    key_cache_on_sources(replay_compiled, [__file__, str(_Path(__file__).parents[1] / "engine" / "driver.py"),
                                           *sorted(str(p) for p in _Path(_policies.__file__).parent.glob("*.py"))])


def replay_tiers(trace, spec, capacity: int, params: dict, tiers: list[Tier], block_size: int, engine: str,
                 copies: str = "move"):
    """Hits with the tiers (sequential, one request at a time): (hit_blocks, hit_tokens,
    tier_hits (n x T+1), policy counters, final HBM blocks, per-tier counts)."""
    n = len(trace)
    hit_blocks = np.zeros(n, dtype=np.int64)
    hit_tokens = np.zeros(n, dtype=np.int64)
    tier_hits = np.zeros((n, len(tiers) + 1), dtype=np.int64)
    if engine == "compiled" and spec.native:
        from .. import native
        from ..policies.base import with_eviction_log

        log = capacity + int(np.diff(trace.offsets).max(initial=0)) + 1
        state = with_eviction_log((spec.held_state or spec.make_state)(capacity, trace, **params), log)
        pools = Pools(tiers, 1, trace.num_blocks, copies=copies)
        table, record = spec.compiled(state)
        pool_record = pools.record()
        offsets = np.ascontiguousarray(trace.offsets, dtype=np.int64)
        blocks = np.ascontiguousarray(trace.blocks, dtype=np.int32)
        lengths = np.ascontiguousarray(trace.input_length, dtype=np.int64)
        _c_replay_tiers()(table, native.ptr(record), native.ptr(pool_record), native.ptr(offsets), native.ptr(blocks),
                          native.ptr(lengths), n, block_size, native.ptr(hit_blocks), native.ptr(hit_tokens),
                          native.ptr(tier_hits))
        final, counters = spec.read_state(state)
        totals = [pools.totals(t) for t in range(len(tiers))]
    elif engine == "compiled":
        from .. import jit
        from ..policies.base import with_eviction_log

        if not jit.HAVE_NUMBA:
            raise ConfigError("tiers need the compiled engine's numba (pip install numba), or --engine reference")
        log = capacity + int(np.diff(trace.offsets).max(initial=0)) + 1
        state = with_eviction_log((spec.held_state or spec.make_state)(capacity, trace, **params), log)
        pools = Pools(tiers, 1, trace.num_blocks, copies=copies)
        args = (trace.offsets, trace.blocks, trace.input_length, block_size, state, pools.arrays, hit_blocks,
                hit_tokens, tier_hits)
        jit.ensure_compiled(replay_compiled, args, f"the {spec.name} kernel with tiers")
        replay_compiled(*args)
        final, counters = spec.read_state(state)
        totals = [pools.totals(t) for t in range(len(tiers))]
    else:
        cache = spec.reference(capacity, trace, **params)
        contents = replay_reference(trace.offsets, trace.blocks, trace.input_length, block_size, cache, tiers,
                                    hit_blocks, hit_tokens, tier_hits, copies)
        final, counters = cache.size(), cache.counters()
        totals = [{"resident": len(c)} for c in contents]
    return hit_blocks, hit_tokens, tier_hits, counters, final, totals


def _c_replay_tiers():
    import ctypes

    from .. import native

    p, i = ctypes.c_void_p, ctypes.c_int64
    return native.function("kv_replay_tiers", None, p, p, p, p, p, p, i, i, p, p, p)


def split_by_tier(tiers: list[Tier], tier_hits, hit_blocks, hit_tokens, block_size: int) -> dict:
    """Hit tokens per request per tier (HBM first): block counts x block size, the
    min(k x block_size, L) cap taken off the tier of the last hit block."""
    T = len(tiers)
    tokens = tier_hits[:, :T] * block_size
    hbm = (hit_blocks - tier_hits[:, :T].sum(axis=1)) * block_size
    excess = hit_blocks * block_size - hit_tokens
    last = tier_hits[:, T]
    hbm = hbm - np.where(last == 0, excess, 0)
    out = {"hbm": hbm}
    for t, tier in enumerate(tiers):
        out[tier.name] = tokens[:, t] - np.where(last == t + 1, excess, 0)
    return out


def resolve_tiers(tiers, global_store_spec=None, *, block_size: int, block_bytes: int | None = None):
    """(tiers below HBM, the HBM pool if the text gave it): `tiers` a text such as
    "dram=64GiB@64GB/s,ssd=2TiB" (sizes in bytes need `block_bytes`) or a list of Tier; a
    global store spec "SIZE@BANDWIDTH" is added last."""
    hbm = None
    out = []
    if tiers is not None:
        if isinstance(tiers, str):
            hbm, out = parse_tiers(tiers, block_size=block_size, block_bytes=block_bytes)
        else:
            out = list(tiers)
            if not all(isinstance(t, Tier) for t in out):
                raise ConfigError("tiers: give a text such as 'dram=64GiB@64GB/s' or a list of Tier")
    if global_store_spec is not None:
        if any(t.shared for t in out):
            raise ConfigError("the global store is given twice (--tiers global=... and --global-store)")
        out.append(global_store_spec if isinstance(global_store_spec, Tier)
                   else global_store(global_store_spec, block_size=block_size, block_bytes=block_bytes))
    return out, hbm


def tier_rows(tiers, per_request: dict, measured, prompt_tokens, totals, block_bytes=None) -> list[dict]:
    """One row per tier (HBM first): its hit tokens and their share of the measured prompt tokens."""
    prompt = int(np.asarray(prompt_tokens)[measured].sum())
    rows = []
    for name, tokens in per_request.items():
        hit = int(tokens[measured].sum())
        row = {"name": name}
        if name != "hbm":
            t = [x.name for x in tiers].index(name)
            row.update(tiers[t].to_dict(block_bytes), **totals[t])
        row.update(hit_tokens=hit, hit_rate=hit / prompt if prompt else 0.0)
        rows.append(row)
    return rows
