"""`kvreplay plan`: the cheapest deployment that meets an SLO at each load (docs/plan.md).

The grid is GPU x TP x tiers x router x policy. For each configuration and load, the search
finds the fewest identical instances that meet every objective in every window (slo.py):
doubling from 1 until one passes, then bisecting between the last failure and the first pass.
That relies on one monotonicity: adding an instance never makes a deployment miss an SLO it met.
Every run the search makes is checked against it, and each violation is reported.

Configurations are tried cheapest first, by the price of one instance. A configuration whose
smallest possible cost (the instances its last failure proved too few, plus one) is already above
the best passing cost is pruned, and counted. Runs are cached by (trace digest, configuration,
instances, load), so a refined search, or the same point reached twice, simulates once.

Where the time model has an error band (the calibrated roofline), a configuration is judged on
the band's pessimistic run (`judge="pessimistic"`, the default) or on its centre; each result
says which.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import product

import numpy as np

from ..errors import ConfigError
from ..progress import tell
from ..units import seconds_arg
from .prices import Prices
from .slo import SLO, judge
from .stats import nearest_rank

JUDGES = ("pessimistic", "centre")


@dataclass(frozen=True)
class Config:
    gpu: str
    tp: int
    tiers: str | None
    router: str
    policy: str | None

    def text(self) -> str:
        return (f"{self.gpu} x{self.tp}, tiers {self.tiers or 'none'}, router {self.router}, "
                f"policy {self.policy or 'vllm'}")


@dataclass
class Run:
    """What the plan keeps of one simulation: the per-request times its SLOs are judged on and
    the run's summary (slo.judge reads the same attributes as from a SimReport)."""

    policy: str
    summary: dict
    arrival_s: np.ndarray
    ttft_s: np.ndarray
    tpot_s: np.ndarray
    e2e_s: np.ndarray
    finished: np.ndarray

    @classmethod
    def of(cls, report) -> "Run":
        return cls(report.policy, report.summary(), report.arrival_s, report.ttft_s, report.tpot_s, report.e2e_s,
                   report.finished)

    @property
    def num_requests(self) -> int:
        return int(self.finished.size)

    @property
    def num_finished(self) -> int:
        return int(self.finished.sum())

    @property
    def duration_s(self) -> float:
        return float(self.summary["duration_s"])

    def save(self, path) -> None:
        import io

        from ..files import write_atomic

        buf = io.BytesIO()
        np.savez(buf, arrival_s=self.arrival_s, ttft_s=self.ttft_s, tpot_s=self.tpot_s, e2e_s=self.e2e_s,
                 finished=self.finished, doc=np.frombuffer(json.dumps(
                     {"policy": self.policy, "summary": self.summary}, default=float).encode(), dtype=np.uint8))
        write_atomic(str(path), buf.getvalue())

    @classmethod
    def load(cls, path) -> "Run":
        with np.load(path, allow_pickle=False) as z:
            doc = json.loads(z["doc"].tobytes().decode())
            return cls(doc["policy"], doc["summary"], z["arrival_s"], z["ttft_s"], z["tpot_s"], z["e2e_s"],
                       z["finished"])


@dataclass
class Search:
    """The state of one plan: its cache of runs and what it counted."""

    trace: object
    model: str
    slo: SLO
    prices: Prices
    window_s: float | None
    judge: str
    options: dict
    max_instances: int
    cache_dir: str | None = None
    cache: dict = field(default_factory=dict)
    models: dict = field(default_factory=dict)
    runs: int = 0
    cache_hits: int = 0
    disk_hits: int = 0
    violations: list = field(default_factory=list)

    def digest(self) -> str:
        if "digest" not in self.models:
            from .plan_result import trace_digest

            self.models["digest"] = trace_digest(self.trace)
        return self.models["digest"]


