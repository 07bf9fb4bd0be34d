"""The serving simulator's compiled loop (C: sim.h maps its files), and what Python gives it.

:func:`run` takes the run's arrays and settings by name, checks them against the layout the C
side declares (``kv_layout_sim``: fields, the names of the cfg/fcfg slots, counters, statuses,
series columns, the router view), calls ``kv_simulate`` and returns. Nothing here knows a slot's
index: :data:`LAYOUT` has them all, from C.
"""

from __future__ import annotations

import ctypes
from functools import lru_cache

import numpy as np

from ... import native
from ...errors import ConfigError


@lru_cache(maxsize=None)
def layout() -> native.Layout:
    return native.layout("sim")


def slots(name: str):
    """The named slots of one of the kernel's slot arrays (cfg, fcfg, counters, status, series, itl, view)."""
    return layout().slot(name)


def counter_names() -> tuple[str, ...]:
    return layout().slots["counters"]


def settings(values: dict, array: str, dtype) -> np.ndarray:
    """A cfg (int64) or fcfg (float64) array from {slot name: value}; every slot must be given."""
    names = layout().slots[array]
    missing = sorted(set(names) - set(values))
    unknown = sorted(set(values) - set(names))
    if missing or unknown:
        raise ConfigError(f"simulator {array}: missing {missing}, unknown {unknown}")
    return np.array([values[n] for n in names], dtype=dtype)


#: Fields the kernel only reads.
INPUTS = ("offsets", "blocks", "P", "L", "O", "arrival", "assigned", "transfer_s", "states", "state_ids", "tm", "cfg",
          "fcfg", "rparams")


@lru_cache(maxsize=None)
def _kv_simulate():
    p = ctypes.c_void_p
    return native.function("kv_simulate", None, p, p, p)


def run(arrays: dict, policy_table: int, tiers_record: np.ndarray | None) -> None:
    """Run the kernel over `arrays` (every field of the layout, by name; outputs are filled in
    place). The policy states' records (arrays["states"] holds their addresses) and the tiers'
    record must stay alive until it returns."""
    record = native.bind(arrays, layout(), "simulator input", inputs=INPUTS)
    _kv_simulate()(native.ptr(record), policy_table, None if tiers_record is None else native.ptr(tiers_record))


@lru_cache(maxsize=None)
def routers() -> dict:
    """The state-aware routers the core has: {name: (index, {parameter: default})}, aliases included."""
    lib = native.lib()
    count = native.function("kv_router_count", ctypes.c_int64)()
    out = {}
    for k in range(count):
        name = native.function("kv_router_name", ctypes.c_char_p, ctypes.c_int64)(k).decode()
        aliases = native.function("kv_router_aliases", ctypes.c_char_p, ctypes.c_int64)(k).decode().split()
        params = {}
        for item in native.function("kv_router_params", ctypes.c_char_p, ctypes.c_int64)(k).decode().split():
            key, _, value = item.partition("=")
            params[key] = float(value)
        for n in [name, *aliases]:
            out[n] = (k, params)
    del lib
    return out
