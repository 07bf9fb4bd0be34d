"""What a deployment costs (`kvreplay plan`): GPU-hours and DRAM/SSD tiers from the shipped
catalog (data/prices.json: each price with its source and date) or the user's --price overrides."""

from __future__ import annotations

import json
import math
import re
from functools import lru_cache

from ..checks import number
from ..errors import ConfigError
from .gpus import get_gpu

HOURS_PER_MONTH = 730.0
PRICINGS = ("on-demand", "reserved")
MEMORIES = ("dram", "ssd")  # tiers priced per GiB-month
_PRICE = re.compile(r"^\s*([A-Za-z0-9._-]+)\s*=\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(/h|/GiB-month)?\s*$")


@lru_cache(maxsize=1)
def catalog() -> dict:
    from importlib.resources import files

    return json.loads(files("kvreplay.data").joinpath("prices.json").read_text(encoding="utf-8"))


def parse_overrides(items) -> dict:
    """--price H100=2.49/h, --price dram=0.5/GiB-month: {name: USD} (GPUs per GPU-hour, dram and
    ssd per GiB-month; the unit, when given, must match)."""
    out = {}
    for item in items or ():
        m = _PRICE.match(str(item))
        if not m:
            raise ConfigError(f"--price wants GPU=USD/h, dram=USD/GiB-month or ssd=USD/GiB-month, got {item!r}")
        name, value, unit = m.group(1), float(m.group(2)), m.group(3)
        memory = name.lower() in MEMORIES
        if unit is not None and (unit == "/h") == memory:
            raise ConfigError(f"--price {item}: {name.lower() + ' is priced per GiB-month' if memory else 'a GPU is priced per hour (/h)'}")
        if not (value > 0 and math.isfinite(value)):
            raise ConfigError(f"--price {item}: a price must be a positive finite number")
        out[name.lower() if memory else _gpu_name(name, f"--price {item}")] = value
    return out


def _gpu_name(name: str, what: str) -> str:
    """The catalog's name of GPU `name` (matched ignoring case, aliases too), else ConfigError
    naming `what` with the closest names."""
    try:
        return get_gpu(name).name
    except ConfigError as e:
        raise ConfigError(f"{what}: {e}") from None


def check_overrides(overrides) -> dict:
    """The API's prices={name: USD}: each a positive finite number, GPUs by their catalog name."""
    if overrides is None:
        return {}
    if not isinstance(overrides, dict):
        raise ConfigError(f"prices (--price) must be a dict of {{name: USD}}, got {overrides!r}")
    out = {}
    for name, value in overrides.items():
        if not isinstance(name, str):
            raise ConfigError(f"prices (--price): a price's name must be a GPU, dram or ssd, got {name!r}")
        what = f"prices (--price) {name}"
        usd = number(value, what, unit="USD")
        out[name.lower() if name.lower() in MEMORIES else _gpu_name(name, what)] = usd
    return out


def gpu_name(name: str) -> str:
    """The catalog's name of GPU `name` (an alias or another case: "h100", "GB200-NVL72"), or `name`
    itself when the catalog has no such GPU (a run names it then), so that a --price and a --gpus
    typed differently still meet."""
    try:
        return get_gpu(name).name
    except ConfigError:
        return name


class Prices:
    """GPU, DRAM and SSD prices, each with where it came from."""

    def __init__(self, overrides: dict | None = None, pricing: str = "on-demand"):
        if pricing not in PRICINGS:
            raise ConfigError(f"pricing must be one of {', '.join(PRICINGS)}, got {pricing!r}")
        self.pricing = pricing
        self.overrides = check_overrides(overrides)

    def gpu_hour(self, gpu: str) -> tuple[float, str]:
        """USD per GPU-hour and its source (`gpu` as typed: a catalog name or alias, any case)."""
        try:
            gpu = _gpu_name(gpu, "gpu") if isinstance(gpu, str) else gpu
        except ConfigError:
            pass  # not a catalog GPU: priced only by name, below
        if gpu in self.overrides:
            return self.overrides[gpu], "--price"
        entry = catalog()["gpus"].get(gpu)
        if entry is None:
            why = catalog().get("unpriced", {}).get(gpu)
            raise ConfigError(f"no price for {gpu} in the catalog ({why + '; ' if why else ''}it has "
                              f"{', '.join(catalog()['gpus'])}): give --price {gpu}=USD/h")
        key = "on_demand_per_hour" if self.pricing == "on-demand" else "reserved_per_hour"
        if key not in entry:
            raise ConfigError(f"no {self.pricing} price for {gpu} in the catalog (its source, {entry['source']}, "
                              f"gives an on-demand price only): give --price {gpu}=USD/h or --pricing on-demand")
        return float(entry[key]), f"{entry['source']} ({entry['date']}, {self.pricing})"

    def memory_gib_hour(self, kind: str) -> tuple[float, str]:
        """USD per GiB-hour of a "dram" or "ssd" tier and its source."""
        if kind in self.overrides:
            return self.overrides[kind] / HOURS_PER_MONTH, "--price"
        entry = catalog()["memory"][kind]
        return float(entry["per_gib_month"]) / HOURS_PER_MONTH, f"{entry['source']} ({entry['date']})"