def plan(trace, *, model: str, slo: SLO, gpus=("H100",), tps=(1,), tiers=(None,), routers=("round-robin",),
         policies=(None,), loads=(1.0,), rates=None, window_s: float | None = None, prices: Prices | None = None,
         judge_at: str = "pessimistic", max_instances: int = 64, runners_up: int = 3, cache_dir: str | None = None,
         jobs: int = 1, executor: str = "local", ray_address: str | None = None, progress=None, **options):
    """The cheapest configuration per load meeting `slo`, its runners-up, and what the search did:
    a PlanResult (a JSON-ready dict; `.to_pandas()` has one row per configuration tried). `loads`: multiples of the trace's arrival rate, or `rates`: Poisson arrivals at
    these requests per second. `cache_dir`: keep every run there, named by the trace's digest and
    its configuration, for later plans to reuse. `jobs` / `executor` / `ray_address`: search the
    configurations at once on processes, threads or Ray (analysis/executors.py; nothing is pruned
    then, since no search waits for another's best). progress: a kvreplay.progress callback, told
    ``(done, total, "configurations")``: each configuration at each load, searched, pruned or
    skipped. `options` go to simulate()."""
    from ..engine.replay import as_trace

    if judge_at not in JUDGES:
        raise ConfigError(f"judge must be one of {', '.join(JUDGES)}, got {judge_at!r}")
    if not any(True for _ in slo.objectives()):
        raise ConfigError("give at least one SLO (--slo-ttft-p90, --slo-tpot-p90 or --slo-e2e-p99)")
    from .semantics import one_semantics

    options, semantics_note = one_semantics(model, options, tiers, policies)
    if window_s is not None:
        window_s = seconds_arg(window_s, "window_s")
        if not 0 < window_s < math.inf:
            raise ConfigError(f"window_s must be a positive finite duration, got {window_s!r}")
    s = Search(trace=as_trace(trace), model=model, slo=slo, prices=prices or Prices(), window_s=window_s,
               judge=judge_at, options=options, max_instances=max_instances, cache_dir=cache_dir)
    if cache_dir is not None:
        os.makedirs(cache_dir, exist_ok=True)
    parallel = jobs > 1 or executor != "local"
    configs = [Config(g, int(t), tr, r, p) for g, t, tr, r, p in product(gpus, tps, tiers, routers, policies)]
    out = {"slo": slo.text(), "slo_limits": slo.limits(), "judged_at": judge_at, "pricing": s.prices.pricing, "loads": []}
    points = [("rate", float(r)) for r in rates] if rates is not None else [("speedup", float(x)) for x in loads]
    total = len(configs) * len(points)
    for k, point in enumerate(points):
        told = None if progress is None else (
            lambda done, _total, *unused, before=k * len(configs): progress(before + done, total, "configurations"))
        out["loads"].append(_plan_load_parallel(s, configs, point, runners_up, jobs, executor, ray_address, told)
                            if parallel else _plan_load(s, configs, point, runners_up, told))
    out.update(runs=s.runs, cache_hits=s.cache_hits, disk_hits=s.disk_hits, monotonicity_violations=s.violations,
               trace_digest=s.digest(), cache_dir=cache_dir, parallel=parallel, kv_semantics=semantics_note,
               calibration_warnings=_calibration_warnings(s, configs))
    from .plan_result import PlanResult

    return PlanResult(out)


def _plan_load(s: Search, configs: list, load: tuple, runners_up: int, progress=None) -> dict:
    """Every configuration at one load, cheapest instance first; prune what cannot beat the best.
    A tiered configuration whose HBM-only twin passed is searched up to the twin's instance count
    instead of pruned, for its tier economics (the GPUs the tier saves, or the TTFT it buys)."""
    priced, skipped = [], []
    for c in configs:
        try:
            priced.append((instance_cost(s, c)[0], c))
        except ConfigError as e:
            skipped.append({"config": c.text(), "reason": str(e)})
    priced.sort(key=lambda x: x[0])
    results, pruned, best = [], [], math.inf
    for k, (per_instance, c) in enumerate(priced):
        tell(progress, len(skipped) + k, len(configs), "configurations")
        twin = _passing_twin(results, c)
        if twin is not None:
            r = _fewest_instances(s, c, load, max_cost=math.inf, per_instance=per_instance, limit=twin["instances"])
        elif per_instance >= best:  # even one instance costs more than the best found
            pruned.append(_pruned(c, 1, per_instance, best))
            continue
        else:
            r = _fewest_instances(s, c, load, max_cost=best, per_instance=per_instance)
        if r.get("pruned"):
            pruned.append(_pruned(c, r["at"], per_instance, best))
            continue
        results.append(r)
        if r["meets"]:
            best = min(best, r["cost_per_hour"])
    tell(progress, len(configs), len(configs), "configurations")
    return _summarise(s, load, results, skipped, pruned, runners_up)


