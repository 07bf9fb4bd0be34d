"""`kvreplay plan`: the cheapest deployment that meets an SLO at each load (docs/plan.md).

The grid is GPU x TP x tiers x router x policy; without TP degrees, each GPU's of 1, 2, 4 and 8
on which vLLM would start the model (fit.py). For each configuration and load, the search finds
the fewest identical instances that meet every objective in every window of the judged span
(slo.py; the warm-up before it is served, not judged: warmup.py): doubling from 1 until one
passes, then bisecting between the last failure and the first pass. That relies on one
monotonicity: adding an instance never makes a deployment miss an SLO it met. Every run the search
makes is checked against it, and each violation is reported.

Before a configuration is searched, two things can settle it: vLLM would not start the model on
its GPUs (unfit, fit.py), or a lower bound that holds on any number of instances is above a limit
in some window (unreachable, floors.py). Configurations are then tried cheapest first, by the
price of one instance; one whose smallest possible cost (the instances its last failure proved too
few, plus one) is already at or above the best passing cost is pruned. Every configuration gets a
row, with its verdict and why. Runs are cached by (trace digest, configuration, instances, load,
band end, warm-up), so a refined search, or the same point reached twice, simulates once.

Where the time model has an error band (the calibrated roofline), a configuration is judged on
the band's pessimistic run (`judge="pessimistic"`, the default) or on its centre; each passing
configuration also says how many instances it needs at both ends of the band and at its centre.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field, fields, replace
from functools import lru_cache
from itertools import product

import numpy as np

from ..analysis.executors import check_stopping
from ..errors import ConfigError
from ..units import seconds_arg
from . import plan_cache, plan_rows
from ..catalog.prices import Prices, gpu_name
from .slo import MIN_WINDOW_REQUESTS, SLO, Windows, judge, worst_windows
from .warmup import AUTO, JudgedSpan, judged_mask, spec_text

JUDGES = ("pessimistic", "centre")
#: a band end's name in the runs' cache and the words the rows use for it
END_TEXT = {"high": "pessimistic end of the band", "centre": "centre of the band", "low": "optimistic end of the band"}
#: a closed loop judged pessimistically: the worst of the band's three runs (_worst_end)
WORST_TEXT = "worst of the band's ends and its centre (a closed loop: here the {})"


@dataclass(frozen=True)
class Config:
    gpu: str
    tp: int
    tiers: str | None
    router: str
    policy: str | None
    pp: int = 1  # pipeline stages, each on `tp` GPUs

    @property
    def gpus(self) -> int:
        """GPUs of one instance."""
        return self.tp * self.pp

    def text(self) -> str:
        return (f"{self.gpu} x{self.tp}" + (f" x pp{self.pp}" if self.pp > 1 else "") + f", tiers {self.tiers or 'none'}, router {self.router}, "
                f"policy {self.policy or 'vllm'}")


@dataclass
class Run(JudgedSpan):
    """What the plan keeps of one simulation: the per-request times its SLOs are judged on, the
    warm-up, and the run's summary (slo.judge reads the same attributes as from a SimReport)."""

    policy: str
    summary: dict
    arrival_s: np.ndarray
    ttft_s: np.ndarray
    tpot_s: np.ndarray
    e2e_s: np.ndarray
    finished: np.ndarray
    warmup_s: float = 0.0
    judged_until_s: float | None = None  # a closed loop of N sessions: its steady state's end

    @classmethod
    def of(cls, report) -> "Run":
        return cls(report.policy, report.summary(), report.arrival_s, report.ttft_s, report.tpot_s, report.e2e_s,
                   report.finished, report.warmup_s, report.judged_until_s)

    @property
    def num_requests(self) -> int:
        return int(self.finished.size)

    @property
    def num_finished(self) -> int:
        return int(self.finished.sum())

    @property
    def duration_s(self) -> float:
        return float(self.summary["duration_s"])

    def save(self, path: str, key: str) -> None:
        """Keep this run in the cache directory under `key` (plan_cache.py)."""
        plan_cache.write(path, key, {"arrival_s": self.arrival_s, "ttft_s": self.ttft_s, "tpot_s": self.tpot_s,
                                     "e2e_s": self.e2e_s, "finished": self.finished},
                         {"policy": self.policy, "summary": self.summary, "warmup_s": self.warmup_s,
                          "judged_until_s": self.judged_until_s})

    @classmethod
    def load(cls, path: str, key: str, num_requests: int) -> "Run | None":
        """The run kept at `path` under `key`, or None (warned) when the entry is missing, damaged,
        another run's or not this trace's (plan_cache.py)."""
        entry = plan_cache.read(path, key, num_requests)
        if entry is None:
            return None
        z, doc = entry["arrays"], entry["doc"]
        return cls(doc["policy"], doc["summary"], z["arrival_s"], z["ttft_s"], z["tpot_s"], z["e2e_s"],
                   z["finished"], float(doc.get("warmup_s", 0.0)), doc.get("judged_until_s"))


@dataclass
class Search:
    """The state of one plan: its settings, its cache of runs and what it counted."""

    trace: object
    model: str
    slo: SLO
    prices: Prices
    window_s: float | None
    judge: str
    options: dict
    max_instances: int
    cache_dir: str | None = None
    warmup: object = AUTO
    min_requests: int = MIN_WINDOW_REQUESTS
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

    def shared(self) -> dict:
        """What a worker needs to rebuild this search (the executors' tasks)."""
        return {"model": self.model, "slo": self.slo, "prices": self.prices, "window_s": self.window_s,
                "judge": self.judge, "options": self.options, "max_instances": self.max_instances,
                "cache_dir": self.cache_dir, "warmup": self.warmup, "min_requests": self.min_requests}


