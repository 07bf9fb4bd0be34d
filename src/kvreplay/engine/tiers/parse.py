"""The tiers' text syntax: ``--tiers hbm=4096,dram=64GiB@64GB/s,ssd=2TiB@7GB/s:fifo`` and
``--global-store SIZE@BANDWIDTH`` (the rules: engine/tiers/__init__.py)."""

from __future__ import annotations

import numbers
from dataclasses import dataclass

from ...errors import ConfigError
from ...units import parse_bandwidth as bytes_per_second
from ...units import parse_size

POLICIES = ("lru", "fifo")
MAX_BLOCKS = 2 ** 40  # a tier's blocks, at most (its pool's arrays and byte counts stay in int64)


@dataclass(frozen=True)
class Tier:
    """One tier below HBM."""

    name: str
    blocks: int
    bandwidth: float | None = None  # bytes per second; None: loads take no time
    policy: str = "lru"
    shared: bool = False  # one pool for every instance (a global store)
    size_text: str = ""

    def __post_init__(self):
        what = f"Tier(name={self.name!r})"
        if not isinstance(self.name, str) or not self.name.strip():
            raise ConfigError(f"Tier: name must be a non-empty text, got {self.name!r}")
        if isinstance(self.blocks, bool) or not isinstance(self.blocks, numbers.Integral) \
                or not 1 <= self.blocks <= MAX_BLOCKS:
            raise ConfigError(f"{what}: blocks must be a whole number from 1 to 2^40, got {self.blocks!r}")
        if self.bandwidth is not None and (isinstance(self.bandwidth, bool) or not isinstance(self.bandwidth, numbers.Real)
                                           or not MIN_BANDWIDTH <= self.bandwidth <= MAX_BANDWIDTH):
            raise ConfigError(f"{what}: bandwidth must be from {MIN_BANDWIDTH:g} to {MAX_BANDWIDTH:g} bytes per second "
                              f"(None: loads take no time), got {self.bandwidth!r}")
        if self.policy not in POLICIES:
            raise ConfigError(f"{what}: policy must be one of {', '.join(POLICIES)}, got {self.policy!r}")
        if not isinstance(self.shared, bool):
            raise ConfigError(f"{what}: shared must be True or False, got {self.shared!r}")

    def to_dict(self, block_bytes: int | None = None) -> dict:
        out = {"name": self.name, "blocks": self.blocks, "policy": self.policy, "shared": self.shared,
               "bandwidth_bytes_per_s": self.bandwidth, "size": self.size_text or str(self.blocks)}
        if block_bytes and self.bandwidth:
            out["load_ms_per_block"] = 1e3 * block_bytes / self.bandwidth
        return out


#: bandwidths (bytes/s) a tier or link may have: below 1 KB/s a block's load outlasts any run's
#: clock, above 1 PB/s (hundreds of times an HBM's) it is "inf", loads that take no time
MIN_BANDWIDTH, MAX_BANDWIDTH = 1e3, 1e15


def parse_bandwidth(text: str) -> float:
    """Bytes per second (units.parse_bandwidth) within what a tier or link may have; "inf" for
    loads that take no time."""
    return bytes_per_second(text, MIN_BANDWIDTH, MAX_BANDWIDTH, "from 1KB/s to 1PB/s (inf: loads that take no time)")


def tier_blocks(size, *, block_size: int, block_bytes: int | None, what: str) -> int:
    """A tier's size in blocks: a block count, or a size ("64GiB") with the model's block bytes."""
    text = str(size).strip()
    if text.isdigit():
        blocks = int(text)
    else:
        try:  # (a size in bits is refused before anything else is asked for)
            size_bytes = parse_size(text)
        except ConfigError as e:
            raise ConfigError(f"{what}: {e}") from None
        if block_bytes is None:
            raise ConfigError(f"{what}: {text!r} is a size in bytes: give --model to turn it into blocks, "
                              "or give the size in blocks")
        blocks = size_bytes // block_bytes
    if blocks < 1:
        raise ConfigError(f"{what}: {text!r} holds no block")
    if blocks > MAX_BLOCKS:
        raise ConfigError(f"{what}: {text!r} is {blocks:,} blocks; at most 2^40 = {MAX_BLOCKS:,}")
    return int(blocks)


def parse_tiers(text: str, *, block_size: int, block_bytes: int | None = None,
                flag: str = "--tiers") -> tuple[int | None, list[Tier]]:
    """``--tiers hbm=4096,dram=64GiB@64GB/s,ssd=2TiB@7GB/s:fifo``: the HBM pool in blocks (None
    when not given) and the tiers below it, in order. Each tier: NAME=SIZE[@BANDWIDTH][:POLICY];
    sizes in blocks, or bytes with a model; a tier named "global" is shared by every instance."""
    hbm = None
    tiers: list[Tier] = []
    for part in [p.strip() for p in str(text).split(",") if p.strip()]:
        name, sep, rest = part.partition("=")
        name = name.strip().lower()
        if not sep or not name or not rest.strip():
            raise ConfigError(f"{flag}: {part!r} is not NAME=SIZE[@BANDWIDTH][:POLICY]")
        policy = "lru"
        if ":" in rest:
            rest, policy = rest.rsplit(":", 1)
            policy = policy.strip().lower()
            if policy not in POLICIES:
                raise ConfigError(f"{flag}: {name}: unknown tier policy {policy!r} (known: {', '.join(POLICIES)})")
        size, at, bw = rest.partition("@")
        shown = rest if flag == "--global-store" else part  # (the store's text has no name)
        if at and not bw.strip():
            raise ConfigError(f"{flag}: {shown!r}: nothing after '@': give a bandwidth (e.g. 64GB/s), or leave out "
                              "'@' for loads that take no time")
        blocks = tier_blocks(size, block_size=block_size, block_bytes=block_bytes, what=flag if flag != "--tiers" else f"--tiers {name}")
        if name == "hbm":
            if bw or policy != "lru" and ":" in part:
                raise ConfigError("--tiers hbm=SIZE: the GPU pool has no bandwidth here, and its policy is --policy")
            if hbm is not None or tiers:
                raise ConfigError("--tiers: hbm comes first, once")
            hbm = blocks
            continue
        if any(t.name == name for t in tiers):
            raise ConfigError(f"--tiers: tier {name!r} is given twice")
        try:
            bandwidth = parse_bandwidth(bw) if bw.strip() else None
        except ConfigError as e:
            raise ConfigError(f"{flag if flag == '--global-store' else f'--tiers {name}'}: {e}") from None
        tiers.append(Tier(name=name, blocks=blocks, bandwidth=None if bandwidth == float("inf") else bandwidth,
                          policy=policy, shared=name == "global", size_text=size.strip()))
    if not tiers and hbm is None:
        raise ConfigError("--tiers: give at least one tier (e.g. dram=64GiB@64GB/s)")
    if any(t.shared for t in tiers[:-1]):
        raise ConfigError("--tiers: the global store is the last tier")
    return hbm, tiers


def global_store(text: str, *, block_size: int, block_bytes: int | None = None) -> Tier:
    """``--global-store SIZE[@BANDWIDTH][:POLICY]``: a tier every instance shares."""
    _, tiers = parse_tiers(f"global={text}", block_size=block_size, block_bytes=block_bytes, flag="--global-store")
    return tiers[0]


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


