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
from itertools import product

import numpy as np

from ..errors import ConfigError
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
            t = self.trace
            h = hashlib.sha256()
            for a in (t.offsets, t.blocks, t.input_length, t.output_length, t.timestamp):
                h.update(np.ascontiguousarray(a).tobytes())
            self.models["digest"] = h.hexdigest()[:32]
        return self.models["digest"]


def plan(trace, *, model: str, slo: SLO, gpus=("H100",), tps=(1,), tiers=(None,), routers=("round-robin",),
         policies=(None,), loads=(1.0,), rates=None, window_s: float | None = None, prices: Prices | None = None,
         judge_at: str = "pessimistic", max_instances: int = 64, runners_up: int = 3, cache_dir: str | None = None,
         jobs: int = 1, executor: str = "local", ray_address: str | None = None, **options) -> dict:
    """The cheapest configuration per load meeting `slo`, its runners-up, and what the search did
    (JSON-ready). `loads`: multiples of the trace's arrival rate, or `rates`: Poisson arrivals at
    these requests per second. `cache_dir`: keep every run there, named by the trace's digest and
    its configuration, for later plans to reuse. `jobs` / `executor` / `ray_address`: search the
    configurations at once on processes, threads or Ray (analysis/executors.py; nothing is pruned
    then, since no search waits for another's best). `options` go to simulate()."""
    from ..engine.replay import as_trace

    if judge_at not in JUDGES:
        raise ConfigError(f"judge must be one of {', '.join(JUDGES)}, got {judge_at!r}")
    if not any(True for _ in slo.objectives()):
        raise ConfigError("give at least one SLO (--slo-ttft-p90, --slo-tpot-p90 or --slo-e2e-p99)")
    s = Search(trace=as_trace(trace), model=model, slo=slo, prices=prices or Prices(), window_s=window_s,
               judge=judge_at, options=options, max_instances=max_instances, cache_dir=cache_dir)
    if cache_dir is not None:
        os.makedirs(cache_dir, exist_ok=True)
    parallel = jobs > 1 or executor != "local"
    configs = [Config(g, int(t), tr, r, p) for g, t, tr, r, p in product(gpus, tps, tiers, routers, policies)]
    out = {"slo": slo.text(), "judged_at": judge_at, "pricing": s.prices.pricing, "loads": []}
    points = [("rate", float(r)) for r in rates] if rates is not None else [("speedup", float(x)) for x in loads]
    for point in points:
        out["loads"].append(_plan_load_parallel(s, configs, point, runners_up, jobs, executor, ray_address)
                            if parallel else _plan_load(s, configs, point, runners_up))
    out.update(runs=s.runs, cache_hits=s.cache_hits, disk_hits=s.disk_hits, monotonicity_violations=s.violations,
               trace_digest=s.digest(), cache_dir=cache_dir, parallel=parallel)
    return out


def _plan_load(s: Search, configs: list, load: tuple, runners_up: int) -> dict:
    """Every configuration at one load, cheapest instance first; prune what cannot beat the best."""
    priced, skipped = [], []
    for c in configs:
        try:
            priced.append((instance_cost(s, c)[0], c))
        except ConfigError as e:
            skipped.append({"config": c.text(), "reason": str(e)})
    priced.sort(key=lambda x: x[0])
    results, pruned, best = [], 0, math.inf
    for per_instance, c in priced:
        if per_instance >= best:  # even one instance costs more than the best found
            pruned += 1
            continue
        r = _fewest_instances(s, c, load, max_cost=best, per_instance=per_instance)
        if r.get("pruned"):
            pruned += 1
            continue
        results.append(r)
        if r["meets"]:
            best = min(best, r["cost_per_hour"])
    return _summarise(s, load, results, skipped, pruned, runners_up)


def _plan_load_parallel(s: Search, configs: list, load: tuple, runners_up: int, jobs: int, executor: str,
                        ray_address) -> dict:
    """Every configuration's search at once, on an executor (none is pruned)."""
    from ..analysis.executors import Task, run

    shared = {"model": s.model, "slo": s.slo, "prices": s.prices, "window_s": s.window_s, "judge": s.judge,
              "options": s.options, "max_instances": s.max_instances, "cache_dir": s.cache_dir}
    tasks = [Task(kind="call", trace=0, function=search_task,
                  options=(("config", c), ("load", load), ("search", shared))) for c in configs]
    results, skipped = [], []
    for (out,) in run(tasks, [s.trace], executor=executor, jobs=jobs, ray_address=ray_address):
        if "skipped" in out:
            skipped.append(out["skipped"])
            continue
        results.append(out["result"])
        s.runs += out["runs"]
        s.cache_hits += out["cache_hits"]
        s.disk_hits += out["disk_hits"]
        s.violations += [v for v in out["violations"] if v not in s.violations]
    return _summarise(s, load, results, skipped, 0, runners_up)


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
            "violations": s.violations}


def _summarise(s: Search, load: tuple, results: list, skipped: list, pruned: int, runners_up: int) -> dict:
    passing = sorted((r for r in results if r["meets"]), key=lambda r: r["cost_per_hour"])
    out = {"load_kind": load[0], "load": load[1], "best": passing[0] if passing else None,
           "runners_up": passing[1:1 + runners_up], "pruned": pruned, "skipped": skipped, "evaluated": len(results),
           "tier_economics": _tier_economics(results)}
    if not passing:
        out["closest"] = _closest(s, results, load)
    return out