@dataclass(frozen=True)
class PlanConfig:
    """What plan() searches (plan()'s keywords but simulate()'s options and progress)."""

    model: object
    slo: SLO
    gpus: object = ("H100",)
    tps: object = None
    pps: object = None
    tiers: object = (None,)
    routers: object = ("round-robin",)
    policies: object = (None,)
    loads: object = None
    rates: object = None
    sessions: object = None
    window_s: object = None
    warmup: object = AUTO
    min_window_requests: int = MIN_WINDOW_REQUESTS
    prices: Prices | None = None
    judge_at: str = "pessimistic"
    max_instances: int = 64
    runners_up: int = 3
    cache_dir: str | None = None
    jobs: int = 1
    executor: str = "local"
    ray_address: str | None = None


def plan(trace, config: PlanConfig | None = None, *, progress=None, **options):
    """The cheapest configuration per load meeting `slo`, its runners-up, and every configuration
    tried with its verdict (`config`: a PlanConfig, or its fields among the keywords, which replace
    `config`'s; the other keywords go to simulate()): a PlanResult (a JSON-ready dict; `.to_pandas()` has one row per
    configuration tried). `loads`: multiples of the trace's arrival rate, or `rates`: Poisson
    arrivals at these requests per second, or `sessions`: these numbers of concurrent sessions
    (a closed loop: simulate's sessions=; each block then states the chosen deployment's capacity
    in sessions). `tps`: TP degrees (None: each GPU's of 1, 2, 4 and 8
    on which vLLM would start the model; when it starts on none, 8 GPUs a stage at 2 and 4 pipeline
    stages). `pps`: pipeline-parallel degrees, each with every TP degree (None: 1, or the above).
    `warmup`: the first part of each run's arrivals, served
    but not judged ("auto", a fraction, a duration such as "10m", or 0 for a cold start;
    warmup.py). `window_s` / `min_window_requests`: the windows every SLO must hold in, merged
    until each has that many requests (slo.py). `cache_dir`: keep every run there, named by the
    trace's digest and its configuration, for later plans to reuse. `jobs` / `executor` /
    `ray_address`: search the configurations at once on processes, threads or Ray
    (analysis/executors.py; nothing is pruned on cost then, since no search waits for another's
    best). `progress`: a kvreplay.progress callback, told ``(done, total, "configurations")``:
    each configuration at each load, searched, pruned, unreachable, unfit or skipped."""
    from ..engine.replay import as_trace

    given = {f.name: options.pop(f.name) for f in fields(PlanConfig) if f.name in options}
    c = PlanConfig(**given) if config is None else replace(config, **given)
    trace = as_trace(trace)
    checked = _checked(trace, c, options)
    from .semantics import one_semantics

    options, semantics_note = one_semantics(c.model, options, checked["tiers"], checked["policies"])
    options = sized_options(options)
    s = Search(trace=trace, model=c.model, slo=checked["slo"], prices=checked["prices"] or Prices(),
               window_s=checked["window_s"], judge=c.judge_at, options=options, max_instances=checked["max_instances"],
               cache_dir=c.cache_dir, warmup=c.warmup, min_requests=int(c.min_window_requests))
    if c.cache_dir is not None:
        s.cache_dir = plan_cache.prepare(c.cache_dir)
    parallel = checked["jobs"] > 1 or c.executor != "local"
    configs, unfit = _configs(s, [gpu_name(g) for g in checked["gpus"]], checked["tps"], c.pps, checked["tiers"],
                              checked["routers"], checked["policies"])
    out = {"slo": s.slo.text(), "slo_limits": s.slo.limits(), "judged_at": c.judge_at, "pricing": s.prices.pricing,
           "warmup_spec": spec_text(c.warmup), "min_window_requests": s.min_requests,
           "tp_searched": "given" if c.tps is not None or c.pps is not None else
           "every TP of 1, 2, 4 and 8 on which vLLM would start the model; if none, TP 8 x PP 2 and 4", "loads": []}
    points = load_points(c.loads, c.rates, c.sessions) if c.sessions is not None else checked["points"]
    tracker = _Tracker(progress, (len(configs) + len(unfit)) * len(points))
    for point in points:
        block = (_plan_load_parallel(s, configs, point, checked["jobs"], c.executor, c.ray_address, tracker)
                 if parallel else _plan_load(s, configs, point, tracker))
        if block["probes"] is None:
            block["probes"] = probes(s, point)
        out["loads"].append(plan_rows.summarise(point, block, unfit, c.runners_up))
        tracker.advance(len(unfit))
    _refuse_a_plan_that_tried_nothing(out["loads"])
    if c.sessions is not None:
        out["capacity"] = capacities(s, out["loads"])
    out["arrivals"] = arrivals_text(s, c.sessions)
    out.update(model=c.model, window_s=s.window_s, run_options=run_options(options),
               runs=s.runs, cache_hits=s.cache_hits, disk_hits=s.disk_hits, monotonicity_violations=s.violations,
               trace_digest=s.digest(), cache_dir=c.cache_dir, parallel=parallel, kv_semantics=semantics_note,
               calibration_warnings=_calibration_warnings(s, configs))
    from .plan_result import PlanResult

    return PlanResult(out)


