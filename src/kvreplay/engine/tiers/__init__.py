"""Memory tiers below the GPU pool: CPU DRAM, SSD, a remote or global store (docs/clusters.md, "Tiers").

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

parse.py: the text syntax (Tier); pools.py + pools.c/h: the pools' state and their compiled
operations, which the tiered sequential replay (replay.py + replay.c) and the serving simulator
(serving/kernel/requests.c) share.
"""

from __future__ import annotations

from .parse import POLICIES, Tier, global_store, parse_bandwidth, parse_tiers, resolve_tiers, tier_blocks
from .pools import POOL, POOLS, Pools
from .replay import hbm_gaps, in_hbm, replay_reference, replay_tiers, split_by_tier, tier_rows

__all__ = ["POLICIES", "POOL", "POOLS", "Pools", "Tier", "global_store", "hbm_gaps", "in_hbm", "parse_bandwidth",
           "parse_tiers", "replay_reference", "replay_tiers", "resolve_tiers", "split_by_tier", "tier_blocks",
           "tier_rows"]
