"""Names to policies. Names are case-insensitive."""

from __future__ import annotations

from ..engine import driver
from ..errors import ConfigError
from . import base, fifo, lru, s3fifo
from .base import PolicySpec

_MODULES = (s3fifo, lru, fifo)
POLICIES: dict[str, PolicySpec] = {m.POLICY.name: m.POLICY for m in _MODULES}
driver.key_cache_on_sources((driver, base, *_MODULES))


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
        try:
            params[key] = int(value)
        except ValueError:
            try:
                params[key] = float(value)
            except ValueError:
                raise ConfigError(f"{text!r}: {key} must be a number, got {value!r}") from None
    return spec, spec.resolve(params)