def _passing_twin(results: list, c: Config) -> dict | None:
    """The searched HBM-only configuration with `c`'s GPU, TP, router and policy, if it passed."""
    if c.tiers is None:
        return None
    for r in results:
        if r["meets"] and r["tiers"] == "none" and (r["gpu"], r["tp"], r["router"], r["policy_asked"]) == (
                c.gpu, c.tp, c.router, c.policy):
            return r
    return None


def _pruned(c: Config, instances: int, per_instance: float, best: float) -> dict:
    return {**_config_columns(c), "verdict": "pruned", "instances": instances, "cost_per_hour": per_instance * instances,
            "why": f"{instances} instances, the fewest it could still need, cost {per_instance * instances:,.2f} "
                   f"USD/h, not below the best found ({best:,.2f} USD/h)"}


def _config_columns(c: Config) -> dict:
    return {"config": c.text(), "gpu": c.gpu, "tp": c.tp, "tiers": c.tiers or "none", "router": c.router,
            "policy": c.policy or "vllm"}


def _plan_load_parallel(s: Search, configs: list, load: tuple, runners_up: int, jobs: int, executor: str,
                        ray_address, progress=None) -> dict:
    """Every configuration's search at once, on an executor (none is pruned)."""
    from ..analysis.executors import Task, run

    shared = {"model": s.model, "slo": s.slo, "prices": s.prices, "window_s": s.window_s, "judge": s.judge,
              "options": s.options, "max_instances": s.max_instances, "cache_dir": s.cache_dir}
    tasks = [Task(kind="call", trace=0, function=search_task,
                  options=(("config", c), ("load", load), ("search", shared))) for c in configs]
    results, skipped, found = [], [], []
    for (out,) in run(tasks, [s.trace], executor=executor, jobs=jobs, ray_address=ray_address, progress=progress):
        if "skipped" in out:
            skipped.append(out["skipped"])
            continue
        results.append(out["result"])
        found += out["probes"]
        s.runs += out["runs"]
        s.cache_hits += out["cache_hits"]
        s.disk_hits += out["disk_hits"]
        s.violations += [v for v in out["violations"] if v not in s.violations]
    return _summarise(s, load, results, skipped, [], runners_up, found)


def search_task(trace, options: dict) -> dict:
    """One configuration's search at one load, in a worker (the executors call it by name)."""
    s = Search(trace=trace, **options["search"])
    c = options["config"]
    try:
        per_instance = instance_cost(s, c)[0]
    except ConfigError as e:
        return {"skipped": {"config": c.text(), "reason": str(e)}}
    r = _fewest_instances(s, c, options["load"], max_cost=math.inf, per_instance=per_instance)
    return {"result": r, "runs": s.runs, "cache_hits": s.cache_hits, "disk_hits": s.disk_hits,
            "violations": s.violations, "probes": probes(s, options["load"])}


def _summarise(s: Search, load: tuple, results: list, skipped: list, pruned: list, runners_up: int,
               found: list | None = None) -> dict:
    passing = sorted((r for r in results if r["meets"]), key=lambda r: r["cost_per_hour"])
    for r in results:
        r["verdict"] = "meets" if r["meets"] else "misses"
        r["why"] = _passes_because(r) if r["meets"] else _why(s, r)
    tried = results + pruned + [{"config": k["config"], "verdict": "skipped", "why": k["reason"]} for k in skipped]
    out = {"load_kind": load[0], "load": load[1], "best": passing[0] if passing else None,
           "runners_up": passing[1:1 + runners_up], "pruned": len(pruned), "skipped": skipped, "evaluated": len(results),
           "tier_economics": _tier_economics(results), "tried": tried,
           "probes": sorted(probes(s, load) if found is None else found, key=lambda p: (p["config"], p["instances"]))}
    if not passing:
        out["closest"] = _closest(s, results, load)
    return out