def _checked(trace, c: PlanConfig, options: dict) -> dict:
    """plan()'s values checked (plan_args.resolve; ConfigError naming the first bad one)."""
    from .plan_args import resolve

    window_s = c.window_s
    if isinstance(window_s, str):  # (a duration with its unit: "5m")
        window_s = seconds_arg(window_s, "window_s")
    checked = resolve(trace, replace(c, window_s=window_s))
    if c.judge_at not in JUDGES:
        raise ConfigError(f"judge must be one of {', '.join(JUDGES)}, got {c.judge_at!r}")
    if not any(True for _ in checked["slo"].objectives()):
        raise ConfigError("give at least one SLO (--slo-ttft-p90, --slo-tpot-p90 or --slo-e2e-p99)")
    if "warmup_fraction" in options:
        raise ConfigError("plan judges a warm server with warmup= (--warmup: auto, a fraction of the arrival span "
                          "such as 0.2, a duration such as 10m, or 0); warmup_fraction (--warmup-fraction) is "
                          "replay's and does not apply")
    spec_text(c.warmup)  # checked before any run
    m = c.min_window_requests
    if isinstance(m, bool) or not isinstance(m, (int, np.integer)) or m < 1:
        raise ConfigError(f"min_window_requests (--min-window-requests) must be a whole number >= 1, got {m!r}")
    return checked


def _refuse_a_plan_that_tried_nothing(blocks: list) -> None:
    """A plan whose every configuration was skipped (no price, no tier it can price) has no answer:
    ConfigError saying why, so that nothing is written (an existing -o file stays as it was)."""
    rows = [r for b in blocks for r in b["tried"]]
    if rows and all(r["verdict"] == "skipped" for r in rows):
        reasons = list(dict.fromkeys(r["why"] for r in rows))
        raise ConfigError(f"every configuration was skipped: {'; '.join(reasons[:3])}"
                          + (f" (and {len(reasons) - 3} more reasons)" if len(reasons) > 3 else ""))


def load_points(loads, rates, sessions) -> list[tuple]:
    """The plan's loads as (kind, value): speedups, Poisson rates or concurrent sessions (one kind)."""
    from .lanes import check_sessions

    if sessions is not None:
        if rates is not None or loads is not None:
            raise ConfigError("give the loads as speedups (--loads), rates (--rates) or concurrent sessions "
                              "(--sessions), one of them")
        return [("sessions", float(check_sessions(int(n) if float(n).is_integer() else n))) for n in sessions]
    if rates is not None:
        return [("rate", float(r)) for r in rates]
    return [("speedup", float(x)) for x in loads]


def load_arguments(load: tuple) -> dict:
    """simulate()'s keywords for a plan's load."""
    kind, value = load
    return {"speedup": value if kind == "speedup" else None, "rate": value if kind == "rate" else None,
            **({"sessions": int(value)} if kind == "sessions" else {})}


def capacities(s: "Search", blocks: list) -> list:
    """Per deployment chosen at some number of concurrent sessions: the most sessions of those
    planned it serves within the SLOs ("up to N concurrent sessions"), each checked by a run."""
    out = []
    seen = set()
    for block in blocks:
        best = block["best"]
        if best is None:
            continue
        key = (best["config"], best["instances"])
        if key in seen:
            continue
        seen.add(key)
        c = Config(best["gpu"], best["tp"], None if best["tiers"] == "none" else best["tiers"], best["router"],
                   best["policy_asked"])
        served = []
        for other in blocks:
            load = (other["load_kind"], other["load"])
            e = evaluate(s, c, best["instances"], load)
            b = e["verdict"]["binding"] or {}
            served.append({"sessions": int(other["load"]), "meets": e["meets"], "objective": b.get("objective"),
                           "value_s": b.get("value_s"), "limit_s": b.get("limit_s")})
        up_to = max((x["sessions"] for x in served if x["meets"]), default=None)
        out.append({"config": best["config"], "instances": best["instances"], "gpus": best["gpus"],
                    "cost_per_hour": best["cost_per_hour"], "up_to_sessions": up_to, "served": served,
                    "text": capacity_text(best, up_to, s.slo, served)})
    return out


def capacity_text(best: dict, up_to: int | None, slo: SLO, served: list) -> str:
    what = f"{best['instances']} x {best['tp']} x {best['gpu']} ({best['config']})"
    if up_to is None:
        return f"{what}: meets {slo.text()} at none of the planned session counts"
    at = next(x for x in served if x["sessions"] == up_to)
    more = [x["sessions"] for x in served if x["sessions"] > up_to]
    worst = (f"; its worst window there: {at['objective']} {at['value_s']:.3g} s against {at['limit_s']:.3g} s"
             if at.get("value_s") is not None else "")
    counts = ", ".join(f"{x['sessions']:,}" for x in served)
    return (f"{what}: up to {up_to:,} concurrent sessions (of {counts}) at {slo.text()}{worst}"
            + (f"; misses at {min(more):,}" if more else ""))


#: simulate()'s options a plan's JSON keeps, so that `kvreplay report --plan` can serve its chosen
#: deployment again exactly as the plan did (JSON values only)
RUN_OPTIONS = ("time_model", "weights_dtype", "kv_dtype", "block_size", "max_model_len", "rate_profile",
               "kv_semantics", "gpu_memory_utilization", "engine_style", "seed", "arrivals", "think_time")


