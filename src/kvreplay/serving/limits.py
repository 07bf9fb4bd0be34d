"""What one simulated run can hold, refused up front with the limit named (docs/serving.md,
"Limits"): a run that would need more memory or time than a machine has is an input error,
not a crash or a hang hours later."""

from __future__ import annotations

import numbers

import numpy as np

from ..errors import ConfigError

MAX_INSTANCES = 4096
#: a request's prompt and output lengths (tokens): beyond them a request alone needs gigabytes of
#: block positions, or more decode steps than a run can take
MAX_PROMPT_TOKENS = 2 ** 30
MAX_OUTPUT_TOKENS = 2 ** 24
#: block positions of every request (prompt and output), the kernel's int32 arrays
MAX_POSITIONS = 2 ** 31 - 1
#: a state-aware router's lag: 0 (current state), or from 0.1 ms (its snapshots are counted in
#: units of the lag over a clock of up to 1e11 s, within float precision) to 1e9 ms
MIN_ROUTER_LAG_MS, MAX_ROUTER_LAG_MS = 0.1, 1e9
MAX_SWEEP_RUNS = 10_000
#: cluster sizes in one load sweep: each is a run per load (and per policy, capacity, router and
#: tier set); more than this is minutes of runs no curve needs (sizes 1, 2, 4, ... 4,096 are 13)
MAX_CLUSTER_SIZES = 64


def check_instances(instances, what: str = "instances (--instances)") -> int:
    if isinstance(instances, bool) or not isinstance(instances, numbers.Integral) or not 1 <= instances <= MAX_INSTANCES:
        raise ConfigError(f"{what} must be a whole number from 1 to {MAX_INSTANCES:,}, got {instances!r}")
    return int(instances)


def check_router_lag(lag_ms) -> float:
    if isinstance(lag_ms, bool) or not isinstance(lag_ms, numbers.Real) or not (
            lag_ms == 0 or MIN_ROUTER_LAG_MS <= lag_ms <= MAX_ROUTER_LAG_MS):
        raise ConfigError(f"router lag (--router-lag-ms) must be 0 or from {MIN_ROUTER_LAG_MS:g} to "
                          f"{MAX_ROUTER_LAG_MS:g} ms, got {lag_ms!r}")
    return float(lag_ms)


def check_flag(value, name: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise ConfigError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def check_requests(trace, block_size: int, output_kv: bool) -> None:
    """Every request's lengths, and the positions of all of them, within what a run can hold."""
    lengths = np.asarray(trace.input_length, dtype=np.int64)
    outputs = np.asarray(trace.output_length, dtype=np.int64)
    for values, limit, name in ((lengths, MAX_PROMPT_TOKENS, "input_length"), (outputs, MAX_OUTPUT_TOKENS, "output_length")):
        if values.size and values.max() > limit:
            i = int(np.argmax(values))
            raise ConfigError(f"{trace.source}: request {i}: {name} {int(values[i]):,} is more than a simulated run can "
                              f"take ({limit:,} tokens at most)")
    kept = lengths + (outputs if output_kv else 0)
    positions = int((-(-kept // block_size)).sum())
    if positions > MAX_POSITIONS:
        raise ConfigError(f"{trace.source}: its requests need {positions:,} block positions of {block_size} tokens, more "
                          f"than a run can hold ({MAX_POSITIONS:,}): simulate a slice of it (kvreplay slice), or a larger "
                          "--block-size")


def check_sweep_size(runs: int) -> None:
    if runs > MAX_SWEEP_RUNS:
        raise ConfigError(f"the sweep has {runs:,} runs (loads x policies x capacities x instances x routers x tiers); "
                          f"at most {MAX_SWEEP_RUNS:,} in one call: split it")


def check_cluster_sizes(sizes) -> list[int]:
    """A load sweep's cluster sizes (--instances-list): each from 1 to MAX_INSTANCES, at most
    MAX_CLUSTER_SIZES of them, refused before any run."""
    what = "instances (--instances-list)"
    sizes = [check_instances(n, what) for n in sizes]
    if len(sizes) > MAX_CLUSTER_SIZES:
        raise ConfigError(f"{what}: {len(sizes):,} cluster sizes; at most {MAX_CLUSTER_SIZES} in one sweep (each is a "
                          "run at every load): give fewer, e.g. 1,2,4,8,16,32,64")
    return sizes
