"""The tiers' compiled state: one pool per (tier, instance), one for a shared tier, as the C pool
operations (pools.c) take them."""

from __future__ import annotations

import numpy as np

from ... import native
from ...errors import ConfigError
from .parse import Tier


#: a pool's slots in its meta row, and its policy's code, as pools.h names them
POOL = native.slots("tiers", "meta")
POOLS = {"lru": 0, "fifo": 1}


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
        self.meta = np.zeros((max(npool, 1), len(POOL)), dtype=np.int64)
        self.meta[:, POOL.POOL_HEAD] = -1
        self.meta[:, POOL.POOL_TAIL] = -1
        for p, (cap, pol) in enumerate(zip(caps, policies)):
            self.meta[p, POOL.POOL_CAP] = cap
            self.meta[p, POOL.POOL_POLICY] = pol
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


    def totals(self, t: int) -> dict:
        """Tier t's counts summed over its pools: demoted into it, promoted out of it, evicted from it."""
        pools = np.unique(self.pool_of[t])
        m = self.meta[pools]
        return {"demoted": int(m[:, POOL.POOL_DEMOTED].sum()), "promoted": int(m[:, POOL.POOL_PROMOTED].sum()),
                "evicted": int(m[:, POOL.POOL_EVICTIONS].sum()), "resident": int(m[:, POOL.POOL_SIZE].sum())}




def no_pools(instances: int = 1) -> Pools:
    """No tier below HBM (the kernels' arrays, empty)."""
    return Pools([], instances, 1)