def probes(s: Search, load: tuple) -> list:
    """Every run judged at `load` (each configuration at each instance count the search tried, at
    the band end it judges): cost, TTFT p90 and verdict, for the cost-vs-TTFT plot."""
    out = []
    for (c, n, ld, end), e in s.cache.items():
        if ld != load or (s.judge == "pessimistic" and e["judged_at"] == "centre of the band"):
            continue  # (the runs searching the band centre's count are not the judged ones)
        out.append({"config": c.text(), "gpu": c.gpu, "tp": c.tp, "tiers": c.tiers or "none", "instances": n,
                    "cost_per_hour": instance_cost(s, c)[0] * n, "meets": e["meets"],
                    "ttft_p90_s": e["report"].summary["latency_s"]["ttft"]["p90"],
                    "worst_window_ttft_p90_s": e["verdict"]["worst_window_s"].get("TTFT p90")})
    return out


def _passes_because(r: dict) -> str:
    b = r["binding"] or {}
    return (f"the fewest instances that pass: {b.get('objective')} {b.get('value_s', 0):.3g} s against "
            f"{b.get('limit_s', 0):g} s in the binding window (from {b.get('window_start_s', 0):,.0f} s), judged at "
            f"the {r['judged_at']}")


def _tier_economics(results: list) -> list:
    """Per searched configuration with tiers: what it costs against the same GPU, TP, router and
    policy without them (the GPUs the tier saves and their price, and the TTFT each gets). A tiered
    configuration is searched up to its HBM-only twin's count, so one that misses there saves none."""
    plain = {(r["gpu"], r["tp"], r["router"], r["policy_asked"]): r for r in results
             if r["tiers"] == "none" and r["meets"]}
    out = []
    for r in results:
        if r["tiers"] == "none":
            continue
        base = plain.get((r["gpu"], r["tp"], r["router"], r["policy_asked"]))
        if base is None and not r["meets"]:
            continue
        row = {"config": r["config"], "tiers": r["tiers"], "instances": r["instances"], "meets": r["meets"],
               "cost_per_hour": r["cost_per_hour"], "ttft_p90_s": r["ttft_p90_s"]}
        if base is None:
            row["versus_none"] = None  # HBM only did not pass, or was pruned before it was searched
        else:
            saved = base["gpus"] - r["gpus"] if r["meets"] else 0
            row["versus_none"] = {"instances": base["instances"], "cost_per_hour": base["cost_per_hour"],
                                  "gpus_saved": saved,
                                  "saves_per_hour": base["cost_per_hour"] - r["cost_per_hour"] if r["meets"] else None,
                                  "ttft_p90_s": base["ttft_p90_s"], "ttft_p90_with_tiers_s": r["ttft_p90_s"],
                                  "same_instances": r["instances"] == base["instances"]}
        out.append(row)
    return out


def instance_cost(s: Search, c: Config) -> tuple[float, dict]:
    """USD per hour of one instance (its GPUs, and its DRAM and SSD tiers) and the prices' sources."""
    gpu_hour, gpu_source = s.prices.gpu_hour(c.gpu)
    cost, sources = gpu_hour * c.tp, {"gpu": gpu_source}
    for kind, gib in tier_gib(c.tiers).items():
        price, sources[kind] = s.prices.memory_gib_hour(kind)
        cost += gib * price
    return cost, sources


def tier_gib(tiers: str | None) -> dict:
    """GiB per priced kind ("dram", "ssd") of the tiers in a --tiers text. A tier must be sized in
    bytes and named dram or ssd to be priced."""
    from ..units import parse_size
    from .prices import MEMORIES

    out = {}
    for part in (tiers or "").split(","):
        name, _, rest = part.partition("=")
        name = name.strip().lower()
        if not name or name == "hbm":
            continue
        if name == "global":
            raise ConfigError(f"--tiers {tiers}: plan prices each instance's tiers; a store shared by every "
                              "instance (global) is not priced or searched")
        if name not in MEMORIES:
            raise ConfigError(f"--tiers {tiers}: name the tier dram or ssd to price it, not {name!r}")
        size = rest.split("@")[0].split(":")[0].strip()
        if size.isdigit():
            raise ConfigError(f"--tiers {tiers}: give the {name} tier's size in bytes (256GiB) to price it")
        out[name] = out.get(name, 0.0) + parse_size(size) / 2 ** 30
    return out