def sized_options(options: dict) -> dict:
    """`options` with the vLLM-style pools' GPU memory utilization resolved (vLLM 0.33.0's default
    when not given), so that the plan's JSON and its runs' cache keys say the budget its pools were
    sized at: a kvreplay with another default neither reuses those runs nor serves the plan again,
    or emits its engine flags, at another pool. Other styles size their pools otherwise (SGLang by
    mem_fraction_static), and refuse a utilization."""
    from .timing.memory import vllm_utilization

    style = options.get("engine_style") or getattr(options.get("scheduler"), "style", None) or "vllm"
    if style != "vllm" or options.get("gpu_memory_utilization") is not None:
        return options
    return {**options, "gpu_memory_utilization": vllm_utilization(None)}


def run_options(options: dict) -> dict:
    """The options a plan's runs were made with, as JSON (a time model or rate profile given as an
    object rather than a name is named by its description, and marked not reproducible)."""
    out = {}
    for k in RUN_OPTIONS:
        if k in options and options[k] is not None:
            v = options[k]
            out[k] = v if isinstance(v, (str, int, float, bool)) else {"not_reproducible": repr(v)[:200]}
    unknown = sorted(k for k in options if k not in RUN_OPTIONS and options[k] is not None)
    if unknown:
        out["other"] = {k: repr(options[k])[:200] for k in unknown}
    return out


class _Tracker:
    """The progress callback's count of configurations searched (every load's)."""

    def __init__(self, progress, total: int):
        self.progress, self.total, self.done = progress, total, 0
        if progress is not None:
            progress(0, total, "configurations")

    def advance(self, n: int = 1) -> None:
        self.done += n
        if self.progress is not None and n:
            self.progress(self.done, self.total, "configurations")


def _configs(s: Search, gpus, tps, pps, tiers, routers, policies) -> tuple[list, list]:
    """The configurations to search, and the unfit ones with why (vLLM would not start the model
    on their GPUs): each GPU at the TP x PP degrees given, or at TP 1, 2, 4 and 8 (and, when the
    model fits none of them, TP 8 x PP 2 and 4: fit.PP_DEGREES)."""
    from .fit import PP_DEGREES, TP_DEGREES, unfit_reason

    kw = dict(weights_dtype=s.options.get("weights_dtype", "bf16"), kv_dtype=s.options.get("kv_dtype"),
              gpu_memory_utilization=s.options.get("gpu_memory_utilization"),
              max_model_len=s.options.get("max_model_len"))
    searched, unfit = [], []
    for g in gpus:
        shapes = [(int(t), int(p), _unfit(s, g, int(t), kw, unfit_reason, int(p)))
                  for t, p in product(TP_DEGREES if tps is None else tps, (1,) if pps is None else pps)]
        if tps is None and pps is None and s.options.get("engine_style", "vllm") == "vllm" \
                and all(reason is not None for *_, reason in shapes):
            shapes += [(max(TP_DEGREES), p, _unfit(s, g, max(TP_DEGREES), kw, unfit_reason, p)) for p in PP_DEGREES]
        for (t, pp, reason), (tr, r, p) in product(shapes, product(tiers, routers, policies)):
            c = Config(g, t, tr, r, p, pp)
            (searched if reason is None else unfit).append(c if reason is None else (c, reason))
    if not searched and not unfit:
        raise ConfigError("no configuration to search: give --gpus and --tp")
    return searched, unfit


def _unfit(s: Search, gpu: str, tp: int, kw: dict, unfit_reason, pp: int = 1) -> str | None:
    """Why vLLM would not start the model on `pp` stages of `tp` x `gpu` (None: it would, or the GPU or model is
    not one the catalog places, left for the run to say)."""
    from ..analysis.models import get_model

    try:
        get_model(s.model)
        from ..catalog.gpus import get_gpu

        get_gpu(gpu)
    except ConfigError:
        return None
    return unfit_reason(s.model, gpu, tp, pp=pp, **kw)


def _plan_load(s: Search, configs: list, load: tuple, tracker: _Tracker) -> dict:
    """Every configuration at one load, cheapest instance first; prune what cannot beat the best.
    A tiered configuration whose HBM-only twin passed is searched up to the twin's instance count
    instead of pruned, for its tier economics (the GPUs the tier saves, or the TTFT it buys)."""
    priced, skipped = [], []
    for c in configs:
        try:
            priced.append((instance_cost(s, c)[0], c))
        except ConfigError as e:
            skipped.append({"config": c, "reason": str(e)})
            tracker.advance()
    priced.sort(key=lambda x: x[0])
    results, pruned, unreachable, best = [], [], [], math.inf
    for per_instance, c in priced:
        floor = floor_binding(s, c, load)
        twin = _passing_twin(results, c)
        if floor is not None:
            unreachable.append(plan_rows.unreachable(c, per_instance, floor))
        elif twin is not None:
            results.append(_fewest_instances(s, c, load, max_cost=math.inf, per_instance=per_instance,
                                             limit=twin["instances"]))
        elif per_instance >= best:  # even one instance costs more than the best found
            pruned.append(plan_rows.pruned(c, 1, per_instance, best))
        else:
            r = _fewest_instances(s, c, load, max_cost=best, per_instance=per_instance)
            if r.get("pruned"):
                pruned.append(plan_rows.pruned(c, r["at"], per_instance, best, r.get("missed_at"), r.get("binding")))
            else:
                results.append(r)
                if r["meets"]:
                    best = min(best, r["cost_per_hour"])
        tracker.advance()
    return {"results": results, "pruned": pruned, "unreachable": unreachable, "skipped": skipped, "probes": None}


