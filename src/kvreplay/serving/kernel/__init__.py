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
          "fcfg", "rparams", "spec_accept", "tm_draft")


#: sim.h's SimGrow: (instance, ids wanted) -> the grown state's record address, or 0
GROW = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64, ctypes.c_int64)


@lru_cache(maxsize=None)
def _kv_simulate():
    p = ctypes.c_void_p
    return native.function("kv_simulate", None, p, p, p, GROW)


def run(arrays: dict, policy_table: int, tiers_record: np.ndarray | None, grow=None) -> None:
    """Run the kernel over `arrays` (every field of the layout, by name; outputs are filled in
    place). The policy states' records (arrays["states"] holds their addresses) and the tiers'
    record must stay alive until it returns. grow(instance, ids) -> a record address (or 0): the
    state of an instance whose ids ran out, grown to the ids it writes to arrays["state_ids"]
    (None: the run stops there, sim.h SimGrow)."""
    record = native.bind(arrays, layout(), "simulator input", inputs=INPUTS)
    callback = GROW(grow) if grow is not None else GROW()
    _kv_simulate()(native.ptr(record), policy_table, None if tiers_record is None else native.ptr(tiers_record),
                   callback)


def mode(spec, style: str) -> str:
    """How `spec`'s requests hold their blocks under a scheduler style ("MODE_WHOLE",
    "MODE_PIECEWISE" or "MODE_PAGED": requests.c)."""
    table, _ = native.policy(spec.native)
    fn = native.function("kv_sim_mode", ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64)
    return layout().slots["mode"][fn(table, 0 if style == "vllm" else 1)]


def itl_bins() -> tuple[float, float]:
    """(ITL_MIN_S, ITL_RATIO): the inter-token histogram's first bin edge and its ratio (sim.h)."""
    lib = native.lib()
    return ctypes.c_double.in_dll(lib, "kv_itl_min_s").value, ctypes.c_double.in_dll(lib, "kv_itl_ratio").value


STATUS = slots("status")  # WAITING_ARRIVAL, WAITING, RUNNING, FINISHED, REJECTED, REFUSED
#: sim.h's SIM_MAX_STEP_S and SIM_MAX_TIME_S: the longest step and the latest simulated time a run
#: may reach (tests/serving/test_limits.py checks both sides of each)
MAX_STEP_S, MAX_TIME_S = 1e7, 1e11
SERIES = slots("series")  # the time series' columns: S_TIME, S_RUNNING, ...
ITL = slots("itl")  # ITL_SUM, ITL_MAX, ITL_COUNT; the histogram follows (ITL_HEAD = len(ITL))
ITL_HEAD = len(ITL.names)
ITL_MIN_S, ITL_RATIO = itl_bins()