def _fewest_instances(s: Search, c: Config, load: tuple, *, max_cost: float, per_instance: float,
                      limit: int | None = None) -> dict:
    """Double, then bisect, for the fewest instances meeting the SLO, up to `limit` (default
    --max-instances) and below `max_cost`: the result at the fewest that pass (or at the most
    tried), or {"pruned": True, "at": n} when the fewest it could still need, n, cost `max_cost`
    or more."""
    top = min(limit or s.max_instances, s.max_instances)
    affordable = top if math.isinf(max_cost) else min(top, math.ceil(max_cost / per_instance) - 1)
    if affordable < 1:
        return {"pruned": True, "at": 1}
    lo, hi, n = 0, None, 1  # lo: instances known too few; hi: instances known enough
    while hi is None:
        n = min(n, affordable)
        e = evaluate(s, c, n, load)
        if e["meets"]:
            hi = n
        elif e["verdict"]["unserved_requests"]:  # past max_model_len or the pool: so on every instance count
            return _result(s, c, n, load)
        elif n == affordable:
            break
        else:
            lo, n = n, n * 2
    if hi is None:
        return {"pruned": True, "at": n + 1} if affordable < top else _result(s, c, top, load)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if evaluate(s, c, mid, load)["meets"]:
            hi = mid
        else:
            lo = mid
    return _result(s, c, hi, load)


def evaluate(s: Search, c: Config, n: int, load: tuple, end: str | None = None) -> dict:
    """One run, from the cache when this point was simulated before; checks monotonicity. `end`:
    "high" or "centre" of the time model's band (default: the one the plan judges at); a time model
    without a band has only its centre."""
    tm = _time_model(s, c)
    banded = tm is not None and hasattr(tm, "at_band")
    end = (end or ("high" if s.judge == "pessimistic" else "centre")) if banded else "centre"
    key = (c, n, load, end)
    if key in s.cache:
        s.cache_hits += 1
        return s.cache[key]
    from .simulate import simulate

    path = _cache_path(s, c, n, load, end)
    if path is not None and os.path.exists(path):
        run, s.disk_hits = Run.load(path), s.disk_hits + 1
    else:
        options = dict(s.options)
        if banded:  # one run at that end of the band (not the band's three)
            options["time_model"] = tm.at_band("high") if end == "high" else tm
        report = simulate(s.trace, c.policy, None, model=s.model, gpu=c.gpu, tp=c.tp, instances=n, router=c.router,
                          tiers=c.tiers, speedup=load[1] if load[0] == "speedup" else None,
                          rate=load[1] if load[0] == "rate" else None, compare_sequential=False, band_runs=False,
                          **options)
        s.runs += 1
        run = Run.of(report)
        if path is not None:
            run.save(path)
    at = ("pessimistic end of the band" if end == "high" else "centre of the band") if banded else "centre (no band)"
    verdict = judge(run, s.slo, s.window_s)
    entry = {"meets": verdict["meets"], "verdict": verdict, "judged_at": at, "report": run}
    s.cache[key] = entry
    _check_monotone(s, c, load, end)
    return entry


#: what a cached run's meaning depends on beyond its inputs: 2 since auto KV semantics serve a
#: hybrid model with vLLM's hybrid manager (runs cached before served it as full attention); 3
#: since they serve Mamba hybrids with it too
CACHE_VERSION = 3


@lru_cache(maxsize=1)
def _calibration_digest() -> str:
    """The shipped roofline calibration's digest: a refit changes every calibrated run's times, so
    runs cached under other coefficients are not reused."""
    from .timing.roofline import calibration_data

    return hashlib.sha256(json.dumps(calibration_data()["gpus"], sort_keys=True).encode()).hexdigest()[:16]