def _passing_twin(results: list, c: Config) -> dict | None:
    """The searched HBM-only configuration with `c`'s GPU, TP, router and policy, if it passed."""
    if c.tiers is None:
        return None
    for r in results:
        if r["meets"] and r["tiers"] == "none" and (r["gpu"], r["tp"], r.get("pp", 1), r["router"],
                                                    r["policy_asked"]) == (c.gpu, c.tp, c.pp, c.router, c.policy):
            return r
    return None


def _plan_load_parallel(s: Search, configs: list, load: tuple, jobs: int, executor: str, ray_address,
                        tracker: _Tracker) -> dict:
    """Every configuration's search at once, on an executor (none is pruned on cost)."""
    from ..analysis.executors import Task, run

    shared = s.shared()
    tasks = [Task(kind="call", trace=0, function=search_task,
                  options=(("config", c), ("load", load), ("search", shared))) for c in configs]
    block = {"results": [], "pruned": [], "unreachable": [], "skipped": [], "probes": []}
    done = tracker.done
    try:
        outs = run(tasks, [s.trace], executor=executor, jobs=jobs, ray_address=ray_address,
                   progress=lambda k, _: tracker.advance(done + k - tracker.done))
    except BaseException:
        if s.cache_dir is not None:  # (workers stopped mid-write leave their temporary files: plan_cache.sweep)
            plan_cache.sweep(s.cache_dir)
        raise
    for (out,) in outs:
        for kind in ("skipped", "unreachable"):
            if kind in out:
                block[kind].append(out[kind])
        if "result" in out:
            block["results"].append(out["result"])
        block["probes"] += out["probes"]
        s.runs += out["runs"]
        s.cache_hits += out["cache_hits"]
        s.disk_hits += out["disk_hits"]
        s.violations += [v for v in out["violations"] if v not in s.violations]
    tracker.advance(done + len(configs) - tracker.done)
    return block


def search_task(trace, options: dict) -> dict:
    """One configuration's search at one load, in a worker (the executors call it by name)."""
    s = Search(trace=trace, **options["search"])
    c, load = options["config"], options["load"]
    counts = lambda: {"runs": s.runs, "cache_hits": s.cache_hits, "disk_hits": s.disk_hits,  # noqa: E731
                      "violations": s.violations, "probes": probes(s, load)}
    try:
        per_instance = instance_cost(s, c)[0]
    except ConfigError as e:
        return {"skipped": {"config": c, "reason": str(e)}, **counts()}
    floor = floor_binding(s, c, load)
    if floor is not None:
        return {"unreachable": plan_rows.unreachable(c, per_instance, floor), **counts()}
    r = _fewest_instances(s, c, load, max_cost=math.inf, per_instance=per_instance)
    return {"result": r, **counts()}


def probes(s: Search, load: tuple) -> list:
    """Every run judged at `load` (each configuration at each instance count the search tried, at
    the band end it judges): cost, TTFT p90 and verdict, for the cost-vs-TTFT plot."""
    out = []
    for (c, n, ld, end), e in s.cache.items():
        if ld != load or end != (_judged_end(s) if _banded(s, c) else "centre"):
            continue  # (the runs searching the other band ends' counts are not the judged ones)
        out.append({"config": c.text(), "gpu": c.gpu, "tp": c.tp, "pp": c.pp, "tiers": c.tiers or "none", "instances": n,
                    "cost_per_hour": instance_cost(s, c)[0] * n, "meets": e["meets"],
                    "ttft_p90_s": e["report"].summary["latency_s"]["ttft"]["p90"],
                    "worst_window_ttft_p90_s": e["verdict"]["worst_window_s"].get("TTFT p90")})
    return out


def instance_cost(s: Search, c: Config) -> tuple[float, dict]:
    """USD per hour of one instance (its GPUs, and its DRAM and SSD tiers) and the prices' sources."""
    gpu_hour, gpu_source = s.prices.gpu_hour(c.gpu)
    cost, sources = gpu_hour * c.gpus, {"gpu": gpu_source}
    for kind, gib in tier_gib(c.tiers).items():
        price, sources[kind] = s.prices.memory_gib_hour(kind)
        cost += gib * price
    return cost, sources


def tier_gib(tiers: str | None) -> dict:
    """GiB per priced kind ("dram", "ssd") of the tiers in a --tiers text. A tier must be sized in
    bytes and named dram or ssd to be priced."""
    from ..units import parse_size
    from ..catalog.prices import MEMORIES

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
        if affordable < top:  # (the most it can afford missed: the binding window at that count says by how much)
            return {"pruned": True, "at": n + 1, "missed_at": n, "binding": e["verdict"]["binding"]}
        return _result(s, c, top, load)
    hi = _bisect(s, c, load, None, lo, hi)  # (at the judged end: the worst of three for a closed loop)
    return _result(s, c, hi, load)


