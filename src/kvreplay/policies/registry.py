"""Names to policies. Names are case-insensitive.

Every module in this package that defines ``POLICY`` (a PolicySpec) is registered.
"""

from __future__ import annotations

from ..errors import ConfigError
from ..plugins import discover
from ..units import Seconds
from .base import PolicySpec

# Listing order; policies not named here follow alphabetically.
ORDER = ("s3fifo", "lru", "fifo", "lru-tail", "sieve", "clock", "arc", "2q", "lfu", "ttl", "vllm", "radix", "trtllm", "llamacpp", "deepseek",
         "infinite", "belady")


def _discover() -> dict[str, PolicySpec]:
    found = discover(__package__, __file__, "POLICY", PolicySpec)
    rank = {name: i for i, name in enumerate(ORDER)}
    return dict(sorted(found.items(), key=lambda item: (rank.get(item[0], len(rank)), item[0])))


POLICIES: dict[str, PolicySpec] = _discover()


def get_policy(name: str) -> PolicySpec:
    """The policy registered under `name` (any case); ConfigError listing the known names otherwise."""
    spec = POLICIES.get(str(name).strip().lower())
    if spec is None:
        raise ConfigError(f"unknown policy {name!r} (known: {', '.join(POLICIES)})")
    return spec


def parse_policy(text: str) -> tuple[PolicySpec, dict]:
    """Parse ``name`` or ``name:key=value:key=value`` into (spec, resolved params)."""
    name, *pairs = text.split(":")
    spec = get_policy(name)
    params = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise ConfigError(f"{text!r}: expected key=value after ':', got {pair!r}")
        key = key.strip().replace("-", "_")
        if any(p.name == key and p.kind is Seconds for p in spec.params):
            params[key] = value.strip()  # a duration: its unit is required (units.parse_duration)
            continue
        try:
            params[key] = int(value)
        except ValueError:
            try:
                params[key] = float(value)
            except ValueError:
                raise ConfigError(f"{text!r}: {key} must be a number, got {value!r}") from None
    return spec, spec.resolve(params)