def _cache_path(s: Search, c: Config, n: int, load: tuple, end: str) -> str | None:
    """The run's file in the cache directory: named by the trace's digest and everything the run
    depends on (not the SLOs: a run is judged again for each)."""
    if s.cache_dir is None:
        return None
    key = json.dumps([CACHE_VERSION, _calibration_digest(), s.digest(), s.model, [c.gpu, c.tp, c.tiers, c.router, c.policy], n, list(load), end,
                      sorted((k, repr(v)) for k, v in s.options.items())])
    return os.path.join(s.cache_dir, hashlib.sha256(key.encode()).hexdigest()[:32] + ".npz")


def _check_monotone(s: Search, c: Config, load: tuple, end: str) -> None:
    done = sorted((n, e["meets"]) for (cc, n, ld, en), e in s.cache.items() if cc == c and ld == load and en == end)
    for (n1, m1), (n2, m2) in zip(done, done[1:]):
        if m1 and not m2:
            v = {"config": c.text(), "load": load[1], "load_kind": load[0], "passes_at": n1, "fails_at": n2}
            if v not in s.violations:
                s.violations.append(v)


def _centre_instances(s: Search, c: Config, n: int, load: tuple) -> int | None:
    """Judged at the band's pessimistic end, `n` instances meet the SLO: the fewest that meet it
    at the band's centre (at most n: the centre's steps are never slower). None without a band."""
    e = evaluate(s, c, n, load)
    if not e["judged_at"].startswith("pessimistic") or not e["meets"]:
        return None
    lo, hi = 0, n
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if evaluate(s, c, mid, load, "centre")["meets"]:
            hi = mid
        else:
            lo = mid
    return hi


def _result(s: Search, c: Config, n: int, load: tuple) -> dict:
    e = evaluate(s, c, n, load)
    r, v = e["report"], e["verdict"]
    per_instance, sources = instance_cost(s, c)
    cost = per_instance * n
    summ = r.summary
    hours = summ["duration_s"] / 3600 if summ["duration_s"] else None
    per_m = (lambda tokens: cost * hours / tokens * 1e6 if hours and tokens else None)  # noqa: E731
    per_token = _prefill_seconds_per_token(s, c)
    saved = (summ["hit_tokens"] / hours * per_token * per_instance / 3600 if hours and per_token is not None else None)
    return {"config": c.text(), "gpu": c.gpu, "tp": c.tp, "tiers": c.tiers or "none", "router": c.router,
            "policy_asked": c.policy, "load_kind": load[0], "load": load[1], "cache_saved_per_hour": saved, "prefill_seconds_per_token": per_token, "duration_s": summ["duration_s"],
            "hit_tokens": summ["hit_tokens"],
            "policy": r.policy, "instances": n, "gpus": n * c.tp, "meets": e["meets"], "judged_at": e["judged_at"],
            "instances_at_centre": _centre_instances(s, c, n, load),
            "cost_per_hour": cost, "instance_cost_per_hour": per_instance, "price_sources": sources,
            "usd_per_million_input": per_m(summ["prompt_tokens"]), "usd_per_million_output": per_m(summ["output_tokens"]),
            "hit_rate": summ["hit_rate"], "binding": v["binding"], "window_s": v["window_s"],
            "worst_window_s": v["worst_window_s"],
            "goodput_per_s": v["goodput_per_s"], "attainment": v["attainment"],
            "unserved_requests": v["unserved_requests"],
            "ttft_p90_s": summ["latency_s"]["ttft"]["p90"], "tpot_p90_s": summ["latency_s"]["tpot"]["p90"]}


def _prefill_seconds_per_token(s: Search, c: Config) -> float | None:
    """Seconds one instance spends per prompt token in a full 8,192-token prefill step (the time
    model's; None for a time model that is not a function of the GPU)."""
    from .timing.models import StepBatch

    tm = _time_model(s, c)
    if tm is None:
        return None
    chunk = 8192
    return float(tm.step_time(StepBatch(prefill_new=(chunk,), prefill_cached=(0,)))) / chunk