def _result(s: Search, c: Config, n: int, load: tuple) -> dict:
    """The row of a searched configuration at `n` instances (the fewest that pass, or the most tried)."""
    e = evaluate(s, c, n, load)
    r, v = e["report"], e["verdict"]
    per_instance, sources = instance_cost(s, c)
    cost = per_instance * n
    summ = r.summary
    hours = summ["duration_s"] / 3600 if summ["duration_s"] else None
    per_m = (lambda tokens: cost * hours / tokens * 1e6 if hours and tokens else None)  # noqa: E731
    per_token = prefill_seconds_per_token(s, c)
    saved = (summ["hit_tokens"] / hours * per_token * per_instance / 3600 if hours and per_token is not None else None)
    band = band_instances(s, c, n, load) if e["meets"] else None
    return {**plan_rows.config_columns(c), "load_kind": load[0], "load": load[1], "cache_saved_per_hour": saved,
            "prefill_seconds_per_token": per_token, "duration_s": summ["duration_s"], "hit_tokens": summ["hit_tokens"],
            "policy": r.policy, "instances": n, "gpus": n * c.gpus, "meets": e["meets"], "judged_at": e["judged_at"],
            "instances_band": band,
            "instances_at_low": None if band is None else band["low"],
            "instances_at_centre": None if band is None else band["centre"],
            "instances_at_high": None if band is None else band["high"],
            "cost_per_hour": cost, "instance_cost_per_hour": per_instance, "price_sources": sources,
            "usd_per_million_input": per_m(summ["prompt_tokens"]), "usd_per_million_output": per_m(summ["output_tokens"]),
            "hit_rate": summ["hit_rate"], "binding": v["binding"], "window_s": v["window_s"],
            "window_grouping": v["grouping"], "judged_requests": v["judged_requests"],
            "judged_start_s": v["judged_start_s"], "warmup": summ["window"].get("warmup"),
            "worst_window_s": v["worst_window_s"],
            "goodput_per_s": v["goodput_per_s"], "attainment": v["attainment"],
            "unserved_requests": v["unserved_requests"],
            "refused_context": summ["whole_run"]["refused_context"], "rejected": summ["whole_run"]["rejected"],
            "ttft_p90_s": summ["latency_s"]["ttft"]["p90"], "tpot_p90_s": summ["latency_s"]["tpot"]["p90"],
            "floor_in_binding_s": None if e["meets"] else floor_in(s, c, load, v["binding"])}


def _bisect(s: Search, c: Config, load: tuple, end: str | None, lo: int, hi: int) -> int:
    """The fewest instances in (lo, hi] meeting the SLOs at the band's `end`; `hi` meets, `lo` not."""
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if evaluate(s, c, mid, load, end)["meets"]:
            hi = mid
        else:
            lo = mid
    return hi


def band_instances(s: Search, c: Config, n: int, load: tuple) -> dict | None:
    """A passing configuration's fewest instances at each end of the time model's band and at its
    centre ({"low", "centre", "high"}; None without a band). Judged at the pessimistic end, `n` is
    the high end's count and the centre's and the low end's are bisected below it (their steps are
    never slower); judged at the centre, the high end's is searched above `n` (None past
    --max-instances)."""
    if not _banded(s, c):
        return None
    if s.judge == "pessimistic" and closed_loop(s, load):  # n meets all three (_worst_end): each below it
        return {end: _bisect(s, c, load, end, 0, n) for end in ("low", "centre", "high")}
    if s.judge == "pessimistic":
        centre = _bisect(s, c, load, "centre", 0, n)
        return {"low": _bisect(s, c, load, "low", 0, centre), "centre": centre, "high": n}
    high, lo = None, n - 1
    k = n
    while k <= s.max_instances:
        if evaluate(s, c, k, load, "high")["meets"]:
            high = _bisect(s, c, load, "high", lo, k)
            break
        lo, k = k, min(k * 2, s.max_instances) if k < s.max_instances else s.max_instances + 1
    return {"low": _bisect(s, c, load, "low", 0, n), "centre": n, "high": high}


def _judged_end(s: Search) -> str:
    return "high" if s.judge == "pessimistic" else "centre"


def _banded(s: Search, c: Config) -> bool:
    tm = _time_model(s, c)
    return tm is not None and hasattr(tm, "at_band")


def evaluate(s: Search, c: Config, n: int, load: tuple, end: str | None = None) -> dict:
    """One run, from the cache when this point was simulated before; checks monotonicity. `end`:
    "low", "high" or "centre" of the time model's band (default: the one the plan judges at); a
    time model without a band has only its centre."""
    banded = _banded(s, c)
    if end is None and banded and s.judge == "pessimistic" and closed_loop(s, load):
        return _worst_end(s, c, n, load)
    end = (end or _judged_end(s)) if banded else "centre"
    if (c, n, load, end) in s.cache:
        s.cache_hits += 1
        return s.cache[(c, n, load, end)]
    from .simulate import simulate

    key = _cache_key(s, c, n, load, end)
    path = None if key is None else plan_cache.path_of(s.cache_dir, key)
    run = None if path is None else Run.load(path, key, len(s.trace))
    if run is not None:
        s.disk_hits += 1
    else:
        check_stopping()  # (a search on threads abandoned by SIGTERM ends before its next run)
        options = dict(s.options)
        if banded:  # one run at that end of the band (not the band's three), the host's terms at theirs
            tm = _time_model(s, c)
            options["time_model"] = tm if end == "centre" else tm.at_band(end)
            options["host"] = _host(s, c, end)
        report = simulate(s.trace, c.policy, None, model=s.model, gpu=c.gpu, tp=c.tp, pp=c.pp, instances=n,
                          router=c.router,
                          tiers=c.tiers, **load_arguments(load), compare_sequential=False, band_runs=False,
                          warmup=s.warmup, **options)
        s.runs += 1
        run = Run.of(report)
        if path is not None:
            run.save(path, key)
    verdict = judge(run, s.slo, s.window_s, s.min_requests)
    entry = {"meets": verdict["meets"], "verdict": verdict, "judged_at": END_TEXT[end] if banded else "centre (no band)",
             "report": run}
    s.cache[(c, n, load, end)] = entry
    _check_monotone(s, c, load, end)
    return entry


