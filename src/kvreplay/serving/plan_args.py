"""plan()'s arguments checked once, before any run (checks.py): each refusal names the argument
and its flag, so `kvreplay plan` and `kvreplay.plan()` refuse the same values the same way.

GPU names are matched ignoring case (aliases too) and replaced by their catalog name, so that
--gpus h100 and --price h100=2/h price the H100; loads and rates are refused together, and where
a load would stretch the trace past what a simulated clock can span."""

from __future__ import annotations

import os

from ..checks import items, number, whole
from ..errors import ConfigError
from .limits import MAX_INSTANCES
from ..catalog.prices import Prices
from .slo import MAX_SECONDS, SLO

#: the most worker processes or threads a plan starts
MAX_JOBS = 1024
#: the largest tensor-parallel degree a configuration may have (a GPU server's GPUs, many times)
MAX_TP = 1024


def resolve(trace, c) -> dict:
    """The checked values of the PlanConfig `c`, by plan()'s argument names (ConfigError naming the
    first bad one)."""
    if c.cache_dir is not None and not isinstance(c.cache_dir, (str, os.PathLike)):
        raise ConfigError(f"cache_dir (--cache) must be a directory's path, got {c.cache_dir!r}")
    return {"prices": check_prices(c.prices), "slo": check_slo(c.slo), "gpus": gpu_names(c.gpus),
            "tps": None if c.tps is None else [whole(t, "tps (--tp)", 1, MAX_TP) for t in items(c.tps, "tps (--tp)")],
            "tiers": [None] if c.tiers is None else items(c.tiers, "tiers (--tiers)"),
            "routers": items(c.routers, "routers (--routers)"),
            "policies": items(c.policies, "policies (--policies)"),
            "points": load_points(trace, c.loads, c.rates),
            "window_s": None if c.window_s is None else number(c.window_s, "window_s (--window)", hi=MAX_SECONDS,
                                                                unit="seconds"),
            "max_instances": whole(c.max_instances, "max_instances (--max-instances)", 1, MAX_INSTANCES),
            "jobs": whole(c.jobs, "jobs (--jobs)", 1, MAX_JOBS)}


def check_prices(prices) -> Prices:
    """A Prices (the catalog's when None; a dict of overrides is one too)."""
    if prices is None or isinstance(prices, dict):
        return Prices(prices)
    if not isinstance(prices, Prices):
        raise ConfigError(f"prices must be a Prices (kvreplay.catalog.prices.Prices) or a dict of {{name: USD}}, "
                          f"got {prices!r}")
    return prices


def check_slo(slo) -> SLO:
    """An SLO (a dict of its fields is one too), each limit given a positive finite number of seconds."""
    if isinstance(slo, dict):
        unknown = sorted(set(slo) - {"ttft_p90_s", "tpot_p90_s", "e2e_p99_s"})
        if unknown:
            raise ConfigError(f"slo: unknown objective {unknown[0]!r} (known: ttft_p90_s, tpot_p90_s, e2e_p99_s)")
        slo = SLO(**slo)
    if not isinstance(slo, SLO):
        raise ConfigError(f"slo must be an SLO (kvreplay.SLO(ttft_p90_s=2.0)) or a dict of its limits, got {slo!r}")
    for field, flag in (("ttft_p90_s", "--slo-ttft-p90"), ("tpot_p90_s", "--slo-tpot-p90"), ("e2e_p99_s", "--slo-e2e-p99")):
        value = getattr(slo, field)
        if value is not None:
            number(value, f"slo.{field} ({flag})", hi=MAX_SECONDS, unit="seconds")
    return slo


def gpu_names(gpus) -> list:
    """Each GPU by its catalog name (a GPUSpec kept as it is), matched ignoring case, aliases too."""
    from ..catalog.gpus import GPUSpec, get_gpu

    out = []
    for g in items(gpus, "gpus (--gpus)"):
        if isinstance(g, GPUSpec):
            out.append(g)
            continue
        if not isinstance(g, str) or not g.strip():
            raise ConfigError(f"gpus (--gpus) must name GPUs (`kvreplay gpus`), got {g!r}")
        try:
            out.append(get_gpu(g).name)
        except ConfigError as e:
            raise ConfigError(f"gpus (--gpus): {e}") from None
    return list(dict.fromkeys(out))


def load_points(trace, loads, rates) -> list:
    """[("speedup", x) or ("rate", r)]: `loads` (multiples of the trace's arrival rate, default 1)
    or `rates` (requests per second), not both; each one positive and finite, and one at which
    the trace's arrivals fit in a simulated clock."""
    from .simulate import arrivals

    if loads is not None and rates is not None:
        raise ConfigError("give loads (--loads) or rates (--rates), not both: each sets the arrivals of every run")
    kind, name, values = ("rate", "rates (--rates)", rates) if rates is not None else \
        ("speedup", "loads (--loads)", (1.0,) if loads is None else loads)
    unit = "requests per second" if kind == "rate" else "times the trace's arrival rate"
    out = []
    for v in items(values, name):
        x = number(v, name, unit=unit)
        try:
            arrivals(trace, **{kind: x})
        except ConfigError as e:
            why = str(e).replace("give a larger --speedup or --rate", "give a larger value")
            raise ConfigError(f"{name}: {why}") from None
        out.append((kind, x))
    return out