def _time_model(s: Search, c: Config):
    """The plan's time model on `c`'s GPUs (None for one that is not a function of them)."""
    from .simulate import _is_roofline
    from .timing import load_time_model

    name = s.options.get("time_model", "roofline")
    if not _is_roofline(name):
        return None
    key = ("time model", c.gpu, c.tp)
    if key not in s.models:
        s.models[key] = load_time_model(name, model=s.model, gpu=c.gpu, tp=c.tp,
                                        dtype=s.options.get("weights_dtype", "bf16"),
                                        kv_dtype=s.options.get("kv_dtype") or "bf16")
    return s.models[key]


def _calibration_warnings(s: Search, configs: list) -> list[str]:
    """Where the configurations' calibrated rooflines leave what they were fitted and checked on
    (simulate.calibration_warnings: GPU, model, TP, context, weights), each said once."""
    from .simulate import calibration_warnings

    out: dict = {}
    for c in configs:
        tm = _time_model(s, c)
        if tm is not None and hasattr(tm, "calibration"):
            out.update(dict.fromkeys(calibration_warnings(tm, s.trace)))
    return list(out)


def _closest(s: Search, results: list, load: tuple) -> dict | None:
    """No configuration met the SLO: the nearest miss and why it misses."""
    if not results:
        return None
    near = min(results, key=lambda r: (r["unserved_requests"], (r["binding"] or {}).get("ratio", math.inf)))
    return {**near, "why": _why(s, near)}


def _why(s: Search, r: dict) -> str:
    if r["unserved_requests"]:
        return (f"{r['unserved_requests']:,} requests cannot be served at all on {r['gpu']} x{r['tp']} (past the "
                "pool or max_model_len): more instances do not help")
    b = r["binding"] or {}
    floor = _alone_floor(s, r)
    if b.get("objective") == "TTFT p90" and floor is not None and floor[0] > b["limit_s"]:
        return (f"TTFT p90 cannot go below {floor[0]:.3g} s on {r['gpu']} x{r['tp']} in the window from "
                f"{floor[1]:,.0f} s: its p90 prompt alone, with no queue and no cache hit, takes that long (limit "
                f"{b['limit_s']:g} s; the run's hit rate is {100 * r['hit_rate']:.1f}%)")
    return (f"at {r['instances']} instances (--max-instances) the window from {b.get('window_start_s', 0):,.0f} s "
            f"still has {b.get('objective')} {b.get('value_s', 0):.3g} s against {b.get('limit_s', 0):g} s: the "
            "trace's burst needs more instances for its peak window")


def _alone_floor(s: Search, r: dict) -> tuple[float, float] | None:
    """The worst window's nearest-rank p90 of each prompt's prefill alone on one instance (no
    queue, no hit), and that window's start; windows as the SLO judgement cuts the run's arrivals."""
    from .stats import window_percentiles
    from .verdict import _windows

    tm = _time_model(s, Config(r["gpu"], r["tp"], None, r["router"], None))
    if tm is None:
        return None
    run = evaluate(s, Config(r["gpu"], r["tp"], None if r["tiers"] == "none" else r["tiers"], r["router"],
                             r["policy_asked"]), r["instances"], (r["load_kind"], r["load"]))["report"]
    lengths = np.asarray(s.trace.input_length)
    if lengths.size != run.arrival_s.size:
        return None
    unique, inverse = np.unique(lengths, return_inverse=True)
    alone = np.array([_prefill_alone(tm, int(n)) for n in unique])[inverse]
    index, t0 = _windows(run.arrival_s, r["window_s"])
    wins, p90 = window_percentiles(index, alone, 90)
    k = int(np.argmax(p90))
    return float(p90[k]), t0 + int(wins[k]) * r["window_s"]


def _prefill_alone(tm, tokens: int, chunk: int = 8192) -> float:
    from .timing.models import StepBatch

    return float(sum(tm.step_time(StepBatch(prefill_new=(min(chunk, tokens - done),), prefill_cached=(done,)))
                     for done in range(0, tokens, chunk)))