def _worst_end(s: Search, c: Config, n: int, load: tuple) -> dict:
    """A closed loop judged pessimistically, at the worst of its band's three runs: with faster
    steps its agents send sooner, so the optimistic end's TTFT can be the highest (docs/sessions.md).
    It meets the SLOs when all three do; its verdict is the run whose binding window is the worst."""
    key = (c, n, load, "worst")
    if key in s.cache:
        s.cache_hits += 1
        return s.cache[key]
    runs = {end: evaluate(s, c, n, load, end) for end in ("high", "centre", "low")}

    def ratio(end):
        b = runs[end]["verdict"]["binding"]
        return (not runs[end]["meets"], -np.inf if b is None else b["ratio"])

    worst = max(runs, key=ratio)  # (a failing run first, then the highest ratio; ties: the pessimistic end)
    entry = {**runs[worst], "meets": all(e["meets"] for e in runs.values()),
             "judged_at": WORST_TEXT.format(END_TEXT[worst]), "worst_end": worst}
    s.cache[key] = entry
    return entry


#: what a cached run's meaning depends on beyond its inputs: 2 since auto KV semantics serve a
#: hybrid model with vLLM's hybrid manager (runs cached before served it as full attention); 3
#: since they serve Mamba hybrids with it too; 4 since a run carries its warm-up; 5 since Claude
#: Code traces are served closed-loop by default; 6 since a vLLM-style run's key holds the GPU memory
#: utilization its pool was sized at, the default resolved (runs cached before were keyed without it,
#: whatever default sized them: 0.9 until vLLM 0.33.0's 0.92 was followed)
CACHE_VERSION = 6


@lru_cache(maxsize=1)
def _calibration_digest() -> str:
    """The shipped roofline calibration's digest: a refit changes every calibrated run's times, so
    runs cached under other coefficients are not reused."""
    from .timing.host import calibration as host_calibration
    from .timing.roofline import calibration_data

    data = [calibration_data()["gpus"], host_calibration()["terms"], host_calibration().get("band")]
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def _cache_key(s: Search, c: Config, n: int, load: tuple, end: str) -> str | None:
    """The run's key in the cache directory (plan_cache.py): the trace's digest and everything the
    run depends on, the content of every file an option names and its warm-up included (not the
    SLOs or windows: a run is judged again for each). None without a cache directory, or when an
    option cannot be recorded (a Python object that cannot be pickled)."""
    if s.cache_dir is None:
        return None
    if "cache key" not in s.models:  # (the files the options name are read once per plan)
        session = getattr(s.trace, "session", None)
        s.models["cache key"] = plan_cache.recorded({
            "version": CACHE_VERSION, "calibration": _calibration_digest(), "trace": s.digest(),
            "sessions": None if session is None else hashlib.sha256(np.ascontiguousarray(session).tobytes()).hexdigest(),
            "model": s.model, "warmup": spec_text(s.warmup), "block_size": _block_size(s),
            "options": sorted([k, v] for k, v in s.options.items() if v is not None)})
    base = s.models["cache key"]
    return None if base is None else plan_cache.key_text(base, {
        "config": [c.gpu, c.tp, c.tiers, c.router, c.policy] + ([c.pp] if c.pp > 1 else []), "instances": n, "load": list(load), "band_end": end})


def _check_monotone(s: Search, c: Config, load: tuple, end: str) -> None:
    done = sorted((n, e["meets"]) for (cc, n, ld, en), e in s.cache.items() if cc == c and ld == load and en == end)
    for (n1, m1), (n2, m2) in zip(done, done[1:]):
        if m1 and not m2:
            v = {"config": c.text(), "load": load[1], "load_kind": load[0], "passes_at": n1, "fails_at": n2,
                 "band_end": end}
            if v not in s.violations:
                s.violations.append(v)


def floor_binding(s: Search, c: Config, load: tuple) -> dict | None:
    """The window where `c`'s GPU and TP cannot meet an SLO on any number of instances, with the
    bound's value there (floors.py), or None when the floors allow every objective everywhere (or
    the time model has no floor)."""
    key = ("floor", c.gpu, c.tp, c.pp, load)
    if key not in s.models:
        s.models[key] = _floor(s, c, load)
    return s.models[key]


