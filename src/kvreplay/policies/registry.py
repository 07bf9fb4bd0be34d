"""Names to policies. Names are case-insensitive.

Every module in this package that defines ``POLICY`` (a PolicySpec) is registered. What the
command line and the listings need before a policy runs (each policy's name, module, summary,
capacity rule and parameters) is in ``index.py``, written from the modules by
``python -m kvreplay.policies.registry`` (tests/policies/test_registry.py fails while it is out of
date), so naming or listing policies imports none of their modules: ``POLICIES[name]`` and
:func:`get_policy` import the one module asked for.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

from ..errors import ConfigError
from ..units import Seconds
from . import index

# Listing order; policies not named here follow alphabetically.
ORDER = ("s3fifo", "lru", "fifo", "lru-tail", "sieve", "clock", "arc", "2q", "lfu", "ttl", "vllm", "radix", "trtllm", "llamacpp", "deepseek",
         "infinite", "belady")


class ParamInfo(NamedTuple):
    """A parameter as the index lists it (PolicySpec's Param has its check too)."""

    name: str
    default: object
    kind: type
    help: str


class PolicyInfo(NamedTuple):
    """A policy as the index lists it."""

    name: str
    module: str
    summary: str
    capacity: str
    params: tuple[ParamInfo, ...]


KINDS = {"int": int, "float": float, "Seconds": Seconds}  # Seconds: a duration (units.py)


def default_text(param) -> str:
    """A parameter's default as its flag would be written (a duration with its unit: 300s)."""
    return f"{param.default:g}s" if param.kind is Seconds else str(param.default)
INFO: dict[str, PolicyInfo] = {
    name: PolicyInfo(name, module, summary, capacity, tuple(ParamInfo(p, d, KINDS[k], h) for p, k, d, h in params))
    for name, module, summary, capacity, params in index.POLICIES
}


class _Registry(Mapping):
    """name -> PolicySpec, in listing order; a policy's module is imported when it is first asked for."""

    def __getitem__(self, name: str):
        info = INFO[name]
        return importlib.import_module(f"{__package__}.{info.module}").POLICY

    def __iter__(self):
        return iter(INFO)

    def __len__(self) -> int:
        return len(INFO)

    def __repr__(self) -> str:
        return f"POLICIES({', '.join(INFO)})"


POLICIES: Mapping = _Registry()


def get_policy(name: str):
    """The policy registered under `name` (any case); ConfigError listing the known names otherwise."""
    key = str(name).strip().lower()
    if key not in INFO:
        raise ConfigError(f"unknown policy {name!r} (known: {', '.join(INFO)})")
    return POLICIES[key]


def parse_policy(text: str) -> tuple:
    """Parse ``name`` or ``name:key=value:key=value`` into (spec, resolved params)."""
    name, *pairs = text.split(":")
    spec = get_policy(name)
    params = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise ConfigError(f"{text!r}: expected key=value after ':', got {pair!r}")
        key = key.strip().replace("-", "_")
        if any(p.name == key and p.kind is Seconds for p in INFO[spec.name].params):
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


# ---- the index, from the modules ------------------------------------------------------------------

def discovered() -> list[tuple]:
    """Every policy module's POLICY, as index.py's rows, in listing order (imports every module)."""
    from ..plugins import discover
    from .base import PolicySpec

    found = discover(__package__, __file__, "POLICY", PolicySpec, with_module=True)
    rank = {name: i for i, name in enumerate(ORDER)}
    rows = []
    for name, (module, spec) in sorted(found.items(), key=lambda item: (rank.get(item[0], len(rank)), item[0])):
        params = tuple((p.name, p.kind.__name__, p.default, p.help) for p in spec.params)
        rows.append((spec.name, module, spec.summary, spec.capacity, params))
    return rows


def index_text(rows: list[tuple]) -> str:
    lines = ['"""Every policy: (name, module, summary, capacity, parameters as (name, kind, default, help)),',
             "in listing order. Written by `python -m kvreplay.policies.registry` from each module's POLICY:",
             'do not edit (tests/policies/test_registry.py checks it against the modules)."""', "", "POLICIES = ("]
    lines += [f"    {row!r}," for row in rows]
    return "\n".join(lines + [")", ""])


if __name__ == "__main__":
    Path(__file__).with_name("index.py").write_text(index_text(discovered()))