def _tier_economics(results: list) -> list:
    """Per passing configuration with tiers: what it costs against the same GPU, TP, router and
    policy without them (the GPUs the tier saves and their price, or the TTFT it buys)."""
    plain = {(r["gpu"], r["tp"], r["router"], r["policy"]): r for r in results if r["tiers"] == "none" and r["meets"]}
    out = []
    for r in results:
        if r["tiers"] == "none" or not r["meets"]:
            continue
        base = plain.get((r["gpu"], r["tp"], r["router"], r["policy"]))
        row = {"config": r["config"], "tiers": r["tiers"], "instances": r["instances"], "cost_per_hour": r["cost_per_hour"]}
        if base is None:
            row["versus_none"] = None  # HBM only did not pass, or was pruned before it was searched
        else:
            row["versus_none"] = {"instances": base["instances"], "cost_per_hour": base["cost_per_hour"],
                                  "gpus_saved": base["gpus"] - r["gpus"],
                                  "saves_per_hour": base["cost_per_hour"] - r["cost_per_hour"],
                                  "ttft_p90_s": base["ttft_p90_s"], "ttft_p90_with_tiers_s": r["ttft_p90_s"]}
        out.append(row)
    return out


def instance_cost(s: Search, c: Config) -> tuple[float, dict]:
    """USD per hour of one instance (its GPUs, and its DRAM tier) and the prices' sources."""
    gpu_hour, gpu_source = s.prices.gpu_hour(c.gpu)
    cost, sources = gpu_hour * c.tp, {"gpu": gpu_source}
    gib = _dram_gib(c.tiers)
    if gib:
        dram, dram_source = s.prices.dram_gib_hour()
        cost += gib * dram
        sources["dram"] = dram_source
    return cost, sources


def _dram_gib(tiers: str | None) -> float:
    """GiB of the DRAM tier in a --tiers text (sizes in bytes; 0 without one)."""
    from ..units import parse_size

    if not tiers:
        return 0.0
    for part in tiers.split(","):
        name, _, rest = part.partition("=")
        if name.strip().lower() == "dram":
            size = rest.split("@")[0].split(":")[0].strip()
            if size.isdigit():
                raise ConfigError(f"--tiers {tiers}: give the DRAM tier's size in bytes (256GiB) to price it")
            return parse_size(size) / 2 ** 30
    return 0.0


def _fewest_instances(s: Search, c: Config, load: tuple, *, max_cost: float, per_instance: float) -> dict:
    """Double, then bisect, for the fewest instances meeting the SLO (or the largest tried)."""
    lo, hi = 0, None  # lo: instances known too few; hi: instances known enough
    n = 1
    while n <= s.max_instances:
        if per_instance * n >= max_cost:
            return {"pruned": True}
        if evaluate(s, c, n, load)["meets"]:
            hi = n
            break
        lo, n = n, n * 2
    if hi is None and lo < s.max_instances:  # the last doubling jumped past the limit
        if per_instance * s.max_instances < max_cost and evaluate(s, c, s.max_instances, load)["meets"]:
            hi = s.max_instances
        else:
            lo = s.max_instances
    while hi is not None and hi - lo > 1:
        mid = (lo + hi) // 2
        if evaluate(s, c, mid, load)["meets"]:
            hi = mid
        else:
            lo = mid
    n = hi if hi is not None else max(lo, 1)
    return _result(s, c, n, load)


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


def _cache_path(s: Search, c: Config, n: int, load: tuple, end: str) -> str | None:
    """The run's file in the cache directory: named by the trace's digest and everything the run
    depends on (not the SLOs: a run is judged again for each)."""
    if s.cache_dir is None:
        return None
    key = json.dumps([s.digest(), s.model, [c.gpu, c.tp, c.tiers, c.router, c.policy], n, list(load), end,
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
            "cache_saved_per_hour": saved, "prefill_seconds_per_token": per_token, "duration_s": summ["duration_s"],
            "hit_tokens": summ["hit_tokens"],
            "policy": r.policy, "instances": n, "gpus": n * c.tp, "meets": e["meets"], "judged_at": e["judged_at"],
            "instances_at_centre": _centre_instances(s, c, n, load),
            "cost_per_hour": cost, "instance_cost_per_hour": per_instance, "price_sources": sources,
            "usd_per_million_input": per_m(summ["prompt_tokens"]), "usd_per_million_output": per_m(summ["output_tokens"]),
            "hit_rate": summ["hit_rate"], "binding": v["binding"], "window_s": v["window_s"],
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
    if b.get("objective") == "TTFT p90" and floor is not None and floor > b["limit_s"]:
        return (f"TTFT p90 cannot go below {floor:.3g} s on {r['gpu']} x{r['tp']}: the p90 prompt alone takes that "
                f"long (limit {b['limit_s']:g} s)")
    return (f"at {r['instances']} instances (--max-instances) the window from {b.get('window_start_s', 0):,.0f} s "
            f"still has {b.get('objective')} {b.get('value_s', 0):.3g} s against {b.get('limit_s', 0):g} s: the "
            "trace's burst needs more instances for its peak window")


def _alone_floor(s: Search, r: dict) -> float | None:
    """The nearest-rank p90 of each prompt's prefill alone on one instance (no queue, no hit)."""
    from .timing.models import StepBatch

    tm = _time_model(s, Config(r["gpu"], r["tp"], None, r["router"], None))
    if tm is None:
        return None
    lengths = np.sort(np.asarray(s.trace.input_length))
    p90 = int(nearest_rank(lengths, 90))
    chunk = 8192
    steps = [StepBatch(prefill_new=(min(chunk, p90 - done),), prefill_cached=(done,)) for done in range(0, p90, chunk)]
    return float(sum(tm.step_time(b) for b in steps))