def _floor(s: Search, c: Config, load: tuple) -> dict | None:
    from .floors import request_floors
    from .simulate import Scheduler, arrival_times
    from .warmup import resolve as resolve_warmup

    tm = _time_model(s, c)
    if tm is None or closed_loop(s, load):  # (a closed loop's arrivals are its run's: no bound holds before it)
        return None
    end = _judged_end(s) if hasattr(tm, "at_band") else "centre"
    at_end = tm.at_band(end) if end != "centre" else tm
    arrival_s, _ = arrival_times(s.trace, speedup=load[1] if load[0] == "speedup" else None,
                                 rate=load[1] if load[0] == "rate" else None, seed=s.options.get("seed", 0),
                                 rate_profile=s.options.get("rate_profile"))
    block_size = _block_size(s)
    warm = resolve_warmup(s.warmup, s.trace, arrival_s, block_size)
    judged = judged_mask(arrival_s, warm.seconds)
    scheduler = s.options.get("scheduler") or Scheduler(style=s.options.get("engine_style", "vllm"))
    if scheduler.style == "sglang":
        chunk = scheduler.chunked_prefill_size if scheduler.chunked_prefill else None
    else:
        chunk = scheduler.max_num_batched_tokens if scheduler.chunked_prefill else None
    floors = request_floors(s.trace, arrival_s, at_end, tm, block_size=block_size, chunk=chunk,
                            any_order=scheduler.schedule_policy != "fcfs", host=_host(s, c, end),
                            max_seqs=scheduler.max_num_seqs)
    start = (float(arrival_s.min()) if arrival_s.size else 0.0) + warm.seconds
    windows = Windows.of(arrival_s, judged, start, s.window_s)
    values = {k: v[judged] for k, v in floors.values().items()}
    s.models[("floor values", c.gpu, c.tp, c.pp, load)] = (windows, values)
    worst = worst_windows(windows, values, np.ones(int(judged.sum()), dtype=bool), s.slo, s.min_requests)
    b = worst["binding"]
    if b is None or b["ratio"] <= 1.0:
        return None
    return {**b, "judged_at": END_TEXT[end] if hasattr(tm, "at_band") else "centre (no band)",
            "hit": "earlier arrivals" if scheduler.schedule_policy == "fcfs" else "any other request"}


def arrivals_text(s: Search, sessions) -> str:
    """How the plan's runs send their requests, in words (docs/sessions.md)."""
    from .closed import CLOSED, check_arrivals

    asked = s.options.get("arrivals")
    mode = CLOSED if sessions is not None and asked is None else check_arrivals(asked, s.trace)
    how = ("each request at its timestamp, whatever the deployment does" if mode != CLOSED else
           "a session's next request is sent when its previous answer ends, plus its think time (docs/sessions.md)")
    why = "--arrivals" if asked is not None else ("--sessions" if sessions is not None else
                                                  f"the default for {s.trace.format or 'this'} traces")
    return f"{'closed' if mode == CLOSED else 'open'} loop ({why}): {how}"


def closed_loop(s: Search, load: tuple) -> bool:
    """Are the plan's runs at `load` closed-loop (concurrent sessions, or the trace's own sessions
    closed)? Their floors are not computed: a request's arrival is known only after the run."""
    from .closed import CLOSED, check_arrivals

    return load[0] == "sessions" or check_arrivals(s.options.get("arrivals"), s.trace) == CLOSED


def floor_in(s: Search, c: Config, load: tuple, binding: dict | None) -> float | None:
    """The floor of `binding`'s objective over its window's requests (what no instance count can
    go below there), or None without floors."""
    from .stats import nearest_rank

    floor_binding(s, c, load)
    got = s.models.get(("floor values", c.gpu, c.tp, c.pp, load))
    if got is None or not binding:
        return None
    windows, values = got
    p, attr = next((p, attr) for name, p, _, attr in s.slo.objectives() if name == binding["objective"])
    first = int(round((binding["window_start_s"] - windows.start_s) / windows.window_s))
    inside = (windows.index >= first) & (windows.index < first + binding["windows_merged"])
    v = values[attr][inside]
    v = np.sort(v[~np.isnan(v)])
    return nearest_rank(v, p) if v.size else None


def _block_size(s: Search) -> int:
    from ..trace.model import resolve_block_size

    return resolve_block_size(s.options.get("block_size"), s.trace)


def _host(s: Search, c: Config, end: str):
    """What the host CPU adds to `c`'s runs at `end` of the band (timing/host.py): the plan's
    `host` option (default: the calibrated terms with the calibrated roofline), at the same end of
    its own band, as simulate()'s band runs take it."""
    from .timing.host import band_end
    from .timing.host import resolve as resolve_host

    terms = resolve_host(s.options.get("host"), _time_model(s, c))
    return terms if end == "centre" else band_end(terms, end)


def _time_model(s: Search, c: Config):
    """The plan's time model on `c`'s GPUs, at its band's centre (None for one that is not a
    function of them)."""
    from .simulate import _is_roofline
    from .timing import load_time_model

    name = s.options.get("time_model", "roofline")
    if not _is_roofline(name):
        return None
    from .timing.pipeline import pipelined

    key = ("time model", c.gpu, c.tp, c.pp)
    if key not in s.models:
        s.models[key] = pipelined(load_time_model(name, model=s.model, gpu=c.gpu, tp=c.tp,
                                                  dtype=s.options.get("weights_dtype", "bf16"),
                                                  kv_dtype=s.options.get("kv_dtype") or "bf16"), c.pp)
    return s.models[key]


def prefill_seconds_per_token(s: Search, c: Config) -> float | None:
    """Seconds one instance spends per prompt token in a full 8,192-token prefill step (the time
    model's; None for a time model that is not a function of the GPU)."""
    from .timing.models import StepBatch

    tm = _time_model(s, c)
    if tm is None:
        return None
    chunk = 8192
    return float(tm.step_time(StepBatch(prefill_new=(chunk,), prefill_cached=(0,)))) / chunk


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
